"""Provenance: what made a recording (versions, key scheme, call policy, models), stamped on write, checked on load.

The timeline stamps what it knows itself (its version, Python's, the key scheme, the call policy); what the pins'
results report and the agent framework's version come from a `ProvenanceStamp` of the provider layer, which the
package root hands over (`use_stamp`) with the default call policy: the timeline knows nothing of the framework's
shapes, nor which policy keys a model call when none is named.
"""

from __future__ import annotations

import platform
import warnings
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

from anagrapheus.errors import ProvenanceMismatch, UsageError
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue

__all__ = [
    "VERIFIED_ANAGRAPHEUS",
    "Provenance",
    "ProvenanceCheck",
    "ProvenanceStamp",
    "ProvenanceWarning",
    "call_policy_identity",
    "check_provenance",
    "installed_version",
    "own_provenance",
    "stamp_provenance",
    "use_stamp",
    "versions_note",
    "within_verified",
]

ProvenanceCheck = Literal["warn", "strict", "ignore"]
"""How loading treats provenance: refuse a foreign key scheme or policy and warn on versions (`warn`),
refuse on versions too (`strict`), or look at nothing (`ignore`, for tools that only inspect a file)."""


class ProvenanceWarning(UserWarning):
    """A recording was made by another anagrapheus or pydantic-ai version than the one loading it."""


