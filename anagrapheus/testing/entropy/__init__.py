"""Declared entropy: a manifest of what a pinned test may touch, and a guard failing the test that touches more."""

from anagrapheus.testing.entropy.guard import Guard, Violation, guarded
from anagrapheus.testing.entropy.manifest import ClockDeclaration, EntropyManifest, load_manifest, test_seed

__all__ = ["ClockDeclaration", "EntropyManifest", "Guard", "Violation", "guarded", "load_manifest", "test_seed"]
