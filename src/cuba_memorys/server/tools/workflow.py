"""Workflow tools: cuba_decreto (decisions), cuba_receta (procedures), cuba_pizarra (working memory).

Thin, like the core tools: the signature is the input schema, the body picks the service for
the action; validation and behaviour live in services/decisions.py, procedures.py and
working_memory.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.errors import InvalidInput
from cuba_memorys.server.runtime import Runtime
from cuba_memorys.services.workflow import decisions as decision_svc
from cuba_memorys.services.workflow import procedures as procedure_svc
from cuba_memorys.services.workflow import working_memory as scratch_svc

Opt = Annotated  # readability: Opt[type, Field(...)] marks an optional parameter


def _need(param: str, value: Any, action: str) -> Any:
    if value is None or value == "" or value == []:
        raise InvalidInput(param, f"is required for action={action}")
    return value


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    """(name, function, description, annotations) for each workflow tool."""

    def cuba_decreto(
        action: Annotated[Literal["record", "query", "list"], Field(description="What to do")],
        title: Opt[str | None, Field(description="record: what was decided, in a few words (default \"Untitled\")")] = None,
        context: Opt[str | None, Field(description="record: the situation that called for a decision")] = None,
        alternatives: Opt[list[str] | None, Field(description="record: the options considered")] = None,
        chosen: Opt[str | None, Field(description="record: the option taken")] = None,
        rationale: Opt[str | None, Field(description="record: why it was taken")] = None,
        query: Opt[str | None, Field(description="query: what to look for among recorded decisions")] = None,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "record":
            return rt.call(ctx, lambda m, c: decision_svc.record(
                m, c, title=title, context=context, alternatives=alternatives, chosen=chosen,
                rationale=rationale, allow_secret=allow_secret))
        if action == "query":
            return rt.call(ctx, lambda m, c: decision_svc.query(m, c, _need("query", query, action)))
        return rt.call(ctx, decision_svc.list_recent)

    def cuba_receta(
        action: Annotated[Literal["add", "get", "search", "outcome", "list", "delete"], Field(description="What to do")],
        name: Opt[str | None, Field(description="Procedure name (add, get, outcome, delete); one per name per project")] = None,
        trigger: Opt[str | None, Field(description="add: when to use it")] = None,
        steps: Opt[list[dict[str, Any]] | None, Field(description="add: non-empty array of {do, run?, expect?}: what to do, the command to run, what should happen")] = None,
        preconditions: Opt[str | None, Field(description="add: what must hold before starting")] = None,
        verification: Opt[str | None, Field(description="add: how to check it worked")] = None,
        success: Opt[bool | None, Field(description="outcome: whether following the procedure worked")] = None,
        query: Opt[str | None, Field(description="search: what the procedure is for")] = None,
        limit: Opt[int | None, Field(description="search: default 5, 1-25; list: default 20, 1-100")] = None,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "add":
            return rt.call(ctx, lambda m, c: procedure_svc.add(
                m, c, name=_need("name", name, action), steps=_need("steps", steps, action), trigger=trigger,
                preconditions=preconditions, verification=verification, allow_secret=allow_secret))
        if action == "search":
            return rt.call(ctx, lambda m, c: procedure_svc.search(m, c, _need("query", query, action), limit))
        if action == "list":
            return rt.call(ctx, procedure_svc.list_all, limit)
        if action == "outcome":
            return rt.call(ctx, lambda m, c: procedure_svc.outcome(
                m, c, _need("name", name, action), _need("success", success, action)))
        chosen = {"get": procedure_svc.get, "delete": procedure_svc.delete}[action]
        return rt.call(ctx, lambda m, c: chosen(m, c, _need("name", name, action)))

    def cuba_pizarra(
        action: Annotated[Literal["write", "read", "clear"], Field(description="What to do")],
        content: Opt[str | None, Field(description="write: the note (1-10000 chars)")] = None,
        tag: Opt[str | None, Field(description="write: label the note; read/clear: only notes with this tag (clear without a tag clears all)")] = None,
        ttl_seconds: Opt[int, Field(ge=1, le=scratch_svc.MAX_TTL_SECONDS, description="write: seconds until the note expires (default 3600)")] = scratch_svc.DEFAULT_TTL_SECONDS,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "write":
            return rt.call(ctx, lambda m, c: scratch_svc.write(
                m, c, content=_need("content", content, action), tag=tag, ttl_seconds=ttl_seconds,
                allow_secret=allow_secret))
        if action == "read":
            return rt.call(ctx, scratch_svc.read, tag)
        return rt.call(ctx, scratch_svc.clear, tag)

    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False)
    may_delete = ToolAnnotations(readOnlyHint=False, destructiveHint=True)
    return [
        ("cuba_decreto", cuba_decreto, "Decisions: record one (title, context, alternatives, chosen,"
         " rationale; stored as a decision observation that never decays), query them by meaning"
         " (up to 10, similarity > 0.2) or list the 20 newest.", writes),
        ("cuba_receta", cuba_receta, "Procedures (recipes) that worked: add (steps [{do, run?, expect?}];"
         " re-adding a name updates it and keeps its counts), get (with markdown), search and list"
         " ranked by reliability (Wilson 95% lower bound of successes), outcome (record success or"
         " failure), delete.", may_delete),
        ("cuba_pizarra", cuba_pizarra, "Working memory: short-lived notes of this client's session"
         " (write with a TTL, default 3600 s; read up to 100 unexpired notes; clear by tag or all)."
         " Expired notes are never returned.", may_delete),
    ]
