"""cuba_reflexion analyze: what the knowledge graph is missing (spec §4f), each finding with a
one-sentence recommendation.

One aggregate read (every visible entity's degree and observation counts by type) and one of
the type pairs some relation joins; the five gaps are then picked in memory, so the cost is
one pass over the entities whatever their number.
"""

from __future__ import annotations

import math
from itertools import combinations

from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.reasoning_rows import EntityProfileRow

ISOLATED_TOP = 20
UNDERCONNECTED_IMPORTANCE, UNDERCONNECTED_DEGREE, UNDERCONNECTED_TOP = 0.4, 3, 10
GAP_FACTS, GAP_TOP = 3, 10
Z_LIMIT, Z_STD_FLOOR, ANOMALY_TOP = 2.0, 1.0, 10


def analyze(mem: Memory, client: str | None) -> dict:
    scope = mem.scope(client)
    profiles = mem.store.entity_profiles(scope)  # most important first
    gaps = {
        "isolated_entities": isolated(profiles),
        "underconnected_high_importance": underconnected(profiles),
        "type_silos": type_silos(profiles, mem.store.linked_type_pairs(scope)),
        "observation_gaps": observation_gaps(profiles),
        "density_anomalies": density_anomalies(profiles),
    }
    counts = {name: len(found) for name, found in gaps.items()}
    summary = {"entities": len(profiles), "relations_touching": sum(p["degree"] for p in profiles) // 2,
               **counts, "total_gaps": sum(counts.values())}
    return {"action": "analyze", "gaps": gaps, "summary": summary, "recommendations": recommendations(gaps)}


def isolated(profiles: list[EntityProfileRow]) -> list[dict]:
    return [{"name": p["name"], "entity_type": p["entity_type"]} for p in profiles if p["degree"] == 0][:ISOLATED_TOP]


def underconnected(profiles: list[EntityProfileRow]) -> list[dict]:
    return [{"name": p["name"], "importance": round(p["importance"], 4), "degree": p["degree"]} for p in profiles
            if p["importance"] > UNDERCONNECTED_IMPORTANCE and p["degree"] < UNDERCONNECTED_DEGREE][:UNDERCONNECTED_TOP]


def type_silos(profiles: list[EntityProfileRow], linked: list[tuple[str, str]]) -> list[dict]:
    """Pairs of (different) entity types present in the graph that no relation joins, either way."""
    present = sorted({p["entity_type"] for p in profiles})
    joined = {frozenset(pair) for pair in linked}
    return [{"type_a": a, "type_b": b} for a, b in combinations(present, 2) if frozenset((a, b)) not in joined]


def observation_gaps(profiles: list[EntityProfileRow]) -> list[dict]:
    """Entities with many facts but no decision or no lesson recorded: knowledge never distilled."""
    found = [p for p in profiles if p["facts"] > GAP_FACTS and (p["decisions"] == 0 or p["lessons"] == 0)]
    found.sort(key=lambda p: -p["facts"])  # stable: importance order among equals
    return [{"name": p["name"], "facts": p["facts"], "decisions": p["decisions"], "lessons": p["lessons"]}
            for p in found[:GAP_TOP]]


def _z_scores(values: list[int]) -> list[float]:
    """Population z-scores with the standard deviation floored at 1.0, so a near-uniform graph
    does not turn a difference of one row into an anomaly."""
    mean = sum(values) / len(values)
    std = max(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)), Z_STD_FLOOR)
    return [(v - mean) / std for v in values]


def density_anomalies(profiles: list[EntityProfileRow]) -> list[dict]:
    if not profiles:
        return []
    obs_z = _z_scores([p["obs_count"] for p in profiles])
    rel_z = _z_scores([p["degree"] for p in profiles])
    found = [(max(abs(o), abs(r)), p, o, r) for p, o, r in zip(profiles, obs_z, rel_z)
             if abs(o) > Z_LIMIT or abs(r) > Z_LIMIT]
    found.sort(key=lambda f: -f[0])
    return [{"name": p["name"], "obs_count": p["obs_count"], "rel_count": p["degree"],
             "obs_zscore": round(o, 3), "rel_zscore": round(r, 3)} for _, p, o, r in found[:ANOMALY_TOP]]


def recommendations(gaps: dict[str, list[dict]]) -> list[str]:
    """One sentence per finding, saying what to do about it."""
    out = [f"Relate '{g['name']}' to the entities it works with (cuba_puente create): it has no relations."
           for g in gaps["isolated_entities"]]
    out += [f"'{g['name']}' is important ({g['importance']}) but has only {g['degree']} relation(s); link it to"
            " what depends on it or what it uses." for g in gaps["underconnected_high_importance"]]
    out += [f"No relation joins a {g['type_a']} to a {g['type_b']}; record how they interact if they do."
            for g in gaps["type_silos"]]
    out += [f"'{g['name']}' has {g['facts']} facts but {_missing(g)}; record what was decided or learned about it."
            for g in gaps["observation_gaps"]]
    out += [f"'{g['name']}' is unusually dense ({g['obs_count']} observations, {g['rel_count']} relations);"
            " consider summarizing it or splitting it into narrower entities." for g in gaps["density_anomalies"]]
    return out


def _missing(gap: dict) -> str:
    absent = [kind for kind in ("decisions", "lessons") if gap[kind] == 0]
    return "no " + " and no ".join(absent)
