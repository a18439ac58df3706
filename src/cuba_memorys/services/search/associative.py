"""cuba_faro associative=true: pull in what the graph connects to the query's entities.

Seeds are up to 5 entities the query names (lexical match); activation spreads 2 hops
(decay 0.85 per hop, times edge strength); up to 8 newly reached entities contribute their
top-2 observations, scored 0.02 · activation · importance. It only adds hits.
"""

from __future__ import annotations

from cuba_memorys.graph.activation import spread
from cuba_memorys.search.fusion import Fused
from cuba_memorys.search.hybrid import SearchRequest
from cuba_memorys.services.memory import Memory

MAX_SEEDS = 5
MAX_NEW_ENTITIES = 8
PER_ENTITY = 2
SCALE = 0.02


def expander(mem: Memory, client: str | None, req: SearchRequest):
    scope = mem.scope(client, req.filter.scope.include_unscoped)

    def neighbours(nodes: list[str]) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for rel in mem.store.relations_of(nodes):
            out.setdefault(rel["from_entity_id"], []).append((rel["to_entity_id"], rel["strength"]))
            out.setdefault(rel["to_entity_id"], []).append((rel["from_entity_id"], rel["strength"]))
        return out

    def in_window(created_at: str) -> bool:
        flt = req.filter
        return (not flt.after or created_at > flt.after) and (not flt.before or created_at < flt.before)

    def expand(fused: list[Fused], rows: dict) -> tuple[list[Fused], dict]:
        seeds = {h.id: 1.0 for h in mem.store.text_candidates("entity", req.query, MAX_SEEDS, req.filter)}
        if not seeds:
            return fused, rows
        present = {row.get("entity_id") for row in rows.values()} | {f.id for f in fused if f.kind == "entity"}
        reached = sorted(spread(seeds, neighbours).items(), key=lambda kv: -kv[1])
        fresh = [(entity, act) for entity, act in reached if entity not in present][:MAX_NEW_ENTITIES]
        added = list(fused)
        for entity_id, activation in fresh:
            kept = [o for o in mem.store.observations_of(entity_id, scope, limit=10)
                    if o.trust == "trusted" and in_window(o.created_at)][:PER_ENTITY]
            fetched = mem.store.fetch_rows("observation", [o.id for o in kept])
            for obs in kept:
                if ("observation", obs.id) in rows or obs.id not in fetched:
                    continue
                score = SCALE * activation * obs.importance
                rows[("observation", obs.id)] = fetched[obs.id]
                added.append(Fused("observation", obs.id, score, {"associative": score}))
        added.sort(key=lambda f: f.score, reverse=True)
        return added, rows

    return expand
