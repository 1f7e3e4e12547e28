"""A failed draw as a pin: its scratch kind, its raw JSON, and the exception it raises again, codec or none."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from anagrapheus.errors import PinnedFailure
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.resolving.failures import failed_raw, failure_of, replayed_failure, scratch_kind, stored_kind


class Codec:
    """Rebuilds every record as a ValueError of its message."""

    def describe(self, error: BaseException) -> JSONValue | None:
        return {"message": str(error)}

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(record["message"])


def test_a_failed_draw_waits_under_its_kind_marked_and_is_told_apart_again() -> None:
    assert scratch_kind("model_call", failed=False) == "model_call"
    assert scratch_kind("model_call", failed=True) == "model_call!failed"
    assert stored_kind("model_call!failed") == ("model_call", True)
    assert stored_kind("model_call") == ("model_call", False)
    assert stored_kind("tool_call.v2!failed") == ("tool_call.v2", True)


def test_the_raw_json_holds_what_a_stream_captured_only_when_it_captured() -> None:
    assert failed_raw({"type": "x"}) == {"error": {"type": "x"}}
    assert failed_raw({"type": "x"}, captured=None, has_captured=True) == {"error": {"type": "x"}, "captured": None}
    assert failed_raw("e", captured=[1], has_captured=True) == {"error": "e", "captured": [1]}


def test_without_a_codec_a_failure_is_raised_as_a_pinned_failure_naming_the_original() -> None:
    record = {"type": "httpx:ReadTimeout", "message": "timed out"}

    error, captured, has_captured = failure_of({"error": record, "captured": ["half"]}, None)

    assert isinstance(error, PinnedFailure)
    assert (error.record, error.type_name, error.original_message) == (record, "httpx:ReadTimeout", "timed out")
    assert str(error) == "the pinned draw failed with httpx:ReadTimeout: timed out"
    assert (captured, has_captured) == (["half"], True)


@pytest.mark.parametrize(
    ("raw", "type_name", "message"),
    [
        ({"error": {"message": "m"}}, "an unknown exception", "m"),
        ({"error": {"type": "t"}}, "t", ""),
        ({"error": "just text"}, "an unknown exception", ""),
        ("a bare record", "an unknown exception", ""),
    ],
    ids=["no type", "no message", "not an object", "bare"],
)
def test_a_record_missing_its_type_or_message_still_raises_typed(raw: JSONValue, type_name: str, message: str) -> None:
    error, captured, has_captured = failure_of(raw, None)

    assert isinstance(error, PinnedFailure)
    assert (error.type_name, error.original_message) == (type_name, message)
    assert error.record == (raw["error"] if isinstance(raw, dict) else raw)
    assert (captured, has_captured) == (None, False)


def test_a_codec_rebuilds_the_exception_from_the_error_part() -> None:
    error, captured, has_captured = failure_of({"error": {"message": "boom"}}, Codec())

    assert type(error) is ValueError and str(error) == "boom"
    assert (captured, has_captured) == (None, False)


def test_a_replayed_stream_that_captured_yields_what_it_streamed_then_its_failure() -> None:
    async def replay(raw: JSONValue) -> Any:
        async with replayed_failure(raw, lambda value: ("interpreted", value), Codec()) as draw:
            return draw

    draw = asyncio.run(replay({"error": {"message": "dropped"}, "captured": ["a", "b"]}))
    assert draw.live is None and draw.pinned == ("interpreted", ["a", "b"])
    assert type(draw.failure) is ValueError and str(draw.failure) == "dropped"

    with pytest.raises(ValueError, match=r"^dropped$"):
        asyncio.run(replay({"error": {"message": "dropped"}}))
