"""cuba_cronica's episodes and timeline: what happened, in order."""

from __future__ import annotations

from typing import Any

from cuba_memorys.models import MAX_NAME_CHARS
from cuba_memorys.secrets_scan import redact
from cuba_memorys.services import validate
from cuba_memorys.services.graph.entities import ensure_entity, find_entity
from cuba_memorys.services.memory import Memory
from cuba_memorys.text import importance_prior

EPISODE_LIST_LIMIT = 50
TIMELINE_OBSERVATIONS = 100


def add(mem: Memory, client: str | None, *, entity_name: object, content: object,
        actors: object = None, artifacts: object = None, created_at: object = None,
        allow_secret: bool = False) -> dict:
    entity_name = validate.name("entity_name", entity_name)
    content = validate.text("content", content)
    validate.no_secret("content", content, allow_secret)
    actors = validate.string_list("actors", actors)
    artifacts = validate.string_list("artifacts", artifacts)
    for param, values in (("actors", actors), ("artifacts", artifacts)):
        for index, value in enumerate(values):
            validate.no_secret(f"{param}[{index}]", value, allow_secret)
    when = validate.timestamp("created_at", created_at)
    entity = ensure_entity(mem, client, entity_name)
    (vector,) = mem.embed_passages([(entity.name, entity.entity_type, content)])
    importance = importance_prior("context", content)
    episode_id = mem.store.add_episode(
        entity.id, content, actors, artifacts, importance, mem.client(client).project_id,
        None if vector is None else vector.tobytes(), None if vector is None else mem.loaded_embedder().name,
        session_id=mem.client(client).session_id, created_at=when)
    return {"action": "episode_add", "id": episode_id, "entity_name": entity.name, "actors": actors,
            "artifacts": artifacts, "importance": importance}


def list_for(mem: Memory, client: str | None, entity_name: object) -> dict:
    entity_name = validate.text("entity_name", entity_name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, entity_name)
    episodes = mem.store.episodes_of(entity.id, mem.scope(client), EPISODE_LIST_LIMIT)
    return {"action": "episode_list", "entity_name": entity.name, "count": len(episodes), "episodes": [
        {"id": e["id"], "content": e["content"], "actors": e["actors"], "artifacts": e["artifacts"],
         "importance": round(e["importance"], 4), "started_at": e["started_at"]} for e in episodes]}


def timeline(mem: Memory, client: str | None, entity_name: object) -> dict:
    entity_name = validate.text("entity_name", entity_name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, entity_name)
    scope = mem.scope(client)
    items: list[dict[str, Any]] = []
    for o in mem.store.observations_of(entity.id, scope, include_superseded=True,
                                       limit=TIMELINE_OBSERVATIONS):
        # a reader's view: credential-looking spans redacted (a quarantined row, a synced history)
        item = {"type": "observation", "id": o.id, "content": redact(o.content),
                "observation_type": o.observation_type, "importance": round(o.importance, 4),
                "version": o.version, "timestamp": o.created_at}
        if o.trust == "quarantined":  # kept, not trusted: never returned by search until promoted
            item["trust"] = "quarantined"
        if o.version > 1:
            item["previous_versions"] = [
                {**v, "content": redact(v["content"])} if isinstance(v, dict) and isinstance(v.get("content"), str)
                else v for v in o.previous_versions]
        items.append(item)
    for e in mem.store.episodes_of(entity.id, scope, EPISODE_LIST_LIMIT):
        items.append({"type": "episode", "id": e["id"], "content": e["content"], "actors": e["actors"],
                      "artifacts": e["artifacts"], "importance": round(e["importance"], 4),
                      "timestamp": e["started_at"]})
    items.sort(key=lambda i: i["timestamp"])
    return {"action": "timeline", "entity_name": entity.name, "items": items, "count": len(items)}
