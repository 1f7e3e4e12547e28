"""`anagrapheus view`: a self-contained page of a recording, a database, a comparison and a miss."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.cli import main
from anagrapheus.provider import Pinning, SemanticCallPolicy
from anagrapheus.testing.miss import read_miss, write_miss
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    RecordingHeader,
    ReplayPins,
    SQLiteEventStore,
    read_recording,
    write_recording,
)
from anagrapheus.timeline.ordered import ORDERED_FIELD, ordered_json, read_ordered
from tests.cli_fixtures import whole_fingerprints

ROOT = Path(__file__).resolve().parents[2]
NEGOTIATION = ROOT / "recordings" / "negotiation.jsonl"
FAKE_KEY = "sk-proj-" + "Zq4" * 16


def view(*args: str) -> int:
    return main(["view", *args])


def page_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_a_recording_becomes_one_page_with_no_network(tmp_path: Path) -> None:
    out = tmp_path / "negotiation.html"
    assert view(str(NEGOTIATION), "-o", str(out)) == 0
    page = page_of(out)
    # Nothing is fetched: no external script, style, image or font.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<link" not in page
    assert page.count('<section class="unit"') == 4
    assert page.count('class="pin ') == 59
    # A model call shows the call it made; a tool pin is named after the tool its fingerprint digests.
    assert "<b>stock_survey</b>" in page
    assert "tool_call · stock_survey" in page
    assert "tool_call · market_price" in page
    assert "python -m examples.negotiation --record --seed 2022" in page
    # A page stays within a few times the size of what it shows.
    assert len(out.read_bytes()) < 4 * len(NEGOTIATION.read_bytes())


def test_the_default_page_sits_beside_the_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "run.jsonl"
    copy.write_bytes(NEGOTIATION.read_bytes())
    assert view(str(copy), "--unit", "eu-uk-talks-round-2", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["output"] == f"{copy}.html"
    assert report["units"] == 1
    assert 'id="unit-eu-uk-talks-round-1"' not in page_of(Path(f"{copy}.html"))


def changed_copy(tmp_path: Path) -> Path:
    """The negotiation with one tool result changed and one model request's prompt moved."""
    lines = [line.rstrip("\n") for line in whole_fingerprints(NEGOTIATION.read_text(encoding="utf-8").splitlines())]
    tools = [i for i, line in enumerate(lines) if '"kind":"tool_call"' in line]
    models = [i for i, line in enumerate(lines) if '"kind":"model_call"' in line]
    event = json.loads(lines[tools[0]])
    # A tool's result is pinned as ordered text: changed inside it.
    raw = event["payload"]["raw"]
    result: Any = read_ordered(raw)
    result["value"]["v"]["trend"] = "rising"
    raw[ORDERED_FIELD] = ordered_json(result)
    lines[tools[0]] = json.dumps(event, separators=(",", ":"), sort_keys=True)
    event = json.loads(lines[models[3]])
    event["payload"]["key"] = event["payload"]["key"][:-4] + "beef"
    event["payload"]["fingerprint"]["messages[0]"] = "0" * 16
    lines[models[3]] = json.dumps(event, separators=(",", ":"), sort_keys=True)
    path = tmp_path / "changed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_against_shows_the_differing_pins_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "diff.html"
    assert view(str(NEGOTIATION), "--against", str(changed_copy(tmp_path)), "-o", str(out)) == 1
    page = page_of(out)
    assert "2 difference(s)" in page
    assert "same request, another answer: result.value.v.trend" in page
    assert "what moved: messages[0]" in page
    # The moved field is highlighted in the fingerprints of both sides, shown open.
    assert page.count('<tr class="moved"><td>messages[0]</td>') == 2
    assert view(str(NEGOTIATION), "--against", str(NEGOTIATION), "-o", str(out)) == 0
    assert "The same" in page_of(out)


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("quota", {"species": "cod"}, tool_call_id="q1")])
    return ModelResponse(parts=[TextPart("Quota agreed.")])


