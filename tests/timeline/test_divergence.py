"""Divergence: the nearest recorded call of its own kind, the report of what moved, and the values shown (opt-in)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings

from anagrapheus import EventTypeRegistry, PinLedger, PinnedModel, ReplayPins, SQLiteEventStore
from anagrapheus.errors import PinMiss
from anagrapheus.provider import SemanticCallPolicy
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.divergence import ELLIPSIS, Divergence, MovedValue, diverged_at, moved_fields
from anagrapheus.timeline.fingerprint import VALUE_CHARS, fingerprint_of
from anagrapheus.timeline.recording import read_recording, write_recording

ASKED = {"model": "d-m", "messages[0]": "d-p", "settings": "d-s"}


def test_moved_fields_names_changed_added_and_removed_fields_and_ignores_kept_values() -> None:
    # Kept values sit among the fields, not only after them.
    asked = {"model": "d-m", "=messages[0]": '"new"', "messages[0]": "d-new", "=tools": "[]", "tools": "d-t"}
    recorded = {"model": "d-m", "messages[0]": "d-old", "settings": "d-s", "=messages[0]": '"old"', "=settings": "{}"}

    assert moved_fields(asked, recorded) == ["messages[0]", "+tools", "-settings"]
    assert moved_fields(recorded, recorded) == []


def test_the_nearest_call_shares_the_most_fields_and_the_first_of_equals_wins() -> None:
    recorded = [
        ("p1:model_call:one", "model_call", {"model": "d-m", "messages[0]": "x", "settings": "y"}),
        ("p1:model_call:two", "model_call", {"model": "d-m", "messages[0]": "d-p", "settings": "y"}),
        ("p1:model_call:also-two", "model_call", {"model": "d-m", "messages[0]": "x", "settings": "d-s"}),
    ]

    divergence = diverged_at("p1:model_call:asked", "model_call", ASKED, after_hits=2, recorded=recorded)

    assert divergence == Divergence(
        key="p1:model_call:asked",
        kind="model_call",
        after_hits=2,
        moved=("settings",),
        nearest_key="p1:model_call:two",
    )


def test_kept_values_neither_make_a_call_nearer_nor_count_as_moved() -> None:
    asked = {**ASKED, "=messages[0]": '"hello"'}
    recorded = [
        # Shares one field and the kept value: it must not beat the call sharing two fields.
        ("p1:model_call:value-twin", "model_call", {"model": "d-m", "messages[0]": "x", "=messages[0]": '"hello"'}),
        ("p1:model_call:near", "model_call", {"model": "d-m", "messages[0]": "d-p", "settings": "y"}),
    ]

    divergence = diverged_at("p1:model_call:asked", "model_call", asked, after_hits=0, recorded=recorded)

    assert (divergence.nearest_key, divergence.moved) == ("p1:model_call:near", ("settings",))


def test_calls_of_another_kind_or_without_a_fingerprint_are_never_nearest() -> None:
    recorded: list[tuple[str, str, dict[str, str] | None]] = [
        ("p1:tool_call:same", "tool_call", dict(ASKED)),
        ("p1:model_call:bare", "model_call", None),
        ("p1:model_call:empty", "model_call", {}),
        ("p1:model_call:far", "model_call", {"model": "x"}),
    ]

    divergence = diverged_at("p1:model_call:asked", "model_call", ASKED, after_hits=0, recorded=recorded)

    assert divergence.nearest_key == "p1:model_call:far"
    assert divergence.moved == ("model", "+messages[0]", "+settings")


def test_a_miss_without_a_fingerprint_has_no_nearest_call() -> None:
    recorded = [("p1:model_call:near", "model_call", dict(ASKED))]

    for fingerprint in (None, {}):
        divergence = diverged_at("p1:model_call:asked", "model_call", fingerprint, after_hits=1, recorded=recorded)
        assert divergence == Divergence(key="p1:model_call:asked", kind="model_call", after_hits=1)


def test_each_moved_field_carries_the_values_either_side_kept() -> None:
    asked = {"model": "d-m2", "tools": "d-t", "=model": '"m2"', "=tools": "[1]"}
    recorded = [
        ("p1:model_call:r", "model_call", {"model": "d-m", "settings": "d-s", "=model": '"m"', "=settings": "{}"})
    ]

    divergence = diverged_at("p1:model_call:asked", "model_call", asked, after_hits=0, recorded=recorded)

    assert divergence.moved == ("model", "+tools", "-settings")
    assert divergence.values == (
        MovedValue(field="model", recorded='"m"', current='"m2"'),
        MovedValue(field="tools", recorded=None, current="[1]"),
        MovedValue(field="settings", recorded="{}", current=None),
    )


def test_a_moved_field_neither_side_kept_a_value_of_carries_none() -> None:
    recorded = [("p1:model_call:r", "model_call", {"model": "d-m"})]

    divergence = diverged_at("p1:model_call:asked", "model_call", {"model": "d-m2"}, after_hits=0, recorded=recorded)

    assert (divergence.moved, divergence.values) == (("model",), ())


def test_a_report_says_where_the_run_left_and_what_moved() -> None:
    base = Divergence(key="p1:model_call:k", kind="model_call", after_hits=3)
    assert base.describe() == (
        "no pin for model_call p1:model_call:k (after 3 hit(s)); the recording has no comparable call of this kind"
    )

    same = Divergence(key="p1:model_call:k", kind="model_call", after_hits=3, nearest_key="p1:model_call:n")
    assert same.describe() == (
        "no pin for model_call p1:model_call:k (after 3 hit(s)); "
        "the nearest recorded call p1:model_call:n has the same fingerprint"
    )

    moved = Divergence(
        key="p1:model_call:k",
        kind="model_call",
        after_hits=3,
        nearest_key="p1:model_call:n",
        moved=("settings", "+tools"),
        values=(MovedValue(field="settings", recorded="{}", current=None),),
    )
    assert moved.describe() == (
        "no pin for model_call p1:model_call:k (after 3 hit(s)); "
        "against the nearest recorded call, what moved: settings, +tools\n"
        "  settings: only the recorded value was kept: {}"
    )


def test_a_report_shows_eight_values_and_counts_the_rest() -> None:
    values = tuple(MovedValue(field=f"f{i}", recorded=None, current=str(i)) for i in range(10))
    divergence = Divergence(
        key="k",
        kind="model_call",
        after_hits=0,
        nearest_key="n",
        moved=tuple(f"f{i}" for i in range(10)),
        values=values,
    )

    lines = divergence.describe().split("\n  ")

    assert lines[1:] == [
        *(f"f{i}: only the current value was kept: {i}" for i in range(8)),
        "and 2 more moved field(s) with values",
    ]
    exactly_eight = Divergence(
        key="k", kind="model_call", after_hits=0, nearest_key="n", moved=("f",), values=values[:8]
    )
    assert len(exactly_eight.describe().split("\n  ")) == 1 + 8


def test_a_value_kept_on_one_side_is_shown_up_to_120_characters() -> None:
    assert (
        MovedValue(field="f", recorded="r" * 120, current=None).describe()
        == f"f: only the recorded value was kept: {'r' * 120}"
    )
    assert MovedValue(field="f", recorded=None, current="c" * 121).describe() == (
        f"f: only the current value was kept: {'c' * 120}{ELLIPSIS}"
    )


def test_equal_kept_starts_say_the_difference_lies_further_on() -> None:
    value = MovedValue(field="messages[0]", recorded='"Round 3', current='"Round 3')

    assert value.describe() == "messages[0]: the kept starts are the same; it differs further on"


def test_the_window_brackets_the_difference_with_forty_characters_either_side() -> None:
    before, after = "a" * 50, "b" * 50
    value = MovedValue(field="f", recorded=f"{before}X{after}", current=f"{before}YZ{after}")

    assert value.describe() == (
        "f:\n"
        f"    recorded {ELLIPSIS}{'a' * 40}[X]{'b' * 40}{ELLIPSIS}\n"
        f"    current  {ELLIPSIS}{'a' * 40}[YZ]{'b' * 40}{ELLIPSIS}"
    )


def test_a_window_near_the_ends_shows_them_without_ellipses() -> None:
    value = MovedValue(field="f", recorded="a" * 40 + "X" + "b" * 40, current="a" * 40 + "Y" + "b" * 40)

    assert value.describe() == f"f:\n    recorded {'a' * 40}[X]{'b' * 40}\n    current  {'a' * 40}[Y]{'b' * 40}"


def test_a_long_difference_is_cut_at_120_characters() -> None:
    value = MovedValue(field="f", recorded="s" + "x" * 121 + "e", current="s" + "y" * 120 + "e")

    assert value.describe() == f"f:\n    recorded s[{'x' * 120}{ELLIPSIS}]e\n    current  s[{'y' * 120}]e"


def test_a_common_end_never_overlaps_the_common_start() -> None:
    # "abcabc" against "abc": the start "abc" is common, and so is the end "abc"; the end is not counted twice.
    value = MovedValue(field="f", recorded="abcabc", current="abc")

    assert value.describe() == "f:\n    recorded abc[abc]\n    current  abc[]"


def test_an_empty_kept_value_is_shown_empty() -> None:
    assert MovedValue(field="f", recorded="", current=None).describe() == "f: only the recorded value was kept: "


def test_a_field_is_named_as_the_policy_names_it_whatever_its_first_letter() -> None:
    # Only a leading `+` or `-` (added, removed) is stripped to find the field's kept values.
    asked = {"XML": "d-new", "=XML": '"<a/>"'}
    recorded = [("p1:model_call:r", "model_call", {"XML": "d-old", "=XML": '"<b/>"'})]

    divergence = diverged_at("p1:model_call:asked", "model_call", asked, after_hits=0, recorded=recorded)

    assert divergence.values == (MovedValue(field="XML", recorded='"<b/>"', current='"<a/>"'),)


KINDS = ["model_call", "tool_call", "model_token_count", "model_compaction", "entity_id"]
KIND_ASKED = {"model": "d-model", "messages[0]": "d-prompt", "settings": "d-settings"}


def record_pins(
    store: SQLiteEventStore, types: EventTypeRegistry, pins: list[tuple[str, str, dict[str, str] | None]]
) -> None:
    ledger = PinLedger(store, types)
    for key, kind, fingerprint in pins:
        ledger.resolve(key, kind=kind, effect=lambda: "answer", interpret=str, fingerprint=fingerprint)
    ledger.commit()


def miss_of_kind(
    store: SQLiteEventStore, types: EventTypeRegistry, kind: str, fingerprint: dict[str, str] | None
) -> PinMiss:
    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PinMiss) as raised:
        replay.resolve(f"p1:{kind}:asked", kind=kind, effect=object, interpret=str, fingerprint=fingerprint)
    return raised.value


@pytest.mark.parametrize("kind", KINDS)
def test_the_nearest_pin_is_of_the_missing_kind(store: SQLiteEventStore, types: EventTypeRegistry, kind: str) -> None:
    others = [other for other in KINDS if other != kind]
    record_pins(
        store,
        types,
        [(f"p1:{other}:same", other, dict(KIND_ASKED)) for other in others]
        + [(f"p1:{kind}:near", kind, {**KIND_ASKED, "settings": "d-other-settings"})],
    )
    divergence = miss_of_kind(store, types, kind, dict(KIND_ASKED)).divergence
    assert (divergence.kind, divergence.nearest_key, divergence.moved) == (kind, f"p1:{kind}:near", ("settings",))


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_the_recording_lacks_has_no_nearest_pin(
    store: SQLiteEventStore, types: EventTypeRegistry, kind: str
) -> None:
    record_pins(store, types, [(f"p1:{other}:same", other, dict(KIND_ASKED)) for other in KINDS if other != kind])
    divergence = miss_of_kind(store, types, kind, dict(KIND_ASKED)).divergence
    assert (divergence.nearest_key, divergence.moved) == (None, ())
    assert "the recording has no comparable call of this kind" in divergence.describe()


def test_of_its_kind_the_pin_sharing_most_fields_is_nearest(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record_pins(
        store,
        types,
        [
            ("p1:model_call:far", "model_call", {"model": "d-model", "messages[0]": "x", "settings": "y"}),
            ("p1:model_call:near", "model_call", {**KIND_ASKED, "messages[0]": "x"}),
            ("p1:model_call:farther", "model_call", {"model": "z", "messages[0]": "x", "settings": "y"}),
        ],
    )
    divergence = miss_of_kind(store, types, "model_call", dict(KIND_ASKED)).divergence
    assert (divergence.nearest_key, divergence.moved) == ("p1:model_call:near", ("messages[0]",))
    assert divergence.describe().endswith("what moved: messages[0]")


def test_added_and_removed_fields_are_named(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record_pins(store, types, [("p1:model_call:near", "model_call", {"model": "d-model", "tools": "t"})])
    divergence = miss_of_kind(store, types, "model_call", {"model": "d-model", "messages[0]": "d-prompt"}).divergence
    assert divergence.moved == ("+messages[0]", "-tools")


def test_pins_without_a_fingerprint_are_never_nearest(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record_pins(store, types, [("p1:model_call:bare", "model_call", None)])
    divergence = miss_of_kind(store, types, "model_call", dict(KIND_ASKED)).divergence
    assert divergence.nearest_key is None


def test_a_miss_without_a_fingerprint_names_no_nearest_pin(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record_pins(store, types, [("p1:model_call:near", "model_call", dict(KIND_ASKED))])
    divergence = miss_of_kind(store, types, "model_call", None).divergence
    assert (divergence.kind, divergence.after_hits, divergence.nearest_key) == ("model_call", 0, None)


def test_a_miss_matching_its_nearest_pin_says_so(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record_pins(store, types, [("p1:model_call:near", "model_call", dict(KIND_ASKED))])
    divergence = miss_of_kind(store, types, "model_call", dict(KIND_ASKED)).divergence
    assert (divergence.nearest_key, divergence.moved) == ("p1:model_call:near", ())
    assert "has the same fingerprint" in divergence.describe()


@pytest.mark.parametrize("kind", KINDS)
def test_diverged_at_alone_compares_only_calls_of_its_kind(kind: str) -> None:
    # Replay hands over only its own kind's pins; the comparison must hold on its own too.
    recorded = [(f"p1:{other}:same", other, dict(KIND_ASKED)) for other in KINDS if other != kind]
    recorded.append((f"p1:{kind}:near", kind, {**KIND_ASKED, "settings": "d-other-settings"}))
    divergence = diverged_at(f"p1:{kind}:asked", kind, dict(KIND_ASKED), after_hits=3, recorded=recorded)
    assert (divergence.nearest_key, divergence.moved, divergence.after_hits) == (f"p1:{kind}:near", ("settings",), 3)


PROMPT = "Round 3: state the UK position on energy."
REWORDED = "Round 3: restate, briefly, the UK position on energy."
HEADER = {"description": "one round", "recorded_with": "a scripted FunctionModel", "rerecord": "pytest"}


def negotiator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("The UK is ready to talk on energy.")])


MODEL = FunctionModel(negotiator, model_name="scripted-uk")


def record_run(tmp_path: Path, types: EventTypeRegistry, policy: SemanticCallPolicy, prompt: str = PROMPT) -> Path:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="round-3")
        Agent(PinnedModel(MODEL, ledger, policy=policy)).run_sync(prompt)
        ledger.commit()
        return write_recording(
            tmp_path / "run.jsonl", store.read(namespace="anagrapheus", type="pin_promoted"), header=HEADER
        )


def miss_reworded(path: Path, types: EventTypeRegistry, policy: SemanticCallPolicy, prompt: str = REWORDED) -> PinMiss:
    replay = ReplayPins.from_events(read_recording(path, registry=types).events, types)
    with pytest.raises(PinMiss) as caught:
        Agent(PinnedModel(MODEL, replay, policy=policy)).run_sync(prompt)
    return caught.value


def test_a_reworded_prompt_shows_the_recorded_and_the_current_text_of_messages_0(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    policy = SemanticCallPolicy(keep_values=True)
    path = record_run(tmp_path, types, policy)

    error = miss_reworded(path, types, policy)

    assert error.divergence.moved == ("messages[0]",)
    [value] = error.divergence.values
    assert value.field == "messages[0]"
    assert value.recorded is not None and PROMPT in value.recorded
    assert value.current is not None and REWORDED in value.current
    message = str(error)
    assert "recorded …" in message and "Round 3: [state] the UK position on energy." in message
    assert "current  …" in message and "Round 3: [restate, briefly,] the UK position on energy." in message


def test_by_default_a_miss_names_fields_and_the_log_holds_no_prompt_text(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    path = record_run(tmp_path, types, SemanticCallPolicy())

    error = miss_reworded(path, types, SemanticCallPolicy())

    assert error.divergence.moved == ("messages[0]",) and error.divergence.values == ()
    assert "Round 3" not in str(error)
    assert PROMPT not in path.read_text(encoding="utf-8")
    assert PROMPT.encode() not in (tmp_path / "live.db").read_bytes()


def test_values_kept_on_one_side_only_are_shown_as_such(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = record_run(tmp_path, types, SemanticCallPolicy(keep_values=True))

    error = miss_reworded(path, types, SemanticCallPolicy())

    assert error.divergence.moved == ("messages[0]",)
    [value] = error.divergence.values
    assert value.current is None and value.recorded is not None and PROMPT in value.recorded
    assert "only the recorded value was kept" in str(error)


def test_kept_values_change_no_key(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = record_run(tmp_path, types, SemanticCallPolicy(keep_values=True))
    replay = ReplayPins.from_events(read_recording(path, registry=types).events, types)

    result = Agent(PinnedModel(MODEL, replay)).run_sync(PROMPT)

    assert result.output == "The UK is ready to talk on energy." and replay.hits == 1


def test_a_credential_in_a_prompt_is_redacted_before_its_value_is_kept(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    token = "gh" + "p_" + "Zq8" * 12
    path = record_run(tmp_path, types, SemanticCallPolicy(keep_values=True), prompt=f"Use {token} to open the file.")

    assert token not in path.read_text(encoding="utf-8")
    assert token.encode() not in (tmp_path / "live.db").read_bytes()
    error = miss_reworded(path, types, SemanticCallPolicy(keep_values=True), prompt="Open the file.")
    [value] = error.divergence.values
    assert value.recorded is not None and "Use [redacted:github-token:1] to open the file." in value.recorded


def test_a_long_value_is_kept_only_in_part_and_the_report_stays_short(tmp_path: Path, types: EventTypeRegistry) -> None:
    policy = SemanticCallPolicy(keep_values=True)
    long_prompt = "Round 3: " + "the UK restates its position. " * 200
    path = record_run(tmp_path, types, policy, prompt=long_prompt)

    error = miss_reworded(path, types, policy, prompt=long_prompt.replace("Round 3", "Round 4", 1))

    [value] = error.divergence.values
    assert value.recorded is not None and len(value.recorded) == VALUE_CHARS + 1 and value.recorded.endswith(ELLIPSIS)
    assert "Round [3]: the UK" in str(error) and "Round [4]: the UK" in str(error)
    assert len(str(error)) < 1_000


class ListedPolicy:
    """A call policy of one's own, keyed on the prompts only, that keeps values too."""

    name: ClassVar[str] = "listed"
    keep_values = True

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        return {"prompts": [str(getattr(part, "content", "")) for m in messages for part in m.parts]}


