"""A scripted OpenAI-compatible chat-completions server on loopback, for recording cassettes.

It answers deterministically from the request alone (no clock, no randomness), so a
cassette recorded against it replays byte for byte. It serves at most `max_requests`
requests and shuts itself down after `lifetime` seconds, whichever comes first.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["StubOpenAIServer", "scripted_reply", "stub_server_process"]


def scripted_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message for a chat: call `lookup` on a new user turn, answer once the tool has returned."""
    last = messages[-1]
    turn = sum(1 for m in messages if m.get("role") == "user")
    if last.get("role") == "tool":
        return {"role": "assistant", "content": f"Turn {turn}: the record says {last.get('content')}."}
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:24]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{digest}",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"topic": f"topic-{turn}"})},
            }
        ],
    }


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    message = scripted_reply(body["messages"])
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model", "stub"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without these two, Nagle's algorithm and a buffered write stall every response by ~40 ms.
    disable_nagle_algorithm = True
    wbufsize = -1

    server: StubOpenAIServer._Server  # pyright: ignore[reportIncompatibleVariableOverride]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        if not self.server.take_request():
            self.send_error(503, "stub server request budget spent")
            return
        data = json.dumps(_completion(body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class StubOpenAIServer:
    """Serve the scripted chat on 127.0.0.1 in a daemon thread; use as a context manager."""

    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        budget: int
        lock: threading.Lock

        def take_request(self) -> bool:
            with self.lock:
                self.budget -= 1
                return self.budget >= 0

    def __init__(self, *, max_requests: int = 1_000, lifetime: float = 120.0) -> None:
        self._server = self._Server(("127.0.0.1", 0), _Handler)
        self._server.budget = max_requests
        self._server.lock = threading.Lock()
        self._lifetime = lifetime
        self._thread = threading.Thread(target=self._server.serve_forever, name="stub-openai", daemon=True)
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give the provider."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def serving(self) -> bool:
        """Whether the server thread is still running."""
        return self._thread.is_alive()

    def start(self) -> StubOpenAIServer:
        """Start serving (and the self-stop timer)."""
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice."""
        self._timer.cancel()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> StubOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def stub_server_process(*, max_requests: int = 1_000_000, lifetime: float = 3_600.0) -> Iterator[str]:
    """Serve the scripted chat from a child process, so its CPU is not the client's; yield the base URL."""
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from _stub_server import StubOpenAIServer\n"
        f"s = StubOpenAIServer(max_requests={max_requests}, lifetime={lifetime}).start()\n"
        "print(s.base_url, flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        assert child.stdin is not None
        child.stdin.close()  # the child's read returns and it exits
        child.wait(timeout=10)
