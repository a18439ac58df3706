"""cuba_alma: create, rename, delete and read entities."""

from __future__ import annotations

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import ENTITY_TYPES, MAX_NAME_CHARS, Entity, Scope
from cuba_memorys.services import audit, reminders, validate
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import RelationEndsRow


def _named(mem: Memory, client: str | None, name: str) -> Entity | None:
    """The visible entity of that name, else the one a merge left that name to (an alias)."""
    scope = mem.scope(client)
    return mem.store.get_entity(name, scope) or mem.store.entity_by_alias(name, scope)


def find_entity(mem: Memory, client: str | None, name: str) -> Entity:
    entity = _named(mem, client, name)
    if entity is None:
        raise NotFound(f"Entity '{name}' not found.",
                       hint="Create it with cuba_alma action=create, or check the active project.")
    return entity


def ensure_entity(mem: Memory, client: str | None, name: str, entity_type: str = "concept") -> Entity:
    """The visible entity of that name (or alias), created in the active project when missing."""
    entity = _named(mem, client, name)
    if entity is not None:
        return entity
    return mem.store.create_entity(name, entity_type, mem.client(client).project_id)


def _entity_view(entity: Entity, with_access: bool) -> dict:
    view = {"id": entity.id, "name": entity.name, "entity_type": entity.entity_type,
            "importance": round(entity.importance, 4)}
    if with_access:
        view["access_count"] = entity.access_count
    return view


def create(mem: Memory, client: str | None, name: object, entity_type: object = None) -> dict:
    name = validate.name("name", name)
    entity_type = validate.choice("entity_type", entity_type, ENTITY_TYPES, default="concept")
    existing = _named(mem, client, name)
    if existing is not None:
        boosted = mem.store.boost_entity(existing.id)
        return {"action": "create", "already_existed": True, "entity": _entity_view(boosted, True),
                "message": f"Entity '{name}' already existed; its importance was reinforced."}
    entity = mem.store.create_entity(name, entity_type, mem.client(client).project_id)
    return {"action": "create", "already_existed": False, "entity": _entity_view(entity, False)}


def rename(mem: Memory, client: str | None, name: object, new_name: object) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS)
    new_name = validate.name("new_name", new_name)
    entity = find_entity(mem, client, name)
    clash = mem.store.get_entity(new_name, mem.scope(client))
    if clash is not None and clash.id != entity.id:
        raise InvalidInput("new_name", f"an entity named '{new_name}' already exists",
                           "a name not used in this project")
    mem.store.rename_entity(entity.id, new_name)
    return {"action": "update", "old_name": name, "new_name": new_name}


def delete(mem: Memory, client: str | None, name: object) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, name)
    with mem.store.transaction():
        removed = mem.store.delete_entity(entity.id)
        audit.record(mem, client, "memory.entity_delete", {"entity_id": entity.id, "removed": removed})
    return {"action": "delete", "name": name, "cascade": True, "removed": removed}


def get(mem: Memory, client: str | None, name: object) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, name)
    entity = mem.store.boost_entity(entity.id)
    observations = mem.store.observations_of(entity.id, mem.scope(client))
    return reminders.attach(mem, client, "on_access", entity.name, {
        "action": "get",
        "entity": {"name": entity.name, "entity_type": entity.entity_type,
                   "importance": round(entity.importance, 4), "access_count": entity.access_count},
        "observations": code_anchors.with_freshness(mem, client, [
            {"id": o.id, "content": o.content, "type": o.observation_type,
             "importance": round(o.importance, 4), "source": o.source, "created_at": o.created_at}
            for o in observations
        ]),
        "observation_count": len(observations),
        "relations": relation_views(mem, client, entity),
    })


def relation_views(mem: Memory, client: str | None, entity: Entity) -> list[dict]:
    """The entity's edges as {entity, type, direction, strength}, the other ends read in one
    query and only those visible in the caller's scope kept."""
    visible = mem.scope(client)
    edges = mem.store.relations_of([entity.id])
    others = mem.store.entities_by_ids(list({_other_end(rel, entity.id) for rel in edges}))
    views = []
    for rel in edges:
        other = others.get(_other_end(rel, entity.id))
        if other is None or not _visible(other, visible):
            continue
        views.append({"entity": other.name, "type": rel["relation_type"],
                      "direction": "outgoing" if rel["from_entity_id"] == entity.id else "incoming",
                      "strength": round(rel["strength"], 4)})
    return views


def _other_end(rel: RelationEndsRow, entity_id: str) -> str:
    return rel["to_entity_id"] if rel["from_entity_id"] == entity_id else rel["from_entity_id"]


def _visible(entity: Entity, scope: Scope) -> bool:
    if scope.unrestricted or entity.project_id == scope.project_id:
        return True
    return entity.project_id is None and scope.include_unscoped
