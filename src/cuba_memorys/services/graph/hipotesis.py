"""cuba_hipotesis explain: what could have caused an effect (spec §4f).

A backward walk from the effect over causes / related_to / depends_on edges (one recursive
statement in the store, never revisiting an entity on its own path), then each candidate cause
ranked by plausibility = path strength (the product of the strengths on its strongest path) ×
the cause's importance.
"""

from __future__ import annotations

from cuba_memorys.models import MAX_NAME_CHARS
from cuba_memorys.services import validate
from cuba_memorys.services.graph.entities import _named, _visible
from cuba_memorys.services.memory import Memory

DEFAULT_DEPTH, MAX_DEPTH = 3, 5
DEFAULT_LIMIT, MAX_LIMIT = 10, 50
# Paths read at most: a dense neighbourhood has exponentially many paths at depth 5. Both
# engines expand breadth first, so what is cut is the longest (and weakest) paths.
MAX_PATHS = 20_000
SCORING = "plausibility = path_strength (product of edge strengths on the strongest path) x importance"


def explain(mem: Memory, client: str | None, effect: object, max_depth: object = None,
            limit: object = None) -> dict:
    name = validate.text("effect", effect, high=MAX_NAME_CHARS)
    clamps = validate.Clamps()
    depth = clamps.integer("max_depth", max_depth, 1, MAX_DEPTH, DEFAULT_DEPTH)
    most = clamps.integer("limit", limit, 1, MAX_LIMIT, DEFAULT_LIMIT)
    target = _named(mem, client, name)
    answer: dict = {"action": "explain", "effect": name, "hypotheses": [], "count": 0, "max_depth": depth,
                    "scoring": SCORING}
    if target is None:
        answer["note"] = f"Entity '{name}' not found in this project; nothing to explain."
        return clamps.note(answer)
    answer["effect"] = target.name
    paths = mem.store.causal_paths(target.id, depth, MAX_PATHS)
    best: dict[str, tuple[float, int]] = {}
    for p in paths:  # the strongest path to each cause; the shorter one among equals
        seen = best.get(p["entity_id"])
        if seen is None or (p["path_strength"], -p["hops"]) > (seen[0], -seen[1]):
            best[p["entity_id"]] = (p["path_strength"], p["hops"])
    scope = mem.scope(client)
    causes = {i: e for i, e in mem.store.entities_by_ids(list(best)).items() if _visible(e, scope)}
    ranked = sorted(((best[i][0] * e.importance, best[i][0], best[i][1], e) for i, e in causes.items()),
                    key=lambda r: (-r[0], -r[1], r[2], r[3].name))
    answer["hypotheses"] = [{"cause": e.name, "entity_type": e.entity_type, "importance": round(e.importance, 4),
                             "hops": hops, "path_strength": round(strength, 4),
                             "plausibility": round(plausibility, 4)}
                            for plausibility, strength, hops, e in ranked[:most]]
    answer["count"] = len(answer["hypotheses"])
    if len(paths) >= MAX_PATHS:
        answer["truncated"] = True
    return clamps.note(answer)
