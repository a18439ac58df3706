"""Session tools: cuba_jornada (the client's work session) and cuba_pre_compact (its snapshots).

Signatures only: each is the tool's input schema. The catalogue routes every action to its
service (services/sessions/).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.models import SESSION_OUTCOMES
from cuba_memorys.server.tools.schema import Choice


def cuba_jornada(
    action: Annotated[Literal["start", "end", "list", "current"], Field()],
    name: Opt[str, Field(description="start: the session's name")] = "unnamed",
    goals: Opt[list[str] | None, Field(description="start: what this session is for; search boosts results about"
                                                   " the first goal")] = None,
    project: Opt[str | None, Field(description="start: project to create if new and make active")] = None,
    outcome: Opt[str, Choice(SESSION_OUTCOMES), Field(description="end: how it went")] = "success",
    summary: Opt[str | None, Field(description="end: what was done, for the next session")] = None,
    allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_pre_compact(
    action: Annotated[Literal["snapshot", "restore"], Field(description="snapshot before a context compaction;"
                                                                        " restore after it")],
    ctx: Context | None = None,
) -> dict[str, Any]: ...
