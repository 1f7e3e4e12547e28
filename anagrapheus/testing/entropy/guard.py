"""The determinism guard: while a test body runs, what user code touches outside its manifest is a violation.

Sockets, processes and file reads are seen by one audit hook, installed once for the process (an audit hook
cannot be removed) and gated by a flag, so it returns at once outside a guarded test body. Clocks and random
draws raise no audit event, so the names user modules hold for them (`time`, `datetime`, `random`, `uuid`, `os`,
`secrets`, and what was imported from them) are swapped for stand-ins while the body runs, and swapped back
after: the standard library and installed packages keep the real ones, so pydantic-ai's own timestamps and a
pinned run's clock still come from the pins.
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
import random
import secrets
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from typing_extensions import override

from anagrapheus.errors import UsageError
from anagrapheus.testing.entropy.frames import caller, is_user_file, opener, shown, user_frame, where
from anagrapheus.testing.entropy.manifest import ClockDeclaration, EntropyManifest

__all__ = ["Guard", "Violation", "guarded"]

_T = TypeVar("_T")
_REAL_DATETIME = _dt.datetime
_REAL_DATE = _dt.date
_EPOCH = _REAL_DATETIME(1970, 1, 1, tzinfo=_dt.UTC)
_SUBPROCESS_EVENTS = frozenset(("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"))
_WATCHED = _SUBPROCESS_EVENTS | {"open", "socket.connect"}
# What a user module can hold that has a stand-in; anything else is passed over without hashing it.
_SWAPPABLE = frozenset((types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type))
_RANDOM_DRAWS = (
    "random",
    "randint",
    "randrange",
    "randbytes",
    "getrandbits",
    "choice",
    "choices",
    "sample",
    "shuffle",
    "uniform",
    "triangular",
    "gauss",
    "normalvariate",
    "lognormvariate",
    "expovariate",
    "vonmisesvariate",
    "gammavariate",
    "betavariate",
    "paretovariate",
    "weibullvariate",
)


@dataclass(frozen=True, slots=True)
class Violation:
    """One undeclared touch: its kind, what it touched, and the line of user code that did it."""

    kind: str
    """`clock`, `random`, `network`, `subprocess`, `read` or `order` (an order taken from a set)."""
    target: str
    """What was touched: `datetime.now()`, a socket address, a command, a file."""
    where: str
    """`path:line (function)` of the first user frame."""

    def describe(self) -> str:
        """One line for the failure report."""
        return f"{self.kind:<10} {self.target}  at {self.where}"


@dataclass
class Guard:
    """The state of one guarded test body: what it may touch and what it touched."""

    manifest: EntropyManifest
    seed: int | None
    """The test's seed (from the manifest's seed and its node id), or None when none is declared."""
    allowed_dirs: tuple[str, ...] = ()
    """Directories whose files a test may read whatever the manifest says (its tmp_path)."""
    violations: list[Violation] = field(default_factory=list[Violation])
    _seen: set[tuple[str, str, str]] = field(default_factory=set[tuple[str, str, str]])
    _written: set[str] = field(default_factory=set[str])
    _declared: dict[str, bool] = field(default_factory=dict[str, bool])
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, kind: str, target: str, frame: types.FrameType | None) -> None:
        """Record a violation once per kind, target and line."""
        self.report_at(kind, target, where(frame))

    def report_at(self, kind: str, target: str, at: str) -> None:
        """Record a violation found at `at` (`path:line (in function)`), once per kind, target and line."""
        violation = Violation(kind, target, at)
        key = (violation.kind, violation.target, violation.where)
        with self._lock:
            if key not in self._seen:
                self._seen.add(key)
                self.violations.append(violation)

    def describe(self, nodeid: str) -> str:
        """The failure report: every violation, and where to declare them."""
        source = self.manifest.source or "[tool.anagrapheus.entropy] of pyproject.toml (or nondeterminism.toml)"
        lines = [f"{nodeid} touched {len(self.violations)} undeclared source(s) of nondeterminism:"]
        lines += [f"  {violation.describe()}" for violation in self.violations]
        lines.append(f"declare them in {source}, or take them out of the test")
        # Set and dict order of strings moves with the hash seed, which no hook sees: say which one this run had.
        hash_seed = os.environ.get("PYTHONHASHSEED", "random")
        lines.append(f"(PYTHONHASHSEED={hash_seed}: run again under another value to find an order taken from a set)")
        return "\n".join(lines)

    # The audit hook's half: sockets, processes, reads.
    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """Judge one audit event raised while the body runs."""
        if event == "open":
            self._open(args)
        elif event == "socket.connect":
            if not self.manifest.allow_network:
                self.report("network", f"connect {args[1]!r}", user_frame(caller(2)))
        elif event in _SUBPROCESS_EVENTS and not self.manifest.allow_subprocess:
            command: Any = args[0] if event == "os.system" else args[1]
            if isinstance(command, list | tuple):
                command = " ".join(os.fsdecode(part) for part in cast("Sequence[Any]", command))
            self.report("subprocess", f"{event} {os.fsdecode(command)}", user_frame(caller(2)))

    def _open(self, args: tuple[Any, ...]) -> None:
        target, mode, flags = args
        if isinstance(target, int):
            return
        if mode is not None:
            # `w` and `x` start the file afresh; `r+` and `a+` read what was there before.
            fresh = "w" in mode or "x" in mode
            reads = not fresh and ("r" in mode or "+" in mode)
        else:
            fresh = flags & os.O_ACCMODE == os.O_WRONLY or bool(flags & os.O_TRUNC)
            reads = not fresh
        path = os.path.abspath(os.fsdecode(target))
        if not reads:
            # What the test wrote, it may read back.
            self._written.add(path)
            return
        if path in self._written or path.startswith(self.allowed_dirs):
            return
        declared = self._declared.get(path)
        if declared is None:
            declared = self._declared[path] = self.manifest.declares_read(path)
        frame = None if declared else opener(caller(3))
        if frame is None:
            return
        self.report("read", shown(path), frame)


# Process-wide because an audit hook is: CPython cannot remove one, so it is installed once, on the first guarded
# body, and does nothing while no body is guarded. The `guarded` scope arms it (`_current`) and disarms it as it closes.
_current: Guard | None = None
_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audit event of the process (`id()` raises one): out at once unless armed and watched.
    guard = _current
    if guard is None or event not in _WATCHED:
        return
    guard.audit(event, args)


# CPython runs audit hooks untraced unless the hook says otherwise: coverage and debuggers see this one.
_audit.__cantrace__ = True  # type: ignore[attr-defined]


def _install() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True


# The clock and random halves: stand-ins for what user modules hold.


class _Served:
    """The values one guarded body's user code reads: the declared clock, and draws from the test's seed."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.clock: ClockDeclaration | None = guard.manifest.clock
        self.wall_reads = 0
        self.monotonic_reads = 0
        self.rng = random.Random(guard.seed) if guard.seed is not None else None

    def wall_ns(self, name: str) -> int | None:
        """The next wall-clock reading in ns, or None (after reporting it) when no clock is declared."""
        if self.clock is None:
            self.guard.report("clock", name, user_frame(caller(2)))
            return None
        base = (self.clock.frozen_at - _EPOCH) // _dt.timedelta(microseconds=1) * 1000
        reading = base + round(self.wall_reads * self.clock.step * 1_000_000_000)
        self.wall_reads += 1
        return reading

    def monotonic_ns(self, name: str) -> int | None:
        """The next monotonic reading in ns, or None (after reporting it) when no clock is declared."""
        if self.clock is None:
            self.guard.report("clock", name, user_frame(caller(2)))
            return None
        reading = round(self.monotonic_reads * self.clock.monotonic_step * 1_000_000_000)
        self.monotonic_reads += 1
        return reading

    def draw(self, name: str) -> random.Random | None:
        """The seeded stream, or None (after reporting the draw) when no seed is declared."""
        if self.rng is None:
            self.guard.report("random", name, user_frame(caller(2)))
        return self.rng


