"""Replacing a file durably: written beside it, fsynced and renamed over it; a killed writer's leftovers cleared."""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

__all__ = ["replace_durably"]


def replace_durably(target: Path, data: bytes, *, mode: int) -> None:
    """Write `data` beside `target` and rename it over, so a crash leaves the old file or the new, never half."""
    prefix = f".{target.name}."
    _clear_orphans(target.parent, prefix)
    # The writer's pid is in the name, so a later write can tell a killed writer's leftovers from a live one's.
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            # Owner-only unless the caller asks otherwise: a recording holds whatever the run was told and drew.
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename is durable only once the directory entry is.
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _clear_orphans(folder: Path, prefix: str) -> None:
    """Remove the temporary files that writers killed mid-write (SIGKILL, power loss) left beside the target."""
    for leftover in folder.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = leftover.name[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