def quota_agent(model: FunctionModel, resolver: PinLedger | ReplayPins) -> Agent[None, str]:
    agent = Agent(model, capabilities=[Pinning(resolver, policy=SemanticCallPolicy(keep_values=True))])

    @agent.tool_plain
    def quota(species: str) -> dict[str, object]:
        return {"species": species, "tonnes": 39400}

    return agent


def recorded_miss(tmp_path: Path) -> tuple[Path, PinMiss]:
    types = EventTypeRegistry()
    model = FunctionModel(scripted, model_name="scripted")
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, types, unit_id="talks")
        quota_agent(model, ledger).run_sync("Round 1: the cod quota, please.")
        ledger.commit()
        recording = tmp_path / "talks.jsonl"
        header = RecordingHeader(description="talks", recorded_with="scripted", rerecord="pytest")
        write_recording(recording, store.read(), header=header)
    replay = ReplayPins.from_events(read_recording(recording).events, types)
    with pytest.raises(PinMiss) as caught:
        quota_agent(model, replay).run_sync(f"Round 1: the haddock quota, please. Use {FAKE_KEY}.")
    return recording, caught.value


def test_a_miss_file_shows_where_the_run_left_and_what_moved(tmp_path: Path) -> None:
    recording, miss = recorded_miss(tmp_path)
    miss_file = write_miss(miss, tmp_path / "miss.json", recording=recording)
    divergence, named = read_miss(miss_file)
    assert (divergence, named) == (miss.divergence, str(recording))
    out = tmp_path / "miss.html"
    # The miss names its recording, so the path may be left out.
    assert view("--miss", str(miss_file), "-o", str(out)) == 0
    page = page_of(out)
    assert "Where the run left its recording" in page
    assert "messages[0]" in page
    # The kept values are side by side, the differing part marked; a credential is never shown.
    assert "<mark>haddock" in page or "<mark>haddo" in page
    assert "<mark>cod" in page
    assert FAKE_KEY not in page
    # The nearest recorded call is on the page, focused, with the moved field open and highlighted.
    assert 'class="pin kind-model_call focus"' in page
    assert '<tr class="moved"><td>messages[0]</td>' in page


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{", "cannot read this miss file"),
        ('{"format": "other"}', "not an anagrapheus.miss file"),
        ('{"format": "anagrapheus.miss", "version": 9}', "version 9 is not known"),
        ('{"format": "anagrapheus.miss", "version": 1, "key": "k", "kind": "m", "after_hits": "x"}', "after_hits"),
        (
            '{"format": "anagrapheus.miss", "version": 1, "key": "k", "kind": "m", "after_hits": 0, "moved": [1]}',
            "moved",
        ),
        ('{"format": "anagrapheus.miss", "version": 1, "key": 3, "kind": "m", "after_hits": 0}', "`key`"),
        (
            '{"format": "anagrapheus.miss", "version": 1, "key": "k", "kind": "m", "after_hits": 0, "values": [1]}',
            "values",
        ),
    ],
)
def test_a_bad_miss_file_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, said: str
) -> None:
    miss = tmp_path / "miss.json"
    miss.write_text(content, encoding="utf-8")
    assert view(str(NEGOTIATION), "--miss", str(miss), "-o", str(tmp_path / "x.html")) == 2
    assert said in capsys.readouterr().err