class Provenance(BaseModel):
    """What made a recording: stamped into its header by `write_recording`, checked by `read_recording`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    anagrapheus: str | None
    """The anagrapheus version that wrote it (None when not installed as a distribution)."""
    pydantic_ai: str | None
    """The agent framework's version installed when it was written (pydantic-ai's, as the provider layer says)."""
    python: str
    """The Python version that wrote it."""
    key_scheme: str
    """The pin-key scheme of its keys (`p1`): a replay under another scheme cannot find them."""
    call_policy: str
    """The name of the call policy that keyed its model calls."""
    call_policy_version: int
    """That policy's version: a policy bumps it whenever what it keys changes."""
    models: tuple[str, ...] = ()
    """The model names the pinned responses report, sorted."""
    providers: tuple[str, ...] = ()
    """The provider names the pinned responses report, sorted."""


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution`, or None when it is not installed as one."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def call_policy_identity(policy: object | None) -> tuple[str, int]:
    """Return a call policy's (name, version): its class's own `name` and `version`, else its qualified class name.

    Only the policy's exact class is asked, so a subclass that changes what is keyed is never taken
    for its parent unless it says so. None means the default policy, the one the package root handed over.
    """
    if policy is None:
        if not _default_call_policy:
            raise UsageError("no default call policy was handed to the timeline: import anagrapheus, whose root does")
        return _default_call_policy[0]
    return _identity(type(policy))


def _identity(policy: type) -> tuple[str, int]:
    """The (name, version) a policy class declares itself, or its qualified name and version 1."""
    own = vars(policy)
    name, version = own.get("name"), own.get("version", 1)
    if not isinstance(name, str):
        name = f"{policy.__module__}.{policy.__qualname__}"
    if not isinstance(version, int) or isinstance(version, bool):
        version = 1
    return name, version


class ProvenanceStamp(Protocol):
    """Stamps a recording's provenance from the results its pins hold: the provider layer's, which knows their shape."""

    def __call__(self, results: Iterable[JSONValue], /, *, call_policy: object | None) -> Provenance:
        """This process's provenance, with the models and providers the pinned `results` (raw, as written) report."""
        ...


def own_provenance(*, call_policy: object | None = None) -> Provenance:
    """What the timeline knows of this process: its version, Python's, the key scheme and the call policy."""
    name, version = call_policy_identity(call_policy)
    return Provenance(
        anagrapheus=installed_version("anagrapheus"),
        pydantic_ai=None,
        python=platform.python_version(),
        key_scheme=KEY_SCHEME,
        call_policy=name,
        call_policy_version=version,
    )


def _own_stamp(results: Iterable[JSONValue], /, *, call_policy: object | None) -> Provenance:
    return own_provenance(call_policy=call_policy)


# The one stamp of this process, and the class of the call policy that keys a model call when none is named. The
# package root (`anagrapheus/__init__.py`, run before any timeline module is used) hands over the provider layer's
# once, as it is imported; until then a recording would be stamped with what the timeline knows. Module state only
# because the timeline cannot import the layer above it.
_stamp: list[ProvenanceStamp] = [_own_stamp]
_default_call_policy: list[tuple[str, int]] = []
_verified: dict[str, tuple[str, str]] = {}


def use_stamp(
    stamp: ProvenanceStamp,
    *,
    default_call_policy: tuple[str, int] | None = None,
    verified: Mapping[str, tuple[str, str]] | None = None,
) -> None:
    """Stamp recordings with `stamp` from now on: the package root hands over the provider layer's.

    `default_call_policy`, when given, is the (name, version) of the policy assumed when none is named (the
    provider's `SemanticCallPolicy`): it stamps and checks recordings made without one. `verified`
    names, per provenance field, the first and last version across which recordings are known to replay: a
    recording made under one of them and loaded under another is not warned about.
    """
    _stamp[0] = stamp
    if default_call_policy is not None:
        _default_call_policy[:] = [default_call_policy]
    if verified is not None:
        _verified.clear()
        _verified.update(verified)


def _release(version: object) -> tuple[int, ...] | None:
    """`2.78.0` as (2, 78, 0); None for a version that is not plain numbers (a pre-release, say)."""
    if not isinstance(version, str):
        return None
    parts = version.split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else None


VERIFIED_ANAGRAPHEUS: tuple[str, str] = ("0.1.0", "0.2.0")
"""The anagrapheus releases, first and last, whose recordings replay under each other: the key scheme (`p1`) and
the pins' forms are the same in both, and CI replays every recording committed under 0.1.0 with 0.2.0."""


def within_verified(field: str, *versions: object) -> bool:
    """Whether every one of `versions` of `field` lies within the range known to replay each other's recordings."""
    span = VERIFIED_ANAGRAPHEUS if field == "anagrapheus" else _verified.get(field)
    if span is None:
        return False
    first, last = _release(span[0]), _release(span[1])
    releases = [_release(version) for version in versions]
    return first is not None and last is not None and all(r is not None and first <= r <= last for r in releases)


def stamp_provenance(results: Iterable[JSONValue], *, call_policy: object | None = None) -> Provenance:
    """Stamp what this process is, with the models and providers that the pinned `results` report."""
    return _stamp[0](results, call_policy=call_policy)


def check_provenance(
    recorded: Provenance | None,
    *,
    path: str,
    rerecord: str,
    call_policy: object | None = None,
    check: ProvenanceCheck = "warn",
) -> None:
    """Refuse a recording whose pins this process cannot answer from; warn (or, strictly, refuse) on other versions.

    A recording without provenance (format version 1) is accepted as it is: it predates the stamp.
    """
    if check not in get_args(ProvenanceCheck):
        # A misspelt check would otherwise be taken for "warn", and "strict" never enforced.
        raise UsageError(f"provenance= must be 'warn', 'strict' or 'ignore', not {check!r}")
    if recorded is None or check == "ignore":
        return
    how = f"re-record it with `{rerecord}`"
    if recorded.key_scheme != KEY_SCHEME:
        raise ProvenanceMismatch(
            f"recorded under pin-key scheme {recorded.key_scheme!r}, but this anagrapheus keys with {KEY_SCHEME!r}:"
            " none of its pins can answer, and keys are digests of what was asked, so they cannot be converted."
            f" {how.capitalize()}; until then, replay it with the anagrapheus that wrote it ({recorded.anagrapheus})",
            path=path,
            field="key_scheme",
            recorded=recorded.key_scheme,
            current=KEY_SCHEME,
        )
    name, version = call_policy_identity(call_policy)
    if (recorded.call_policy, recorded.call_policy_version) != (name, version):
        raise ProvenanceMismatch(
            f"recorded under call policy {recorded.call_policy!r} v{recorded.call_policy_version}, but loaded for"
            f" {name!r} v{version}: its model-call keys would all miss. Pass call_policy= the policy that recorded"
            f" it, or {how}",
            path=path,
            field="call_policy",
            recorded=(recorded.call_policy, recorded.call_policy_version),
            current=(name, version),
        )
    current = stamp_provenance((), call_policy=call_policy)
    for field in ("anagrapheus", "pydantic_ai"):
        # The field's name is the library's, as a reader spells it.
        was, now, label = getattr(recorded, field), getattr(current, field), field.replace("_", "-")
        if was == now or (check == "warn" and within_verified(field, was, now)):
            # Within the verified range keys and pins agree across releases: nothing to warn of (strict refuses).
            continue
        message = (
            f"recorded with {label} {was}, loaded with {label} {now}; a call the new version asks"
            f" differently will miss its pin. If the replay misses, {how}"
        )
        if check == "strict":
            raise ProvenanceMismatch(message, path=path, field=field, recorded=was, current=now)
        warnings.warn(f"{path}: {message}", ProvenanceWarning, stacklevel=3)


def versions_note(recorded: Provenance | None) -> str | None:
    """Name the versions a recording was made with and is replayed under, where they differ; None where they agree."""
    if recorded is None:
        return None
    current = stamp_provenance(())
    differ = [
        f"{field.replace('_', '-')} {getattr(recorded, field)}, replayed under {getattr(current, field)}"
        for field in ("pydantic_ai", "anagrapheus")
        if getattr(recorded, field) != getattr(current, field)
    ]
    if not differ:
        return None
    return (
        f"recorded with {'; '.join(differ)}: if the release changed what a call means, re-key the recording"
        " offline with `anagrapheus rekey` (docs/explanation/upstream-releases.md)"
    )
