"""Replay a durable engine's harbour unit offline, in a process that imports no engine, and print its messages.

`python -m tests.offline_harbour STORE UNIT LOG [PROMPT]` builds the harbour agent (tests/harbour_agent.py) with
plain `Pinning` over a strict replay of UNIT from STORE (a SQLite path), runs it on PROMPT (by default `the north
quay`), and prints its `all_messages()` as JSON: no run id or time is passed by hand. It fails if an engine (Temporal,
Prefect, DBOS) was imported, and any model request or tool body the replay reached logs to LOG.
"""

from __future__ import annotations

import sys
from pathlib import Path

from anagrapheus import Pinning, ReplayPins, SQLiteEventStore
from tests.harbour_agent import harbour_agent

ENGINES = ("temporalio", "prefect", "dbos")


def main(store_at: str, unit: str, log: Path, prompt: str) -> None:
    """Replay the unit and print its messages."""
    store = SQLiteEventStore(store_at)
    agent = harbour_agent(log, capabilities=[Pinning(ReplayPins.from_store(store, unit_id=unit))])
    messages = agent.run_sync(prompt).all_messages_json().decode()
    imported = [name for name in ENGINES if name in sys.modules]
    assert not imported, f"the offline replay imported {imported}"
    sys.stdout.write(messages)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "the north quay")