class _Serving:
    """What the stand-ins ask: the guarded body's `_Served` while one runs; outside it, the real sources, unjudged.

    The stand-ins are made once for the process; one a user keeps past the body acts as the real thing.
    """

    served: _Served | None = None

    def wall_ns(self, name: str) -> int | None:
        """The body's next wall-clock reading, or None for the real clock."""
        return None if self.served is None else self.served.wall_ns(name)

    def monotonic_ns(self, name: str) -> int | None:
        """The body's next monotonic reading, or None for the real clock."""
        return None if self.served is None else self.served.monotonic_ns(name)

    def draw(self, name: str) -> random.Random | None:
        """The body's seeded stream, or None for the real source."""
        return None if self.served is None else self.served.draw(name)

    def draw_random(self, name: str) -> None:
        """Report a draw from the global random, unless a seed is declared (it is seeded per test then)."""
        if self.served is not None and self.served.rng is None:
            self.served.draw(name)


_SERVING = _Serving()


def _now(served: _Serving, name: str, tz: _dt.tzinfo | None) -> _dt.datetime:
    ns = served.wall_ns(name)
    if ns is None:
        return _REAL_DATETIME.now(tz)
    instant = _EPOCH + _dt.timedelta(microseconds=ns // 1000)
    # A naive reading is the frozen instant in UTC: the machine's zone must not move a declared clock.
    return instant.replace(tzinfo=None) if tz is None else instant.astimezone(tz)


class _StandIn(type):
    """Metaclass of a stand-in class: it makes real instances, takes real ones as its own, and validates as the real."""

    _real: type

    @override
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real(*args, **kwargs)

    @override
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, cls._real)

    @override
    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls._real)

    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # A model declared in the body with a `datetime` field is a model of real datetimes.
        return handler.generate_schema(cls._real)


