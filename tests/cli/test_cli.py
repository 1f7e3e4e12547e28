"""The `anagrapheus` command: show, check, export and upcast, on the committed negotiation and files derived from it."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from anagrapheus.cli import main
from anagrapheus.provider import PinnedModel
from anagrapheus.testing import assert_same_run
from anagrapheus.timeline import PinLedger, ReplayPins, SQLiteEventStore, read_recording
from anagrapheus.timeline.ordered import ordered, read_ordered
from examples.negotiation.runs import RECORDING
from tests.cli_fixtures import (
    NEGOTIATION_LINES,
    Counting,
    builtin_types,
    model_call_lines,
    negotiation_database,
    rewritten,
    units_database,
    with_one_more_event,
)

ROOT = Path(__file__).resolve().parents[2]
NEGOTIATION = str(RECORDING.relative_to(ROOT))


def undated(text: str) -> str:
    """`show`'s output with each unit's age (`335 days ago`, a day older tomorrow) left out; its date stays."""
    return re.sub(r"\((\d+) days ago\)", lambda days: f"({'N' * len(days[1])} days ago)", text)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(autouse=True)
def _from_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # so reports name the committed recording as a reader would type it


@pytest.fixture(scope="module")
def negotiation_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return negotiation_database(tmp_path_factory.mktemp("negotiation") / "talks.db")


@pytest.fixture
def corrupt(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.jsonl"
    lines = list(NEGOTIATION_LINES)
    lines[4] = lines[4][: len(lines[4]) // 2] + "\n"  # line 5 cut in half
    path.write_text("".join(lines), encoding="utf-8")
    return path


# show


def test_show_prints_the_header_then_units_pins_by_kind_and_attempts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", NEGOTIATION)

    assert code == 0
    assert undated(out) == snapshot("""\
recordings/negotiation.jsonl
  format         anagrapheus.recording, 67 event(s)
  description    A 4-round EU-UK fisheries negotiation: two negotiators on distinct models, pinned
                 stock-survey and market-price tools, treaty and position ids minted through each round's
                 ledger, one unit of work per round.
  recorded with  Offline; no provider was reached. Both negotiators are scripted pydantic-ai FunctionModels
                 (scripted-eu, scripted-uk, in examples/negotiation/scripts.py) that compute their offers from
                 the prompt and the tool results by fixed rules. The survey and market readings, the clock and
                 the ids are drawn from seed 2022, so recording again writes the same bytes.
  rerecord       python -m examples.negotiation --record --seed 2022
  models         EU=function:scripted-eu UK=function:scripted-uk
  details        seed=2022 tools=["stock_survey", "market_price"] units=["eu-uk-talks-round-1",
                 "eu-uk-talks-round-2", "eu-uk-talks-round-3", "eu-uk-talks-round-4"]
  provenance     anagrapheus=0.2.0 pydantic_ai=2.78.0 python=3.11.7 key_scheme=p1 call_policy=semantic
                 call_policy_version=1 models=["scripted-eu", "scripted-uk"] providers=[]

unit                 state      pins  attempts  entity_id  model_call  run_clock  run_id  run_place  tool_call
eu-uk-talks-round-1  committed    17        17          3           4          4       2          2          2
eu-uk-talks-round-2  committed    16        16          2           4          4       2          2          2
eu-uk-talks-round-3  committed    16        16          2           4          4       2          2          2
eu-uk-talks-round-4  committed    10        10          2           2          2       2          2          0
total                             59        59          9          14         14       8          8          6

unit                 recorded                   model calls  input tokens  output tokens  cost
eu-uk-talks-round-1  2026-01-05 (NNN days ago)            4           401             64  unpriced (scripted-eu, scripted-uk)
eu-uk-talks-round-2  2026-01-05 (NNN days ago)            4           587             64  unpriced (scripted-eu, scripted-uk)
eu-uk-talks-round-3  2026-01-05 (NNN days ago)            4           793             63  unpriced (scripted-eu, scripted-uk)
eu-uk-talks-round-4  2026-01-05 (NNN days ago)            2           480             36  unpriced (scripted-eu, scripted-uk)
total                                                    14          2261            227  unpriced (scripted-eu, scripted-uk)

