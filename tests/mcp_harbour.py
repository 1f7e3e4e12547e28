"""A tiny stdio MCP server for the tests: one tool and instructions; each start appends a line to a log.

`python tests/mcp_harbour.py` serves on stdin/stdout. When `ANAGRAPHEUS_MCP_STARTS` names a file, the
server appends its process id to it on start, so a test can count the servers a run started.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("harbour", instructions="Ask the harbour master before you berth.")


@server.tool()
def berths(port: str) -> str:
    """Count the free berths in a port."""
    return f"{port}: 4 free berths"


if __name__ == "__main__":
    starts = os.environ.get("ANAGRAPHEUS_MCP_STARTS")
    if starts:
        with open(starts, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()}\n")
    server.run()
