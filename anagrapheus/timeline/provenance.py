"""Provenance: what made a recording (versions, key scheme, call policy, models), stamped on write, checked on load.

The timeline stamps what it knows itself (its version, Python's, the key scheme, the call policy); what the pins'
results report, the agent framework's version, the call policy assumed when none is named and the framework releases
known to replay each other's recordings come from a `Stamping` of the provider layer, passed to the functions here
and to the recording functions (`stamping=`, `write_recording(stamp=)`): the timeline knows nothing of the
framework's shapes, nor which policy keys a model call when none is named. A call that passes none is stamped and
checked with the provider layer's, found by its address when first needed (`default_stamping`): no module slot is
filled at import.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import platform
import warnings
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

from anagrapheus.deprecation import deprecated
from anagrapheus.errors import ProvenanceMismatch, UsageError
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue

__all__ = [
    "VERIFIED_ANAGRAPHEUS",
    "Provenance",
    "ProvenanceCheck",
    "ProvenanceStamp",
    "ProvenanceWarning",
    "Stamping",
    "call_policy_identity",
    "check_provenance",
    "default_stamping",
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


def call_policy_identity(policy: object | None, *, stamping: Stamping | None = None) -> tuple[str, int]:
    """Return a call policy's (name, version): its class's own `name` and `version`, else its qualified class name.

    Only the policy's exact class is asked, so a subclass that changes what is keyed is never taken
    for its parent unless it says so. None means the default policy, the one `stamping` names (the provider's
    `SemanticCallPolicy` when no stamping is given).
    """
    if policy is None:
        default = stamping_or_default(stamping).default_call_policy
        if default is None:
            raise UsageError("the stamping names no default call policy: pass call_policy= the policy that keys")
        return default
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


def own_provenance(*, call_policy: object | None = None, stamping: Stamping | None = None) -> Provenance:
    """What the timeline knows of this process: its version, Python's, the key scheme and the call policy."""
    name, version = call_policy_identity(call_policy, stamping=stamping)
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


@dataclasses.dataclass(frozen=True, slots=True)
class Stamping:
    """How recordings are stamped and checked: what a layer above the timeline knows of their provenance.

    The provider layer's (`anagrapheus.provider.provenance.STAMPING`) is the one used when none is passed.
    """

    stamp: ProvenanceStamp = _own_stamp
    """Stamps a recording from its pins' results (the timeline's own stamp knows no framework, models or providers)."""
    default_call_policy: tuple[str, int] | None = None
    """The (name, version) of the policy assumed when none is named: recordings made or read without one."""
    verified: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict[str, tuple[str, str]])
    """Per provenance field, the first and last version across which recordings are known to replay each other."""
    stamped_fields: tuple[str, ...] = ()
    """The fields the framework sets on a model call's result after the call (a run's history holds them, the pin
    may not): a recording's history refers to a pinned result less these (`recording.responses`). Part of the
    recording format from version 4: changing it changes what a version 4 file reads as."""


_PROVIDER_STAMPING = ("anagrapheus.provider.provenance", "STAMPING")
"""Where the stamping used when none is passed is: the provider layer's module that imports no pydantic-ai.

Named, not imported: the timeline imports nothing above it. It is read when a recording is first stamped or checked
without a stamping, so a call written before stamps were passed keeps its bytes and its checks."""


@functools.cache
def default_stamping() -> Stamping:
    """The stamping a recording function uses when given none: the provider layer's, read from its module once."""
    module, name = _PROVIDER_STAMPING
    found = getattr(importlib.import_module(module), name)
    if not isinstance(found, Stamping):  # pragma: no cover - the provider's own constant
        raise TypeError(f"{module}.{name} is not a Stamping")
    return found


# Only `use_stamp`, deprecated, sets it: the stamping a caller handed over for the whole process, before stamps were
# passed. Nothing fills it at import.
_handed: list[Stamping] = []