def _datetime_class(served: _Serving) -> type:
    class datetime(_REAL_DATETIME, metaclass=_StandIn):
        _real = _REAL_DATETIME

        @classmethod
        @override
        def now(cls, tz: _dt.tzinfo | None = None) -> Any:
            return _now(served, "datetime.now()", tz)

        @classmethod
        @override
        def utcnow(cls) -> Any:
            return _now(served, "datetime.utcnow()", _dt.UTC).replace(tzinfo=None)

        @classmethod
        @override
        def today(cls) -> Any:
            return _now(served, "datetime.today()", None)

    return datetime


def _date_class(served: _Serving) -> type:
    class date(_REAL_DATE, metaclass=_StandIn):
        _real = _REAL_DATE

        @classmethod
        @override
        def today(cls) -> Any:
            return _now(served, "date.today()", None).date()

    return date


_ABSENT = object()
"""What a module held under a name it had not got: deleting it again removes it."""


class _Module(types.ModuleType):
    """A stand-in for a module: its own attributes first, the real module's for the rest.

    What a test sets on it (monkeypatch.setattr(os, "kill", ...)) is set on the real module, where the
    libraries it calls look; setting a stand-in back puts back what the real module held before.
    """

    def __init__(self, real: types.ModuleType, overrides: dict[str, object]) -> None:
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(overrides)
        self.__dict__["_anagrapheus_real"] = real
        self.__dict__["_anagrapheus_stand_ins"] = dict(overrides)
        self.__dict__["_anagrapheus_saved"] = {}

    @override
    def __getattr__(self, name: str) -> Any:
        return getattr(self._anagrapheus_real, name)

    @override
    def __setattr__(self, name: str, value: object) -> None:
        real: types.ModuleType = self._anagrapheus_real
        stand_in = self._anagrapheus_stand_ins.get(name)
        saved: dict[str, object] = self._anagrapheus_saved
        if stand_in is None:
            # What the real module held first is kept: a `del` (pytest 9.2's monkeypatch undoes a set it could not
            # see in this stand-in's own `__dict__` by deleting) puts it back rather than removing it for good.
            saved.setdefault(name, getattr(real, name, _ABSENT))
            setattr(real, name, value)
        elif value is stand_in:
            if name in saved:
                setattr(real, name, saved.pop(name))
            self.__dict__[name] = stand_in
        else:
            saved.setdefault(name, getattr(real, name))
            setattr(real, name, value)
            self.__dict__[name] = value

    @override
    def __delattr__(self, name: str) -> None:
        real: types.ModuleType = self._anagrapheus_real
        saved: dict[str, object] = self._anagrapheus_saved
        before = saved.pop(name, _ABSENT)
        if before is _ABSENT or name in self._anagrapheus_stand_ins:
            delattr(real, name)
        else:
            setattr(real, name, before)  # set through this stand-in, so deleting it puts back what was there


