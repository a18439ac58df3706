"""Workflow tools: cuba_decreto (decisions), cuba_receta (procedures), cuba_pizarra (working memory).

Signatures only: each is the tool's input schema. The catalogue routes every action to its
service (services/workflow/).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.services.workflow.working_memory import DEFAULT_TTL_SECONDS

SECRET = "Store text that looks like a credential anyway"


def cuba_decreto(
    action: Annotated[Literal["record", "query", "list"], Field()],
    title: Opt[str | None, Field(description="record: what was decided, in a few words (default \"Untitled\")")] = None,
    context: Opt[str | None, Field(description="record: the situation that called for a decision")] = None,
    alternatives: Opt[list[str] | None, Field(description="record: the options considered")] = None,
    chosen: Opt[str | None, Field(description="record: the option taken")] = None,
    rationale: Opt[str | None, Field(description="record: why it was taken")] = None,
    query: Opt[str | None, Field(description="query: what to look for among recorded decisions")] = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_receta(
    action: Annotated[Literal["add", "get", "search", "outcome", "list", "delete"], Field()],
    name: Opt[str | None, Field(description="add/get/outcome/delete: the procedure's name (one per name per"
                                            " project)")] = None,
    trigger: Opt[str | None, Field(description="add: when to use it")] = None,
    steps: Opt[list[dict[str, Any]] | None, Field(description="add: non-empty array of {do, run?, expect?}: what to"
                                                              " do, the command to run, what should happen")] = None,
    preconditions: Opt[str | None, Field(description="add: what must hold before starting")] = None,
    verification: Opt[str | None, Field(description="add: how to check it worked")] = None,
    success: Opt[bool | None, Field(description="outcome: whether following the procedure worked")] = None,
    query: Opt[str | None, Field(description="search: what the procedure is for")] = None,
    limit: Opt[int | None, Field(description="search: default 5, clamped to 1-25; list: default 20, clamped to"
                                             " 1-100")] = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_pizarra(
    action: Annotated[Literal["write", "read", "clear"], Field()],
    content: Opt[str | None, Field(description="write: the note (1-10000 chars)")] = None,
    tag: Opt[str | None, Field(description="write: label the note; read/clear: only notes with this tag (clear"
                                           " without a tag clears all)")] = None,
    ttl_seconds: Opt[int, Field(description="write: seconds until the note expires (at least 1; clamped to one"
                                            " year)")] = DEFAULT_TTL_SECONDS,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
