"""cuba_juez (judge pairs of stored observations, cached), cuba_contradiccion (scan for
contradictions) and auto_extract's supersede_conflicts, all on the verify judge chain.

Bands and scores are the original's: juez scans pairs whose embeddings are ambiguous (cosine
0.6–0.8, at most CUBA_JUEZ_MAX_PAIRS = 5); contradiccion looks at cosine 0.3–0.85 and scores
cos × 1.5 with a negation mismatch, × 0.7 without. One addition: pairs the heuristic finds in
plain conflict ("we use X" / "we do not use X") are always candidates, because e5 puts such
pairs above 0.85 where the band alone would never look.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.judge.base import Judge
from cuba_memorys.judge.chain import JudgeChain
from cuba_memorys.judge.heuristic import clear_conflict, rule_of
from cuba_memorys.models import Observation
from cuba_memorys.services import validate
from cuba_memorys.services.embedding_queue import embed_now
from cuba_memorys.services.graph.entities import find_entity
from cuba_memorys.services.lifecycle import facts
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import VerifyJudgmentRow
from cuba_memorys.text import has_negation

JUEZ_BAND = (0.6, 0.8)
CONTRADICTION_BAND = (0.3, 0.85)
CONTRADICTION_JUDGED = 10  # pairs of one scan the judge chain looks at, best-scored first
SCAN_ENTITIES = 10  # entities scanned when none is named
MAX_OBSERVATIONS = 200  # per entity: pairs grow with the square


def _judgment(verdict) -> dict:
    out = {"verdict": verdict.verdict, "confidence": round(verdict.confidence, 4), "reason": verdict.reason,
           "backend": verdict.backend, "model": verdict.model}
    if verdict.rule:
        out["rule"] = verdict.rule
    return out


def _stored(row: VerifyJudgmentRow) -> dict[str, Any]:
    out = {"verdict": row["verdict"], "confidence": row["confidence"], "reason": row["reason"],
           "backend": row["backend"], "model": row["model"]}
    rule = rule_of(row["reason"]) if row["backend"] == "heuristic" else None
    if rule:  # the cache keeps the reason, whose opening names the text rule
        out["rule"] = rule
    return out


def _judge_pair(mem: Memory, chain: JudgeChain, a: Observation, b: Observation) -> tuple[dict, bool]:
    """(judgment, cached). A cached ``unknown`` is judged again: a better judge may be here now."""
    return _judge_pairs(mem, chain, [(a, b)])[0]


def _judge_pairs(mem: Memory, chain: JudgeChain,
                 pairs: list[tuple[Observation, Observation]]) -> list[tuple[dict, bool]]:
    """(judgment, cached) per pair; the pairs not cached are judged together (side by side when
    the judge runs out of process), older observation first."""
    out: list[tuple[dict, bool] | None] = []
    todo: list[tuple[int, Observation, Observation]] = []
    for a, b in pairs:
        cached = mem.store.get_judgment(a.id, b.id)
        if cached and cached["verdict"] != "unknown":
            out.append((_stored(cached), True))
        else:
            out.append(None)
            older, newer = sorted((a, b), key=lambda o: o.created_at)
            todo.append((len(out) - 1, older, newer))
    verdicts = chain.judge_pairs([(older.content, newer.content) for _, older, newer in todo])
    for (slot, older, newer), verdict in zip(todo, verdicts, strict=True):
        mem.store.put_judgment(older.id, newer.id, verdict.verdict, verdict.confidence, verdict.reason,
                               verdict.backend, verdict.model)
        out[slot] = (_judgment(verdict), False)
    return [item for item in out if item is not None]


def _observation(mem: Memory, client: str | None, param: str, value: object) -> Observation:
    obs_id = validate.text(param, value, high=100)
    found = mem.store.get_observation(obs_id, mem.scope(client))
    if found is None:
        raise NotFound(f"observation {obs_id} not found", hint="Use an id returned by cuba_faro or cuba_cronica list.")
    return found


def judge_pair(mem: Memory, client: str | None, observation_a: object, observation_b: object,
               sampler: Judge | None = None) -> dict:
    """cuba_juez judge_pair, by the judge chain (an NLI model, else ``sampler``, the client's
    model, else the heuristic); cached per pair."""
    chain = mem.judge_chain(sampler)
    a = _observation(mem, client, "observation_a", observation_a)
    b = _observation(mem, client, "observation_b", observation_b)
    if a.id == b.id:
        raise InvalidInput("observation_b", "must differ from observation_a")
    judgment, cached = _judge_pair(mem, chain, a, b)
    return {"action": "judge_pair", "cached": cached, "observation_a": a.id, "observation_b": b.id,
            "judgment": judgment}


def _pairs(mem: Memory, observations: list[Observation], band: tuple[float, float]):
    """(a, b, cosine) for every pair of embedded observations, cosine within ``band``. Rows the
    background queue has not embedded yet are embedded now (a few at most, embed_now), so a scan
    right after a batch write pairs them as it will once settled."""
    ids = [o.id for o in observations]
    fresh = embed_now(mem, "observation", ids)
    vectors = {**mem.store.observation_vectors([i for i in ids if i not in fresh]), **fresh}
    embedded = [o for o in observations if o.id in vectors]
    if len(embedded) < 2:
        return []
    matrix = np.vstack([vectors[o.id] for o in embedded])
    cos = matrix @ matrix.T
    return [(embedded[i], embedded[j], float(cos[i, j]))
            for i, j in itertools.combinations(range(len(embedded)), 2)
            if band[0] <= cos[i, j] <= band[1]]


def scan_entity(mem: Memory, client: str | None, entity_name: object, max_pairs: object = None,
                sampler: Judge | None = None) -> dict:
    chain = mem.judge_chain(sampler)
    entity = find_entity(mem, client, validate.text("entity_name", entity_name, high=200))
    clamps = validate.Clamps()
    limit = clamps.integer("max_pairs", max_pairs, 1, 50, mem.settings.juez_max_pairs)
    observations = mem.store.observations_of(entity.id, mem.scope(client), limit=MAX_OBSERVATIONS)
    pairs = sorted(_pairs(mem, observations, JUEZ_BAND), key=lambda p: -p[2])[:limit]
    results, calls, hits = [], 0, 0
    judged = _judge_pairs(mem, chain, [(a, b) for a, b, _ in pairs])
    for (a, b, cosine), (judgment, cached) in zip(pairs, judged, strict=True):
        hits, calls = hits + cached, calls + (not cached)
        results.append({"observation_a": a.id, "observation_b": b.id, "cosine_sim": round(cosine, 4),
                        "cached": cached, "judgment": judgment})
    return clamps.note({"action": "scan_entity", "entity_name": entity.name, "backend": chain.backend,
                        "ambiguous_band": list(JUEZ_BAND), "llm_calls": calls, "cache_hits": hits,
                        "results": results})


def _may_conflict(cosine: float | None, a: Observation, b: Observation) -> bool:
    """A pair worth judging for a conflict: cosine in the contradiction band, or a plain conflict
    the heuristic sees (e5 scores "use X" / "do not use X" above the band)."""
    in_band = cosine is not None and CONTRADICTION_BAND[0] <= cosine <= CONTRADICTION_BAND[1]
    return in_band or bool(clear_conflict(a.content, b.content))


def _candidates(mem: Memory, observations: list[Observation]) -> list[dict]:
    by_pair = {(a.id, b.id): (a, b, c) for a, b, c in _pairs(mem, observations, CONTRADICTION_BAND)}
    for a, b in itertools.combinations(observations, 2):
        if (a.id, b.id) not in by_pair and _may_conflict(None, a, b):
            by_pair[(a.id, b.id)] = (a, b, None)
    out = []
    for a, b, cosine in by_pair.values():
        negation = has_negation(a.content) != has_negation(b.content)
        score = (cosine if cosine is not None else 1.0) * (1.5 if negation else 0.7)
        out.append({"observation_a": {"id": a.id, "content": a.content},
                    "observation_b": {"id": b.id, "content": b.content},
                    "cosine_similarity": None if cosine is None else round(cosine, 4),
                    "negation_detected": negation, "contradiction_score": round(score, 4),
                    "_pair": (a, b)})
    return sorted(out, key=lambda c: -c["contradiction_score"])


def scan_contradictions(mem: Memory, client: str | None, entity_name: object = None,
                        sampler: Judge | None = None) -> dict:
    chain = mem.judge_chain(sampler)
    if entity_name is None:
        entities, name = mem.store.top_entities(mem.scope(client), SCAN_ENTITIES), None
    else:
        entity = find_entity(mem, client, validate.text("entity_name", entity_name, high=200))
        entities, name = [entity], entity.name
    candidates = []  # every entity's best pairs, judged in one batch (one time limit for a slow judge)
    for entity in entities:
        observations = mem.store.observations_of(entity.id, mem.scope(client), limit=MAX_OBSERVATIONS)
        candidates.extend(_candidates(mem, observations)[:CONTRADICTION_JUDGED])
    judged = _judge_pairs(mem, chain, [c.pop("_pair") for c in candidates])
    found = []
    for candidate, (judgment, _) in zip(candidates, judged, strict=True):
        verdict = judgment["verdict"]
        if verdict == "contradicts" or (candidate["negation_detected"] and verdict == "unknown"):
            found.append(candidate | {"judgment": judgment})
    found.sort(key=lambda c: -c["contradiction_score"])
    return {"action": "scan", "entity_name": name, "contradictions": found, "count": len(found)}



SUPERSEDE_JUDGED = 10  # pairs one auto_extract call may judge, most similar first


def supersede_by(mem: Memory, client: str | None, chain: JudgeChain, new_ids: list[str]) -> list[dict]:
    """Mark superseded the stored observations that new ones replace (auto_extract's
    supersede_conflicts): each new observation is paired with the other live observations of its
    entity whose cosine lies in the original's 0.30–0.85 band, or that the heuristic finds in
    plain conflict; a pair judged ``contradicts`` or ``supersedes`` retires the older row."""
    scope, fresh = mem.scope(client), set(new_ids)
    pairs = []
    for new in filter(None, (mem.store.get_observation(i, scope) for i in dict.fromkeys(new_ids))):
        others = [o for o in mem.store.observations_of(new.entity_id, scope, limit=MAX_OBSERVATIONS)
                  if o.id not in fresh]
        vectors = mem.store.observation_vectors([new.id, *(o.id for o in others)])
        for old in others:
            cosine = float(vectors[new.id] @ vectors[old.id]) if {new.id, old.id} <= vectors.keys() else None
            if _may_conflict(cosine, old, new):
                pairs.append((1.0 if cosine is None else cosine, old, new))
    retired: list[dict] = []
    chosen = sorted(pairs, key=lambda p: -p[0])[:SUPERSEDE_JUDGED]
    judged = _judge_pairs(mem, chain, [(old, new) for _, old, new in chosen])
    for (_, old, new), (judgment, _) in zip(chosen, judged, strict=True):
        if any(r["id"] == old.id for r in retired):
            continue
        if judgment["verdict"] in ("contradicts", "supersedes"):
            facts.supersede(mem, [old.id], new.id, "supersede_conflicts")
            retired.append({"id": old.id, "content": old.content, "superseded_by": new.id, "judgment": judgment})
    return retired
