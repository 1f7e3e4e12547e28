"""Failed model requests and tool calls as pins: described as JSON, raised again on replay as what they were."""

from __future__ import annotations

import contextlib
import json
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

from pydantic_ai.durable_exec import record_durable_unit
from pydantic_core import to_jsonable_python

from anagrapheus.errors import AnagrapheusError, PinnedFailure
from anagrapheus.provider.compat import CATEGORIZED_HTTP_ERROR
from anagrapheus.provider.retries import inherited_failures, noted_failure
from anagrapheus.timeline.canonical import JSONValue, pin_key, stored_value
from anagrapheus.timeline.ordered import ORDERED_FIELD, ordered_json
from anagrapheus.timeline.resolving.resolver import Resolver

__all__ = ["FAILURES", "DrawSequence", "ExceptionCodec", "did_before_failing", "failed_having_done"]

T = TypeVar("T")

# Only exception classes from these packages (or their modules) are rebuilt from a recording: a recording names what
# to call, and a recording from elsewhere must not be able to make replay call anything else.
_REBUILDABLE_PACKAGES = frozenset({"builtins", "pydantic_ai", "httpx", "anyio", "asyncio"})


def _path(obj: Any) -> str:
    """`module:qualname` of a class or function (a class made where no module name is set has no `__module__`)."""
    return f"{getattr(obj, '__module__', '?')}:{obj.__qualname__}"


def _resolve(path: str) -> object:
    """The class or function a recording names, from an allowed package only: nothing else is ever imported."""
    module, _, qualname = path.partition(":")
    if module.split(".")[0] not in _REBUILDABLE_PACKAGES:
        # A recording is data, never code (issue #35): it names no module outside these packages.
        raise LookupError(f"{module} is not a package failures are rebuilt from")
    # Only a module the process imported already, read from its namespace: a recording imports nothing and runs no
    # module's `__getattr__` (issue #41). The class of an error a run raised is imported by the code that raised it.
    found: object = sys.modules.get(module)
    if found is None:
        raise LookupError(f"{module} is not imported")
    for part in qualname.split("."):
        found = vars(found)[part]
    return found


def _rebuildable(obj: object) -> bool:
    if obj is CATEGORIZED_HTTP_ERROR:
        return True
    module = getattr(obj, "__module__", "")
    return isinstance(obj, type) and issubclass(obj, BaseException) and module.split(".")[0] in _REBUILDABLE_PACKAGES


class ExceptionCodec:
    """The failure codec for pydantic-ai runs: pins an exception's class, message and the state that rebuilds it.

    pydantic-ai's exceptions (`ModelHTTPError` with its status and body, `ModelAPIError`, `ModelRetry`, ...)
    and Python's built-in ones are raised again as the same class with the same attributes. Any other
    class is raised as `PinnedFailure`, naming the original class and message. `AnagrapheusError`s and
    exceptions that are not `Exception`s (cancellation) are never pinned.
    """

    def describe(self, error: BaseException) -> JSONValue | None:
        """Return the exception as JSON to pin, or None when it is not the outcome of a draw."""
        if isinstance(error, PinnedFailure):
            return stored_value(error.record)
        if not isinstance(error, Exception) or isinstance(error, AnagrapheusError):
            return None
        described: dict[str, JSONValue] = {
            "type": _path(type(error)),
            "message": str(error),
            "rebuild": _reduced(error),
        }
        did = did_before_failing(error)
        if did is not None:
            described[_DID] = did
        return described

    def rebuild(self, record: JSONValue) -> BaseException:
        """Return the exception `record` describes: its own class where allowed and rebuilt, else `PinnedFailure`."""
        error = self._rebuilt(record)
        did = record.get(_DID) if isinstance(record, dict) else None
        if did is not None:
            failed_having_done(error, did)
        return error

    def _rebuilt(self, record: JSONValue) -> BaseException:
        fields: Mapping[str, Any] = record if isinstance(record, dict) else {}
        type_name, message = str(fields.get("type", "?")), str(fields.get("message", ""))
        fallback = PinnedFailure(record, type_name=type_name, message=message)
        reduced = fields.get("rebuild")
        if not isinstance(reduced, dict):
            return fallback
        recipe = cast("dict[str, Any]", reduced)
        try:
            call: Any = _resolve(str(recipe["call"]))
            if not _rebuildable(call):
                return fallback
            if isinstance(ordered := recipe.get(ORDERED_FIELD), str):
                # Written since the recipe kept its key order: the body a provider sent, as it sent it.
                recipe = {**recipe, **json.loads(ordered)}
            args: list[Any] = list(recipe.get("args") or [])
            if call is CATEGORIZED_HTTP_ERROR:
                args[0] = _resolve(str(args[0]))
            error: Any = call(*args)
            state = recipe.get("state")
            if isinstance(state, dict):
                error.__setstate__(state)
        except Exception:
            return fallback
        # The same class and message, or nothing: a rebuilt error that differs would take another path silently.
        # The message is stored as it was; a pin written before #45 holds it NFC-normalised, and is compared so.
        said = str(error) if isinstance(error, BaseException) else None
        if said is None or _path(type(error)) != type_name or message not in (said, unicodedata.normalize("NFC", said)):
            return fallback
        return error


