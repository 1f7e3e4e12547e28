"""sqlite-utils is handed a connection only without its side effects: no plugin hook runs on it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlite_utils import hookimpl
from sqlite_utils.plugins import pm

from anagrapheus.cli.sources import open_source
from anagrapheus.timeline import SQLiteEventStore


class PreparingPlugin:
    """An installed sqlite-utils plugin that would change every connection sqlite-utils opens a Database over."""

    def __init__(self) -> None:
        self.prepared: list[sqlite3.Connection] = []

    @hookimpl
    def prepare_connection(self, conn: sqlite3.Connection) -> None:
        self.prepared.append(conn)


@pytest.fixture
def plugin() -> Iterator[PreparingPlugin]:
    installed = PreparingPlugin()
    pm.register(installed, name="anagrapheus-test-preparing-plugin")
    try:
        yield installed
    finally:
        pm.unregister(name="anagrapheus-test-preparing-plugin")


def test_opening_a_store_and_looking_at_a_log_run_no_plugin(tmp_path: Path, plugin: PreparingPlugin) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path):
        pass
    source = open_source(str(path))
    assert source.kind == "database"
    assert plugin.prepared == []
