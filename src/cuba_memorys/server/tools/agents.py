"""Agent tools: cuba_whoami (who this client is to the daemon) and cuba_contexto (the context to
see at the start of a turn, within a character budget).

Signatures only: each is the tool's input schema. The catalogue routes each to its service
(services/agents/).
"""

from __future__ import annotations

from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter
from typing import Any

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.services.agents.contexto import DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET


def cuba_whoami(ctx: Context | None = None) -> dict[str, Any]: ...


def cuba_contexto(
    budget_chars: Opt[int, Field(description=f"Most characters the answer may take (clamped to"
                                             f" {MIN_BUDGET}-{MAX_BUDGET}); over it, layers become a truncated"
                                             " preview")] = DEFAULT_BUDGET,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
