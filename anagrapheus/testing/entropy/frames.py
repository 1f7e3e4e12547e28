"""Whose code is this frame: the user's, or the standard library's, an installed package's or anagrapheus's own.

Only user code answers to the manifest: pytest, pydantic-ai, anyio, hypothesis and the store read clocks,
draw random numbers and open files of their own all the time.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path
from types import FrameType

__all__ = ["caller", "is_user_file", "opener", "shown", "user_frame", "where"]

_OWN = str(Path(__file__).resolve().parents[2]) + os.sep
_SITE = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {
        *site.getsitepackages(),
        site.getusersitepackages(),
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    }
)
_STDLIB = tuple(
    str(Path(p).resolve()) + os.sep for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
# Standard modules that open a file on their caller's behalf: the caller is who reads it.
_OPENERS = frozenset(
    [
        "io",
        "_pyio",
        "pathlib",
        "codecs",
        "shutil",
        "fileinput",
        "gzip",
        "bz2",
        "lzma",
        "tarfile",
        "zipfile",
        "os",
        "configparser",
    ]
)
# Whether a file is the user's, by its name, for the process: where a file lies does not change while it runs,
# and the question is asked for every frame an audit event walks.
_user: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    """Whether code in `filename` is the user's: outside the stdlib, site-packages and anagrapheus."""
    known = _user.get(filename)
    if known is None:
        if filename.startswith("<"):
            # Frozen modules (importlib) and code compiled from strings belong to no user file.
            known = False
        else:
            path = os.path.abspath(filename)
            known = not (
                path.startswith(_OWN)
                or path.startswith(_SITE)
                or f"{os.sep}site-packages{os.sep}" in path
                or f"{os.sep}dist-packages{os.sep}" in path
                or path.startswith(_STDLIB)
            )
        _user[filename] = known
    return known


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost user frame at or above `frame`, if any."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def opener(frame: FrameType | None) -> FrameType | None:
    """The user frame that opened a file, if a user frame did: the caller, past the standard modules opening for it."""
    while frame is not None and frame.f_globals.get("__name__") in _OPENERS:
        frame = frame.f_back
    if frame is None or not is_user_file(frame.f_code.co_filename):
        return None
    return frame


def where(frame: FrameType | None) -> str:
    """`path:line (function)` of a frame, relative to the working directory where it lies inside."""
    if frame is None:
        return "no user frame"
    filename = shown(frame.f_code.co_filename)
    return f"{filename}:{frame.f_lineno} (in {frame.f_code.co_name})"


def shown(path: str) -> str:
    """A path as a reader finds it: relative to the working directory where it lies inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def caller(depth: int) -> FrameType | None:
    """The frame `depth` levels above the caller of this function."""
    return sys._getframe(depth + 1)  # pyright: ignore[reportPrivateUsage]
