"""PinLedger and ReplayPins costs, as ratios to a raw-sqlite3 floor measured in the same run.

- Draw: `PinLedger.resolve` of a new key (effect, canonical JSON, durable scratch write,
  interpretation) vs raw sqlite3 doing `json.dumps` of the same result and one INSERT into a
  table of the same shape in its own BEGIN IMMEDIATE..COMMIT.
- Commit: `PinLedger.commit()` of 10,000 scratch pins vs raw sqlite3 doing the same in one
  transaction: select the scratch rows, splice each into a payload, insert the events, delete
  the scratch.
- Replay: building `ReplayPins.from_events(store.read(), ...)` from a 100,000-pin log vs a dict
  of key -> raw text built from a raw sqlite3 select with `json.loads` per payload; lookups
  (`ReplayPins.resolve` of every key) vs `dict.get` + `json.loads`; and the memory each holds
  (tracemalloc).

Both sides use files with the store's own schema and pragmas (WAL, the same synchronous setting).

    python benchmarks/ledger.py            # default, well under a minute
    python benchmarks/ledger.py --long     # more rounds
    python benchmarks/ledger.py --quick    # smoke test: tiny sizes, one round
"""

from __future__ import annotations

import gc
import json
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uuid_utils
from _measure import Variant, compare, machine_line, options, print_table, raw_connection, store_schema, use_options

from anagrapheus.timeline import (
    EventTypeRegistry,
    PendingEvent,
    PinLedger,
    ReplayPins,
    SQLiteEventStore,
    canonical_json,
    pin_key,
)

_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode
EVENT_COLUMNS = "event_id, namespace, type, schema_version, causation_id, correlation_id, created_at, payload"


def result(i: int) -> dict[str, Any]:
    """A model response as PinnedModel would pin it: a few hundred bytes of JSON."""
    return {
        "finish_reason": "stop",
        "model_name": "scripted",
        "parts": [{"content": f"Answer {i}: the UK holds firm on fisheries.", "part_kind": "text"}],
        "usage": {"input_tokens": 120 + i % 7, "output_tokens": 12},
    }


def key_of(i: int) -> str:
    return pin_key("model_call", {"n": i})


def identity(value: object) -> object:
    return value


def never() -> object:
    raise AssertionError("replay ran an effect")


class Raw:
    """The floor: plain sqlite3 on a file with the store's schema and pragmas."""

    def __init__(self, path: Path, schema: list[str], synchronous: str) -> None:
        self.conn = raw_connection(path, schema, synchronous)
        self.draws = 0

    def draw(self, unit_id: str, key: str, value: object) -> object:
        self.draws += 1
        raw = _dumps(value)
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "INSERT INTO pin_scratch (unit_id, key, kind, raw, attempts, draw_no, fingerprint)"
            " VALUES (?, ?, 'model_call', ?, 1, ?, NULL)",
            (unit_id, key, raw, self.draws),
        )
        self.conn.execute("COMMIT")
        return value

    def fill_scratch(self, unit_id: str, pins: list[tuple[str, str]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT INTO pin_scratch (unit_id, key, kind, raw, attempts, draw_no, fingerprint)"
            " VALUES (?, ?, 'model_call', ?, 1, ?, NULL)",
            [(unit_id, key, raw, n) for n, (key, raw) in enumerate(pins, start=1)],
        )
        self.conn.execute("COMMIT")

    def commit(self, unit_id: str) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        rows = self.conn.execute(
            "SELECT key, kind, raw, attempts FROM pin_scratch WHERE unit_id = ? ORDER BY draw_no", (unit_id,)
        ).fetchall()
        created_at = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        unit = _dumps(unit_id)
        events = [
            (
                str(uuid_utils.uuid7()),
                "anagrapheus",
                "pin_promoted",
                1,
                None,
                unit_id,
                created_at,
                f'{{"attempts":{attempts},"fingerprint":null,"key":{_dumps(key)},"kind":{_dumps(kind)},'
                f'"raw":{raw},"unit_id":{unit}}}',
            )
            for key, kind, raw, attempts in rows
        ]
        self.conn.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)", events)
        self.conn.execute("DELETE FROM pin_scratch WHERE unit_id = ?", (unit_id,))
        self.conn.execute("COMMIT")

    def pins(self) -> dict[str, str]:
        pins: dict[str, str] = {}
        for (payload,) in self.conn.execute(
            "SELECT payload FROM events WHERE namespace = 'anagrapheus' AND type = 'pin_promoted' ORDER BY seq"
        ):
            value = json.loads(payload)
            pins[value["key"]] = _dumps(value["raw"])
        return pins


