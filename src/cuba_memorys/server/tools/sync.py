"""Sync tool: cuba_sync (the memory as a bundle that travels with the code through git).

A signature only: it is the tool's input schema. The catalogue routes every action to its
service (services/sync/). For now export and status; the other actions of the original
(import, diff, pull, notify, fetch, conflicts, resolve) come with the rest of issue 17.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.server.tools.schema import Choice


def cuba_sync(
    action: Annotated[Literal["export", "status"], Field(description="What to do")],
    dir: Opt[str | None, Field(description="The bundle's folder (default: $CUBA_SYNC_DIR, else .cuba-memorys/ at"
                                           " the git repository's top, else in the current directory)")] = None,
    scope: Opt[str | None, Choice(("project", "all"), nullable=True),
               Field(description="export: project (the active project's rows only; default) or all")] = None,
    with_embeddings: Opt[bool, Field(description="export: also write embeddings.bin.zst (zstd-compressed"
                                                 " vectors)")] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
