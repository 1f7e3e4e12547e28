"""Keys at scale and loading at scale: four figures, each a ratio against a baseline measured in the same run.

1. key cost at 200 messages / key cost at 2 messages (`PinnedModel.pin_for`, the same message
   objects re-sent on every request, as pydantic-ai sends a growing history). Aim <= 2x.
2. keying's share of a replayed request at a 6,000-message history: an agent run continuing the
   history through `PinnedModel` + `ReplayPins`, and the time spent inside `pin_for` during it.
   Aim <= 5%.
3. loading a recording of N pins into `ReplayPins` (`ReplayPins.from_recording`) / `json.loads`
   of every line of the same file. Aim <= 2x.
4. peak memory of that load (tracemalloc) / the file's size. Aim <= 2x.

    python benchmarks/keys.py             # default: 20,000 pins
    python benchmarks/keys.py --long      # more rounds, 100,000 pins (a ~50 MB file)
    python benchmarks/keys.py --quick     # smoke test
"""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from _measure import Aim, Variant, compare, machine_line, options, print_table, repeated, use_options
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from anagrapheus import EventTypeRegistry, PinLedger, PinnedModel, ReplayPins, SQLiteEventStore
from anagrapheus.provider.keying.history import SEEN_BEFORE_KEPT
from anagrapheus.timeline import PinPromoted, RecordingHeader, StoredEvent, canonical_json, write_recording
from anagrapheus.timeline.events import BUILTIN_NAMESPACE

