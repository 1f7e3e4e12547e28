"""What a miss report says, exactly: the nearest recorded call, the moved fields, and the window on each value."""

from __future__ import annotations

from anagrapheus.timeline.divergence import ELLIPSIS, Divergence, MovedValue, diverged_at, moved_fields

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
