"""One self-contained HTML page of a recording, a log, or a divergence: styles and script inline, no network."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from importlib import resources
from typing import Any, cast

from anagrapheus.timeline import Divergence, JSONValue, SecretScanner, canonical_json
from anagrapheus.timeline.divergence import VALUE_PREFIX
from anagrapheus.timeline.fingerprint import digest_text

__all__ = ["Change", "PinView", "UnitView", "render_page"]

_KEY_SHOWN = 24


@dataclass(frozen=True, slots=True)
class PinView:
    """One pin as the page shows it."""

    unit: str
    position: int
    """Its place in its unit's draw order, from 1."""
    kind: str
    key: str
    attempts: int
    failed: bool
    raw: JSONValue
    fingerprint: Mapping[str, str] | None
    at: str
    """Where it sits: `file:line` or `file (seq N)`; `scratch` for a pin of a unit still open."""
    created_at: str | None = None

    @property
    def anchor(self) -> str:
        """The element id of this pin on the page."""
        return f"pin-{unit_slug(self.unit)}-{self.position}"


@dataclass(slots=True)
class UnitView:
    """One unit of work: its state and its pins in draw order."""

    unit_id: str
    state: str = "committed"
    """`committed`, `abandoned` or `open` (pins in scratch, never committed)."""
    pins: list[PinView] = field(default_factory=list[PinView])
    reason: str | None = None
    """Why an abandoned unit was abandoned."""
    diverged: list[str] = field(default_factory=list[str])
    """What each record-mode replay that left the recording in this unit said."""
    elided: int = 0
    """How many more pins the unit holds than the page shows (a page past `view --max-pins`)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between two logs' pins: `added`, `removed` or `changed`, and what moved."""

    unit: str
    change: str
    a: PinView | None
    b: PinView | None
    moved: tuple[str, ...] = ()
    result: str | None = None
    """For the same request with another answer: where the answers part."""


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
_IDS = SecretScanner().redactor()


def unit_slug(unit_id: str) -> str:
    """A unit's part of an element id: the id itself when plain and secret-free, else a digest of it.

    An id is written into element ids and links, which no redaction reaches: one holding a credential, or a
    character a slug would fold (`chat.1` against `chat_1`), is named by `h.` and its digest (issue #35).
    """
    if _PLAIN_ID.fullmatch(unit_id) and _IDS.redact_text(unit_id) == unit_id:
        return unit_id
    return "h." + hashlib.sha256(unit_id.encode()).hexdigest()[:16]