def fill_scratch(path: Path, unit_id: str, pins: list[tuple[str, str]]) -> None:
    """Leave `pins` in a store file's scratch as an open unit, in one transaction (untimed setup).

    Drawing them one by one through the ledger would take minutes: see the draw table.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO pin_scratch (unit_id, key, kind, raw, attempts, draw_no, fingerprint)"
            " VALUES (?, ?, 'model_call', ?, 1, ?, NULL)",
            [(unit_id, key, raw, n) for n, (key, raw) in enumerate(pins, start=1)],
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def retained(build: Callable[[], object]) -> tuple[int, int]:
    """(bytes still held by what `build` returns, peak bytes while building), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del kept
    return after - before, peak - before


def lookups(replay: ReplayPins, floor: dict[str, str], keys: list[str], *, rounds: int) -> None:
    """Resolve every key once per pass, against dict.get + json.loads."""

    def replay_lookups(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            for key in keys:
                replay.resolve(key, kind="model_call", effect=never, interpret=identity)
        return time.perf_counter() - start

    def dict_lookups(n: int) -> float:
        start = time.perf_counter()
        loads, get = json.loads, floor.get
        for _ in range(n):
            for key in keys:
                identity(loads(get(key)))  # type: ignore[arg-type]
        return time.perf_counter() - start

    rows = compare(
        Variant("dict.get + json.loads", dict_lookups, unit="pass"),
        [Variant("ReplayPins.resolve (strict, every key)", replay_lookups, unit="pass")],
        n=1,
        rounds=rounds,
    )
    print_table(f"Replay lookups: every key of the {len(keys):,}-pin log once (per pass)", "dict floor", rows)
    per_lookup = rows[1].per_op_median / len(keys)
    floor_lookup = rows[0].per_op_median / len(keys)
    print(f"  ReplayPins: {1 / per_lookup:,.0f} lookups/s; floor: {1 / floor_lookup:,.0f} lookups/s")


def main() -> None:
    parser = options((__doc__ or "").splitlines()[0], rounds=5)
    args = parser.parse_args()
    rounds = use_options(args)
    draws = 10 if args.quick else 100
    commit_size = 200 if args.quick else 10_000
    log_size = 1_000 if args.quick else 100_000
    sync = args.synchronous

    print(f"benchmarks/ledger.py  {machine_line()}")
    build_rounds = rounds if args.long or args.quick else 3  # a second or more a build: steady at 3
    print(
        f"  synchronous={sync}, journal_mode=WAL, rounds={rounds} (draws {3 * rounds}, replay build {build_rounds}),"
        f" sqlite {sqlite3.sqlite_version}"
    )

    types = EventTypeRegistry()
    with tempfile.TemporaryDirectory(prefix="anagrapheus-bench-") as tmp:
        root = Path(tmp)
        files = iter(range(1_000_000))
        SQLiteEventStore(root / "schema.db", synchronous=sync).close()
        schema = store_schema(root / "schema.db")

        def fresh_store() -> SQLiteEventStore:
            return SQLiteEventStore(root / f"store-{next(files)}.db", synchronous=sync)

        def fresh_raw() -> Raw:
            return Raw(root / f"raw-{next(files)}.db", schema, sync)

        # Draws: a new key each time, into a fresh unit per sample, and into a unit that already holds
        # `commit_size` pins (filled untimed, as a crash-resumed unit would be).
        values = [result(i) for i in range(draws)]
        draw_store, draw_raw = fresh_store(), fresh_raw()
        big_unit = str(uuid_utils.uuid7())
        fill_scratch(draw_store.path, big_unit, [(f"held-{i}", canonical_json(result(i))) for i in range(commit_size)])
        big = PinLedger(draw_store, types, unit_id=big_unit)
        raw_unit = str(uuid_utils.uuid7())
        # Keys are hashed before timing: every variant draws a new key from this pool each time.
        pool = iter([key_of(i) for i in range(3 * draws * (3 * rounds + 1))])

        def ledger_draws(*, into: PinLedger | None) -> Callable[[int], float]:
            def sample(n: int) -> float:
                ledger = into if into is not None else PinLedger(draw_store, types)
                start = time.perf_counter()
                for i in range(n):
                    value = values[i % draws]
                    ledger.resolve(next(pool), kind="model_call", effect=lambda v=value: v, interpret=identity)
                spent = time.perf_counter() - start
                if into is None:
                    ledger.abandon(reason="benchmark sample over")
                return spent

            return sample

        def raw_draws(n: int) -> float:
            start = time.perf_counter()
            for i in range(n):
                draw_raw.draw(raw_unit, next(pool), values[i % draws])
            return time.perf_counter() - start

        rows = compare(
            Variant("raw sqlite3: json.dumps + INSERT + COMMIT", raw_draws, unit="draw"),
            [
                Variant("PinLedger.resolve, first draw, fresh unit", ledger_draws(into=None), unit="draw"),
                Variant(f"... into a unit holding {commit_size:,} pins", ledger_draws(into=big), unit="draw"),
            ],
            n=draws,
            rounds=3 * rounds,  # cheap, and fsync-bound: more rounds steady the median
        )
        print_table("Draw cost per pin (one durable scratch write each)", "raw sqlite3 insert per draw", rows)
        big.abandon(reason="benchmark over")
        draw_store.close()
        draw_raw.conn.close()

        # Commit: each sample fills a fresh file's scratch (untimed), then times the commit.
        scratch = [(key_of(i), canonical_json(result(i))) for i in range(commit_size)]

        def ledger_commit(n: int) -> float:
            spent = 0.0
            for _ in range(n):
                store = fresh_store()
                unit_id = str(uuid_utils.uuid7())
                fill_scratch(store.path, unit_id, scratch)
                unit = PinLedger(store, types, unit_id=unit_id)
                start = time.perf_counter()
                committed = unit.commit()
                spent += time.perf_counter() - start
                assert len(committed) == commit_size
                store.close()
            return spent

        def raw_commit(n: int) -> float:
            spent = 0.0
            for _ in range(n):
                raw = fresh_raw()
                unit_id = str(uuid_utils.uuid7())
                raw.fill_scratch(unit_id, scratch)
                start = time.perf_counter()
                raw.commit(unit_id)
                spent += time.perf_counter() - start
                raw.conn.close()
            return spent

        rows = compare(
            Variant("raw sqlite3: select, splice, insert, delete", raw_commit, unit="commit"),
            [Variant(f"PinLedger.commit() of {commit_size:,} pins", ledger_commit, unit="commit")],
            n=1,
            rounds=rounds,
        )
        print_table(f"Commit of {commit_size:,} pins (one transaction)", "raw sqlite3, same rows", rows)

        # Replay from a large log: the same PinPromoted events on both sides.
        log_store, log_raw = fresh_store(), fresh_raw()
        unit_id = str(uuid_utils.uuid7())
        keys = [key_of(i) for i in range(log_size)]
        # ASCII text and integers only, so the stdlib's sorted compact encoding is the canonical JSON.
        events = [
            PendingEvent(
                namespace="anagrapheus",
                type="pin_promoted",
                schema_version=1,
                payload=_dumps(
                    {
                        "attempts": 1,
                        "fingerprint": None,
                        "key": key,
                        "kind": "model_call",
                        "raw": result(i),
                        "unit_id": unit_id,
                    }
                ),
                correlation_id=unit_id,
            )
            for i, key in enumerate(keys)
        ]
        assert events[0].payload == canonical_json(json.loads(events[0].payload))
        for start in range(0, log_size, 10_000):
            log_store.append(events[start : start + 10_000])
        log_raw.conn.execute("BEGIN IMMEDIATE")
        log_raw.conn.executemany(
            f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
            [
                (str(uuid_utils.uuid7()), e.namespace, e.type, 1, None, unit_id, "2026-01-01T00:00:00Z", e.payload)
                for e in events
            ],
        )
        log_raw.conn.execute("COMMIT")
        del events

        def replay_build(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                assert len(ReplayPins.from_events(log_store.read(), types)) == log_size
            return time.perf_counter() - start

        def raw_build(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                assert len(log_raw.pins()) == log_size
            return time.perf_counter() - start

        rows = compare(
            Variant("raw sqlite3 select + json.loads into a dict", raw_build, unit="build"),
            [Variant("ReplayPins.from_events(store.read())", replay_build, unit="build")],
            n=1,
            rounds=build_rounds,
        )
        print_table(f"Build a replay from a {log_size:,}-pin log", "raw sqlite3 rows into dict[key, raw text]", rows)

        lookups(ReplayPins.from_events(log_store.read(), types), log_raw.pins(), keys, rounds=rounds)

        held, peak = retained(lambda: ReplayPins.from_events(log_store.read(), types))
        floor_held, floor_peak = retained(log_raw.pins)
        print(f"\nMemory for a replay of {log_size:,} pins (tracemalloc, held after build / peak while building)")
        floor_label = "dict[key, raw text] floor"
        print(f"  {floor_label:<52} {floor_held / 2**20:8.1f} MiB {floor_peak / 2**20:8.1f} MiB  1.000x")
        print(
            f"  {'ReplayPins.from_events(store.read())':<52} {held / 2**20:8.1f} MiB {peak / 2**20:8.1f} MiB"
            f"  {held / floor_held:.3f}x  ({held / log_size:,.0f} bytes a pin)"
        )
        log_store.close()
        log_raw.conn.close()


if __name__ == "__main__":
    main()