def test_a_policy_of_ones_own_keeps_values_through_fingerprint_of(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="u")
        Agent(PinnedModel(MODEL, ledger, policy=ListedPolicy())).run_sync(PROMPT)
        ledger.commit()
        events = list(store.read(namespace="anagrapheus", type="pin_promoted"))
    replay = ReplayPins.from_events(events, types)

    with pytest.raises(PinMiss) as caught:
        Agent(PinnedModel(MODEL, replay, policy=ListedPolicy())).run_sync(REWORDED)

    [value] = caught.value.divergence.values
    assert (value.field, value.recorded, value.current) == ("prompts[0]", f'"{PROMPT}"', f'"{REWORDED}"')


def test_fingerprint_of_keeps_values_only_when_asked() -> None:
    material = {"messages": ["hello"], "model": "m"}

    assert fingerprint_of(material) == {k: v for k, v in fingerprint_of(material, values=True).items() if k[0] != "="}
    assert fingerprint_of(material, values=True)["=messages[0]"] == '"hello"'


@given(st.text(max_size=VALUE_CHARS), st.text(max_size=VALUE_CHARS))
@example(recorded="1", current="01")  # an insertion: one side's differing part is empty
def test_a_moved_value_is_shown_in_a_bounded_window_around_the_first_difference(recorded: str, current: str) -> None:
    shown = MovedValue(field="messages[0]", recorded=recorded, current=current).describe()

    assert len(shown) <= 2 * (40 + 120 + 40 + 8) + 40
    if recorded != current:
        # The differing part: what is left of each side after the longest common start, then the longest common
        # end of the rest. An insertion leaves one side's part empty: '1' against '01' shows '[]1' and '[0]1'.
        start = next(
            (i for i, (a, b) in enumerate(zip(recorded, current, strict=False)) if a != b),
            min(len(recorded), len(current)),
        )
        end = 0
        while end < min(len(recorded), len(current)) - start and recorded[-1 - end] == current[-1 - end]:
            end += 1
        for side in (recorded, current):
            assert f"[{side[start : len(side) - end][:120]}" in shown