def _short(key: str) -> str:
    return key if len(key) <= _KEY_SHOWN + 12 else key[: key.rfind(":") + 1 + _KEY_SHOWN // 2] + "\u2026"


INDENTED_LEVELS = 8
"""How many levels of a shown value are laid out one item a line; deeper ones are written compact on one line.

Indenting every level made a page grow with the square of a value's nesting (a 0.8 MB recording gave an 80 MB
page, issue #35); past this depth the page grows with the value's size only.
"""


def _indented(value: object, depth: int = 0) -> str:
    """`value` as `json.dumps(value, indent=2)` writes it, down to `INDENTED_LEVELS` levels; compact below."""
    if depth >= INDENTED_LEVELS or not isinstance(value, dict | list) or not value:
        return json.dumps(value, ensure_ascii=False)
    pad, close = "  " * (depth + 1), "  " * depth
    if isinstance(value, dict):
        fields = cast("dict[str, object]", value)
        items = [
            f"{pad}{json.dumps(name, ensure_ascii=False)}: {_indented(item, depth + 1)}"
            for name, item in fields.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + close + "}"
    items = [f"{pad}{_indented(item, depth + 1)}" for item in cast("list[object]", value)]
    return "[\n" + ",\n".join(items) + "\n" + close + "]"


class _Writer:
    """Builds the page's HTML, every shown text escaped and passed through the secret redactor."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._redactor = SecretScanner().redactor()

    def text(self, value: str) -> str:
        return escape(self._redactor.redact_text(value))

    def redacted(self, value: str) -> str:
        return self._redactor.redact_text(value)

    def json(self, value: JSONValue) -> str:
        shown = self._redactor.redact(value)
        return escape(_indented(shown))

    def add(self, *html: str) -> None:
        self.parts.extend(html)


def _part(w: _Writer, part: Mapping[str, Any]) -> str:
    kind = part.get("part_kind")
    if kind == "text":
        return f'<div class="part text">{w.text(str(part.get("content", "")))}</div>'
    if kind in ("tool-call", "builtin-tool-call"):
        args = part.get("args")
        # A provider may send the arguments as JSON text rather than an object.
        shown = w.text(args) if isinstance(args, str) else w.json(args)
        call_id = part.get("tool_call_id")
        return (
            f'<div class="part call"><span class="label">calls</span> <b>{w.text(str(part.get("tool_name")))}</b>'
            f'<span class="dim"> {w.text(str(call_id or ""))}</span><pre>{shown}</pre></div>'
        )
    if kind == "thinking":
        return (
            '<details class="part thinking"><summary>thinking</summary>'
            f"<pre>{w.text(str(part.get('content', '')))}</pre></details>"
        )
    return (
        f'<div class="part other"><span class="label">{w.text(str(kind))}</span><pre>{w.json(dict(part))}</pre></div>'
    )


def _response(w: _Writer, raw: Mapping[str, Any]) -> str:
    parts: Any = raw.get("parts")
    listed = cast("list[Any]", parts) if isinstance(parts, list) else []
    body = "".join(_part(w, cast("dict[str, Any]", p)) for p in listed if isinstance(p, dict))
    usage: Any = raw.get("usage")
    facts = [str(raw.get("model_name") or "")]
    if isinstance(usage, dict):
        usage = cast("dict[str, Any]", usage)
        facts.append(f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens")
    if raw.get("timestamp"):
        facts.append(str(raw["timestamp"]))
    if raw.get("finish_reason"):
        facts.append(f"finish: {raw['finish_reason']}")
    return f'{body}<div class="facts">{w.text(" · ".join(f for f in facts if f))}</div>'


def _failure(w: _Writer, raw: JSONValue) -> str:
    error = raw.get("error") if isinstance(raw, dict) else raw
    if isinstance(error, dict):
        name = error.get("type") or error.get("kind") or "failure"
        message = error.get("message") or ""
        return (
            f'<div class="part failure"><b>{w.text(str(name))}</b> {w.text(str(message))}'
            f"<details><summary>as pinned</summary><pre>{w.json(error)}</pre></details></div>"
        )
    return f'<div class="part failure"><pre>{w.json(error)}</pre></div>'


def _fingerprint(w: _Writer, fingerprint: Mapping[str, str] | None, moved: Iterable[str], *, open_: bool) -> str:
    """What was asked, field by field: a table when shown open, else its rows as data the page's script lays out.

    A large recording's fingerprints are most of its page; kept as one attribute until a reader opens them,
    they cost the browser a string, not thousands of table rows.
    """
    if not fingerprint:
        return ""
    fields = [
        (name, digest, fingerprint.get(VALUE_PREFIX + name))
        for name, digest in fingerprint.items()
        if not name.startswith(VALUE_PREFIX)
    ]
    summary = f"<summary>what was asked: {len(fields)} field(s)</summary>"
    if not open_:
        data = [[name, digest, w.redacted(value) if value is not None else None] for name, digest, value in fields]
        return f'<details class="fp" data-fp="{escape(json.dumps(data, ensure_ascii=False))}">{summary}</details>'
    marked = {m.lstrip("+-") for m in moved}
    rows: list[str] = []
    for name, digest, value in fields:
        shown = f"<code>{w.text(value)}</code>" if value is not None else '<span class="dim">not kept</span>'
        css = ' class="moved"' if name in marked else ""
        rows.append(f"<tr{css}><td>{w.text(name)}</td><td><code>{w.text(digest)}</code></td><td>{shown}</td></tr>")
    return (
        f'<details class="fp" open>{summary}'
        f"<table><tr><th>field</th><th>digest</th><th>value (kept with keep_values)</th></tr>{''.join(rows)}</table>"
        "</details>"
    )


def _tool_names(units: Sequence[UnitView]) -> dict[str, str]:
    """Each tool name a model asked for, by the digest a tool pin's fingerprint gives it."""
    names: dict[str, str] = {}
    for unit in units:
        for pin in unit.pins:
            parts = pin.raw.get("parts") if isinstance(pin.raw, dict) and pin.kind == "model_call" else None
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict) and isinstance(name := part.get("tool_name"), str):
                    names.setdefault(digest_text(canonical_json(name)), name)
    return names


def _pin(w: _Writer, pin: PinView, tools: Mapping[str, str], moved: Iterable[str] = (), *, focus: bool = False) -> str:
    moved = tuple(moved)
    title = pin.kind
    if pin.kind == "tool_call" and pin.fingerprint and (name := tools.get(pin.fingerprint.get("tool", ""))):
        title = f"tool_call · {name}"
    flags: list[str] = []
    if pin.attempts > 1:
        flags.append(f'<span class="badge">asked {pin.attempts}x</span>')
    if pin.failed:
        flags.append('<span class="badge bad">failed</span>')
    if pin.at == "scratch":
        flags.append('<span class="badge open">in scratch</span>')
    if pin.failed:
        body = _failure(w, pin.raw)
    elif pin.kind == "model_call" and isinstance(pin.raw, dict):
        body = _response(w, pin.raw)
    elif isinstance(pin.raw, str):
        body = f'<div class="part value"><code>{w.text(pin.raw)}</code></div>'
    else:
        body = f'<div class="part value"><pre>{w.json(pin.raw)}</pre></div>'
    css = f"pin kind-{_slug(pin.kind)}" + (" focus" if focus else "")
    when = f" · {w.text(pin.created_at)}" if pin.created_at else ""
    return (
        f'<article class="{css}" id="{pin.anchor}" tabindex="0">'
        f'<header><span class="pos">#{pin.position}</span> <b>{w.text(title)}</b> {"".join(flags)}'
        f'<span class="key" title="{escape(pin.key)}">{escape(_short(pin.key))}</span></header>'
        f"{body}{_fingerprint(w, pin.fingerprint, moved, open_=bool(moved))}"
        f'<footer class="dim">{w.text(pin.at)}{when}</footer></article>'
    )


def _header(w: _Writer, header: Mapping[str, Any] | None) -> str:
    if not header:
        return ""
    rows: list[str] = []
    for name in ("description", "recorded_with", "rerecord", "models", "provenance", "details"):
        value = header.get(name)
        if value in (None, "", {}, []):
            continue
        shown = w.text(value) if isinstance(value, str) else _facts(w, value)
        rows.append(f"<tr><th>{escape(name.replace('_', ' '))}</th><td>{shown}</td></tr>")
    return f'<section id="about"><h2>About this recording</h2><table class="about">{"".join(rows)}</table></section>'


def _facts(w: _Writer, value: JSONValue) -> str:
    """A flat object as `name: value` lines; anything deeper as indented JSON."""
    if isinstance(value, dict) and all(not isinstance(v, dict) for v in value.values()):
        lines = (
            f"<b>{w.text(name)}</b>: {w.text(', '.join(map(str, v)) if isinstance(v, list) else str(v))}"  # pyright: ignore[reportUnknownArgumentType]
            for name, v in value.items()
        )
        return "<br>".join(lines)
    return f"<pre>{w.json(value)}</pre>"


def _values(w: _Writer, divergence: Divergence) -> str:
    rows: list[str] = []
    for value in divergence.values:
        rows.append(
            f'<tr class="moved"><td>{w.text(value.field)}</td>'
            f"<td>{_marked(w, value.recorded, value.current)}</td>"
            f"<td>{_marked(w, value.current, value.recorded)}</td></tr>"
        )
    if not rows:
        return (
            '<p class="dim">No values were kept, so only the moved fields are named. Record with'
            " <code>keep_values=True</code> in the call policy to see them side by side.</p>"
        )
    return f"<table><tr><th>field</th><th>recorded</th><th>current</th></tr>{''.join(rows)}</table>"


def _marked(w: _Writer, text: str | None, other: str | None) -> str:
    """`text`, with the part that differs from `other` highlighted."""
    if text is None:
        return '<span class="dim">not kept</span>'
    if other is None:
        return f"<code>{w.text(text)}</code>"
    start = 0
    while start < min(len(text), len(other)) and text[start] == other[start]:
        start += 1
    end = 0
    while end < min(len(text), len(other)) - start and text[len(text) - 1 - end] == other[len(other) - 1 - end]:
        end += 1
    middle = text[start : len(text) - end]
    return f"<code>{w.text(text[:start])}<mark>{w.text(middle)}</mark>{w.text(text[len(text) - end :])}</code>"


_GLOSSES = (
    ("messages[", "a message the model was sent, counted from 0 (the first holds the run's prompt)"),
    ("instructions", "the agent's instructions (system prompt)"),
    ("tools.", "the schema of the tool of that name"),
    ("args.", "an argument of the tool call"),
    ("model", "the model asked"),
    ("settings", "model settings (temperature, ...)"),
    ("output", "the output schema"),
    ("tool", "which tool was called"),
)


def _glossary(w: _Writer, moved: Iterable[str]) -> str:
    """What each moved field means, for a reader new to fingerprints."""
    items: list[str] = []
    for name in moved:
        gloss = next((text for prefix, text in _GLOSSES if name.lstrip("+-").startswith(prefix)), None)
        change = (
            " (only in the current call)"
            if name[:1] == "+"
            else " (only in the recorded call)"
            if name[:1] == "-"
            else ""
        )
        if gloss is not None:
            items.append(f"<li><code>{w.text(name)}</code>: {w.text(gloss + change)}</li>")
    return f'<ul class="gloss">{"".join(items)}</ul>' if items else ""


def _miss(w: _Writer, divergence: Divergence, nearest: PinView | None, tools: Mapping[str, str]) -> str:
    moved = ", ".join(divergence.moved) or "nothing the fingerprints can see"
    where = (
        f'<p>Nearest recorded call: <a href="#{nearest.anchor}">#{nearest.position}'
        f" in unit {w.text(nearest.unit)}</a></p>"
        if nearest is not None
        else ""
    )
    side = _pin(w, nearest, tools, divergence.moved, focus=True) if nearest is not None else ""
    return (
        '<section id="divergence" class="divergence" tabindex="0"><h2>Where the run left its recording</h2>'
        f"<p>After {divergence.after_hits} pin(s) answered, the run asked a {w.text(divergence.kind)} that no pin"
        f' answers: <code title="{escape(divergence.key)}">{escape(_short(divergence.key))}</code>.</p>'
        f'<p>What moved against the nearest recorded call: <b class="movedlist">{w.text(moved)}</b></p>'
        f"{_glossary(w, divergence.moved)}{where}"
        f"{_values(w, divergence)}{side}</section>"
    )


def _comparison(w: _Writer, changes: Sequence[Change], tools: Mapping[str, str], labels: tuple[str, str]) -> str:
    if not changes:
        return (
            '<section id="divergence" class="divergence same" tabindex="0"><h2>The same</h2>'
            f"<p>{w.text(labels[1])} holds the same pins as {w.text(labels[0])}.</p></section>"
        )
    rows: list[str] = []
    for change in changes:
        what = (
            f"same request, another answer: {change.result}"
            if change.result is not None
            else ("what moved: " + (", ".join(change.moved) or "nothing the fingerprints can see"))
            if change.change == "changed"
            else change.change
        )
        left = _pin(w, change.a, tools, change.moved) if change.a is not None else '<div class="absent">absent</div>'
        right = _pin(w, change.b, tools, change.moved) if change.b is not None else '<div class="absent">absent</div>'
        rows.append(
            f'<div class="change {change.change}"><h3>unit {w.text(change.unit)}: {w.text(change.change)}'
            f' <span class="movedlist">{w.text(what)}</span></h3><div class="sides">{left}{right}</div></div>'
        )
    return (
        f'<section id="divergence" class="divergence" tabindex="0"><h2>{len(changes)} difference(s)</h2>'
        f'<div class="sides heads"><b>recorded: {w.text(labels[0])}</b><b>current: {w.text(labels[1])}</b></div>'
        f"{''.join(rows)}</section>"
    )


def render_page(
    *,
    title: str,
    header: Mapping[str, Any] | None,
    units: Sequence[UnitView],
    miss: Divergence | None = None,
    nearest: PinView | None = None,
    changes: Sequence[Change] | None = None,
    labels: tuple[str, str] = ("A", "B"),
) -> str:
    """The whole page: what the log holds, unit by unit, and the divergence when one is given."""
    w = _Writer()
    tools = _tool_names(units)
    pins = sum(len(u.pins) for u in units)
    elided = sum(u.elided for u in units)
    summary = f"{len(units)} unit(s), {pins + elided} pin(s)"
    if elided:
        summary += (
            f"; this page shows the first {pins} (view --max-pins), each unit's count in full: write a unit's page"
            " with view --unit UNIT"
        )
    w.add(
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">',
        f"<title>{w.text(title)}</title><style>{_STYLE}</style></head><body>",
        f'<header class="top"><h1>{w.text(title)}</h1><p>{w.text(summary)}. Each card is a <em>pin</em>: the answer'
        " to one call (a model request, a tool call, a clock reading, an id), stored under a key made from what was"
        " asked, in the order the run drew them. A replay answers from these cards without reaching the model."
        " Keys: <kbd>j</kbd>/<kbd>k</kbd> next and previous pin, <kbd>d</kbd> the divergence,"
        " <kbd>u</kbd> next unit.</p></header>",
    )
    if miss is not None:
        w.add(_miss(w, miss, nearest, tools))
    if changes is not None:
        w.add(_comparison(w, changes, tools, labels))
    w.add(_header(w, header))
    w.add('<nav><h2>Units</h2><ul class="units">')
    for unit in units:
        w.add(
            f'<li><a href="#unit-{unit_slug(unit.unit_id)}">{w.text(unit.unit_id)}</a>'
            f' <span class="badge {unit.state}">{unit.state}</span> {len(unit.pins) + unit.elided} pin(s)</li>'
        )
    w.add("</ul></nav>")
    for unit in units:
        w.add(
            f'<section class="unit" id="unit-{unit_slug(unit.unit_id)}"><h2>unit {w.text(unit.unit_id)}'
            f' <span class="badge {unit.state}">{unit.state}</span></h2>'
        )
        if unit.reason:
            w.add(f'<p class="bad">abandoned: {w.text(unit.reason)}</p>')
        for said in unit.diverged:
            w.add(f'<p class="dim">a record-mode replay left the recording here: {w.text(said)}</p>')
        w.add(*(_pin(w, pin, tools) for pin in unit.pins))
        if unit.elided:
            w.add(
                f'<p class="dim">{unit.elided} more pin(s) not on this page: <code>anagrapheus view PATH --unit'
                f" {w.text(unit.unit_id)}</code> writes them all</p>"
            )
        w.add("</section>")
    w.add(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(w.parts)


def _asset(name: str) -> str:
    return resources.files("anagrapheus.cli").joinpath(name).read_text(encoding="utf-8")


# Read once: every page inlines them, so it opens from file:// with no network.
_STYLE = _asset("page.css")
_SCRIPT = _asset("page.js")