LOOKUP = ToolDefinition(
    name="lookup",
    parameters_json_schema={"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
    description="Look a topic up in the record.",
)
PARAMETERS = ModelRequestParameters(function_tools=[LOOKUP], allow_text_output=True)


def history(size: int) -> list[ModelMessage]:
    """A conversation of `size` messages, four a turn: prompt, tool call, tool return, answer."""
    messages: list[ModelMessage] = []
    turn = 0
    while len(messages) < size:
        call_id = f"pyd_ai_{turn:032x}"
        messages += [
            ModelRequest(parts=[UserPromptPart(f"Question {turn}: which treaty governs fisheries?")]),
            ModelResponse(parts=[ToolCallPart("lookup", {"topic": f"fisheries {turn}"}, tool_call_id=call_id)]),
            ModelRequest(parts=[ToolReturnPart("lookup", f"fact about fisheries {turn}", tool_call_id=call_id)]),
            ModelResponse(parts=[TextPart(f"The record says: fact about fisheries {turn}.")]),
        ]
        turn += 1
    return messages[:size]


def key_cost(*, n: int, rounds: int) -> None:
    """Figure 1: the cost of one key at 200 messages against 2, the same objects re-sent each time."""
    model = PinnedModel(FunctionModel(lambda m, i: ModelResponse(parts=[]), model_name="keys"), ReplayPins({}))
    settings: ModelSettings = {"temperature": 0.0}

    def keying(size: int) -> Variant:
        # Each size its own conversation: two that share their first message are one conversation cut short and
        # grown again, so every sample would begin by walking the 198 messages between them anew.
        messages = history(size)

        sample = repeated(lambda: model.pin_for(messages, settings, PARAMETERS))
        return Variant(f"pin_for, {size} messages", sample, aim=Aim(at_most=2.0) if size == 200 else None)

    rows = compare(keying(2), [keying(200)], n=n, rounds=rounds)
    print_table("1. key cost: 200 messages against 2 (the same objects re-sent)", "pin_for, 2 messages", rows)


class TimedPinnedModel(PinnedModel):
    """A `PinnedModel` that adds up the time spent keying."""

    keying = 0.0

    def pin_for(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ):  # type: ignore[override]
        start = time.perf_counter()
        try:
            return super().pin_for(messages, model_settings, model_request_parameters)
        finally:
            TimedPinnedModel.keying += time.perf_counter() - start


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Agreed.")])


def keying_share(root: Path, *, size: int, runs: int) -> None:
    """Figure 2: the share of a replayed request spent keying, continuing a `size`-message history."""
    past = history(size)
    types = EventTypeRegistry()
    store = SQLiteEventStore(root / "share.db", synchronous="NORMAL")
    prompt = "Summarise the fisheries position."
    ledger = PinLedger(store, types)
    recording = Agent(PinnedModel(FunctionModel(answer, model_name="share"), ledger))
    # A replay answers the runs its recording holds, each from its own pins (issue #34): as many as are replayed.
    for _ in range(SEEN_BEFORE_KEPT + 1 + runs):
        recording.run_sync(prompt, message_history=past)
    ledger.commit()
    replay = ReplayPins.from_store(store, types)
    agent = Agent(TimedPinnedModel(FunctionModel(answer, model_name="share"), replay))
    shares: list[float] = []
    totals: list[float] = []
    # Not measured: the runs after which the policy keeps the conversation (its first requests are keyed from
    # scratch), as a conversation grown to this length has long been kept.
    for _ in range(SEEN_BEFORE_KEPT + 1):
        agent.run_sync(prompt, message_history=past)
    for _ in range(runs):
        gc.collect()
        TimedPinnedModel.keying = 0.0
        start = time.perf_counter()
        agent.run_sync(prompt, message_history=past)
        total = time.perf_counter() - start
        shares.append(TimedPinnedModel.keying / total)
        totals.append(total)
    store.close()
    share = statistics.median(shares)
    verdict = "met" if share <= 0.05 else "MISSED"
    print(f"\n2. keying's share of a replayed request, continuing a {size}-message history ({runs} runs)")
    print(f"  replayed request {statistics.median(totals) * 1000:.1f} ms median; keying {share:.1%} of it")
    print(f"  (aim <= 5%: {verdict})")


def write_pins(path: Path, count: int) -> None:
    """A recording of `count` model-call pins shaped like real ones: a response, a fingerprint, one unit per 100."""

    def events() -> list[StoredEvent]:
        out: list[StoredEvent] = []
        for seq in range(1, count + 1):
            raw = {
                "finish_reason": "stop",
                "kind": "response",
                "model_name": "gpt-4o-mini",
                "parts": [{"content": f"The record says fact number {seq} about fisheries.", "part_kind": "text"}],
                "provider_name": "openai",
                "state": "complete",
                "timestamp": "2026-01-01T00:00:00Z",
                "usage": {"input_tokens": 100 + seq % 50, "output_tokens": 20},
            }
            fingerprint = {f"messages[{i}]": f"{(seq * 7919 + i) % 16**16:016x}" for i in range(8)}
            fingerprint.update({"model": "0123456789abcdef", "settings.temperature": "fedcba9876543210"})
            payload = PinPromoted.payload_text(
                unit_id=f"unit-{seq // 100:06d}",
                key=f"p1:model_call:{seq:064x}",
                kind="model_call",
                raw=canonical_json(raw),
                attempts=1,
                fingerprint=canonical_json(fingerprint),
            )
            out.append(
                StoredEvent(
                    seq,
                    f"event-{seq:08d}",
                    BUILTIN_NAMESPACE,
                    PinPromoted.event_type,
                    # The current version: a recording made today is read without an upcast.
                    PinPromoted.schema_version,
                    None,
                    None,
                    "2026-01-01T00:00Z",
                    payload,
                )
            )
        return out

    header = RecordingHeader(description="benchmark pins", recorded_with="synthetic", rerecord="benchmarks/keys.py")
    # No index: the figure is the whole load (a replay through an index reads only what it answers from, which
    # benchmarks/large_recording.py measures).
    write_recording(path, events(), header=header, index=False)


def load(path: Path, types: EventTypeRegistry) -> ReplayPins:
    return ReplayPins.from_recording(path, types)


def loading(root: Path, *, pins: int, rounds: int) -> None:
    """Figures 3 and 4: loading a recording into ReplayPins against json.loads of every line, and peak memory."""
    path = root / "pins.jsonl"
    write_pins(path, pins)
    size = path.stat().st_size
    types = EventTypeRegistry()

    def parse_lines(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            with path.open("rb") as lines:
                [json.loads(line) for line in lines]
        return time.perf_counter() - start

    def replay_pins(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            load(path, types)
        return time.perf_counter() - start

    rows = compare(
        Variant("json.loads of every line", parse_lines),
        [Variant("ReplayPins.from_recording", replay_pins, aim=Aim(at_most=2.0))],
        n=1,
        rounds=rounds,
    )
    print_table(f"3. loading {pins:,} pins ({size / 1e6:.1f} MB) into ReplayPins", "json.loads of every line", rows)
    gc.collect()
    tracemalloc.start()
    replay = load(path, types)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(replay) == pins
    ratio = peak / size
    print(f"\n4. peak memory of that load: {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file: {ratio:.2f}x", end="")
    print(f"  (aim <= 2x: {'met' if ratio <= 2 else 'MISSED'})")


def main(argv: Sequence[str] | None = None) -> None:
    parser = options(__doc__.splitlines()[0], rounds=7)
    args = parser.parse_args(argv)
    rounds = use_options(args)
    quick, long = args.quick, args.long
    print(machine_line())
    key_cost(n=20 if quick else 200, rounds=rounds)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        keying_share(root, size=400 if quick else 6000, runs=1 if quick else 5)
        loading(root, pins=500 if quick else (100_000 if long else 20_000), rounds=1 if quick else min(rounds, 5))


if __name__ == "__main__":
    main()