def test_refusals_name_what_to_give(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert view() == 2
    assert "name a recording or a database" in capsys.readouterr().err
    recording, miss = recorded_miss(tmp_path)
    miss_file = write_miss(miss.divergence, tmp_path / "miss.json")
    assert view("--miss", str(miss_file)) == 2
    capsys.readouterr()
    args = [str(recording), "--miss", str(miss_file), "--against", str(recording)]
    assert view(*args) == 2
    assert "give one of them" in capsys.readouterr().err
    assert view(str(recording), "-o", str(tmp_path / "no" / "such" / "dir.html")) == 2
    assert "cannot write the page" in capsys.readouterr().err


def test_a_database_shows_open_abandoned_and_diverged_units(tmp_path: Path) -> None:
    types = EventTypeRegistry()
    model = FunctionModel(scripted, model_name="scripted")
    db = tmp_path / "run.db"
    with SQLiteEventStore(db) as store:
        ledger = PinLedger(store, types, unit_id="committed")
        quota_agent(model, ledger).run_sync("the cod quota")
        ledger.commit()
        dropped = PinLedger(store, types, unit_id="dropped")
        quota_agent(model, dropped).run_sync("the hake quota")
        dropped.abandon(reason="the talks broke down")
        recorder = PinLedger(store, types, unit_id="rerun")
        replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=recorder)
        quota_agent(model, replay).run_sync("the plaice quota")
        recorder.commit()
        still_open = PinLedger(store, types, unit_id="crashed")
        quota_agent(model, still_open).run_sync("the sole quota")
        out = tmp_path / "db.html"
        assert view(str(db), "-o", str(out)) == 0
    page = page_of(out)
    assert '<span class="badge abandoned">abandoned</span>' in page
    assert "abandoned: the talks broke down" in page
    assert "a record-mode replay left the recording here" in page
    assert '<span class="badge open">open</span>' in page
    assert "in scratch" in page
    assert "Quota agreed." in page


