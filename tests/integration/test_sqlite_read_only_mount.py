"""A SQLite log in a folder nobody may write opens read-only, read by another (unprivileged) process.

Kept apart from `timeline/stores/test_sqlite.py` because it starts a Python process that imports the package: under
mutation testing the child inherits mutmut's environment and fails in its trampoline, so this file cannot be
listed for `timeline/stores/sqlite.py` in `.ci/mutation_slice.py`, and `timeline/stores/test_sqlite.py` now can.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from anagrapheus.timeline import SQLiteEventStore

from ..store_conformance import pending


def test_a_log_in_a_directory_nobody_may_write_opens_read_only(tmp_path: Path) -> None:
    # As root nothing is read-only, so the reader drops to an unprivileged user after its imports.
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the reader as another user")
    folder = Path(tempfile.mkdtemp(prefix="anagrapheus-ro-"))
    try:
        with SQLiteEventStore(folder / "log.db") as store:
            store.append([pending(1), pending(2)])
        folder.chmod(0o555)
        (folder / "log.db").chmod(0o444)
        reader = (
            "import os, sys\n"
            "from anagrapheus.timeline import SQLiteEventStore\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "assert not os.access(sys.argv[1], os.W_OK)\n"
            "with SQLiteEventStore(sys.argv[1] + '/log.db', read_only=True) as store:\n"
            "    print([e.seq for e in store.read()])\n"
        )
        done = subprocess.run([sys.executable, "-c", reader, str(folder)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[1, 2]"
        assert sorted(p.name for p in folder.iterdir()) == ["log.db"]
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)
