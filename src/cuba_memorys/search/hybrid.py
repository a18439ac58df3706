"""cuba_faro's hybrid mode: three branches, routed by query entropy, fused with RRF.

Pipeline (spec §3): text branch (word match + trigram, importance-weighted), vector branch
(cosine over passage embeddings, episodes appended), BM25 branch (stemmed terms); RRF with
k=60; word-overlap dedup; cut to ``limit``; exact cl100k token budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models import Hit, SearchFilter
from ..storage.base import Store
from ..text import analyze
from .format import budget_rows, compact_row, row_content, verbose_row
from .fusion import Fused, dedup, route, rrf

SCOPE_KINDS = {
    "all": ("entity", "observation", "episode", "error"),
    "entities": ("entity",),
    "observations": ("observation",),
    "errors": ("error",),
}
BM25_KINDS = ("observation", "entity", "error")


@dataclass(frozen=True)
class SearchRequest:
    query: str
    scope: str = "all"
    limit: int = 10
    filter: SearchFilter = field(default_factory=SearchFilter)
    format: str = "compact"
    max_tokens: int = 5000
    enable_bm25: bool = True
    compact_chars: int = 1200
    track_access: bool = True


@dataclass
class SearchOutcome:
    results: list[dict]
    fused: list[Fused]
    rows: dict[tuple[str, str], dict]
    degraded_reason: str | None
    weights: dict[str, float]


def _merge(lists: list[list[Hit]], limit: int) -> list[Hit]:
    merged = [hit for hits in lists for hit in hits]
    merged.sort(key=lambda h: h.score, reverse=True)
    return merged[:limit]


def _text_branch(store: Store, req: SearchRequest, kinds: tuple[str, ...], width: int) -> list[Hit]:
    hits = _merge([store.text_candidates(k, req.query, width, req.filter) for k in kinds], width)
    if req.filter.tags and "observation" in kinds:
        seen = {(h.kind, h.id) for h in hits}
        hits += [h for h in store.tag_candidates(req.filter.tags, width, req.filter)
                 if (h.kind, h.id) not in seen]
    return hits


def _vector_branch(store: Store, embedder, req: SearchRequest, kinds: tuple[str, ...],
                   width: int) -> tuple[list[Hit], str | None]:
    if embedder is None:
        return [], "no embedding model is loaded; results come from the lexical branches only"
    if "observation" not in kinds:
        return [], None
    query_vec = embedder.embed_query(req.query)
    hits = store.vector_candidates("observation", query_vec, width, req.filter)
    if "episode" in kinds:
        hits += store.vector_candidates("episode", query_vec, width, req.filter)
    return hits, None


def _bm25_branch(store: Store, req: SearchRequest, kinds: tuple[str, ...], width: int) -> list[Hit]:
    terms = analyze(req.query)
    lists = [store.bm25_candidates(k, terms, width, req.filter) for k in kinds if k in BM25_KINDS]
    return _merge(lists, width)


def _hydrate(store: Store, fused: list[Fused]) -> dict[tuple[str, str], dict]:
    by_kind: dict[str, list[str]] = {}
    for item in fused:
        by_kind.setdefault(item.kind, []).append(item.id)
    rows: dict[tuple[str, str], dict] = {}
    for kind, ids in by_kind.items():
        for row_id, row in store.fetch_rows(kind, ids).items():
            rows[(kind, row_id)] = row
    return rows


def run_search(store: Store, embedder, req: SearchRequest) -> SearchOutcome:
    kinds = SCOPE_KINDS[req.scope]
    width = 2 * req.limit
    weights = route(req.query)
    branches = {"text": _text_branch(store, req, kinds, width)}
    branches["vector"], degraded = _vector_branch(store, embedder, req, kinds, width)
    if req.enable_bm25:
        branches["bm25"] = _bm25_branch(store, req, kinds, width)
    fused = rrf(branches, {"text": weights.text, "vector": weights.vector, "bm25": weights.bm25})
    rows = _hydrate(store, fused)
    fused = [f for f in fused if f.key in rows]
    fused = dedup(fused, {key: row_content(key[0], row) for key, row in rows.items()})[: req.limit]
    if req.track_access:
        store.record_access("observation", [f.id for f in fused if f.kind == "observation"])
        store.record_access("entity", [f.id for f in fused if f.kind == "entity"])
    make_row = compact_row if req.format == "compact" else verbose_row
    formatted = [make_row(f, rows[f.key], req.compact_chars) for f in fused]
    return SearchOutcome(
        results=budget_rows(formatted, req.max_tokens, "c" if req.format == "compact" else "content"),
        fused=fused, rows=rows, degraded_reason=degraded,
        weights={"text": weights.text, "vector": weights.vector, "bm25": weights.bm25},
    )
