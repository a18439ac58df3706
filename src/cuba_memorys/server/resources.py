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
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.types import Resource as MCPResource

from cuba_memorys.errors import CubaError, NotFound
from cuba_memorys.models import MAX_NAME_CHARS
from cuba_memorys.server.runtime import Runtime, client_id
from cuba_memorys.services import validate
from cuba_memorys.services.graph.entities import find_entity, relation_views
from cuba_memorys.services.memory import Memory

ENTITY_OBSERVATIONS = 20
LISTED_ENTITIES = 20  # resources/list: the caller's most important entities
# Template values are names and ids, never file paths: a name may contain "..", or start with "/".
NAMES_NOT_PATHS = ResourceSecurity(reject_path_traversal=False, reject_absolute_paths=False)


def entity_view(mem: Memory, client: str | None, name: str) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, name)
    observations = mem.store.observations_of(entity.id, mem.scope(client))
    return {
        "name": entity.name, "entity_type": entity.entity_type, "importance": round(entity.importance, 4),
        "access_count": entity.access_count,
        "observations": [{"id": o.id, "content": o.content, "type": o.observation_type,
                          "importance": round(o.importance, 4), "created_at": o.created_at}
                         for o in observations[:ENTITY_OBSERVATIONS]],
        "observation_count": len(observations),
        "relations": relation_views(mem, client, entity),
    }


def project_view(mem: Memory, client: str | None, name: str) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS).strip()
    project = mem.store.get_project(name)
    scope = mem.scope(client)
    if project is None or not (scope.unrestricted or project["id"] == scope.project_id):
        raise NotFound(f"Project '{name}' not found in your scope.",
                       hint="cuba_proyecto action=list shows the projects; another project's resource is"
                            " readable after cuba_proyecto action=switch to it.")
    counts = mem.store.project_counts(project["id"])
    return {"name": project["name"], "id": project["id"], **counts,
            "created_at": project.get("created_at"), "last_active_at": project.get("last_active_at")}


def snapshot_markdown(mem: Memory, client: str | None, snapshot_id: str) -> str:
    snapshot_id = validate.text("id", snapshot_id, high=100).strip()
    saved = mem.store.get_snapshot(snapshot_id, mem.scope(client))
    if saved is None:
        raise NotFound(f"Snapshot '{snapshot_id}' not found in your scope.",
                       hint="cuba_jornada action=current shows the last snapshot of your session;"
                            " cuba_pre_compact action=snapshot takes one.")
    return saved["summary_md"]


def listed(mem: Memory, client: str | None) -> list[dict]:
    """Concrete resources for resources/list, in ``client``'s scope: {uri, name, description, mime}."""
    scope = mem.scope(client)
    found = [{"uri": f"cuba://project/{quote(p['name'], safe='')}", "name": f"project {p['name']}",
              "description": "Row counts and dates of the project", "mime": "application/json"}
             for p in mem.store.list_projects() if scope.unrestricted or p["id"] == scope.project_id]
    found += [{"uri": f"cuba://entity/{quote(e.name, safe='')}", "name": e.name,
               "description": f"{e.entity_type}, importance {e.importance:.2f}", "mime": "application/json"}
              for e in mem.store.top_entities(scope, LISTED_ENTITIES)]
    session_id = mem.client(client).session_id
    last = mem.store.latest_snapshot(session_id) if session_id else None
    if last and mem.store.get_snapshot(last["id"], scope):  # as reading it would: only in scope
        found.append({"uri": f"cuba://snapshot/{last['id']}", "name": "last snapshot of this session",
                      "description": "The markdown summary cuba_pre_compact saved", "mime": "text/markdown"})
    return found


def _read(rt: Runtime, ctx: Context | None, uri: str, fn: Callable, value: str) -> str:
    client = client_id(ctx)
    try:
        with rt.memory.acting_for(client):
            result = fn(rt.memory, client, value)
    except CubaError as exc:
        raise ResourceError(f"{uri}: {exc}") from exc
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


def listed_for(rt: Runtime, ctx: Context) -> list[MCPResource]:
    """resources/list's concrete part for the calling client (empty when the memory fails: a
    listing is a convenience, the templates still work)."""
    client = client_id(ctx)
    try:
        with rt.memory.acting_for(client):
            found = listed(rt.memory, client)
    except CubaError:
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
        return _read(rt, ctx, f"cuba://entity/{name}", entity_view, name)

    @app.resource("cuba://project/{name}", name="project", mime_type="application/json",
                  description="A project's row counts (entities, observations, episodes, relations, errors,"
                              " sessions, …) and when it was created and last active.",
                  security=NAMES_NOT_PATHS)
    def project(name: str, ctx: Context) -> str:
        return _read(rt, ctx, f"cuba://project/{name}", project_view, name)

    @app.resource("cuba://snapshot/{id}", name="snapshot", mime_type="text/markdown",
                  description="A compaction snapshot (cuba_pre_compact) as its markdown summary.",
                  security=NAMES_NOT_PATHS)
    def snapshot(id: str, ctx: Context) -> str:  # noqa: A002 - the template's variable
        return _read(rt, ctx, f"cuba://snapshot/{id}", snapshot_markdown, id)
