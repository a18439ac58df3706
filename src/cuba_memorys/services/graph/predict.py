"""cuba_puente predict: links the graph is likely missing, by Adamic-Adar over common
neighbours (two entities sharing neighbours that few others share are likely related).

The score Σ 1/ln(deg z) over common neighbours z is normalised to s/(s+1). ``persist`` writes
the predictions as related_to edges with provenance 'predicted', which traversal and search's
graph context report, so they are never mistaken for extracted knowledge; an existing edge is
never changed.
"""

from __future__ import annotations

from cuba_memorys.errors import InvalidInput
from cuba_memorys.graph.linkpred import adamic_adar, neighbour_sets, normalised
from cuba_memorys.models import MAX_NAME_CHARS
from cuba_memorys.services import validate
from cuba_memorys.services.graph.entities import _named, _visible
from cuba_memorys.services.memory import Memory

DEFAULT_LIMIT, MAX_LIMIT = 10, 50
ALGORITHM = "adamic_adar (normalised s/(s+1))"
SHOWN_VIA = 3  # common neighbours named in a recommendation


def predict(mem: Memory, client: str | None, entity_name: object = None, start_entity: object = None,
            persist: object = None, limit: object = None) -> dict:
    given = entity_name if entity_name not in (None, "") else start_entity
    if given in (None, ""):
        raise InvalidInput("entity_name", "is required for action=predict", "an entity name (or start_entity)")
    name = validate.text("entity_name", given, high=MAX_NAME_CHARS)
    write = validate.flag("persist", persist, False)
    clamps = validate.Clamps()
    most = clamps.integer("limit", limit, 1, MAX_LIMIT, DEFAULT_LIMIT)
    answer: dict = {"action": "predict", "entity": name, "predictions": [], "count": 0, "algorithm": ALGORITHM,
                    "persisted": False, "relations_created": 0}
    start = _named(mem, client, name)
    if start is None:
        answer["note"] = f"Entity '{name}' not found in this project; nothing to predict."
        return clamps.note(answer)
    answer["entity"] = start.name
    first = neighbour_sets(mem.store.adjacency([start.id])).get(start.id, set())
    around = neighbour_sets(mem.store.adjacency(sorted(first)))
    scores = adamic_adar(start.id, first, around)
    scope = mem.scope(client)
    known = {i: e for i, e in mem.store.entities_by_ids(list(scores) + list(first)).items() if _visible(e, scope)}
    ranked = sorted((i for i in scores if i in known), key=lambda i: (-scores[i][0], known[i].name))[:most]
    answer["predictions"] = [_prediction(known, i, *scores[i]) for i in ranked]
    answer["count"] = len(answer["predictions"])
    if write and ranked:
        edges = [(start.id, i, normalised(scores[i][0])) for i in ranked]
        answer["relations_created"] = mem.store.add_predicted_relations(edges, None)
    answer["persisted"] = write and bool(ranked)
    return clamps.note(answer)


def _prediction(known: dict, entity_id: str, score: float, via: list[str]) -> dict:
    target = known[entity_id]
    names = sorted(known[z].name for z in via if z in known)
    shown = ", ".join(f"'{n}'" for n in names[:SHOWN_VIA]) + (" and others" if len(names) > SHOWN_VIA else "")
    return {"entity": target.name, "entity_type": target.entity_type,
            "adamic_adar_score": round(normalised(score), 4),
            "recommendation": f"Consider relating to '{target.name}': both are linked to {shown}"
                              f" ({len(via)} common neighbour{'s' if len(via) != 1 else ''})."}
