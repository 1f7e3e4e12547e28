"""The strict JSON of a recording line: no object, a name given twice, NaN, nesting too deep, each refused in full."""

from __future__ import annotations

from pathlib import Path

from tests.timeline.sample_recording import lines_of, refused, rewrite


def test_a_line_that_is_no_object_is_refused_in_full(recording: Path) -> None:
    rewrite(recording, 3, "[1]")
    refused(recording, 3, "line is not a JSON object")


def test_a_name_given_twice_in_one_object_is_refused_naming_it(recording: Path) -> None:
    rewrite(recording, 2, lines_of(recording)[1].replace('"unit_id":"u1"}', '"unit_id":"u1","key":"again"}'))
    refused(recording, 2, "line is not valid JSON (the name 'key' appears twice in one object)")


def test_a_nan_is_refused_as_no_json_number(recording: Path) -> None:
    rewrite(recording, 4, lines_of(recording)[3].replace('"raw":[2]', '"raw":[NaN]'))
    refused(recording, 4, "line is not valid JSON (NaN is not a JSON number)")


def test_a_line_nested_too_deeply_is_refused_naming_it(recording: Path) -> None:
    rewrite(recording, 3, "[" * 100_000 + "]" * 100_000)
    refused(recording, 3, "line is nested too deeply to read")
    rewrite(recording, 1, "[" * 100_000 + "]" * 100_000)
    refused(recording, 1, "line is nested too deeply to read")
