"""`cuba-memorys reembed`: fill in missing embeddings (or redo all of them after a model change)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from cuba_memorys.errors import ModelUnavailable
from cuba_memorys.services.memory import Memory, passage_text

REEMBED_BATCH = 64
EMBEDDED_KINDS = ("observation", "episode")


def reembed(mem: Memory, *, everything: bool = False, limit: int | None = None,
            progress: Callable[[int], None] | None = None) -> dict:
    """Embed every observation that has no embedding (or all of them with ``everything``),
    or at most ``limit`` rows (cuba_zafra reembed: one call stays within its time limit).

    Works in batches, committing each, so an interrupted run keeps its progress.
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
        for batch in _missing_batches(mem, kind):
            if limit is not None:
                batch = batch[:max(0, limit - updated)]
                if not batch:
                    break
            texts = [_passage(label, content) for _, content, label in batch]
            vectors = embedder.embed_passages(texts)
            mem.store.set_embeddings(kind, [(seq, vec) for (seq, _, _), vec in zip(batch, vectors)],
                                     embedder.name, [content for _, content, _ in batch])
            updated += len(batch)
            if progress:
                progress(len(batch))
    return {"action": "reembed", "total_missing": total, "updated": updated, "model": embedder.name,
            "dim": embedder.dim}


def _passage(label: str, content: str) -> str:
    name, _, entity_type = label.rpartition("|")
    return passage_text(name, entity_type, content)


def _missing_batches(mem: Memory, kind: str) -> Iterator[list[tuple[int, str, str]]]:
    last = 0
    while True:
        batch = mem.store.rows_missing_embedding(kind, REEMBED_BATCH, after_seq=last)
        if not batch:
            return
        yield batch
        last = batch[-1][0]
