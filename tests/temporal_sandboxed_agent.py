"""The agent of tests/temporal_sandboxed.py, set by the test before its worker starts (a module the sandbox passes)."""

from __future__ import annotations

from pydantic_ai import Agent

AGENT: Agent[None, str] | None = None
