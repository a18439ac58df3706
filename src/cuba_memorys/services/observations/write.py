"""cuba_cronica: observations (add, batch_add, list, delete) with write-time dedup."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import (
    MAX_BATCH,
    MAX_NAME_CHARS,
    SOURCES,
    TRUST_LEVELS,
    WRITABLE_OBSERVATION_TYPES,
    NewObservation,
    Observation,
)
from cuba_memorys.services import audit, reminders, validate
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.graph.entities import ensure_entity, find_entity
from cuba_memorys.services.lifecycle import facts, undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.text import (
    extract_tags,
    importance_prior,
    information_density,
    same_claim,
    trigram_similarity,
    word_overlap,
)

DUPLICATE_TRIGRAM = 0.85
REINFORCE_COSINE = 0.92
# e5 vectors of short texts sharing an entity prefix are all close ("We migrated from MySQL"
# vs "We adopted Kubernetes" score > 0.92), so reinforcement also needs nearly the same
# wording: losing a distinct fact is far worse than keeping a paraphrase.
REINFORCE_MIN_OVERLAP = 0.8
OVERLOAD_THRESHOLD = 50
EMBED_STEP = 32  # texts per model call when a caller follows the progress
Progress = Callable[[float, float | None, str | None], None]  # (done, total, message), as MCP reports it


@dataclass
class ObservationInput:
    entity_name: str
    content: str
    observation_type: str
    source: str
    created_at: str | None
    trust: str = "trusted"  # cuba_ingesta untrusted: stored quarantined, never searched
    anchors: list[code_anchors.NewAnchor] = field(default_factory=list)  # checked against the repository
    # False for a record that is no claim (the mcp-jsonl import's note of an original type): two
    # such notes may differ in one word and both matter, so it is written as it is, never merged
    # into a near-duplicate; its caller leaves out the ones stored already.
    dedup: bool = True


def parse_item(item: object, where: str, *, allow_secret: bool) -> ObservationInput:
    """Validate one observation (``where`` names it in errors, e.g. "observations[3]")."""
    if not isinstance(item, dict):
        raise InvalidInput(where, "must be an object with entity_name and content")
    prefix = f"{where}." if where else ""
    entity_name = validate.name(f"{prefix}entity_name", item.get("entity_name"))
    content = validate.text(f"{prefix}content", item.get("content"))
    validate.no_secret(f"{prefix}content", content, allow_secret)
    return ObservationInput(
        entity_name=entity_name,
        content=content,
        observation_type=validate.choice(f"{prefix}observation_type", item.get("observation_type"),
                                         WRITABLE_OBSERVATION_TYPES, default="fact"),
        source=validate.choice(f"{prefix}source", item.get("source"), SOURCES, default="agent"),
        created_at=validate.timestamp(f"{prefix}created_at", item.get("created_at")),
    )


def _candidates(mem: Memory, client: str | None, entity_id: str, content: str, trust: str) -> list[Observation]:
    """Stored rows of the entity that may state ``content`` already. A trusted write is not
    absorbed by a quarantined row (it would then never be searchable)."""
    candidates = mem.store.similar_content(entity_id, content, mem.scope(client))
    return [c for c in candidates if same_claim(c.content, content) and (trust != "trusted" or c.trust == "trusted")]


def _find_duplicate(mem: Memory, client: str | None, entity_id: str, content: str,
                    vector: np.ndarray | None, trust: str = "trusted") -> tuple[str, Observation] | None:
    """('duplicate' | 'reinforce', existing row) when ``content`` is already known."""
    candidates = _candidates(mem, client, entity_id, content, trust)
    for cand in candidates:
        if trigram_similarity(cand.content, content) > DUPLICATE_TRIGRAM:
            return "duplicate", cand
    if vector is None or not candidates:
        return None
    stored = mem.store.observation_vectors([c.id for c in candidates])
    for cand in candidates:
        other = stored.get(cand.id)
        if (other is not None and float(np.dot(other, vector)) > REINFORCE_COSINE
                and word_overlap(cand.content, content) >= REINFORCE_MIN_OVERLAP):
            return "reinforce", cand
    return None


def _store_one(mem: Memory, client: str | None, item: ObservationInput,
               vector: np.ndarray | None) -> tuple[str, str, dict]:
    """Write (or dedup) one observation; returns (outcome, id, details)."""
    entity = ensure_entity(mem, client, item.entity_name)
    found = _find_duplicate(mem, client, entity.id, item.content, vector, item.trust) if item.dedup else None
    if found is not None:
        outcome, existing = found
        if outcome == "reinforce":
            mem.store.reinforce_observation(existing.id, 0.05)
        code_anchors.store(mem, existing.id, existing.project_id, item.anchors)  # the claim it already holds
        return outcome, existing.id, {"existing_content": existing.content[:80]}
    state = mem.client(client)
    importance = importance_prior(item.observation_type, item.content)
    tags = extract_tags(item.content)
    obs_id = mem.store.add_observation(NewObservation(
        entity_id=entity.id, content=item.content, observation_type=item.observation_type,
        source=item.source, importance=importance, tags=tags, trust=item.trust, project_id=state.project_id,
        session_id=state.session_id, created_at=item.created_at,
        embedding=None if vector is None else np.asarray(vector, dtype=np.float32).tobytes(),
        embedding_model=None if vector is None else mem.loaded_embedder().name,
    ))
    facts.opened(mem, obs_id, entity, item.observation_type, item.content, importance, state.project_id,
                 item.created_at)
    code_anchors.store(mem, obs_id, state.project_id, item.anchors)
    return "added", obs_id, {"entity": entity, "importance": importance, "tags": tags}


def _vectors(mem: Memory, client: str | None, items: list[ObservationInput],
             entity_types: dict[str, str] | None = None, progress: Progress | None = None) -> list[np.ndarray | None]:
    """Embed before the write transaction, so the database is not locked while the model runs.
    ``entity_types``: the type an entity will be created with (it may not exist yet)."""
    types: dict[str, str] = dict(entity_types or {})
    for item in items:
        if item.entity_name not in types:
            entity = mem.store.get_entity(item.entity_name, mem.scope(client))
            types[item.entity_name] = entity.entity_type if entity else "concept"
    passages = [(i.entity_name, types[i.entity_name], i.content) for i in items]
    if progress is None:
        return mem.embed_passages(passages)
    vectors: list[np.ndarray | None] = []
    for start in range(0, len(passages), EMBED_STEP):  # in steps, so a long batch shows its progress
        progress(start, len(passages), "embedding")
        vectors.extend(mem.embed_passages(passages[start:start + EMBED_STEP]))
    return vectors


def _deciding_vectors(mem: Memory, client: str | None, items: list[ObservationInput],
                      entity_types: dict[str, str] | None = None, progress: Progress | None = None
                      ) -> list[np.ndarray | None]:
    """With the background queue: vectors only for the items whose vector decides how they are
    written — those that may reinforce a stored row (nearly the same words as one that has its
    vector, and no textual duplicate), as _find_duplicate decides; None for the others, which
    are written without one and queued. A row written earlier in the same batch (or still
    pending from another call) has no vector, so it can absorb a repeat only as a textual
    duplicate, as a row written without a model can."""
    entities: dict[str, str | None] = {}
    deciding = []
    for n, item in enumerate(items):
        if progress is not None and n % 100 == 0:
            progress(n, len(items), "checking for duplicates")
        if item.entity_name not in entities:
            entity = mem.store.get_entity(item.entity_name, mem.scope(client))
            entities[item.entity_name] = entity.id if entity else None
        entity_id = entities[item.entity_name]
        if entity_id is None or not item.dedup:
            continue
        candidates = _candidates(mem, client, entity_id, item.content, item.trust)
        if any(trigram_similarity(c.content, item.content) > DUPLICATE_TRIGRAM for c in candidates):
            continue
        close = [c.id for c in candidates if word_overlap(c.content, item.content) >= REINFORCE_MIN_OVERLAP]
        if close and mem.store.observation_vectors(close):
            deciding.append(n)
    vectors: list[np.ndarray | None] = [None] * len(items)
    for n, vector in zip(deciding, _vectors(mem, client, [items[n] for n in deciding], entity_types)):
        vectors[n] = vector
    return vectors


def add(mem: Memory, client: str | None, *, entity_name: object, content: object,
        observation_type: object = None, source: object = None, created_at: object = None,
        trust: object = None, allow_secret: bool = False, anchors: object = None) -> dict:
    received = time.perf_counter()
    item = parse_item({"entity_name": entity_name, "content": content,
                       "observation_type": observation_type, "source": source,
                       "created_at": created_at}, "", allow_secret=allow_secret)
    item.trust = validate.choice("trust", trust, TRUST_LEVELS, default="trusted")
    item.anchors = code_anchors.resolve(mem, "anchors", anchors)
    answer = _add(mem, client, item, received)
    if item.anchors:
        answer["anchors"] = [code_anchors.view_of(a) for a in item.anchors]
    elif answer.get("action") == "add" and "entity_name" in answer:
        proposed = code_anchors.propose(mem, client, item.content)
        if proposed:
            answer["proposed_anchors"] = proposed
    return reminders.attach(mem, client, "on_access", item.entity_name, answer)


def searchable(mem: Memory, received: float, ids: Sequence[str], written: Sequence[str]) -> dict:
    """The 0.25 keys: ``embedding`` (see :func:`embedding_state`) and ``write_to_searchable_ms``,
    the time from receiving the write until its transaction committed: the moment its rows are
    in the lexical indexes, and in the vector indexes too when ``embedding`` is "ready" (SQLite's
    in-memory index is updated as the commit returns). A "pending" row joins the vector indexes
    when the background queue has embedded it."""
    elapsed = round((time.perf_counter() - received) * 1000, 3)
    return {"embedding": embedding_state(mem, ids, written), "write_to_searchable_ms": elapsed}


def embedding_state(mem: Memory, ids: Sequence[str], written: Sequence[str]) -> str:
    """"ready" when a model is loaded and every row named by ``ids`` has its vector stored now;
    "pending" otherwise: no model, a row the background queue has not embedded yet, or a row
    absorbed by an older one that has none yet. ``written`` are the ids whose vector this call
    stored; the others are checked in the store (the queue may have finished already)."""
    if mem.embedder is None:
        return "pending"
    mine = set(written)
    others = [i for i in dict.fromkeys(ids) if i not in mine]
    stored = mem.store.observation_vectors(others) if others else {}
    return "ready" if all(i in stored for i in others) else "pending"


def _add(mem: Memory, client: str | None, item: ObservationInput, received: float) -> dict:
    (vector,) = _vectors(mem, client, [item])
    with mem.store.transaction():
        outcome, obs_id, details = _store_one(mem, client, item, vector)
    if outcome == "added" and vector is not None:
        mem.queue_tokens([obs_id])  # the reranker's token vectors, in the background (issue 31)
    status = searchable(mem, received, [obs_id], [obs_id] if outcome == "added" and vector is not None else [])
    if outcome == "duplicate":
        return {"action": "add", "deduplicated": True, "id": obs_id,
                "existing_content": details["existing_content"],
                "message": "An almost identical observation already exists on this entity; nothing was written.",
                **status}
    if outcome == "reinforce":
        return {"action": "add", "prediction_error": "reinforce", "reinforced_id": obs_id, "id": obs_id,
                "message": "A semantically equivalent observation exists; it was reinforced instead.", **status}
    count = len(mem.store.observations_of(details["entity"].id, mem.scope(client)))
    return {
        "action": "add", "id": obs_id, "entity_name": item.entity_name,
        "observation_type": item.observation_type,
        "information_density": information_density(item.content),
        "importance": details["importance"], "tags": details["tags"],
        "overload_warning": (f"'{item.entity_name}' now has {count} observations; consider"
                             " summarising or splitting it." if count > OVERLOAD_THRESHOLD else None),
        "superseded": 0,
        "embedded": vector is not None,
        **({"trust": item.trust} if item.trust != "trusted" else {}),
        **status,
    }


def batch_add(mem: Memory, client: str | None, observations: object, allow_secret: bool = False,
              progress: Progress | None = None) -> dict:
    """All items are validated before anything is written; the batch is one transaction.
    ``ids`` holds one id per input item, in input order (the existing row's id for a dup).
    The rows' vectors come from the background queue: ``embedding`` says "pending" until then
    (a single add embeds before it answers)."""
    if not isinstance(observations, list) or not observations:
        raise InvalidInput("observations", "must be a non-empty array of {entity_name, content, ...}")
    received = time.perf_counter()
    if len(observations) > MAX_BATCH:
        raise InvalidInput("observations", f"has {len(observations)} items", f"1..{MAX_BATCH} per call")
    items = [parse_item(o, f"observations[{i}]", allow_secret=allow_secret)
             for i, o in enumerate(observations)]
    for i, (item, raw) in enumerate(zip(items, observations)):
        item.anchors = code_anchors.resolve(mem, f"observations[{i}].anchors", raw.get("anchors"))
    answer, written = _write_batch(mem, client, items, progress=progress)
    if anchored := sum(len(i.anchors) for i in items):
        answer["anchors_stored"] = anchored
    answer = {"action": "batch_add", **answer, **searchable(mem, received, answer["ids"], written)}
    return reminders.attach(mem, client, "on_access", _entities(items), answer)


def store_batch(mem: Memory, client: str | None, items: list[ObservationInput], embed_now: bool = False,
                progress: Progress | None = None) -> dict:
    """Store validated items in one transaction (cuba_ingesta): the counts, one id per item in
    order, ``embedding`` (embedding_state), and the reminders the written entities fired.
    ``embed_now``: embed every row before writing, for a caller that reads their vectors next."""
    answer, written = _write_batch(mem, client, items, embed_now, progress)
    answer["embedding"] = embedding_state(mem, answer["ids"], written)
    return reminders.attach(mem, client, "on_access", _entities(items), answer)


def _entities(items: list[ObservationInput]) -> list[str]:
    return list(dict.fromkeys(i.entity_name for i in items))


@dataclass
class PreparedBatch:
    """Validated items with the vectors computed for them before any transaction (the model is
    never run while the store is held: cuba_memorys/locks.py)."""

    items: list[ObservationInput]
    vectors: list[np.ndarray | None]
    queued: bool  # the rows written without a vector go to the background queue
    prepared_share: float = 0.5  # of the progress reported, the preparation's part (the rest: writing)


def prepare_batch(mem: Memory, client: str | None, items: list[ObservationInput], embed_now: bool = False,
                  entity_types: dict[str, str] | None = None, progress: Progress | None = None) -> PreparedBatch:
    """The vectors a batch needs, computed now, outside any transaction. With the background
    queue (services/embedding_queue.py) only the items whose vector decides how they are
    written are embedded first; the others are written without one and queued once committed.
    Without it (CUBA_EMBED_QUEUE=off, or ``embed_now``) every item is embedded first."""
    queued = mem.queues_embeddings and not embed_now
    share = 0.5 if queued else 0.9  # embedding every row is most of the work; checking for duplicates, half
    staged = _stage(progress, 0.0, share)
    vectors = (_deciding_vectors(mem, client, items, entity_types, staged) if queued
               else _vectors(mem, client, items, entity_types, staged))
    return PreparedBatch(items, vectors, queued, share)


def _stage(progress: Progress | None, start: float, share: float) -> Progress | None:
    """``progress`` for one stage of a batch: its (done, total) mapped into [start, start + share]
    of the total, so the reports of all stages only ever increase (as MCP requires)."""
    if progress is None:
        return None

    def report(done: float, total: float | None, message: str | None = None) -> None:
        if total:
            progress(round(total * (start + share * done / total), 1), total, message)

    return report


def commit_batch(mem: Memory, client: str | None, batch: PreparedBatch,
                 progress: Progress | None = None) -> tuple[dict, list[str], list[str]]:
    """Write a prepared batch in one transaction (a savepoint inside the caller's): the counts
    and ids, the ids added with their vector, and those added without one (for the queue, which
    the caller hands them to once the outermost transaction has committed)."""
    tally = {"added": 0, "duplicate": 0, "reinforce": 0}
    ids: list[str] = []
    written: list[str] = []  # added with their vector
    bare: list[str] = []  # added without one: the queue's
    staged = _stage(progress, batch.prepared_share, 1 - batch.prepared_share)
    with mem.store.transaction():
        for n, (item, vector) in enumerate(zip(batch.items, batch.vectors)):
            if staged is not None and n % 100 == 0:
                staged(n, len(batch.items), "writing")
            outcome, obs_id, _ = _store_one(mem, client, item, vector)
            tally[outcome] += 1
            ids.append(obs_id)
            if outcome == "added":
                (written if vector is not None else bare).append(obs_id)
    if progress is not None and batch.items:
        progress(len(batch.items), len(batch.items), "written")
    return {"added": tally["added"], "deduplicated": tally["duplicate"], "reinforced": tally["reinforce"],
            "total_processed": len(batch.items), "ids": ids}, written, bare


def _write_batch(mem: Memory, client: str | None, items: list[ObservationInput], embed_now: bool = False,
                 progress: Progress | None = None) -> tuple[dict, list[str]]:
    """Prepare (embed what must be embedded first), write in one transaction, queue the rest.
    ``progress``: told how far it got (an MCP progress token, a CLI bar)."""
    batch = prepare_batch(mem, client, items, embed_now, progress=progress)
    answer, written, bare = commit_batch(mem, client, batch, progress)
    hand_over(mem, batch, written, bare)
    return answer, written


def hand_over(mem: Memory, batch: PreparedBatch, written: list[str], bare: list[str]) -> None:
    """After the commit: rows written without a vector go to the queue for their vector (and
    token vectors); rows written with one, for the reranker's token vectors only (issue 31)."""
    if batch.queued:
        mem.queue_embeddings("observation", bare)
    mem.queue_tokens(written)


def delete(mem: Memory, client: str | None, observation_id: object = None, id: object = None) -> dict:
    """cuba_cronica delete; ``id`` is the original's alias of ``observation_id``."""
    observation_id = validate.text("observation_id", observation_id or id, high=64)
    if mem.store.get_observation(observation_id, mem.scope(client)) is None:
        raise NotFound(f"Observation '{observation_id}' not found.",
                       hint="List an entity's observations with cuba_cronica action=list.")
    with mem.store.transaction():
        # `cuba-memorys undo FILE` puts the row back, with its facts and their links
        path = undo.save(mem, "delete", undo.observation_history(mem, [observation_id])[0])
        mem.store.delete_observation(observation_id)
        audit_id = audit.record(mem, client, "memory.delete", {"observation_id": observation_id,
                                                               "undo_file": path.name})
    return {"action": "delete", "deleted_id": observation_id, "undo_file": str(path), "audit_id": audit_id}


def list_for(mem: Memory, client: str | None, entity_name: object) -> dict:
    entity_name = validate.text("entity_name", entity_name, high=MAX_NAME_CHARS)
    entity = find_entity(mem, client, entity_name)
    rows = mem.store.observations_of(entity.id, mem.scope(client))
    return reminders.attach(mem, client, "on_access", entity.name, {
        "action": "list", "entity_name": entity.name, "count": len(rows), "observations": [
            {"id": o.id, "content": o.content, "type": o.observation_type, "importance": round(o.importance, 4),
             "source": o.source, "access_count": o.access_count, "created_at": o.created_at}
            for o in rows]})
