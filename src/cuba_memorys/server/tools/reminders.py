"""Reminder tool: cuba_centinela (triggers that fire when an entity is touched, a session starts
or an error is reported).

Signatures only: the tool's input schema. The catalogue routes every action to its service
(services/reminders.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.server.tools.schema import Choice
from cuba_memorys.services.reminders import CONDITIONS


def cuba_centinela(
    action: Annotated[Literal["create", "list", "delete", "check"], Field()],
    entity_pattern: Opt[str | None, Field(description="create: glob (case-insensitive, * and ?) the reminder"
                                                      " watches: an entity name for on_access (whole name),"
                                                      " text found in a session's project/name/goals or in an"
                                                      " error for the others; check: the name or text to check")]
    = None,
    condition_type: Opt[str | None, Choice(CONDITIONS, nullable=True),
                        Field(description="create: when it fires (required); check: default on_access")] = None,
    message: Opt[str | None, Field(description="create: what to remind")] = None,
    max_fires: Opt[int, Field(description="create: times it fires before switching off (-1 unlimited;"
                                          " clamped to 10000)")] = 1,
    expires_at: Opt[str | None, Field(description="create: RFC 3339 date-time after which it never fires"
                                                  " (an invalid or past one is an error)")] = None,
    trigger_id: Opt[str | None, Field(description="delete: the trigger_id create returned")] = None,
    allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
