"""A loopback stub of three provider APIs (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages).

It serves a script: one reply per request, in order, as JSON or as the API's server-sent events when the
request asks to stream. Bodies are shaped as the real APIs send them: keys in the API's own (unsorted)
order, usage with its details, reasoning or thinking, tool calls, and each API's error bodies and
headers. Every reply is fixed (ids, `created`, signatures), so two runs of one script receive the same
bytes, and every request the server receives is kept (path and body) for comparison.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = ["API", "Failure", "StubProvider", "ToolCall", "Turn", "failure"]

API = Literal["chat", "responses", "anthropic"]
CREATED = 1_767_600_000


@dataclass(frozen=True)
class ToolCall:
    """A tool the model calls, with arguments in the order the model wrote them."""

    name: str
    args: dict[str, Any]
    id: str = "call_0"


@dataclass(frozen=True)
class Turn:
    """One successful model reply: optional reasoning, optional text, tool calls."""

    text: str | None = None
    thinking: str | None = None
    calls: tuple[ToolCall, ...] = ()
    searched: ToolCall | None = None
    """A search the provider ran itself (Anthropic's `web_search`), before the text."""


@dataclass(frozen=True)
class Failure:
    """One error reply: the status, the API's error body and its headers."""

    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


def failure(api: API, status: int) -> Failure:
    """The error each API sends for `status` (503 or 429 for OpenAI; 529 or 429 for Anthropic), as sent."""
    if api == "anthropic":
        kind = {529: "overloaded_error", 429: "rate_limit_error"}.get(status, "api_error")
        body = {
            "type": "error",
            "error": {"type": kind, "message": "Overloaded" if status == 529 else "Number of request tokens exceeded"},
            "request_id": "req_011CVstubAnthropicError",
        }
        return Failure(status, body, (("request-id", "req_011CVstubAnthropicError"), ("x-should-retry", "true")))
    if status == 429:
        error = {
            "message": "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29800, Requested 612.",
            "type": "tokens",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        headers = (("x-ratelimit-remaining-tokens", "200"), ("retry-after-ms", "1"), ("x-request-id", "req_stub429"))
    else:
        error = {
            "message": "The server is overloaded or not ready yet.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        headers = (("x-request-id", "req_stub503"), ("retry-after-ms", "1"))
    return Failure(status, {"error": error}, headers)


Reply = Turn | Failure


@dataclass
class _Script:
    replies: list[Reply]
    received: list[tuple[str, bytes]] = field(default_factory=list[tuple[str, bytes]])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, path: str, body: bytes) -> Reply:
        with self.lock:
            self.received.append((path, body))
            if not self.replies:
                return Failure(500, {"error": {"message": "stub script spent", "type": "server_error"}})
            return self.replies.pop(0)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    wbufsize = -1
    server: _Server  # pyright: ignore[reportIncompatibleVariableOverride]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request: dict[str, Any] = json.loads(body)
        reply = self.server.script.next(self.path, body)
        api: API = (
            "anthropic" if self.path.endswith("/messages") else "responses" if "responses" in self.path else "chat"
        )
        if isinstance(reply, Failure):
            self._send(reply.status, "application/json", _dumps(reply.body), reply.headers)
            return
        model = str(request.get("model", "stub"))
        if request.get("stream"):
            events = {"chat": _chat_chunks, "responses": _responses_events, "anthropic": _anthropic_events}[api]
            self._send(200, "text/event-stream", b"".join(events(reply, model)), ())
            return
        bodies = {"chat": _chat_body, "responses": _responses_body, "anthropic": _anthropic_body}
        self._send(200, "application/json", _dumps(bodies[api](reply, model)), ())

    def _send(self, status: int, content_type: str, data: bytes, headers: tuple[tuple[str, str], ...]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def version_string(self) -> str:
        return "stub-provider"

    def date_time_string(self, timestamp: float | None = None) -> str:
        # A fixed date: two runs of one script receive the same bytes, headers included.
        return "Mon, 05 Jan 2026 09:00:00 GMT"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    script: _Script


class StubProvider:
    """Serve a script of replies on 127.0.0.1 in a daemon thread; use as a context manager."""

    def __init__(self, replies: list[Reply]) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._replies = list(replies)
        self._server.script = _Script(list(replies))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.01,), name="stub-provider", daemon=True
        )

    @property
    def url(self) -> str:
        """The server's root URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def restart_script(self) -> list[tuple[str, bytes]]:
        """Serve the script again from its first reply; return what was received since the last restart."""
        received = self._server.script.received
        self._server.script = _Script(list(self._replies))
        return received

    def __enter__(self) -> StubProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _dumps(value: object) -> bytes:
    # As the APIs send it: keys in the order written, not sorted.
    return json.dumps(value, separators=(",", ":")).encode()


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


# OpenAI Chat Completions.


def _chat_usage(turn: Turn) -> dict[str, Any]:
    return {
        "prompt_tokens": 131,
        "completion_tokens": 42,
        "total_tokens": 173,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 17 if turn.thinking else 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_finish(turn: Turn) -> str:
    return "tool_calls" if turn.calls else "stop"


def _chat_logprobs(turn: Turn) -> dict[str, Any] | None:
    if turn.text is None:
        return None
    # A certain token has a log-probability of exactly 0.0: a float that must stay a float.
    first = turn.text.split(" ")[0]
    return {"content": [{"token": first, "logprob": 0.0, "bytes": list(first.encode()), "top_logprobs": []}]}


def _chat_body(turn: Turn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.thinking is not None:
        message["reasoning_content"] = turn.thinking
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.args)}}
            for c in turn.calls
        ]
    message |= {"refusal": None, "annotations": []}
    choice = {"index": 0, "message": message, "logprobs": _chat_logprobs(turn), "finish_reason": _chat_finish(turn)}
    return {
        "id": "chatcmpl-CsTubAbC123",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [choice],
        "usage": _chat_usage(turn),
        "service_tier": "default",
        "system_fingerprint": "fp_7a3b9c1d2e",
    }


def _chat_chunks(turn: Turn, model: str) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        head = {"id": "chatcmpl-CsTubAbC123", "object": "chat.completion.chunk", "created": CREATED, "model": model}
        return _sse(
            {**head, "service_tier": "default", "system_fingerprint": "fp_7a3b9c1d2e", "choices": [choice]} | extra
        )

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    if turn.thinking is not None:
        for word in turn.thinking.split(" "):
            yield chunk({"reasoning_content": word + " "})
    if turn.text is not None:
        for word in turn.text.split(" "):
            yield chunk({"content": word + " "})
    for index, call in enumerate(turn.calls):
        head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        yield chunk({"tool_calls": [head]})
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": json.dumps(call.args)}}]})
    yield chunk({}, _chat_finish(turn))
    usage = {"id": "chatcmpl-CsTubAbC123", "object": "chat.completion.chunk", "created": CREATED, "model": model}
    yield _sse({**usage, "choices": [], "usage": _chat_usage(turn)})
    yield b"data: [DONE]\n\n"


# OpenAI Responses.


def _responses_items(turn: Turn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.thinking is not None:
        summary = [{"type": "summary_text", "text": turn.thinking}]
        items.append({"id": "rs_0a1b2c", "type": "reasoning", "summary": summary, "encrypted_content": "gAAAAABstub=="})
    if turn.text is not None:
        content = [{"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}]
        items.append(
            {"id": "msg_0a1b2c", "type": "message", "status": "completed", "content": content, "role": "assistant"}
        )
    for call in turn.calls:
        items.append(
            {
                "id": f"fc_{call.id}",
                "type": "function_call",
                "status": "completed",
                "arguments": json.dumps(call.args),
                "call_id": call.id,
                "name": call.name,
            }
        )
    return items


def _responses_body(turn: Turn, model: str, *, status: str = "completed", done: bool = True) -> dict[str, Any]:
    return {
        "id": "resp_0a1b2c3d4e5f",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": _responses_items(turn) if done else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": "detailed"},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 218,
            "input_tokens_details": {"cached_tokens": 128},
            "output_tokens": 77,
            "output_tokens_details": {"reasoning_tokens": 40 if turn.thinking else 0},
            "total_tokens": 295,
        }
        if done
        else None,
        "user": None,
        "metadata": {},
    }


def _responses_events(turn: Turn, model: str) -> Iterator[bytes]:
    seq = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return _sse({"type": kind, "sequence_number": seq - 1, **fields}, kind)

    yield event("response.created", response=_responses_body(turn, model, status="in_progress", done=False))
    yield event("response.in_progress", response=_responses_body(turn, model, status="in_progress", done=False))
    for index, item in enumerate(_responses_items(turn)):
        at = {"output_index": index}
        if item["type"] == "reasoning":
            yield event("response.output_item.added", **at, item={**item, "summary": []})
            text = item["summary"][0]["text"]
            where = {"item_id": item["id"], **at, "summary_index": 0}
            yield event("response.reasoning_summary_part.added", **where, part={"type": "summary_text", "text": ""})
            for word in text.split(" "):
                yield event("response.reasoning_summary_text.delta", **where, delta=word + " ")
            yield event("response.reasoning_summary_text.done", **where, text=text)
            yield event("response.reasoning_summary_part.done", **where, part={"type": "summary_text", "text": text})
        elif item["type"] == "message":
            yield event("response.output_item.added", **at, item={**item, "status": "in_progress", "content": []})
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], **at, "content_index": 0}
            empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            yield event("response.content_part.added", **where, part=empty)
            for word in text.split(" "):
                yield event("response.output_text.delta", **where, delta=word + " ", logprobs=[])
            yield event("response.output_text.done", **where, text=text, logprobs=[])
            yield event("response.content_part.done", **where, part=item["content"][0])
        else:
            yield event("response.output_item.added", **at, item={**item, "status": "in_progress", "arguments": ""})
            where = {"item_id": item["id"], **at}
            yield event("response.function_call_arguments.delta", **where, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        yield event("response.output_item.done", **at, item=item)
    yield event("response.completed", response=_responses_body(turn, model))


# Anthropic Messages.


def _anthropic_blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking is not None:
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": "EqQBCkYIBxgCKkBstubSignature=="})
    if turn.searched is not None:
        search = turn.searched
        blocks.append({"type": "server_tool_use", "id": search.id, "name": search.name, "input": search.args})
        found = {"type": "web_search_result", "url": "https://ices.dk/cod", "title": "Cod advice 2026"}
        found |= {"encrypted_content": "EqgBCioIBxgCstub", "page_age": "2 days ago"}
        blocks.append({"type": "web_search_tool_result", "tool_use_id": search.id, "content": [found]})
    if turn.text is not None:
        blocks.append({"type": "text", "text": turn.text})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in turn.calls)
    return blocks


def _anthropic_usage(*, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": 412,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 128,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _anthropic_head(model: str) -> dict[str, Any]:
    return {"id": "msg_01StubAnthropic", "type": "message", "role": "assistant", "model": model}


def _anthropic_body(turn: Turn, model: str) -> dict[str, Any]:
    return {
        **_anthropic_head(model),
        "content": _anthropic_blocks(turn),
        "stop_reason": "tool_use" if turn.calls else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(output_tokens=87),
    }


def _anthropic_events(turn: Turn, model: str) -> Iterator[bytes]:
    start = {**_anthropic_head(model), "content": [], "stop_reason": None, "stop_sequence": None}
    yield _sse(
        {"type": "message_start", "message": start | {"usage": _anthropic_usage(output_tokens=1)}}, "message_start"
    )
    yield _sse({"type": "ping"}, "ping")
    for index, block in enumerate(_anthropic_blocks(turn)):
        kind = block["type"]
        deltas: list[dict[str, Any]]
        if kind == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": w + " "} for w in block["thinking"].split(" ")]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": w + " "} for w in block["text"].split(" ")]
        elif kind in ("tool_use", "server_tool_use"):
            opened = {"type": kind, "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        else:
            opened, deltas = block, []
        yield _sse({"type": "content_block_start", "index": index, "content_block": opened}, "content_block_start")
        for delta in deltas:
            yield _sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    stop = {"stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None}
    yield _sse({"type": "message_delta", "delta": stop, "usage": {"output_tokens": 87}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")
