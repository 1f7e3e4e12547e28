"""How long the crash, fuzz and stress runs go: bounded in the normal suite, scaled by `pytest --soak`.

An explicit environment variable wins over both, so CI can pin the bounded form and a soak can pick
any size. Test modules read these at import, after `pytest_configure` has recorded `--soak`.
"""

from __future__ import annotations

import os

SOAK = False
"""Set by tests/conftest.py when pytest runs with --soak."""


def bound(variable: str, *, normal: int, soak: int) -> int:
    """The size of a run: `$variable` if set, else the soak size under --soak, else the normal size."""
    given = os.environ.get(variable)
    if given is not None:
        return int(given)
    return soak if SOAK else normal