def _stand_ins(served: _Serving) -> dict[object, object]:
    """Each real module, function and class user code may hold, with what it holds while the body runs."""

    def wall(name: str, real: Callable[[], float], seconds: bool) -> Callable[[], Any]:
        def read() -> Any:
            ns = served.wall_ns(name)
            return real() if ns is None else (ns / 1_000_000_000 if seconds else ns)

        return read

    def steady(name: str, real: Callable[[], float], seconds: bool) -> Callable[[], Any]:
        def read() -> Any:
            ns = served.monotonic_ns(name)
            return real() if ns is None else (ns / 1_000_000_000 if seconds else ns)

        return read

    def at(name: str, real: Callable[..., _T]) -> Callable[..., _T]:
        def read(secs: float | None = None) -> _T:
            if secs is not None:
                return real(secs)
            ns = served.wall_ns(name)
            return real(None if ns is None else ns / 1_000_000_000)

        return read

    clock: dict[str, object] = {
        "time": wall("time.time()", time.time, True),
        "time_ns": wall("time.time_ns()", time.time_ns, False),
        "monotonic": steady("time.monotonic()", time.monotonic, True),
        "monotonic_ns": steady("time.monotonic_ns()", time.monotonic_ns, False),
        "perf_counter": steady("time.perf_counter()", time.perf_counter, True),
        "perf_counter_ns": steady("time.perf_counter_ns()", time.perf_counter_ns, False),
        "gmtime": at("time.gmtime()", time.gmtime),
        "localtime": at("time.localtime()", time.localtime),
        "ctime": at("time.ctime()", time.ctime),
    }
    fake_datetime, fake_date = _datetime_class(served), _date_class(served)

    def urandom(size: int) -> bytes:
        rng = served.draw("os.urandom()")
        return os.urandom(size) if rng is None else rng.randbytes(size)

    def uuid4() -> uuid.UUID:
        rng = served.draw("uuid.uuid4()")
        return uuid.uuid4() if rng is None else uuid.UUID(bytes=rng.randbytes(16), version=4)

    def token_bytes(nbytes: int | None = None) -> bytes:
        rng = served.draw("secrets.token_bytes()")
        return secrets.token_bytes(nbytes) if rng is None else rng.randbytes(32 if nbytes is None else nbytes)

    def token_hex(nbytes: int | None = None) -> str:
        rng = served.draw("secrets.token_hex()")
        return secrets.token_hex(nbytes) if rng is None else rng.randbytes(32 if nbytes is None else nbytes).hex()

    def token_urlsafe(nbytes: int | None = None) -> str:
        rng = served.draw("secrets.token_urlsafe()")
        if rng is None:
            return secrets.token_urlsafe(nbytes)
        return base64.urlsafe_b64encode(rng.randbytes(32 if nbytes is None else nbytes)).rstrip(b"=").decode()

    def randbelow(exclusive_upper_bound: int) -> int:
        rng = served.draw("secrets.randbelow()")
        return secrets.randbelow(exclusive_upper_bound) if rng is None else rng.randrange(exclusive_upper_bound)

    def choice(seq: Sequence[_T]) -> _T:
        rng = served.draw("secrets.choice()")
        return secrets.choice(seq) if rng is None else rng.choice(seq)

    def randbits(k: int) -> int:
        rng = served.draw("secrets.randbits()")
        return secrets.randbits(k) if rng is None else rng.getrandbits(k)

    drawn: dict[str, object] = {
        "token_bytes": token_bytes,
        "token_hex": token_hex,
        "token_urlsafe": token_urlsafe,
        "randbelow": randbelow,
        "choice": choice,
        "randbits": randbits,
    }
    swaps: list[tuple[object, object]] = [
        (time, _Module(time, clock)),
        *((getattr(time, name), fake) for name, fake in clock.items()),
        (_dt, _Module(_dt, {"datetime": fake_datetime, "date": fake_date})),
        (_REAL_DATETIME, fake_datetime),
        (_REAL_DATE, fake_date),
        (uuid, _Module(uuid, {"uuid4": uuid4})),
        (uuid.uuid4, uuid4),
        (os, _Module(os, {"urandom": urandom})),
        (os.urandom, urandom),
        (secrets, _Module(secrets, drawn)),
        *((getattr(secrets, name), fake) for name, fake in drawn.items()),
    ]
    # Seeded, the global random is seeded per test; unseeded, every draw by user code is a violation.
    draws: dict[str, object] = {
        name: _reporting(served, f"random.{name}()", getattr(random, name)) for name in _RANDOM_DRAWS
    }
    swaps.append((random, _Module(random, draws)))
    swaps.extend((getattr(random, name), fake) for name, fake in draws.items())
    return dict(swaps)