def stamping_or_default(stamping: Stamping | None) -> Stamping:
    """`stamping`, else the one handed over with `use_stamp` (deprecated), else the provider layer's."""
    if stamping is not None:
        return stamping
    return _handed[0] if _handed else default_stamping()


def use_stamp(
    stamp: ProvenanceStamp,
    *,
    default_call_policy: tuple[str, int] | None = None,
    verified: Mapping[str, tuple[str, str]] | None = None,
) -> None:
    """Deprecated: stamp recordings with `stamp` from now on; pass `stamping=Stamping(...)` where they are written.

    `default_call_policy` and `verified`, when not given, are kept from the stamping in use.
    """
    deprecated(
        "anagrapheus.timeline.provenance.use_stamp()",
        "pass stamping=Stamping(...) to the recording functions (write_recording takes stamp=)",
    )
    now = stamping_or_default(None)
    _handed[:] = [
        Stamping(
            stamp,
            default_call_policy=now.default_call_policy if default_call_policy is None else default_call_policy,
            verified=now.verified if verified is None else dict(verified),
        )
    ]


def _release(version: object) -> tuple[int, ...] | None:
    """`2.78.0` as (2, 78, 0); None for a version that is not plain numbers (a pre-release, say)."""
    if not isinstance(version, str):
        return None
    parts = version.split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else None


VERIFIED_ANAGRAPHEUS: tuple[str, str] = ("0.1.0", "0.2.0")
"""The anagrapheus releases, first and last, whose recordings replay under each other: the key scheme (`p1`) and
the pins' forms are the same in both, and CI replays every recording committed under 0.1.0 with 0.2.0."""


def within_verified(field: str, *versions: object, stamping: Stamping | None = None) -> bool:
    """Whether every one of `versions` of `field` lies within the range known to replay each other's recordings."""
    span = VERIFIED_ANAGRAPHEUS if field == "anagrapheus" else stamping_or_default(stamping).verified.get(field)
    if span is None:
        return False
    first, last = _release(span[0]), _release(span[1])
    releases = [_release(version) for version in versions]
    return first is not None and last is not None and all(r is not None and first <= r <= last for r in releases)


def stamp_provenance(
    results: Iterable[JSONValue], *, call_policy: object | None = None, stamping: Stamping | None = None
) -> Provenance:
    """Stamp what this process is, with the models and providers that the pinned `results` report."""
    return stamping_or_default(stamping).stamp(results, call_policy=call_policy)


def check_provenance(
    recorded: Provenance | None,
    *,
    path: str,
    rerecord: str,
    call_policy: object | None = None,
    check: ProvenanceCheck = "warn",
    stamping: Stamping | None = None,
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
    stamping = stamping_or_default(stamping)
    name, version = call_policy_identity(call_policy, stamping=stamping)
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
    current = stamping.stamp((), call_policy=call_policy)
    for field in ("anagrapheus", "pydantic_ai"):
        # The field's name is the library's, as a reader spells it.
        was, now, label = getattr(recorded, field), getattr(current, field), field.replace("_", "-")
        if was == now or (check == "warn" and within_verified(field, was, now, stamping=stamping)):
            # Within the verified range keys and pins agree across releases: nothing to warn of (strict refuses).
            continue
        message = (
            f"recorded with {label} {was}, loaded with {label} {now}; a call the new version asks"
            f" differently will miss its pin. If the replay misses, {how}"
        )
        if check == "strict":
            raise ProvenanceMismatch(message, path=path, field=field, recorded=was, current=now)
        warnings.warn(f"{path}: {message}", ProvenanceWarning, stacklevel=3)


def versions_note(recorded: Provenance | None, *, stamping: Stamping | None = None) -> str | None:
    """Name the versions a recording was made with and is replayed under, where they differ; None where they agree."""
    if recorded is None:
        return None
    current = stamp_provenance((), stamping=stamping)
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
