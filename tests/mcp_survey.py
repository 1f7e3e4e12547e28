"""A tiny stdio MCP server for the tests: one tool whose result JSON's canonical form would change (keys, floats)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("survey")


@server.tool()
def survey(port: str) -> dict[str, Any]:
    """Read the stock survey at a port."""
    return {"port": port, "trend": "down", "biomass": 1.0, "name": "Sa\u0301o", "depths": [[4.0, 7.5]]}


if __name__ == "__main__":
    server.run()
