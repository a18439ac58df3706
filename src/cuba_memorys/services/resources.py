"""What the MCP resources show: read-only views of the memory in the caller's scope.

- ``cuba://entity/{name}``: the entity, its 20 most important observations and its relations,
  as ``cuba_alma action=get`` shows them but without counting an access (reading a resource
  changes nothing).
- ``cuba://project/{name}``: the project's row counts and dates.
- ``cuba://snapshot/{id}``: a compaction snapshot's markdown summary (cuba_pre_compact).

An entity, project or snapshot outside the caller's scope reads as missing, like one that does
not exist. ``listed`` names the concrete ones ``resources/list`` offers (server/resources.py
registers the templates and converts errors).
"""

from __future__ import annotations

from urllib.parse import quote

from cuba_memorys.errors import NotFound
from cuba_memorys.models import MAX_NAME_CHARS
from cuba_memorys.services import validate
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.graph.entities import find_entity, relation_views
from cuba_memorys.services.memory import Memory

ENTITY_OBSERVATIONS = 20
LISTED_ENTITIES = 20  # resources/list: the caller's most important entities


def entity_view(mem: Memory, client: str | None, name: str) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, name)
    observations = mem.store.observations_of(entity.id, mem.scope(client))
    return {
        "name": entity.name, "entity_type": entity.entity_type, "importance": round(entity.importance, 4),
        "access_count": entity.access_count,
        "observations": code_anchors.with_freshness(mem, client, [
            {"id": o.id, "content": o.content, "type": o.observation_type,
             "importance": round(o.importance, 4), "created_at": o.created_at}
            for o in observations[:ENTITY_OBSERVATIONS]]),
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