def _reporting(served: _Serving, name: str, real: Callable[..., _T]) -> Callable[..., _T]:
    def draw(*args: Any, **kwargs: Any) -> _T:
        served.draw_random(name)
        return real(*args, **kwargs)

    return draw


# Remembered for the process, because each holds while it lives and is asked by every guarded body: which
# imported modules are the user's (judged again when `sys.modules` changes), and the stand-ins, made once (outside
# a guarded body they serve the real sources, through `_SERVING`). Nothing to undo: `_swapped` puts back what
# it swapped into user modules as each body ends.
_modules: dict[str, tuple[object, bool]] = {}
_users: list[tuple[str, types.ModuleType]] = []
_seen_count = -1
_made: dict[object, object] = {}


def _user_modules() -> Iterable[types.ModuleType]:
    """The imported modules of user code; each module is judged once, by its file."""
    global _seen_count
    if len(sys.modules) != _seen_count or any(sys.modules.get(name) is not module for name, module in _users):
        # Something was imported (or replaced) since the last body: look again, judging only what is new.
        _users.clear()
        for name, module in list(sys.modules.items()):
            known = _modules.get(name)
            if known is None or known[0] is not module:
                filename = getattr(module, "__file__", None)
                known = _modules[name] = (module, isinstance(filename, str) and is_user_file(filename))
            if known[1]:
                _users.append((name, module))
        _seen_count = len(sys.modules)
    return [module for _, module in _users]


def _all_stand_ins() -> dict[object, object]:
    """The stand-ins, made once for the process."""
    if not _made:
        _made.update(_stand_ins(_SERVING))
    return _made


@contextmanager
def _swapped(stand_ins: dict[object, object]) -> Generator[None]:
    """Swap what user modules hold for its stand-in while open; put back what is still swapped after.

    `from random import choice` holds the module's own bound method, the same object, so it is found too.
    """
    swapped: list[tuple[dict[str, object], str, object, object]] = []
    for module in _user_modules():
        namespace = vars(module)
        for name, value in list(namespace.items()):
            fake = stand_ins.get(value) if type(value) in _SWAPPABLE else None
            if fake is not None:
                namespace[name] = fake
                swapped.append((namespace, name, value, fake))
    try:
        yield
    finally:
        for namespace, name, real, fake in swapped:
            if namespace.get(name) is fake:
                namespace[name] = real


@contextmanager
def guarded(manifest: EntropyManifest, *, seed: int | None, allowed_dirs: Sequence[str] = ()) -> Generator[Guard]:
    """Guard the code run while open: what user code touches outside `manifest` is recorded on the yielded `Guard`.

    With a seed, the global `random` is seeded from it while open and restored after.
    """
    global _current
    if _current is not None:
        raise UsageError("guarded scopes do not nest: one test body is guarded at a time")
    guard = Guard(manifest, seed, tuple(os.path.abspath(d) + os.sep for d in allowed_dirs))
    _install()
    state = random.getstate()
    if seed is not None:
        random.seed(seed)
    with _swapped(_all_stand_ins()):
        _current, _SERVING.served = guard, _Served(guard)
        try:
            yield guard
        finally:
            _current = _SERVING.served = None
            random.setstate(state)
