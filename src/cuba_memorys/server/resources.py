"""MCP resources: read-only views of the memory under ``cuba://`` URIs.

- ``cuba://entity/{name}``: the entity, its 20 most important observations and its relations,
  as ``cuba_alma action=get`` shows them but without counting an access (reading a resource
  changes nothing).
- ``cuba://project/{name}``: the project's row counts and dates.
- ``cuba://snapshot/{id}``: a compaction snapshot's markdown summary (cuba_pre_compact).

Each read runs as the calling client, in its project scope, exactly as its tools do: an entity,
project or snapshot outside that scope is reported missing, like one that does not exist.
A missing one is a resource error whose message names it and says where to look.

``resources/list`` names concrete ones too, in the caller's scope: its projects, its 20 most
important entities (those with at least two observations) and its open session's last snapshot,
so a client's resource picker offers them without the agent knowing names first.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.shared.exceptions import MCPError
from mcp.types import Resource as MCPResource

from cuba_memorys.errors import CubaError, NotFound
from cuba_memorys.server.runtime import Runtime
from cuba_memorys.services import access
from cuba_memorys.services.resources import (
    entity_view,
    listed,
    project_view,
    snapshot_markdown,
)

RESOURCE_NOT_FOUND = -32002  # MCP: the resource named does not exist (or is outside the caller's scope)
# Template values are names and ids, never file paths: a name may contain "..", or start with "/".
NAMES_NOT_PATHS = ResourceSecurity(reject_path_traversal=False, reject_absolute_paths=False)


def _read(rt: Runtime, ctx: Context | None, uri: str, fn: Callable, value: str) -> str:
    try:
        client = rt.client_of(ctx)
        principal = rt.principal(ctx)
        with rt.memory.acting_for(client):
            if principal is not None:  # a resource is a read in the caller's project, as a tool's
                access.check(rt.memory, client, principal, "resource", "read", "reader", {})
            with access.bound(rt.memory, principal):
                result = fn(rt.memory, client, value)
    except NotFound as exc:  # MCP's "resource not found" code, with the URI, as the spec suggests
        raise MCPError(code=RESOURCE_NOT_FOUND, message=f"{uri}: {exc}", data={"uri": uri}) from exc
    except (CubaError, ToolError) as exc:  # ToolError: refused the caller (the peer token: server/runtime.py)
        raise ResourceError(f"{uri}: {exc}") from exc
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


def listed_for(rt: Runtime, ctx: Context) -> list[MCPResource]:
    """resources/list's concrete part for the calling client (empty when the memory fails: a
    listing is a convenience, the templates still work)."""
    try:
        client = rt.client_of(ctx)
        principal = rt.principal(ctx)
        with rt.memory.acting_for(client):
            if principal is not None:
                access.check(rt.memory, client, principal, "resource", "list", "reader", {})
            with access.bound(rt.memory, principal):
                found = listed(rt.memory, client)
    except (CubaError, ToolError):
        return []
    return [MCPResource(uri=f["uri"], name=f["name"], description=f["description"], mime_type=f["mime"])
            for f in found]


def register(app, rt: Runtime) -> None:
    """Add the three resource templates to ``app`` (an MCPServer)."""

    @app.resource("cuba://entity/{name}", name="entity", mime_type="application/json",
                  description="An entity with its 20 most important observations and its relations"
                              " (read-only: no access is counted). Percent-encode the name.",
                  security=NAMES_NOT_PATHS)
    def entity(name: str, ctx: Context) -> str:
        return _read(rt, ctx, f"cuba://entity/{quote(name, safe='')}", entity_view, name)

    @app.resource("cuba://project/{name}", name="project", mime_type="application/json",
                  description="A project's row counts (entities, observations, episodes, relations, errors,"
                              " sessions, …) and when it was created and last active.",
                  security=NAMES_NOT_PATHS)
    def project(name: str, ctx: Context) -> str:
        return _read(rt, ctx, f"cuba://project/{quote(name, safe='')}", project_view, name)

    @app.resource("cuba://snapshot/{id}", name="snapshot", mime_type="text/markdown",
                  description="A compaction snapshot (cuba_pre_compact) as its markdown summary.",
                  security=NAMES_NOT_PATHS)
    def snapshot(id: str, ctx: Context) -> str:
        return _read(rt, ctx, f"cuba://snapshot/{quote(id, safe='')}", snapshot_markdown, id)