failures: none
divergences: none
""")


def test_show_json_carries_the_same_facts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", NEGOTIATION, "--json", "--unit", "eu-uk-talks-round-4")

    report = json.loads(out)
    assert code == report["exit_code"] == 0
    assert report["units"][0].pop("recorded_at") == "2026-01-05T09:00:47+00:00"
    assert report["units"][0].pop("age_days") > 300
    assert undated(report["units"][0].pop("recorded")) == "2026-01-05 (NNN days ago)"
    assert report["header"]["models"] == {"EU": "function:scripted-eu", "UK": "function:scripted-uk"}
    assert report["units"] == snapshot(
        [
            {
                "unit": "eu-uk-talks-round-4",
                "state": "committed",
                "pins": 10,
                "attempts": 10,
                "kinds": {"entity_id": 2, "model_call": 2, "run_clock": 2, "run_id": 2, "run_place": 2},
                "usage": {
                    "model_calls": 2,
                    "input_tokens": 480,
                    "output_tokens": 36,
                    "cost_usd": None,
                    "unpriced": {"scripted-eu": 1, "scripted-uk": 1},
                },
            }
        ]
    )


def test_show_on_a_database_lists_committed_abandoned_and_open_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = units_database(tmp_path / "support.db")

    code, out, _ = cli(capsys, "show", str(database))

    assert code == 0
    assert out.replace(str(database), "support.db") == snapshot("""\
support.db
  format         anagrapheus event log (SQLite), 2 event(s)

unit       state      pins  attempts  model_call
support-1  committed     1         1           1
support-2  abandoned     0         0           0
support-3  open          1         1           1
total                    2         2           2

unit       recorded  model calls  input tokens  output tokens  cost
support-1  unknown             1            54              6  unpriced (counting)
support-2  unknown             0             0              0  -
support-3  unknown             0             0              0  -
total                          1            54              6  unpriced (counting)

failures: 1
  support-2: abandoned with 1 pin(s), 1 attempt(s): the customer hung up (support.db (seq 2))
divergences: none
""")


def test_show_of_a_corrupt_recording_exits_2_naming_the_line(corrupt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "show", str(corrupt))

    assert (code, out) == (2, "")
    assert err.startswith(f"bad input: {corrupt}:5: line is not valid JSON")


def test_show_of_a_unit_that_is_not_there_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", NEGOTIATION, "--unit", "eu-uk-talks-round-9", "--json")

    assert code == 2
    assert json.loads(out) == snapshot(
        {
            "exit_code": 2,
            "status": "bad input",
            "path": "recordings/negotiation.jsonl",
            "line": None,
            "seq": None,
            "error": "no unit eu-uk-talks-round-9 in this recording",
        }
    )


# check


def test_check_passes_the_committed_recording(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "check", NEGOTIATION) == (
        0,
        snapshot("recordings/negotiation.jsonl: ok, 67 event(s) (format, events, keys, provenance, secrets, seal)\n"),
        "",
    )


def test_check_names_the_corrupt_line_and_exits_2(corrupt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", NEGOTIATION, str(corrupt))

    assert code == 2
    assert out.replace(str(corrupt), "corrupt.jsonl") == snapshot("""\
recordings/negotiation.jsonl: ok, 67 event(s) (format, events, keys, provenance, secrets, seal)
corrupt.jsonl:5: [format] line is not valid JSON (Expecting value: line 1 column 233 (char 232))
""")


def test_check_refuses_an_event_type_it_cannot_decode_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = with_one_more_event(tmp_path / "foreign.jsonl", 4, namespace="shop", type="order_placed")

    code, out, _ = cli(capsys, "check", str(path), "--json")

    assert code == 2
    assert json.loads(out)["files"][0]["problems"] == snapshot(
        [
            {
                "check": "events",
                "code": 2,
                "line": 69,
                "seq": None,
                "message": "unknown event type shop:order_placed (seq 99); pass the application's types with --events MODULE:NAME",
            },
            {
                "check": "seal",
                "code": 0,
                "line": 1,
                "seq": None,
                "message": "unsealed: a line edited by hand would pass unnoticed; seal it as it stands with `anagrapheus reseal`",
            },
        ]
    )


def test_check_finds_a_key_pinned_with_two_results_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A second unit pinned the first entity-id key with another id: the file cannot answer that key.
    change = {"unit_id": "eu-uk-talks-round-5", "raw": "019b8d62-7a80-7a89-9391-000000000000"}
    path = with_one_more_event(tmp_path / "ambiguous.jsonl", 2, payload=change)

    code, out, _ = cli(capsys, "check", str(path))

    assert code == 1
    assert out.replace(str(path), "ambiguous.jsonl") == snapshot(
        """\
