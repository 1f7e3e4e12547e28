"""Every seed test runs with `DeprecationWarning` as an error: no name a reference page uses may warn (#40)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/seeds/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.filterwarnings("error::DeprecationWarning"))
