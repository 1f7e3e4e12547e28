"""Answers pinned as ordered JSON text: what a provider sent comes back byte for byte through the canonical log.

The log writes canonical JSON (sorted keys, integral floats as integers, NFC strings). A model answer and a
failed request's error are pinned as `{"ordered_json": text}` instead, so replay rebuilds them exactly;
pins written before (sorted JSON objects) still read as they did.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

from anagrapheus.errors import PinnedFailure, PinResultError
from anagrapheus.provider.failures import FAILURES
from anagrapheus.provider.model import response_answer, response_from_raw, response_raw
from anagrapheus.timeline.canonical import JSONValue, stored_json
from anagrapheus.timeline.ordered import ORDERED_FIELD, ordered, ordered_json, parsed_json, read_ordered


def through_the_log(raw: object) -> JSONValue:
    """`raw` as a pin gives it back: written as the log stores it, read with `json.loads`."""
    return json.loads(stored_json(raw))


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ({"zeta": 1, "alpha": {"b": 0.0, "a": -0.0}, "mid": [1.0, 2.5, 10**20]}, False),
        ({"text": "Størting på Tromsø, 漁業"}, False),  # non-ASCII and NFC: kept readable
        ({"text": "cafe\u0301"}, True),  # not NFC: the log would normalise it, so it is escaped
        ({"text": "a lone \udc80 surrogate"}, True),  # not UTF-8: escaped
    ],
)
def test_a_value_comes_back_through_the_log_as_it_was_written(value: dict[str, Any], escaped: bool) -> None:
    back = read_ordered(through_the_log(ordered(value)))
    assert json.dumps(back) == json.dumps(value)  # key order, float spelling and every code point
    assert ordered_json(value).isascii() == (escaped or json.dumps(value, ensure_ascii=False).isascii())


def test_a_pin_from_before_ordered_answers_reads_as_it_is() -> None:
    old = {"kind": "response", "parts": []}
    assert read_ordered(old) is old
    assert read_ordered({ORDERED_FIELD: "[1]", "other": 2}) == {ORDERED_FIELD: "[1]", "other": 2}


def test_a_damaged_ordered_answer_is_refused_saying_so() -> None:
    with pytest.raises(PinResultError, match="ordered_json is not JSON"):
        read_ordered({ORDERED_FIELD: "{not json"})


def test_a_response_keeps_the_providers_key_order_where_its_sorted_form_lost_it() -> None:
    response = ModelResponse(
        parts=[TextPart("Hold firm."), ToolCallPart("quota", {"year": 2026, "species": "cod"})],
        provider_details={"service_tier": "default", "finish_reason": "stop", "logprobs": [{"logprob": 0.0}]},
    )
    sorted_back = response_from_raw(through_the_log(response_raw(response)))
    ordered_back = response_from_raw(through_the_log(response_answer(response)))
    assert ordered_back == response and ordered_back.provider_details == response.provider_details
    dumped = json.dumps(response_raw(response))
    assert json.dumps(response_raw(ordered_back)) == dumped
    # The form pinned before: the same values, in another order and spelling.
    assert json.dumps(response_raw(sorted_back)) != dumped
    assert sorted_back.provider_details == {
        "finish_reason": "stop",
        "logprobs": [{"logprob": 0}],
        "service_tier": "default",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"message": "The server is overloaded or not ready yet.", "type": "server_error", "param": None, "code": None},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_1"},
        {"message": "Le serveur est surcharge\u0301"},  # not NFC: message and body come back as they were (#45)
    ],
)
def test_a_provider_error_comes_back_as_the_same_model_http_error(body: dict[str, Any]) -> None:
    error = ModelHTTPError(503, "gpt-4o", body, headers={"x-request-id": "req_1", "retry-after-ms": "1"})
    rebuilt = FAILURES.rebuild(through_the_log(FAILURES.describe(error)))
    assert type(rebuilt) is ModelHTTPError
    assert (str(rebuilt), rebuilt.status_code, rebuilt.model_name) == (str(error), 503, "gpt-4o")
    assert json.dumps(rebuilt.body) == json.dumps(body)
    assert rebuilt.headers == error.headers and list(rebuilt.headers or {}) == list(error.headers or {})


def test_an_error_pinned_before_ordered_recipes_rebuilds_as_it_did() -> None:
    # The recipe held its arguments and state as JSON: an error without a body still comes back as itself;
    # one whose body the log sorted comes back as `PinnedFailure`, as it did then.
    plain = {
        "type": "builtins:ConnectionError",
        "message": "dropped",
        "rebuild": {"call": "builtins:ConnectionError", "args": ["dropped"], "state": None},
    }
    assert type(FAILURES.rebuild(through_the_log(plain))) is ConnectionError
    error = ModelHTTPError(503, "gpt-4o", {"message": "busy", "code": None})
    sorted_recipe = {
        "call": "pydantic_ai.exceptions:ModelHTTPError",
        "args": [503, "gpt-4o", {"message": "busy", "code": None}],
        "state": None,
    }
    old = {"type": "pydantic_ai.exceptions:ModelHTTPError", "message": str(error), "rebuild": sorted_recipe}
    assert isinstance(FAILURES.rebuild(through_the_log(old)), PinnedFailure)


def test_an_error_pinned_with_its_message_normalised_before_45_still_rebuilds_as_itself() -> None:
    import unicodedata

    error = ModelHTTPError(503, "gpt-4o", {"message": "Le serveur est surcharge\u0301"})
    record = FAILURES.describe(error)
    assert isinstance(record, dict) and isinstance(record["message"], str)
    assert through_the_log(record) == record  # stored as it was drawn, accent and all
    old = {**record, "message": unicodedata.normalize("NFC", record["message"])}  # as the log held it before
    assert old != record
    rebuilt = FAILURES.rebuild(through_the_log(old))
    assert type(rebuilt) is ModelHTTPError and str(rebuilt) == str(error)


def _typed(value: object) -> object:
    """`value` with each leaf's class beside it, and each float by its bits: what `==` alone would not tell."""
    if isinstance(value, dict):
        return ("dict", [(name, _typed(item)) for name, item in cast("dict[str, object]", value).items()])
    if isinstance(value, list):
        return ("list", [_typed(item) for item in cast("list[object]", value)])
    return (type(value).__name__, value.hex() if isinstance(value, float) else value)


_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**4299)
    | st.floats()
    | st.text()
)
_values = st.recursive(
    _leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
)


@settings(max_examples=400, deadline=None)
@given(_values, st.booleans())
def test_parsed_json_reads_every_text_json_writes_as_json_loads_reads_it(value: object, ascii_only: bool) -> None:
    # NaN, infinities, lone surrogates, integers of thousands of digits, escaped or not: read as json.loads reads them.
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _typed(parsed_json(text)) == _typed(json.loads(text))


@pytest.mark.parametrize(
    "text",
    ['"\\ud800"', '{"\\udc00": 1}', "[" * 300 + "]" * 300, "1" * 5000, "{not json", "[1,]", "NaN", '"a\\u0000"'],
)
def test_parsed_json_reads_what_the_fast_parser_refuses_as_json_loads_does(text: str) -> None:
    try:
        expected: object = ("value", _typed(json.loads(text)))
    except ValueError as e:
        expected = ("error", str(e))
    try:
        got: object = ("value", _typed(parsed_json(text)))
    except ValueError as e:
        got = ("error", str(e))
    assert got == expected
