"""How a recording grows with a conversation: bytes of a 10- and a 100-turn conversation, `Pinning` vs `PinnedModel`.

Each turn asks the scripted model of `agent.py` (a tool call, then an answer), continuing the conversation's
history (`message_history=result.all_messages()`), under one ledger for the whole conversation; the unit is
committed and written with `write_recording`. `PinnedModel` pins the model calls alone; `Pinning` pins the tool
calls, the runs' ids and times too, and records each run's inputs (`RunInputs`), whose history refers to the
run before it instead of copying it. Under both, the recording writes each pin's fingerprint as what changed
since the last of its kind in its unit (a model call's holds a digest per message of its request). A vcrpy
cassette of the same conversation over an OpenAI-compatible stub is measured where the bench extra (vcrpy,
openai) is installed. Sizes are bytes on disk: no machine load moves them.

    python benchmarks/conversation_size.py            # 10 and 100 turns, a few seconds
    python benchmarks/conversation_size.py --quick    # smoke test: 3 and 12 turns
    python benchmarks/conversation_size.py --by-kind  # and where the short `Pinning` recording's bytes go
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from agent import Scripted, agent_on, lookup
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import FunctionModel

from anagrapheus.provider import PinnedModel, Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.timeline.recording import RecordingHeader, write_recording

HEADER = RecordingHeader(
    description="conversation", recorded_with="benchmarks/conversation_size.py", rerecord="not committed"
)
AIM_PINNING = 1.5
"""The 10-turn `Pinning` recording at most this many times its `PinnedModel` recording."""
AIM_GROWTH = 12.0
"""The 100-turn recording at most this many times the 10-turn one (10 times is linear)."""


async def _converse(agent: Agent[None, str], turns: int) -> None:
    history: list[ModelMessage] | None = None
    for turn in range(turns):
        result = await agent.run(
            f"Question {turn}: what does the record say about topic {turn}?", message_history=history
        )
        history = result.all_messages()


def recorded_size(adapter: str, turns: int, directory: Path) -> int:
    """Record a conversation of `turns` turns under `adapter` and return the recording's size in bytes."""
    types = EventTypeRegistry()
    with SQLiteEventStore(directory / f"{adapter}-{turns}.db") as store:
        ledger = PinLedger(store, types)
        model = FunctionModel(Scripted(), model_name="scripted")
        if adapter == "Pinning":
            agent: Agent[None, str] = Agent(model, tools=[lookup], capabilities=[Pinning(ledger)])
        else:
            agent = agent_on(PinnedModel(model, ledger))
        asyncio.run(_converse(agent, turns))
        ledger.commit()
        path = write_recording(directory / f"{adapter}-{turns}.jsonl", store.read(), header=HEADER)
    return path.stat().st_size


def _compact(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def bytes_by_kind(path: Path) -> tuple[Counter[str], Counter[str]]:
    """A recording's bytes by kind of line (a pin's kind, else its type), and its histories' requests' by field.

    The second counts the request messages the run histories copy (the responses are references to pins): whole,
    then the parts of them a reference to a pin or to an earlier run's `prompt` could stand for (the parts'
    `content`), and the fields only the message holds (its and its parts' `timestamp`, a tool return's
    `tool_call_id`) or that the message before holds alike (`conversation_id`, `run_id`).
    """
    lines: Counter[str] = Counter()
    requests: Counter[str] = Counter()
    for text in path.read_text(encoding="utf-8").splitlines():
        fields: dict[str, Any] = json.loads(text)
        payload: dict[str, Any] = fields.get("payload") or {}
        kind = payload.get("kind") or fields.get("type") or "header"
        lines[kind] += len(text.encode()) + 1
        if fields.get("type") != "run_inputs":
            continue
        for message in payload["inputs"]["history"]:
            if message.get("kind") != "request":
                continue
            requests["requests, whole"] += _compact(message)
            requests["timestamp"] += _compact({"timestamp": message["timestamp"]})
            for name in ("conversation_id", "run_id"):
                requests[name] += _compact({name: message.get(name)})
            for part in message["parts"]:
                requests["parts' content"] += _compact({"content": part["content"]})
                requests["parts' timestamp"] += _compact({"timestamp": part["timestamp"]})
                if "tool_call_id" in part:
                    requests["tool_call_id"] += _compact({"tool_call_id": part["tool_call_id"]})
    return lines, requests


def cassette_size(turns: int, directory: Path) -> int | None:
    """The bytes of a vcrpy cassette of the conversation over the OpenAI-compatible stub; None without the extra."""
    if not all(importlib.util.find_spec(name) for name in ("vcr", "openai")):
        return None
    import vcr
    from _stub_server import StubOpenAIServer
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    path = directory / f"cassette-{turns}.yaml"
    with StubOpenAIServer(max_requests=4 * turns) as server:
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="stub"))
        with vcr.VCR().use_cassette(str(path), record_mode="all"):
            asyncio.run(_converse(agent_on(model), turns))
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 and 12 turns: checks the script runs")
    parser.add_argument("--by-kind", action="store_true", help="the short Pinning recording's bytes by kind")
    args = parser.parse_args()
    short, long = (3, 12) if args.quick else (10, 100)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        sizes = {
            (adapter, turns): recorded_size(adapter, turns, directory)
            for adapter in ("PinnedModel", "Pinning")
            for turns in (short, long)
        }
        try:
            cassette = cassette_size(short, directory)
        except Exception as e:  # the stub or vcrpy refused: say so, the recordings' figures stand
            cassette, reason = None, f"failed: {type(e).__name__}: {e}"
        else:
            reason = "not measured (pip install -e '.[bench]')"
        by_kind = bytes_by_kind(directory / f"Pinning-{short}.jsonl") if args.by_kind else None
    print("Recording bytes of a conversation (each turn: a tool call and an answer, continuing the history)")
    print(f"  {'adapter':<14} {f'{short} turns':>12} {f'{long} turns':>12} {'growth':>8}")
    for adapter in ("PinnedModel", "Pinning"):
        a, b = sizes[(adapter, short)], sizes[(adapter, long)]
        print(f"  {adapter:<14} {a:>12,} {b:>12,} {b / a:>7.1f}x")
    print(f"  {'vcrpy cassette':<14} {f'{cassette:,}' if cassette is not None else reason:>12}")
    ratio = sizes[("Pinning", short)] / sizes[("PinnedModel", short)]
    growth = sizes[("Pinning", long)] / sizes[("Pinning", short)]
    judged = not args.quick  # the aims are set at 10 and 100 turns
    print(
        f"\nPinning / PinnedModel at {short} turns: {ratio:.2f}x (aim <= {AIM_PINNING}x at 10 turns:"
        f" {('met' if ratio <= AIM_PINNING else 'NOT met') if judged else 'not judged with --quick'})"
    )
    print(
        f"Pinning, {long} turns / {short} turns: {growth:.1f}x (aim <= {AIM_GROWTH:g}x at 100/10:"
        f" {('met' if growth <= AIM_GROWTH else 'NOT met') if judged else 'not judged with --quick'})"
    )
    if cassette is not None:
        print(f"Pinning / cassette at {short} turns: {sizes[('Pinning', short)] / cassette:.2f}x")
    if by_kind is not None:
        lines, requests = by_kind
        print(f"\nPinning, {short} turns, bytes by kind of line:")
        for kind, size in lines.most_common():
            print(f"  {kind:<14} {size:>9,}")
        print("  of the histories' copied requests (fields with their names):")
        for name, size in requests.most_common():
            print(f"  {name:<18} {size:>9,}")


if __name__ == "__main__":
    main()