ambiguous.jsonl:69: [keys] ambiguous key p1:entity_id:80fee7081c7b324a63dd5ce51fadb65adbf795ff9f46e9718dbc31a16f180304: unit eu-uk-talks-round-5 pinned a different result than unit eu-uk-talks-round-1 (ambiguous.jsonl:2); replay one unit at a time, or re-record
ambiguous.jsonl:1: [seal] note: unsealed: a line edited by hand would pass unnoticed; seal it as it stands with `anagrapheus reseal`
"""
    )


def test_check_finds_a_credential_naming_line_path_and_rule_but_not_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "gh" + "p_" + "Zq8" * 12  # built from pieces: no token-shaped literal in the test source
    change = {"raw": f"key: {token}", "key": "p1:entity_id:" + "e" * 64}
    path = with_one_more_event(tmp_path / "leaky.jsonl", 2, payload=change)

    code, out, _ = cli(capsys, "check", str(path))

    assert code == 1
    assert token not in out
    assert out.replace(str(path), "leaky.jsonl") == (
        "leaky.jsonl:69: [secrets] seq 99 at $.payload.raw matches secret rule 'github-token';"
        " redact or re-record it before committing\n"
        "leaky.jsonl:1: [seal] note: unsealed: a line edited by hand would pass unnoticed; seal it as it stands with"
        " `anagrapheus reseal`\n"
    )


# export


def test_export_then_strict_replay_of_the_exported_file_reaches_no_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = units_database(tmp_path / "support.db")
    fixture = tmp_path / "support-1.jsonl"

    code, out, _ = cli(capsys, "export", str(database), "--unit", "support-1", "-o", str(fixture), "--json")

    assert code == 0
    assert json.loads(out)["pins"] == 1
    assert cli(capsys, "check", str(fixture))[0] == 0
    recording = read_recording(fixture, registry=builtin_types())
    assert recording.header.details == {"exported_from": "support.db", "units": ["support-1"]}
    model = Counting("a different answer")
    replay = ReplayPins.from_events(recording.events, builtin_types())
    replayed = Agent(PinnedModel(model.model, replay)).run_sync("Where is order 7?")
    assert model.calls == 0
    with SQLiteEventStore(tmp_path / "again.db") as store:
        from anagrapheus.timeline import PinLedger

        live = Counting("Answer to: Where is order 7?")
        ledger = PinLedger(store, builtin_types(), unit_id="support-1")
        original = Agent(PinnedModel(live.model, ledger)).run_sync("Where is order 7?")
    assert_same_run(original, replayed)


def test_export_of_the_negotiation_log_gives_back_the_committed_pins(
    negotiation_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_path = tmp_path / "exported.jsonl"
    units = [arg for n in range(1, 5) for arg in ("--unit", f"eu-uk-talks-round-{n}")]

    code, _, _ = cli(capsys, "export", str(negotiation_db), *units, "-o", str(out_path))

    assert code == 0
    # The same events, byte for byte; only the header says it was exported.
    assert out_path.read_text(encoding="utf-8").splitlines()[1:] == RECORDING.read_text().splitlines()[1:]


@pytest.mark.parametrize(
    ("unit", "why"),
    [
        ("support-2", "it was abandoned, so its pins were never committed"),
        ("support-3", "it is still open (its pins are in scratch): commit it first"),
    ],
)
def test_export_refuses_a_unit_that_never_committed(
    unit: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = units_database(tmp_path / "support.db")
    target = tmp_path / "out.jsonl"

    code, _, err = cli(capsys, "export", str(database), "--unit", unit, "-o", str(target))

    assert code == 2
    assert err == f"bad input: {database}: cannot export unit {unit}: {why}\n"
    assert not target.exists()


# upcast


EVENTS_MODULE = """
from typing import ClassVar
from anagrapheus.timeline import Event, EventTypeRegistry, UpcastRegistry


class OrderPlaced(Event):
    namespace: ClassVar[str] = "shop"
    event_type: ClassVar[str] = "order_placed"
    schema_version: ClassVar[int] = {version}
    order: str
    {field}


def types() -> EventTypeRegistry:
    registry = EventTypeRegistry()
    registry.register(OrderPlaced)
    return registry


def upcasts() -> UpcastRegistry:
    registry = UpcastRegistry()
    registry.add("shop", "order_placed", from_version=1, step=lambda p: {{**p, "currency": "EUR"}})
    return registry
