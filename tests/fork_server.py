"""Real child processes forked from one warm server, for the tests that SIGKILL many of them.

A fresh `python -c` child pays for the interpreter and for importing anagrapheus (which imports pydantic-ai):
about a second of CPU each, most of a crash test's time. A child forked from a server that has imported them
once starts in milliseconds, and is still a process of its own: its own SQLite or PostgreSQL connection, its
own memory, killed by a real SIGKILL. The server imports and opens nothing else, so a child inherits no
connection, lock or thread. A child leaves by `os._exit`: no exit handler copied from the server runs in it.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import IO

SERVER = r"""
import json, os, socket, sys, traceback
control = socket.socket(fileno=int(sys.argv[1]))
for module in sys.argv[2:]:
    __import__(module)
control.send(b"ready")
while True:
    message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
    if not message:
        os._exit(0)  # nothing to flush or save: the shutdown of all it imported would only cost seconds
    request = json.loads(message)
    if "wait" in request:
        _, status = os.waitpid(request["wait"], 0)
        control.send(str(os.waitstatus_to_exitcode(status)).encode())
        continue
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        control.close()
        for fd, std in zip(fds, (0, 1, 2)):
            os.dup2(fd, std)
            os.close(fd)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = ["-c", *request["argv"]]
        code = 0
        try:
            exec(compile(request["script"], "<forked child>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    for fd in fds:
        os.close(fd)
    control.send(str(pid).encode())
"""


class ForkedChild:
    """One forked child: `stdin`, `stdout`, `stderr`, `send_signal`, `wait` and `communicate` as on `Popen`."""

    def __init__(self, server: ForkServer, pid: int, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> None:
        self._server = server
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def send_signal(self, signal: int) -> None:
        os.kill(self.pid, signal)

    def close(self) -> None:
        """Close this side of the child's pipes."""
        self.stdout.close()
        self.stderr.close()
        with suppress(BrokenPipeError):  # the child is gone: nothing was waiting to be flushed
            self.stdin.close()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Close stdin, read stdout and stderr to their ends, wait; as `Popen.communicate` does."""
        with suppress(BrokenPipeError):
            self.stdin.close()
        with ThreadPoolExecutor(1) as reader:
            err = reader.submit(self.stderr.read)
            out = self.stdout.read()
            errors = err.result(timeout)
        self.wait(timeout)
        self.close()
        return out, errors

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end (the server reaps it) and return its exit code, -9 after a SIGKILL."""
        if self.returncode is None:
            self.returncode = int(self._server.ask({"wait": self.pid}, timeout=timeout))
        return self.returncode


class ForkServer:
    """A process that has imported `modules` once and forks a child to run each script given to `start`."""

    def __init__(self, modules: Sequence[str]) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-c", SERVER, str(theirs.fileno()), *modules], pass_fds=[theirs.fileno()]
            )
        self._control.settimeout(120)
        assert self._control.recv(16) == b"ready", "the fork server did not start"

    def ask(self, request: dict[str, object], fds: Sequence[int] = (), timeout: float | None = None) -> str:
        socket.send_fds(self._control, [json.dumps(request).encode()], list(fds))
        self._control.settimeout(timeout if timeout is not None else 120)
        return self._control.recv(64).decode()

    def start(self, script: str, *argv: str) -> ForkedChild:
        """Fork a child that runs `script` with `argv` (as `python -c script *argv` would), on three new pipes.

        Its stderr is a pipe too, so a child's traceback reaches the test that started it; a child that writes more
        than a pipe holds (64 KiB) there must be read (`communicate`) or it blocks.
        """
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        try:
            pid = int(self.ask({"script": script, "argv": list(argv)}, fds=[stdin_r, stdout_w, stderr_w]))
        finally:
            for theirs in (stdin_r, stdout_w, stderr_w):
                os.close(theirs)
        stdin = io.TextIOWrapper(io.FileIO(stdin_w, "w"), line_buffering=True)
        stdout = io.TextIOWrapper(io.FileIO(stdout_r, "r"))
        stderr = io.TextIOWrapper(io.FileIO(stderr_r, "r"))
        return ForkedChild(self, pid, stdin, stdout, stderr)

    def close(self) -> None:
        self._control.close()
        self._process.wait(30)


@contextmanager
def fork_server(*modules: str) -> Iterator[ForkServer]:
    """A fork server that has imported `modules`, stopped on leaving."""
    server = ForkServer(modules)
    try:
        yield server
    finally:
        server.close()
