"""The default call policy is the provider's `SemanticCallPolicy`, handed to the timeline by the package root."""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus import SemanticCallPolicy, read_recording
from anagrapheus.errors import ProvenanceMismatch, UsageError
from anagrapheus.provider.provenance import provenance_of_pins
from anagrapheus.timeline import provenance as provenance_module
from anagrapheus.timeline.provenance import call_policy_identity, check_provenance, own_provenance, use_stamp

DATA = Path(__file__).resolve().parents[1] / "data"


def test_no_policy_named_means_the_one_the_root_handed_over() -> None:
    assert call_policy_identity(None) == (SemanticCallPolicy.name, SemanticCallPolicy.version) == ("semantic", 1)
    stamped = own_provenance()
    assert (stamped.call_policy, stamped.call_policy_version) == ("semantic", 1)


@pytest.mark.parametrize("name", ["negotiation-before-inputs.jsonl", "negotiation-sorted-answers.jsonl"])
def test_a_committed_recording_stamped_with_the_default_policy_loads_without_one(name: str) -> None:
    recording = read_recording(DATA / name, provenance="warn")
    provenance = recording.header.provenance
    assert provenance is not None and (provenance.call_policy, provenance.call_policy_version) == ("semantic", 1)


def test_another_default_handed_over_is_the_one_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = own_provenance()
    monkeypatch.setattr(provenance_module, "_default_call_policy", [])
    use_stamp(provenance_of_pins, default_call_policy=("terse", 3))
    assert call_policy_identity(None) == ("terse", 3)
    with pytest.raises(ProvenanceMismatch) as caught:
        check_provenance(recorded, path="run.jsonl", rerecord="pytest")
    assert caught.value.recorded == ("semantic", 1) and caught.value.current == ("terse", 3)


def test_without_a_handed_over_default_no_policy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance_module, "_default_call_policy", [])
    with pytest.raises(UsageError, match="no default call policy was handed to the timeline"):
        call_policy_identity(None)
