"""Fixtures of the pytest plugin's tests."""

from __future__ import annotations

import pytest

from tests.testing.test_plugin import APP, PYPROJECT


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the sample application and a pyproject.toml that records beside it."""
    pytester.makepyfile(app=APP)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    return pytester
