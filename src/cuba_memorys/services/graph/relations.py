"""cuba_puente: typed, weighted relations between entities, and walks over them."""

from __future__ import annotations

from cuba_memorys.graph.traverse import Edge, walk
from cuba_memorys.models import MAX_NAME_CHARS, RELATION_TYPES
from cuba_memorys.services import validate
from cuba_memorys.services.graph.entities import _visible, find_entity
from cuba_memorys.services.memory import Memory

DEFAULT_DEPTH = 3
MAX_DEPTH = 5
MAX_LIMIT = 50  # traverse/infer limit, as the original's hidden one


def create(mem: Memory, client: str | None, from_entity: object, to_entity: object,
           relation_type: object = None, bidirectional: bool = False) -> dict:
    from_name = validate.name("from_entity", from_entity)
    to_name = validate.name("to_entity", to_entity)
    relation_type = validate.choice("relation_type", relation_type, RELATION_TYPES, default="related_to")
    source = find_entity(mem, client, from_name)
    target = find_entity(mem, client, to_name)
    row = mem.store.upsert_relation(source.id, target.id, relation_type, bool(bidirectional),
                                    mem.client(client).project_id)
    return {"action": "create", "from": from_name, "to": to_name, "relation_type": relation_type,
            "bidirectional": bool(row["bidirectional"]), "strength": round(row["strength"], 4)}


def delete(mem: Memory, client: str | None, from_entity: object, to_entity: object,
           relation_type: object = None) -> dict:
    from_name = validate.text("from_entity", from_entity, high=MAX_NAME_CHARS)
    to_name = validate.text("to_entity", to_entity, high=MAX_NAME_CHARS)
    if relation_type not in (None, ""):
        relation_type = validate.choice("relation_type", relation_type, RELATION_TYPES)
    source = find_entity(mem, client, from_name)
    target = find_entity(mem, client, to_name)
    deleted = mem.store.delete_relation(source.id, target.id, relation_type or None)
    return {"action": "delete", "deleted": deleted}


def _edges_loader(mem: Memory, client: str | None):
    scope = mem.scope(client)
    traversed: list[str] = []

    def edges_of(nodes: list[str]) -> dict[str, list[Edge]]:
        out: dict[str, list[Edge]] = {}
        wanted = set(nodes)
        for rel in mem.store.relations_of(nodes):
            ends = [(rel["from_entity_id"], rel["to_entity_id"])]
            if rel["bidirectional"]:
                ends.append((rel["to_entity_id"], rel["from_entity_id"]))
            for source, target in ends:
                if source in wanted:
                    out.setdefault(source, []).append(Edge(rel["id"], target, rel["relation_type"],
                                                           rel["strength"], rel["provenance"]))
                    traversed.append(rel["id"])
        return out

    def visible_entities(ids: list[str]):
        found = mem.store.entities_by_ids(ids)
        return {i: e for i, e in found.items() if _visible(e, scope)}

    return edges_of, visible_entities, traversed


def traverse(mem: Memory, client: str | None, start_entity: object, max_depth: object = None,
             limit: object = None) -> dict:
    start_name = validate.text("start_entity", start_entity, high=MAX_NAME_CHARS)
    clamps = validate.Clamps()
    depth = clamps.integer("max_depth", max_depth, 1, MAX_DEPTH, DEFAULT_DEPTH)  # the original clamps
    most = clamps.integer("limit", limit, 1, MAX_LIMIT, MAX_LIMIT) if limit is not None else None
    start = find_entity(mem, client, start_name)
    edges_of, visible_entities, traversed = _edges_loader(mem, client)
    reached = walk(start.id, edges_of, depth)
    names = visible_entities([r.node for r in reached])
    mem.store.mark_traversed(sorted(set(traversed)))
    nodes = [{"name": names[r.node].name, "relation": r.via.relation_type,
              "strength": round(r.via.strength, 4), "path_strength": round(r.path_strength, 4),
              "depth": r.depth, "provenance": r.via.provenance} for r in reached if r.node in names][:most]
    return clamps.note({"action": "traverse", "start": start.name, "max_depth": depth, "nodes": nodes,
                        "count": len(nodes)})


def infer(mem: Memory, client: str | None, start_entity: object, max_depth: object = None,
          limit: object = None) -> dict:
    """Transitive connections (two hops or more) with the product of strengths on the path."""
    start_name = validate.text("start_entity", start_entity, high=MAX_NAME_CHARS)
    clamps = validate.Clamps()
    depth = clamps.integer("max_depth", max_depth, 1, MAX_DEPTH, DEFAULT_DEPTH)
    most = clamps.integer("limit", limit, 1, MAX_LIMIT, MAX_LIMIT) if limit is not None else None
    start = find_entity(mem, client, start_name)
    edges_of, visible_entities, _ = _edges_loader(mem, client)
    reached = [r for r in walk(start.id, edges_of, depth) if r.depth >= 2]
    names = visible_entities([r.node for r in reached])
    found = [{"entity": names[r.node].name, "hops": r.depth, "inferred_strength": round(r.path_strength, 4)}
             for r in reached if r.node in names]
    found.sort(key=lambda f: -f["inferred_strength"])
    found = found[:most]
    return clamps.note({"action": "infer", "start": start.name, "inferred_connections": found,
                        "count": len(found)})


def neighbours(mem: Memory, client: str | None, entity_ids: list[str], per_entity: int) -> dict[str, list[dict]]:
    """Direct neighbours of each entity (for search's graph context), strongest first."""
    edges_of, visible_entities, _ = _edges_loader(mem, client)
    edges = edges_of(entity_ids)
    incoming = mem.store.relations_of(entity_ids)
    out: dict[str, list[dict]] = {}
    for entity_id in entity_ids:
        pairs = [(e.target, e.relation_type, e.strength, e.provenance) for e in edges.get(entity_id, [])]
        pairs += [(r["from_entity_id"], r["relation_type"], r["strength"], r["provenance"]) for r in incoming
                  if r["to_entity_id"] == entity_id and not r["bidirectional"]]
        pairs.sort(key=lambda p: -p[2])
        names = visible_entities([p[0] for p in pairs])
        # provenance tells a predicted edge (cuba_puente predict, NPMI link) from an extracted one
        out[entity_id] = [{"name": names[p[0]].name, "relation": p[1], "importance": round(names[p[0]].importance, 4),
                           "provenance": p[3]} for p in pairs if p[0] in names][:per_entity]
    return out


__all__ = ["create", "delete", "infer", "neighbours", "traverse"]
