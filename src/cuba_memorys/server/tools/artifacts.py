"""Artifact tool: cuba_artefacto (shared, versioned texts between agents).

A signature only: it is the tool's input schema. The catalogue routes every action to its
service (services/agents/artifacts.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.services.agents.artifacts import DEFAULT_TTL_SECONDS

SECRET = "put/patch: store text that looks like a credential anyway"


def cuba_artefacto(
    action: Annotated[Literal["list", "get", "put", "patch", "lock", "unlock", "watch_hint"],
                      Field()],
    path: Opt[str | None, Field(description="get/put/patch/lock/unlock: a logical path such as docs/plan.md"
                                            " (1-512 bytes; one artifact per path per project)")] = None,
    content: Opt[str | None, Field(description="put: the whole new text (at most 2 MiB)")] = None,
    base_version: Opt[int | None, Field(description="put: the version you read (get/list); 0 or omitted creates"
                                                    " the path; a stale one is refused")] = None,
    find: Opt[str | None, Field(description="patch: the exact text to replace; it must occur exactly once")] = None,
    replace: Opt[str | None, Field(description="patch: what replaces it (default: nothing, i.e. delete it)")] = None,
    ttl_seconds: Opt[int, Field(description="lock: the lease's seconds (clamped to 5-3600); it frees itself"
                                            " then")] = DEFAULT_TTL_SECONDS,
    prefix: Opt[str | None, Field(description="list: only paths that start with this")] = None,
    limit: Opt[int | None, Field(description="list: at most this many, by path (default 100, clamped to"
                                             " 1-500)")] = None,
    version: Opt[int | None, Field(description="get: this earlier version (the newest 50 replaced are kept)")]
    = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
