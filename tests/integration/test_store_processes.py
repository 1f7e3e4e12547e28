"""Several OS processes on one SQLite file: no lost event, no gap, no 'database is locked' crash.

The writers are forked from one process that has imported anagrapheus (tests/fork_server.py), so they start
within milliseconds of each other and race for the new file.
"""

from __future__ import annotations

from pathlib import Path

from anagrapheus.timeline import SQLiteEventStore
from tests.fork_server import ForkServer

WRITER = """
import sys
from anagrapheus.timeline import PendingEvent, SQLiteEventStore
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = SQLiteEventStore(path, busy_timeout=30.0)
for i in range(n):
    store.append([PendingEvent(namespace="t", type="w", schema_version=1, payload='{"w":"%s","i":%d}' % (tag, i))])
    if i % 10 == 0:
        store.scratch_put(tag, "k%d" % i, kind="model_call", raw="1", fingerprint=None)
store.close()
"""


def run_writers(forks: ForkServer, path: Path, writers: int, per_writer: int) -> None:
    procs = [forks.start(WRITER, str(path), f"w{n}", str(per_writer)) for n in range(writers)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * writers, errors


def test_processes_append_to_one_new_file_concurrently(tmp_path: Path, forks: ForkServer) -> None:
    # The file does not exist yet: every writer races to create it, switch it to WAL and migrate it.
    path = tmp_path / "shared.db"
    run_writers(forks, path, writers=4, per_writer=150)
    with SQLiteEventStore(path) as store:
        events = list(store.read())
        assert [e.seq for e in events] == list(range(1, 601))
        payloads = [e.payload for e in events]
        assert len(set(payloads)) == 600
        for n in range(4):
            mine = [p for p in payloads if f'"w":"w{n}"' in p]
            # Each writer's own events keep their order.
            assert mine == [f'{{"w":"w{n}","i":{i}}}' for i in range(150)]
        assert sorted(u.unit_id for u in store.open_units()) == ["w0", "w1", "w2", "w3"]
