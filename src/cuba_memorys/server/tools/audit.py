"""The audit tool: cuba_archivo (append to, verify and read the hash-chained audit log).

Signature only: the tool's input schema. The catalogue routes each action to its service
(services/audit.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field


def cuba_archivo(
    action: Annotated[Literal["append", "verify", "tail"], Field()],
    event_action: Opt[str | None, Field(description="append: what happened, e.g. deploy.approved (1-200"
                                                    " chars)")] = None,
    payload: Opt[dict[str, Any] | None, Field(description="append: details of the event (a JSON object)")] = None,
    limit: Opt[int | None, Field(description="verify: rows to check (default 10000, 1-1000000); tail: newest"
                                             " rows (default 20, 1-200)")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