_DID = "did"
"""Where a failure's pin keeps what the failed call did to its run before it raised (an agent it delegated to)."""
_DID_ATTRIBUTE = "__anagrapheus_did__"


def failed_having_done(error: BaseException, did: JSONValue) -> None:
    """Note on `error` what the call that raised it did to its run first (its pin keeps it, a replay reads it)."""
    # An exception whose attributes cannot be set (a slotted class) keeps nothing: it is pinned as it always was.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(error, _DID_ATTRIBUTE, did)


def did_before_failing(error: BaseException) -> JSONValue | None:
    """What the call that raised `error` did to its run before (as `failed_having_done` noted it); None if nothing."""
    return cast("JSONValue | None", getattr(error, _DID_ATTRIBUTE, None))


def _reduced(error: BaseException) -> JSONValue | None:
    """How to rebuild `error` (its pickle recipe, as JSON), or None when it has none that JSON can hold."""
    try:
        reduced = error.__reduce__()
        if not isinstance(reduced, tuple) or len(reduced) < 2:
            return None
        call, args = reduced[0], list(reduced[1])
        state = reduced[2] if len(reduced) > 2 else None
        if isinstance(state, dict) and _DID_ATTRIBUTE in state:
            # What the call did before failing is pinned beside the recipe (`did`), not inside it.
            state = {name: value for name, value in cast("dict[str, object]", state).items() if name != _DID_ATTRIBUTE}
            state = state or None
        if call is CATEGORIZED_HTTP_ERROR:
            args[0] = _path(args[0])
        if not _rebuildable(call):
            return None
        # The arguments and state as ordered text: an error's body is what the provider sent, in its key order, and
        # its message quotes it in that order. Sorted, the rebuilt error's message would differ and not be raised.
        return {"call": _path(call), ORDERED_FIELD: ordered_json(to_jsonable_python({"args": args, "state": state}))}
    except Exception:
        return None


FAILURES = ExceptionCodec()
"""The failure codec every pinned model request and tool call uses."""


class DrawSequence:
    """Counts each key's pinned failures, so a retry after a failure is a fresh draw, under a key of its own.

    The first draw of a call is keyed as always; the draw after n failures is keyed on the call's key
    and n. Replay raises the same failures in the same order, so the same retries reach the same draws.
    A run that resumes a failed run's place (the retry rule) counts the failures that run met too.
    """

    def __init__(self) -> None:
        self._failed: dict[str, int] = {}

    def key(self, key: str, *, kind: str, resolver: Resolver | None = None) -> str:
        """The key of the next draw of the call keyed `key` (through `resolver`, which counts a retry's failures)."""
        failed = max(self._failed.get(key, 0), inherited_failures(resolver, key))
        return key if failed == 0 else pin_key(kind, {"retry_of": key, "after_failures": failed})

    def note(self, key: str, error: BaseException, *, resolver: Resolver | None = None) -> None:
        """Count `error` against `key` if it is a drawn failure (one the codec pins)."""
        if FAILURES.describe(error) is not None:
            self._failed[key] = max(self._failed.get(key, 0), inherited_failures(resolver, key)) + 1
            noted_failure(resolver, key)

    async def resolve(
        self,
        resolver: Resolver,
        key: str,
        *,
        kind: str,
        effect: Callable[[], Awaitable[object]],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None,
    ) -> T:
        """Resolve the next draw of the call keyed `key`, failures pinned and counted.

        The draw is reported to pydantic-ai as a durable unit, run or answered from a pin, so that under a
        `replay_scope()` (which `Pinning` opens per run) a span covering only pinned answers is not exported.
        """
        drawn = False

        async def draw() -> object:
            nonlocal drawn
            drawn = True
            return await effect()

        try:
            return await resolver.aresolve(
                self.key(key, kind=kind, resolver=resolver),
                kind=kind,
                effect=draw,
                interpret=interpret,
                fingerprint=fingerprint,
                failure=FAILURES,
            )
        except Exception as e:
            self.note(key, e, resolver=resolver)
            raise
        finally:
            record_durable_unit(executed=drawn)