def test_notes_follow_what_moved_once_each_in_every_shape_of_the_sentence() -> None:
    from anagrapheus.timeline.divergence import Divergence, MovedValue

    note, other = "recorded with pydantic-ai 2.60.0, replayed under 2.78.0", "a field the scheme does not know"
    lone = Divergence(key="p1:model_call:k", kind="model_call", after_hits=2)
    assert lone.noted(note).noted(note).notes == (note,)
    assert lone.noted(note).describe() == (
        "no pin for model_call p1:model_call:k (after 2 hit(s)); the recording has no comparable call of this kind"
        f"\n  {note}"
    )
    same = Divergence(key="k", kind="tool_call", after_hits=0, nearest_key="n")
    assert same.noted(note, other).describe().split("\n  ")[1:] == [note, other]
    assert "has the same fingerprint" in same.noted(note).describe().split("\n")[0]
    moved = Divergence(
        key="k",
        kind="model_call",
        after_hits=1,
        moved=("messages[0]",),
        nearest_key="n",
        values=(MovedValue("messages[0]", "ab", "ac"),),
    ).noted(note)
    lines = moved.describe().split("\n  ")
    assert lines[0].endswith("what moved: messages[0]") and lines[-1] == note
    assert lines[1].startswith("messages[0]:")
    assert moved.noted() is moved