def test_parts_and_failures_render_by_kind(tmp_path: Path) -> None:
    from anagrapheus.cli.page import PinView, UnitView, render_page

    response = {
        "kind": "response",
        "model_name": "m",
        "finish_reason": "stop",
        "parts": [
            {"part_kind": "thinking", "content": "weigh the stock"},
            {"part_kind": "tool-call", "tool_name": "t", "args": '{"a": 1}', "tool_call_id": None},
            {"part_kind": "file", "content": "x"},
            "not a part",
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    pins = [
        PinView("u", 1, "model_call", "p1:model_call:" + "a" * 64, 2, False, response, None, "f:2"),
        PinView(
            "u", 2, "tool_call", "p1:tool_call:b", 1, True, {"error": {"type": "Boom", "message": "no"}}, None, "f:3"
        ),
        PinView("u", 3, "tool_call", "p1:tool_call:c", 1, True, {"error": "bare"}, None, "f:4"),
        PinView("u", 4, "model_call", "p1:model_call:d", 1, False, ["odd"], None, "f:5"),
    ]
    page = render_page(title="t", header=None, units=[UnitView("u", pins=pins)])
    assert "<summary>thinking</summary>" in page
    assert "{&quot;a&quot;: 1}" in page
    assert "finish: stop" in page
    assert "3 in / 4 out tokens" in page
    assert "asked 2x" in page
    assert "<b>Boom</b> no" in page
    assert "&quot;bare&quot;" in page
    assert '<span class="label">file</span>' in page
    assert "p1:model_call:aaaaaaaaaaaa\u2026" in page


def test_a_closed_fingerprint_is_data_for_the_page_and_redacted() -> None:
    from anagrapheus.cli.page import PinView, UnitView, render_page

    fingerprint = {"messages[0]": "ab" * 8, "=messages[0]": f"use {FAKE_KEY}", "tool": "cd" * 8}
    pin = PinView("u", 1, "tool_call", "p1:tool_call:e", 1, False, {"ok": True}, fingerprint, "f:2")
    page = render_page(title="t", header=None, units=[UnitView("u", pins=[pin])])
    (data,) = re.findall(r'data-fp="([^"]*)"', page)
    rows = json.loads(html.unescape(data))
    assert [row[0] for row in rows] == ["messages[0]", "tool"]
    assert rows[1] == ["tool", "cd" * 8, None]
    assert FAKE_KEY not in page and "[redacted:" in rows[0][2]


def test_a_miss_with_added_removed_and_half_kept_fields() -> None:
    from anagrapheus.cli.page import UnitView, render_page
    from anagrapheus.timeline import Divergence
    from anagrapheus.timeline.divergence import MovedValue

    divergence = Divergence(
        key="p1:model_call:" + "c" * 64,
        kind="model_call",
        after_hits=3,
        moved=("+tools.fetch", "-args.species", "unknown_field"),
        nearest_key=None,
        values=(MovedValue("tools.fetch", None, "{...}"), MovedValue("args.species", "cod", None)),
    )
    header = {"description": "d", "details": {"nested": {"a": 1}}, "models": {"EU": "m"}, "rerecord": ""}
    response = {"parts": [], "model_name": "m"}
    from anagrapheus.cli.page import PinView

    pin = PinView("u", 1, "model_call", "k", 1, False, response, None, "f:2")
    page = render_page(title="t", header=header, units=[UnitView("u", pins=[pin])], miss=divergence)
    assert "the schema of the tool of that name (only in the current call)" in page
    assert "an argument of the tool call (only in the recorded call)" in page
    assert "unknown_field</code>:" not in page
    assert page.count('<span class="dim">not kept</span>') == 2
    assert "<code>{...}</code>" in page and "<code>cod</code>" in page
    assert "&quot;nested&quot;" in page
    assert "<b>EU</b>: m" in page
    assert "Nearest recorded call" not in page
    assert "rerecord" not in page
    no_values = render_page(title="t", header=None, units=[], miss=Divergence(key="k", kind="tool_call", after_hits=0))
    assert "No values were kept" in no_values


@pytest.mark.parametrize("which", ["path", "against"])
def test_view_never_writes_over_its_own_input(which: str, tmp_path: Path) -> None:
    recording = tmp_path / "negotiation.jsonl"
    recording.write_bytes(NEGOTIATION.read_bytes())
    if which == "path":
        assert view(str(recording), "-o", str(recording)) == 2
    else:
        assert view(str(NEGOTIATION), "--against", str(recording), "-o", str(recording)) == 2
    assert recording.read_bytes() == NEGOTIATION.read_bytes()


def test_a_scratch_pin_that_is_not_json_is_refused_typed_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore

    db = tmp_path / "crashed.db"
    with SQLiteEventStore(db) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="turn-3")
        ledger.resolve("p1:tool_call:abc", kind="tool_call", effect=lambda: {"sunny": True}, interpret=lambda raw: raw)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE pin_scratch SET raw = '{not json'")

    assert view(str(db), "-o", str(tmp_path / "page.html")) == 2
    said = capsys.readouterr().err
    assert "scratch pin p1:tool_call:abc of open unit turn-3 is not JSON" in said
    assert "Traceback" not in said


def test_a_unit_id_holding_a_key_reaches_no_element_id_link_or_text_of_the_page(tmp_path: Path) -> None:
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore

    key = "sk-ant-api03-" + "b" * 90
    db = tmp_path / "leaky.db"
    with SQLiteEventStore(db) as store:
        for unit in (f"chat-{key}", "chat.1", "chat_1"):
            ledger = PinLedger(store, EventTypeRegistry(), unit_id=unit)
            ledger.resolve("p1:tool_call:abc", kind="tool_call", effect=lambda: "sunny", interpret=lambda raw: raw)
            ledger.commit()
    out = tmp_path / "page.html"

    assert view(str(db), "-o", str(out)) == 0

    page = page_of(out)
    assert key not in page and "b" * 40 not in page
    # Units whose ids a slug would fold together keep element ids of their own.
    assert 'id="unit-chat_1"' in page and page.count('class="unit" id="unit-h.') == 2


def test_a_page_grows_with_its_recording_not_with_the_square_of_its_nesting(tmp_path: Path) -> None:
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore

    def page_size(depth: int) -> tuple[int, int]:
        value: list[object] = []
        inner = value
        for _ in range(depth):
            deeper: list[object] = []
            inner += [{"k": "v" * 10}, deeper]
            inner = deeper
        db = tmp_path / f"deep{depth}.db"
        with SQLiteEventStore(db) as store:
            ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
            ledger.resolve("p1:tool_call:x", kind="tool_call", effect=lambda: value, interpret=lambda raw: raw)
            ledger.commit()
        out = tmp_path / f"deep{depth}.html"
        assert view(str(db), "-o", str(out)) == 0
        return out.stat().st_size, len(json.dumps(value))

    empty, _ = page_size(0)
    for depth in (100, 200):
        size, raw = page_size(depth)
        # Indenting every level wrote 2 spaces per level on every line: 216 kB of page for 6 kB at depth 200.
        assert size - empty <= 12 * raw, (depth, size - empty, raw)
