"""The negotiation demo as an evaluation (pydantic-evals) and as a fork of its second round onto another model."""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus.testing.rerun import read_events
from anagrapheus.timeline import EventTypeRegistry, PinPromoted
from examples.negotiation.__main__ import main
from examples.negotiation.evals import fork_round_two
from examples.negotiation.runs import RECORDING
from examples.negotiation.talks import unit_id


def test_a_fork_of_round_two_on_another_model_starts_with_the_recordings_pins(tmp_path: Path) -> None:
    forked = fork_round_two(RECORDING, database=tmp_path / "fork.db")

    registry = EventTypeRegistry()
    origin = [
        PinPromoted.read(event, registry)
        for event in read_events(RECORDING)
        if event.type == PinPromoted.event_type and PinPromoted.read(event, registry).unit_id == unit_id(2)
    ]
    new = [PinPromoted.read(event, registry) for event in forked.events if event.type == PinPromoted.event_type]
    assert forked.origin == unit_id(2) and forked.unit_id == f"{unit_id(2)}-hardliner"
    assert 0 < forked.replayed < len(new)
    # The new unit's first pins are the recording's runs' pins (the round's minted ids aside: the fork mints
    # none), kind for kind and answer for answer; then it went live.
    runs = [pin for pin in origin if pin.kind != "entity_id"]
    assert [(pin.kind, pin.raw) for pin in new[: forked.replayed]] == [
        (pin.kind, pin.raw) for pin in runs[: forked.replayed]
    ]
    assert (new[forked.replayed].kind, new[forked.replayed].raw) != (
        runs[forked.replayed].kind,
        runs[forked.replayed].raw,
    )
    assert forked.result.output == "The UK counters with a 45% EU share, and not a point more."
    # The new unit holds its runs' inputs (the EU's turn it continued and the UK's), so it can be asked again.
    assert [event.type for event in forked.events if event.type != PinPromoted.event_type] == [
        "run_inputs",
        "run_inputs",
        "unit_forked",
    ]


def test_the_demo_forks_round_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--fork"]) == 0
    out = capsys.readouterr().out
    assert "new unit eu-uk-talks-round-2-hardliner" in out
    assert "UK: The UK counters with a 45% EU share, and not a point more." in out


def test_two_candidate_negotiators_scored_by_pydantic_evals_on_the_pinned_world(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip(
        "pydantic_evals",
        reason="pydantic-evals is not installed: pip install -e '.[evals]' && pip install --no-deps"
        " pydantic-evals==2.62.0",
    )
    from examples.negotiation.evals import evaluate

    scored = evaluate(RECORDING)

    recorded, house_style = scored["recorded"], scored["house style"]
    assert [case.name for case in recorded.report.cases] == [f"{unit_id(n)}/{p}" for n in (1, 2, 3, 4) for p in (0, 1)]
    assert recorded.passed == {"EqualsExpected": 1.0, "StatesAShare": 1.0}
    # Spelled out, seven of the eight statements change (all but the UK's last), and the six quota statements
    # (rounds 1 to 3) lose their percentage.
    assert house_style.passed == {"EqualsExpected": 1 / 8, "StatesAShare": 2 / 8}
    assert recorded.report.failures == [] and house_style.report.failures == []

    # The house style passes too few cases: below the default threshold (80%), the demo fails.
    assert main(["--evals"]) == 1
    out = capsys.readouterr().out
    assert "recorded     8 case(s) scored, 0 failed to run: EqualsExpected 100%, StatesAShare 100%" in out
    assert out.splitlines()[-1] == (
        "Below the threshold of 80% (--min-share): house style (EqualsExpected 12%, StatesAShare 25%)"
    )
    assert main(["--evals", "--min-share", "0.1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Every candidate passed every evaluator on at least 10% of the cases (--min-share)."
    )


def test_the_evals_threshold_is_stated_in_the_help_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "(default 0.8)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as exited:
        main(["--evals", "--min-share", "80"])
    assert exited.value.code == 2
    assert "a share from 0 to 1 (0.8 is 80%), not '80'" in capsys.readouterr().err


def test_without_pydantic_evals_the_demo_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pydantic_evals", None)
    assert main(["--evals"]) == 2
    assert "pip install --no-deps pydantic-evals" in capsys.readouterr().err