"""


def old_order_recording(tmp_path: Path, module: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The negotiation with a v1 `shop:order_placed` appended, and `module` (its v2 code) importable."""
    (tmp_path / f"{module}.py").write_text(EVENTS_MODULE.format(version=2, field="currency: str"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    order = {"namespace": "shop", "type": "order_placed", "schema_version": 1}
    path = with_one_more_event(tmp_path / "old.jsonl", 2, **order)
    text = path.read_text(encoding="utf-8").splitlines(keepends=True)
    event = json.loads(text[-1])
    event["payload"] = {"order": "7"}
    path.write_text("".join(text[:-1]) + json.dumps(event, sort_keys=True) + "\n", encoding="utf-8")
    return path


def test_upcast_rewrites_old_events_and_is_byte_stable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = old_order_recording(tmp_path, "shop_v2", monkeypatch)
    options = ("--events", "shop_v2:types", "--upcasts", "shop_v2:upcasts")
    new, again = tmp_path / "new.jsonl", tmp_path / "again.jsonl"

    code, out, _ = cli(capsys, "upcast", str(old), "-o", str(new), *options)

    assert code == 0
    assert out.replace(str(new), "new.jsonl") == snapshot(
        "wrote new.jsonl: 1 of 68 event(s) upcast (shop:order_placed v1->v2 x1)\n"
    )
    upcast_line = json.loads(new.read_text().splitlines()[-1])
    assert (upcast_line["schema_version"], upcast_line["payload"]) == (2, {"currency": "EUR", "order": "7"})
    # Every other event line keeps its bytes, the header gains only the seal, and a second pass changes nothing.
    new_lines, old_lines = new.read_text().splitlines(), old.read_text().splitlines()
    assert new_lines[1:-1] == old_lines[1:-1]
    new_header = json.loads(new_lines[0])
    assert "seal" in new_header["details"]
    del new_header["details"]["seal"]
    assert new_header == json.loads(old_lines[0])
    assert cli(capsys, "upcast", str(new), "-o", str(again), *options)[0] == 0
    assert again.read_bytes() == new.read_bytes()
    assert cli(capsys, "check", str(new), "--events", "shop_v2:types")[0] == 0


def test_upcast_of_the_committed_recording_changes_no_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "same.jsonl"

    assert cli(capsys, "upcast", NEGOTIATION, "-o", str(out_path))[0] == 0
    assert out_path.read_bytes() == RECORDING.read_bytes()


def test_upcast_without_the_step_is_bad_input_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = old_order_recording(tmp_path, "shop_v2b", monkeypatch)

    code, _, err = cli(capsys, "upcast", str(old), "-o", str(tmp_path / "x.jsonl"), "--events", "shop_v2b:types")

    assert code == 2
    assert err == f"bad input: {old}:69: no upcast registered for shop:order_placed v1 -> v2 (needed to reach v2)\n"


# the command itself


def test_the_console_script_and_python_dash_m_run_the_same_command(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("anagrapheus")
    for command in ([str(script)], [sys.executable, "-m", "anagrapheus"]):
        done = subprocess.run(
            [*command, "check", NEGOTIATION, "--json"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "ok"


def test_a_missing_file_is_bad_input_in_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", "no/such.jsonl", "--json")

    assert code == 2
    assert json.loads(out) == snapshot(
        {
            "exit_code": 2,
            "status": "bad input",
            "path": "no/such.jsonl",
            "line": None,
            "seq": None,
            "error": "cannot read (No such file or directory)",
        }
    )


def console_blocks() -> list[tuple[str, str]]:
    """The ```console blocks of the CLI reference: a `$ anagrapheus ...` line, then what it prints."""
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    found: list[tuple[str, str]] = []
    for block in text.split("```console\n")[1:]:
        body = block.split("```", 1)[0]
        command, _, output = body.partition("\n")
        found.append((command, output))
    return found


@pytest.mark.parametrize(("command", "expected"), console_blocks(), ids=lambda v: v.split("\n")[0][:60])
def test_the_cli_reference_shows_what_the_command_prints(
    command: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = shlex.split(command.removeprefix("$ anagrapheus "))
    main(argv)
    out = capsys.readouterr().out
    assert [line.rstrip() for line in undated(out).splitlines()] == [
        line.rstrip() for line in undated(expected).splitlines()
    ]


# diff


def test_diff_of_the_recording_against_the_log_it_came_from_is_the_same(
    negotiation_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "diff", NEGOTIATION, str(negotiation_db), "--unit", "eu-uk-talks-round-2")

    assert code == 0
    assert out.splitlines()[-1] == "same: 1 unit(s), 16 pin(s)"
    assert cli(capsys, "diff", NEGOTIATION, NEGOTIATION)[1].splitlines()[-1] == "same: 4 unit(s), 59 pin(s)"


def test_diff_names_a_result_that_changed_under_the_same_request_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = model_call_lines()[-1]
    # A model answer is pinned as ordered text: the diff reads inside it.
    raw = read_ordered(json.loads(NEGOTIATION_LINES[last - 1])["payload"]["raw"])
    assert isinstance(raw, dict)
    raw["parts"][0]["content"] = "The UK accepts the package in full; the accord can be signed."
    changed = rewritten(tmp_path, "changed.jsonl", last, {"raw": ordered(raw)})

    code, out, _ = cli(capsys, "diff", NEGOTIATION, str(changed))

    assert code == 1
    assert out.replace(str(changed), "changed.jsonl") == snapshot("""\
--- recordings/negotiation.jsonl
+++ changed.jsonl
unit eu-uk-talks-round-4: 1 change(s)
  ~ model_call #10 (recordings/negotiation.jsonl:66 -> changed.jsonl:66)
      same request, another result: result.parts[0].content: 'The UK accepts the package except cod, where the gap is too wide to close to... != 'The UK accepts the package in full; the accord can be signed.'
differ: 1 of 4 unit(s)
""")


def test_diff_names_what_moved_in_a_changed_request_and_lists_removed_and_added_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Round 3's UK prompt reworded (its key and the fingerprint of messages[0] move), and round 2's last pin gone.
    line = model_call_lines()[9]
    event = json.loads(NEGOTIATION_LINES[line - 1])["payload"]
    fingerprint = {**event["fingerprint"], "messages[0]": "0123456789abcdef"}
    edited = rewritten(
        tmp_path, "edited.jsonl", line, {"key": "p1:model_call:" + "ab" * 32, "fingerprint": fingerprint}
    )
    lines = edited.read_text().splitlines(keepends=True)
    gone = max(n for n, text in enumerate(lines) if '"kind":"tool_call"' in text and "round-2" in text)
    edited.write_text("".join(lines[:gone] + lines[gone + 1 :]))

    code, out, _ = cli(capsys, "diff", NEGOTIATION, str(edited))

    assert code == 1
    assert out.replace(str(edited), "edited.jsonl") == snapshot("""\
--- recordings/negotiation.jsonl
+++ edited.jsonl
unit eu-uk-talks-round-2: 1 change(s)
  - tool_call #14 p1:tool_call:da86a02b3c7844df22103207268cfbf17b73c8dfc228916377ab54d7bbbbc144 (recordings/negotiation.jsonl:34)
unit eu-uk-talks-round-3: 1 change(s)
  ~ model_call #9 (recordings/negotiation.jsonl:47 -> edited.jsonl:46)
      p1:model_call:3db64358b3fa129a19727934ec63b6bbdee3aa3bbd8ae2976961229b93660871 -> p1:model_call:abababababababababababababababababababababababababababababababab
      what moved: messages[0]
differ: 2 of 4 unit(s)
""")
    report = json.loads(cli(capsys, "diff", NEGOTIATION, str(edited), "--json")[1])
    assert [(u["unit"], [c["change"] for c in u["changes"]]) for u in report["units"] if u["changes"]] == snapshot(
        [("eu-uk-talks-round-2", ["removed"]), ("eu-uk-talks-round-3", ["changed"])]
    )
    backwards = json.loads(cli(capsys, "diff", str(edited), NEGOTIATION, "--json")[1])
    assert [[c["change"] for c in u["changes"]] for u in backwards["units"] if u["changes"]] == [["added"], ["changed"]]


def test_diff_of_a_corrupt_recording_is_bad_input(corrupt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "diff", NEGOTIATION, str(corrupt))

    assert code == 2
    assert err.startswith(f"bad input: {corrupt}:5: ")


# regress


CANDIDATE = "examples.negotiation.candidates:{}"


@pytest.mark.parametrize(
    ("candidate", "exit_code"),
    [("control", 0), ("regressed", 1), ("reworded", 3)],
    ids=["passed", "failed", "diverged"],
)
def test_regress_gives_three_verdicts_on_one_recording(
    candidate: str, exit_code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "regress", CANDIDATE.format(candidate), "--recording", NEGOTIATION)

    assert code == exit_code
    assert (
        out
        == snapshot(
            {
                "control": """\
regress examples.negotiation.candidates:control against recordings/negotiation.jsonl
PASSED (8 of 8 turn(s) played, on_miss strict)
  [PASS] quota_statements_state_a_share
  [PASS] uk_counters_below_the_eu_offer
  [PASS] uk_reads_the_market_before_countering
""",
                "regressed": """\
regress examples.negotiation.candidates:regressed against recordings/negotiation.jsonl
FAILED (1 of 8 turn(s) played, on_miss strict)
  [FAIL] quota_statements_state_a_share: turn 1: round 1: the EU stated no share as a percentage: 'The EU proposes a 54 per cent EU share of the cod quota, given an advised catch of 39,400 t, stock falling.'
  [----] uk_counters_below_the_eu_offer: held through turn 1, not evaluated past it
  [----] uk_reads_the_market_before_countering: held through turn 1, not evaluated past it
""",
                "reworded": """\
regress examples.negotiation.candidates:reworded against recordings/negotiation.jsonl
DIVERGED at turn 2 (1 of 8 turn(s) played, on_miss strict)
  no pin for model_call p1:model_call:12cb3ee2a17edc4b56811552d643f3ebafbe5967a0649434f75fbaba7b471e11 after 3 hit(s)
  what moved against the nearest recorded call: instructions[0], messages[0]
  [----] quota_statements_state_a_share: held through turn 1, not evaluated past it
  [----] uk_counters_below_the_eu_offer: held through turn 1, not evaluated past it
  [----] uk_reads_the_market_before_countering: held through turn 1, not evaluated past it
""",
            }
        )[candidate]
    )


def test_regress_recording_misses_draws_the_reworded_candidates_misses_and_passes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(
        capsys, "regress", CANDIDATE.format("reworded"), "--recording", NEGOTIATION, "--on-miss", "record", "--json"
    )

    report = json.loads(out)
    assert code == report["exit_code"] == 0
    assert (report["status"], report["diverged_at"], report["drawn"]) == ("passed", 2, 7)
    assert [i["status"] for i in report["invariants"]] == ["held", "held", "held"]


def test_regress_json_reports_the_divergence(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "regress", CANDIDATE.format("reworded"), "--recording", NEGOTIATION, "--json")

    report = json.loads(out)
    assert code == report["exit_code"] == 3
    assert report["divergence"]["moved"] == ["instructions[0]", "messages[0]"]
    assert [i["status"] for i in report["invariants"]] == ["not evaluated"] * 3


def test_regress_on_a_corrupt_recording_is_bad_input_naming_the_line(
    corrupt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "regress", CANDIDATE.format("control"), "--recording", str(corrupt))

    assert code == 2
    assert err.startswith(f"bad input: {corrupt}:5: line is not valid JSON")


@pytest.mark.parametrize(
    ("candidate", "error"),
    [
        ("examples.negotiation.nowhere:control", "cannot import examples.negotiation.nowhere"),
        ("examples.negotiation.candidates:TURNS", "is not a function"),
        ("examples.negotiation.candidates:quota_statements_state_a_share", "must take (recording, *, on_miss)"),
        ("examples.negotiation.candidates", "expected MODULE:ATTR"),
    ],
)
def test_regress_names_a_candidate_it_cannot_use(
    candidate: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "regress", candidate, "--recording", NEGOTIATION)

    assert code == 2
    assert err.startswith(f"bad input: {candidate}: ") and error in err


def test_regress_names_the_candidate_when_it_misuses_regress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad_candidate.py").write_text(
        "from anagrapheus.testing import Turn, regress\n"
        "from examples.negotiation.candidates import INVARIANTS, _builder\n"
        "from examples.negotiation.talks import EU, UK\n\n"
        "def candidate(recording, *, on_miss='strict'):\n"
        "    turns = [Turn('Hello', agent='FR')]\n"
        "    return regress(recording, _builder({'EU': EU, 'UK': UK}), turns, INVARIANTS, on_miss=on_miss)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    code, _, err = cli(capsys, "regress", "bad_candidate:candidate", "--recording", NEGOTIATION)

    assert code == 2
    assert (
        err == "bad input: bad_candidate:candidate: turn 1 names agent 'FR', but build_agent returned agents EU, UK\n"
    )


def test_check_and_upcast_on_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    database = units_database(tmp_path / "support.db")

    assert cli(capsys, "check", str(database)) == (
        0,
        f"{database}: ok, 2 event(s) (format, events, keys, provenance, secrets, seal)\n",
        "",
    )
    code, _, err = cli(capsys, "upcast", str(database), "-o", str(tmp_path / "x.jsonl"))
    assert code == 2
    assert "a log is never rewritten" in err


def test_a_sqlite_file_that_is_not_a_log_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER)")
    before = other.read_bytes()

    code, _, err = cli(capsys, "show", str(other))

    assert code == 2
    assert err == f"bad input: {other}: a SQLite database, but not an anagrapheus event log\n"
    assert other.read_bytes() == before


# provenance, and exports holding credentials


def test_check_refuses_a_recording_made_under_another_key_scheme_and_notes_other_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = json.loads(NEGOTIATION_LINES[0])
    for name, change in (("scheme.jsonl", {"key_scheme": "p0"}), ("older.jsonl", {"anagrapheus": "0.0.9"})):
        path = tmp_path / name
        edited = {**header, "provenance": {**header["provenance"], **change}}
        path.write_text(json.dumps(edited, sort_keys=True) + "\n" + "".join(NEGOTIATION_LINES[1:]), encoding="utf-8")

    code, out, _ = cli(capsys, "check", str(tmp_path / "scheme.jsonl"), str(tmp_path / "older.jsonl"))

    assert code == 2
    assert out.replace(str(tmp_path) + "/", "") == snapshot("""\
scheme.jsonl:1: [provenance] recorded under pin-key scheme 'p0', but this anagrapheus keys with 'p1': none of its pins can answer, and keys are digests of what was asked, so they cannot be converted. Re-record it with `python -m examples.negotiation --record --seed 2022`; until then, replay it with the anagrapheus that wrote it (0.2.0)
scheme.jsonl:1: [seal] note: unsealed: a line edited by hand would pass unnoticed; seal it as it stands with `anagrapheus reseal`
older.jsonl: ok, 67 event(s) (format, events, keys, provenance, secrets, seal)
older.jsonl:1: [provenance] note: recorded with anagrapheus 0.0.9, loaded with anagrapheus 0.2.0; a call the new version asks differently will miss its pin. If the replay misses, re-record it with `python -m examples.negotiation --record --seed 2022`
older.jsonl:1: [seal] note: unsealed: a line edited by hand would pass unnoticed; seal it as it stands with `anagrapheus reseal`
""")


def test_export_refuses_a_unit_holding_a_credential_unless_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "leaky.db"
    with SQLiteEventStore(database) as store:
        ledger = PinLedger(store, builtin_types(), unit_id="leaky")
        Agent(PinnedModel(Counting("Use key sk-" + "Q" * 40).model, ledger)).run_sync("What key?")
        ledger.commit()
    target = tmp_path / "leaky.jsonl"

    code, _, err = cli(capsys, "export", str(database), "--unit", "leaky", "-o", str(target))
    assert code == 2
    assert "secret rule 'openai-key'" in err and "--redact" in err and "Q" * 40 not in err
    assert not target.exists()

    assert cli(capsys, "export", str(database), "--unit", "leaky", "-o", str(target), "--redact")[0] == 0
    assert cli(capsys, "check", str(target))[0] == 0


def test_diff_leaves_out_the_ids_a_provider_gives_each_response_unless_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two recordings of one unchanged run through OpenAI: every response carries a new `chatcmpl-...` id.
    last = model_call_lines()[-1]
    sides: list[str] = []
    for name in ("a", "b"):
        raw = read_ordered(json.loads(NEGOTIATION_LINES[last - 1])["payload"]["raw"])
        assert isinstance(raw, dict)
        raw["provider_response_id"] = f"chatcmpl-{name}"
        sides.append(str(rewritten(tmp_path, f"{name}.jsonl", last, {"raw": ordered(raw)})))

    code, out, _ = cli(capsys, "diff", *sides)
    assert (code, out.splitlines()[-1]) == (0, "same: 4 unit(s), 59 pin(s)")

    code, out, _ = cli(capsys, "diff", *sides, "--all")
    assert code == 1
    assert out.splitlines()[-2].strip() == snapshot(
        "same request, another result: result.provider_response_id: 'chatcmpl-a' != 'chatcmpl-b'"
    )


def test_export_redacts_personal_data_by_the_users_own_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "desk.db"
    with SQLiteEventStore(database) as store:
        ledger = PinLedger(store, builtin_types(), unit_id="desk")
        answer = "Refund sent to ana@example.org for order ORD-88231."
        Agent(PinnedModel(Counting(answer).model, ledger)).run_sync("Refund my order")
        ledger.commit()
    target = tmp_path / "desk.jsonl"
    export = ("export", str(database), "--unit", "desk", "-o", str(target))

    # Personal data is no credential: the default rules write it as it is.
    assert cli(capsys, *export)[0] == 0
    assert "ana@example.org" in target.read_text()

    rules = ("--redact-rule", r"email=[\w.]+@[\w.]+", "--redact-rule", "order=ORD-(?P<secret>[0-9]+)")
    assert cli(capsys, *export, *rules)[0] == 0
    text = target.read_text()
    # The order number as written, not as five digits any hex digest may hold by chance.
    assert "ana@example.org" not in text and "ORD-88231" not in text
    assert "Refund sent to [redacted:email:1] for order ORD-[redacted:order:1]." in text.replace("\\", "")

    # A scanner of the project's own, named as the other commands name objects.
    (tmp_path / "personal.py").write_text(
        "from anagrapheus import SecretScanner\n"
        "from anagrapheus.timeline import DEFAULT_RULES, EMAIL_RULE\n"
        "SCANNER = SecretScanner((*DEFAULT_RULES, EMAIL_RULE))\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, *export, "--redact-scanner", "personal:SCANNER")[0] == 0
    text = target.read_text()
    assert "ana@example.org" not in text and "ORD-88231" in text

    for wrong, complaint in (
        (("--redact-rule", "email"), "bad input: email: expected --redact-rule NAME=REGEX"),
        (("--redact-rule", "email=(["), "bad input: email=([: not a regular expression"),
        (
            ("--redact-rule", "a=b", "--redact-scanner", "personal:SCANNER"),
            "bad input: personal:SCANNER: give --redact-rule or --redact-scanner, not both",
        ),
        (("--redact-scanner", "personal:NOPE"), "bad input: personal:NOPE: personal has no NOPE"),
    ):
        code, _, err = cli(capsys, *export, *wrong)
        assert (code, err.startswith(complaint)) == (2, True), err


def test_show_gives_each_units_tokens_and_the_price_pydantic_ais_price_data_puts_on_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def priced(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart("The UK holds firm.")], usage=RequestUsage(input_tokens=1000, output_tokens=500)
        )

    database = tmp_path / "priced.db"
    with SQLiteEventStore(database) as store:
        for unit, model in (
            ("gpt", FunctionModel(priced, model_name="gpt-4o")),
            ("scripted", FunctionModel(priced, model_name="desk")),
        ):
            ledger = PinLedger(store, builtin_types(), unit_id=unit)
            Agent(PinnedModel(model, ledger)).run_sync("Round 1: state the UK position.")
            ledger.commit()

    code, out, _ = cli(capsys, "show", str(database))
    assert code == 0
    usage = out[out.rindex("unit", 0, out.index("model calls")) :].split("\n\n")[0]
    assert usage == snapshot("""\
unit      recorded  model calls  input tokens  output tokens  cost
gpt       unknown             1          1000            500  $0.0075
scripted  unknown             1          1000            500  unpriced (desk)
total                         2          2000           1000  $0.0075 + 1 unpriced (desk)\
""")
    report = json.loads(cli(capsys, "show", str(database), "--json")[1])
    assert [unit["usage"] for unit in report["units"]] == snapshot(
        [
            {"model_calls": 1, "input_tokens": 1000, "output_tokens": 500, "cost_usd": 0.0075, "unpriced": {}},
            {"model_calls": 1, "input_tokens": 1000, "output_tokens": 500, "cost_usd": None, "unpriced": {"desk": 1}},
        ]
    )
    assert report["usage"]["cost_usd"] == 0.0075


def test_a_model_call_pin_that_holds_no_response_is_counted_unpriced() -> None:
    from anagrapheus.provider.usage import pinned_usage

    usage = pinned_usage({"parts": "not a list"})
    assert (usage.model_calls, usage.unpriced, usage.describe_cost()) == (1, {"unknown": 1}, "unpriced (unknown)")


def test_check_max_age_fails_a_unit_recorded_longer_ago_and_notes_undated_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "check", NEGOTIATION, "--max-age", "30")
    assert code == 1
    assert undated(out.splitlines()[0]) == (
        "recordings/negotiation.jsonl: [age] unit eu-uk-talks-round-1 was recorded 2026-01-05 (NNN days ago):"
        " older than --max-age 30 days"
    )
    code, out, _ = cli(capsys, "check", NEGOTIATION, "--max-age", "100000")
    assert (code, out) == (
        0,
        "recordings/negotiation.jsonl: ok, 67 event(s) (format, events, keys, provenance, secrets, seal, age)\n",
    )

    database = units_database(tmp_path / "support.db")
    code, out, _ = cli(capsys, "check", str(database), "--max-age", "1")
    assert code == 0
    assert out.splitlines()[-1].endswith(
        "[age] note: no recorded date (no run clock pinned) for unit(s) support-1: not judged"
    )
