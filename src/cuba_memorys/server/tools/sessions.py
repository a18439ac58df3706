"""cuba_jornada (the client's work session) and cuba_pre_compact (its snapshots)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.server.runtime import Runtime
from cuba_memorys.services.sessions import compaction, sessions

Opt = Annotated


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    def cuba_jornada(
        action: Annotated[Literal["start", "end", "list", "current"], Field(description="What to do")],
        name: Opt[str | None, Field(description="start: session name (default 'unnamed')")] = None,
        goals: Opt[list[str] | None, Field(description="start: what this session is for; search boosts results about the first goal")] = None,
        project: Opt[str | None, Field(description="start: project to create if new and make active")] = None,
        outcome: Opt[str | None, Field(description="end: success (default), partial, failed or abandoned")] = None,
        summary: Opt[str | None, Field(description="end: what was done, for the next session")] = None,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda mem, client: sessions.dispatch(
            mem, client, action, name=name, goals=goals, project=project, outcome=outcome,
            summary=summary, allow_secret=allow_secret))

    def cuba_pre_compact(
        action: Annotated[Literal["snapshot", "restore"], Field(description="snapshot before a context compaction; restore after it")],
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda mem, client: compaction.dispatch(mem, client, action))

    return [("cuba_pre_compact", cuba_pre_compact, "Before your context is compacted, snapshot what this"
             " session knows (key observations, decisions, unresolved errors, rows not yet embedded, goals,"
             " and a markdown summary); restore it afterwards.", ToolAnnotations(readOnlyHint=False, destructiveHint=False)),
            ("cuba_jornada", cuba_jornada, "Work sessions, one open per client: start (name, goals,"
             " project; shows how the previous session ended), end (outcome, summary; returns what the"
             " session wrote by type), list, current (with a hint when it is time to snapshot before a"
             " context compaction). Writes made during a session are tagged with it.",
             ToolAnnotations(readOnlyHint=False, destructiveHint=False))]
