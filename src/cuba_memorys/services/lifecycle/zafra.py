"""cuba_zafra: maintenance of the memory.

decay and decay_episodes apply the formulas of services/lifecycle/decay.py; prune deletes
observations below an importance threshold (a dry run unless ``confirm``; an undo file is
written first); merge and summarize retire rows as ``superseded`` — kept, out of search,
their facts closed, undoable from the undo file they write. Every change that deletes or
retires rows appends an audit event.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from cuba_memorys.errors import InvalidInput, ModelUnavailable
from cuba_memorys.models import MAX_NAME_CHARS, PERMANENT_TYPES, NewObservation, Observation, Scope, iso, utc_now
from cuba_memorys.services import audit, validate
from cuba_memorys.services.admin import reembed as reembedding
from cuba_memorys.services.graph.entities import find_entity
from cuba_memorys.services.lifecycle import decay as formulas
from cuba_memorys.services.lifecycle import facts, undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.text import extract_tags, trigram_similarity

MAX_MERGE_PAIRS = 100  # the original's cap per call
MAX_SCANNED_ROWS = 20_000  # merge / find_duplicates compare rows of one entity pairwise
MAX_ROWS_PER_ENTITY = 500
DUPLICATE_THRESHOLD = 0.7
PREVIEW_ROWS = 50


def _own(mem: Memory, client: str | None) -> Scope:
    """The rows maintenance may change: with a project active, that project's only; rows of no
    project are shared by every project, and one project's maintenance must not prune or retire
    them (with no project active, every row)."""
    return mem.scope(client, include_unscoped=False)


def _positive(param: str, value: object, default: float | None, high: float) -> float | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
        raise InvalidInput(param, f"must be a number above 0 and at most {high:g}, got {value!r}")
    return float(value)


# -- decay ---------------------------------------------------------------------------------
def decay(mem: Memory, client: str | None, *, halflife_days: object = None) -> dict:
    halflife = _positive("halflife_days", halflife_days, None, 36_500)
    # Protected as in the cycle (the rule: rows the agent is working on right now never
    # decay), although the original's explicit decay skips the protection.
    done = formulas.decay_observations(mem, client, halflife_days=halflife, protect=True)
    strata: dict[str, object] = {t: halflife or h for t, h in formulas.HALFLIFE_DAYS.items()}
    strata.update(dict.fromkeys(PERMANENT_TYPES, "never"))
    return {"action": "decay", "decayed": done["decayed"], "project_scoped": mem.project_scoped(client),
            "stratification": {"halflife_days": strata, "decayed_by_type": done["by_type"]},
            "formula": formulas.FORMULA, "testing_effect": formulas.TESTING_EFFECT,
            "protected_entities": done["protected_entities"]}


def decay_episodes(mem: Memory, client: str | None, *, c: object = None, beta: object = None) -> dict:
    c_value = _positive("c", c, 0.1, 100) or 0.1
    beta_value = _positive("beta", beta, 0.5, 10) or 0.5
    done = formulas.decay_episodes(mem, client, c=c_value, beta=beta_value)
    return {"action": "decay_episodes", "decayed": done["decayed"],
            "formula": f"max(0.01, 0.5 / (1 + {c_value:g} × days)^{beta_value:g})", "c": c_value, "beta": beta_value}


# -- prune ---------------------------------------------------------------------------------
def prune(mem: Memory, client: str | None, *, threshold: object = None, confirm: object = False) -> dict:
    limit = _positive("threshold", threshold, 0.1, 1.0) or 0.1
    confirmed = validate.flag("confirm", confirm, False)
    rows = mem.store.low_importance(_own(mem, client), limit)
    by_project: dict[str, int] = defaultdict(int)
    for row in rows:
        by_project[row["project"] or "(global)"] += 1
    answer = {"action": "prune", "dry_run": not confirmed, "threshold": limit,
              "by_project": [{"project": p, "observations": n} for p, n in sorted(by_project.items())],
              "project_scoped": mem.project_scoped(client)}
    if not confirmed:
        preview = [{"id": r["id"], "entity": r["entity_name"], "type": r["observation_type"],
                    "importance": round(r["importance"], 4), "content": r["content"][:100]} for r in rows]
        return {**answer, "would_prune": len(rows), "rows": preview[:PREVIEW_ROWS],
                "hint": "Nothing was deleted. Call again with confirm=true to delete these rows; an undo file is"
                        " written first (cuba-memorys undo FILE restores them)."}
    ids = [r["id"] for r in rows]
    if not ids:
        return {**answer, "pruned": 0}
    with mem.store.transaction():
        path = undo.save(mem, "prune", undo.observation_history(mem, ids)[0])
        for obs_id in ids:
            mem.store.delete_observation(obs_id)
        audit_id = audit.record(mem, client, "memory.prune", {"count": len(ids), "threshold": limit, "ids": ids,
                                                              "undo_file": str(path)})
    return {**answer, "pruned": len(ids), "undo_file": str(path), "audit_id": audit_id}


# -- merge and duplicates ------------------------------------------------------------------
def _similar_pairs(rows: list[Observation], threshold: float) -> list[tuple[float, Observation, Observation]]:
    """Pairs of one entity's rows whose trigram similarity is above ``threshold``, most similar
    first; in each pair the older row comes first. Only rows of the same type and trust pair up:
    a quarantined row must not retire a trusted one (which would vanish from search), nor a fact
    a decision (which would lose its protection from decay and prune)."""
    by_entity: dict[tuple[str, str, str], list[Observation]] = defaultdict(list)
    for row in rows:
        by_entity[(row.entity_id, row.observation_type, row.trust)].append(row)
    pairs = []
    for group in by_entity.values():
        group = group[:MAX_ROWS_PER_ENTITY]
        for i, first in enumerate(group):
            for second in group[i + 1:]:
                score = trigram_similarity(first.content, second.content)
                if score > threshold:
                    pairs.append((score, first, second))
    pairs.sort(key=lambda p: -p[0])
    return pairs


def merge(mem: Memory, client: str | None, *, similarity_threshold: object = None) -> dict:
    threshold = _positive("similarity_threshold", similarity_threshold, 0.8, 1.0) or 0.8
    rows = mem.store.content_rows(_own(mem, client), None, MAX_SCANNED_ROWS)
    retired: dict[str, str] = {}  # superseded id → the row kept
    for _, kept, dropped in _similar_pairs(rows, threshold):
        if len(retired) >= MAX_MERGE_PAIRS:
            break
        if kept.id in retired or dropped.id in retired:
            continue
        retired[dropped.id] = kept.id
    answer = {"action": "merge", "merged": len(retired), "threshold": threshold,
              "project_scoped": mem.project_scoped(client),
              "pairs": [{"superseded": d, "kept": k} for d, k in retired.items()]}
    if not retired:
        return answer
    now = iso(utc_now())
    ids = list(retired)
    with mem.store.transaction():
        history, links = undo.observation_history(mem, ids)
        path = undo.save(mem, "merge", history, created=links)
        for old_id, kept_id in retired.items():
            facts.supersede(mem, [old_id], kept_id, "merged", now)
        audit_id = audit.record(mem, client, "memory.merge", {"pairs": answer["pairs"], "threshold": threshold,
                                                              "undo_file": str(path)})
    return {**answer, "undo_file": str(path), "audit_id": audit_id}


def find_duplicates(mem: Memory, client: str | None) -> dict:
    rows = mem.store.content_rows(_own(mem, client), None, MAX_SCANNED_ROWS)
    pairs = _similar_pairs(rows, DUPLICATE_THRESHOLD)[:20]
    duplicates = [{"id_a": a.id, "id_b": b.id, "entity": a.entity_name, "content_a": a.content[:100],
                   "content_b": b.content[:100], "similarity": round(score, 4)} for score, a, b in pairs]
    return {"action": "find_duplicates", "duplicates": duplicates, "count": len(duplicates),
            "project_scoped": mem.project_scoped(client)}


# -- summarize -----------------------------------------------------------------------------
def summarize(mem: Memory, client: str | None, *, entity_name: object, compressed_summary: object,
              allow_secret: bool = False) -> dict:
    name = validate.text("entity_name", entity_name, high=MAX_NAME_CHARS)
    text = validate.text("compressed_summary", compressed_summary)
    validate.no_secret("compressed_summary", text, allow_secret)
    entity = find_entity(mem, client, name)
    rows = mem.store.content_rows(_own(mem, client), entity.id, MAX_SCANNED_ROWS)
    # Decisions and lessons are permanent knowledge: a summary does not retire them.
    replaced = [r for r in rows if r.observation_type not in PERMANENT_TYPES]
    if not replaced:
        raise InvalidInput("entity_name", f"'{entity.name}' has no observations a summary could replace"
                                          " (decisions and lessons are kept as they are)")
    (vector,) = mem.embed_passages([(entity.name, entity.entity_type, text)])
    ids = [r.id for r in replaced]
    now = iso(utc_now())
    importance = max(r.importance for r in replaced)
    state = mem.client(client)
    with mem.store.transaction():
        summary_id = mem.store.add_observation(NewObservation(
            entity_id=entity.id, content=text, observation_type="fact", source="consolidation",
            importance=importance, tags=extract_tags(text), project_id=state.project_id,
            session_id=state.session_id, embedding=None if vector is None else np.asarray(vector, np.float32).tobytes(),
            embedding_model=None if vector is None else mem.loaded_embedder().name))
        facts.opened(mem, summary_id, entity, "fact", text, importance, state.project_id, now)
        history, links = undo.observation_history(mem, ids)
        path = undo.save(mem, "summarize", history, created=[("observations", "id", [summary_id]), *links])
        facts.supersede(mem, ids, summary_id, "summarized", now)
        audit_id = audit.record(mem, client, "memory.summarize", {"entity_id": entity.id, "summary_id": summary_id,
                                                                  "replaced": ids, "undo_file": str(path)})
    return {"action": "summarize", "entity": entity.name, "superseded": len(ids),
            "project_scoped": mem.project_scoped(client),
            "summary_id": summary_id, "replaced": ids, "kept_permanent": len(rows) - len(replaced),
            "undo_file": str(path), "audit_id": audit_id}


# -- stats, export, reembed ----------------------------------------------------------------
def stats(mem: Memory, client: str | None) -> dict:
    return {"action": "stats", **mem.store.memory_stats(mem.scope(client)),
            "project_scoped": mem.project_scoped(client)}


def export(mem: Memory, client: str | None) -> dict:
    entities = mem.store.export_entities(mem.scope(client), 100_000)
    return {"action": "export", "count": len(entities), "entities": [
        {"id": e.id, "name": e.name, "type": e.entity_type, "importance": round(e.importance, 4)} for e in entities]}


def reembed(mem: Memory, client: str | None, *, batch_size: object = None, progress=None) -> dict:
    clamps = validate.Clamps()
    limit = clamps.integer("batch_size", batch_size, 1, 5000, 500)
    embedder = mem.embedder
    if embedder is None:
        return {"action": "reembed", "total_fetched": 0, "updated": 0, "model": None, "dim": None,
                "error": f"no embedding model is loaded: {mem.embedder_status.reason}"}
    missing = sum(mem.store.embedding_coverage(k)["missing"] for k in reembedding.EMBEDDED_KINDS)
    total = min(missing, limit)
    done = [0]

    def step(count: int) -> None:
        done[0] += count
        if progress is not None:
            progress(done[0], total, f"{done[0]} of {total} rows embedded")

    try:
        result = reembedding.reembed(mem, limit=limit, progress=step)
    except ModelUnavailable as exc:
        return {"action": "reembed", "total_fetched": 0, "updated": 0, "model": None, "dim": None, "error": str(exc)}
    left = missing - result["updated"]
    return clamps.note({"action": "reembed", "total_fetched": total, "updated": result["updated"],
                        "model": embedder.name, "dim": embedder.dim,
                        "note": f"{left} rows still lack an embedding; call again to continue." if left
                        else "Every row has an embedding."})
