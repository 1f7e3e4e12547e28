"""The upcast registry: steps applied in order on a private copy, and refusals that say what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from anagrapheus.errors import EventTypeError, UpcastGap
from anagrapheus.timeline import UpcastRegistry


def test_a_careless_in_place_step_never_reaches_the_callers_payload() -> None:
    upcasts = UpcastRegistry()

    @upcasts.register("shop", "order", from_version=1)
    def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
        payload["lines"].append("added by v2")
        payload["note"] = "v2"
        return payload

    stored = {"lines": ["one"]}
    assert upcasts.upcast("shop", "order", stored, version=1, target=2) == {
        "lines": ["one", "added by v2"],
        "note": "v2",
    }
    assert stored == {"lines": ["one"]}


def test_a_payload_at_its_target_version_is_returned_as_is() -> None:
    payload = {"lines": ["one"]}

    assert UpcastRegistry().upcast("shop", "order", payload, version=2, target=2) is payload


def test_a_missing_step_names_itself_and_the_target() -> None:
    upcasts = UpcastRegistry()
    upcasts.add("shop", "order", from_version=1, step=lambda p: {**p, "v": 2})

    with pytest.raises(UpcastGap) as caught:
        upcasts.upcast("shop", "order", {}, version=1, target=3)

    assert (caught.value.missing_from, caught.value.target) == (2, 3)
    assert str(caught.value) == "no upcast registered for shop:order v2 -> v3 (needed to reach v3)"


@pytest.mark.parametrize("from_version", [0, -1])
def test_a_step_from_below_version_one_is_refused(from_version: int) -> None:
    with pytest.raises(EventTypeError) as caught:
        UpcastRegistry().add("shop", "order", from_version=from_version, step=lambda p: p)

    assert str(caught.value) == "from_version must be >= 1"


def test_a_step_registered_twice_is_refused_by_name() -> None:
    upcasts = UpcastRegistry()
    upcasts.add("shop", "order", from_version=1, step=lambda p: p)

    with pytest.raises(EventTypeError) as caught:
        upcasts.add("shop", "order", from_version=1, step=lambda p: p)

    assert str(caught.value) == "an upcast for shop:order v1 is already registered"


def test_the_built_in_pin_promoted_step_marks_old_pins_as_successes() -> None:
    upcasts = UpcastRegistry()

    assert upcasts.upcast("anagrapheus", "pin_promoted", {"key": "k"}, version=1, target=2) == {
        "key": "k",
        "failed": False,
    }
    with pytest.raises(EventTypeError):
        upcasts.add("anagrapheus", "pin_promoted", from_version=1, step=lambda p: p)
