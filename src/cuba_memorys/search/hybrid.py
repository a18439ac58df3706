"""cuba_faro's hybrid mode: three branches fused by normalised scores.

Pipeline: text branch (word match + trigram, importance-weighted, as the original), vector
branch (cosine over passage embeddings, episodes appended), BM25 branch (stemmed terms), each
100 deep; weighted sum of min-max-normalised scores (chosen over the original's entropy-routed
RRF by measurement, see search/fusion.py); neighbour smoothing; word-overlap dedup; optional
associative expansion; pool; optional rerank; optional MMR; cut to ``limit``; exact cl100k
token budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cuba_memorys.models import Hit, SearchFilter
from cuba_memorys.search import entity_factoid
from cuba_memorys.search.format import (
    budget_rows,
    compact_row,
    row_content,
    verbose_row,
)
from cuba_memorys.search.fusion import (
    BRANCH_DEPTH,
    BRANCH_WEIGHTS,
    Fused,
    dedup,
    score_fusion,
    smooth_neighbours,
)
from cuba_memorys.search.mmr import mmr_order
from cuba_memorys.search.query_class import contains_words
from cuba_memorys.search.rerank import NO_RERANKER, rerank_order
from cuba_memorys.search.temporal import boost_in_window, implied_window
from cuba_memorys.storage.protocols import Store
from cuba_memorys.text import analyze, words

SCOPE_KINDS = {
    "all": ("entity", "observation", "episode", "error"),
    "entities": ("entity",),
    "observations": ("observation",),
    "errors": ("error",),
}
BM25_KINDS = ("observation", "entity", "error")
VECTOR_KINDS = ("observation", "episode")  # what the vector branch can score
RERANK_POOL = 50  # rerank=true: the rows reordered
# By default (issue 31: the late-interaction reranker, its passage cost paid at write time) the
# fused top rows reordered: chosen on the dev splits (docs/benchmarks.md, bench/rerank_study.py).
DEFAULT_RERANK_DEPTH = 10
# Observations whose token vectors the embedding queue has not stored yet that one search computes
# itself while the queue is busy; the others keep their fused place. Under eight agents writing on
# two cores the queue lags, and computing every fresh row's vectors was most of a search's time.
FRESH_TOKENS_PER_SEARCH = 2
SMOOTH_TOP = 30  # observations whose neighbours get a share of their score
TIME_BOOST_TOP = 200  # candidates checked against a time window the query implies
MMR_POOL_FACTOR = 5


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
    diversify: bool = False
    mmr_lambda: float = 0.7
    rerank: bool = False
    rerank_budget_s: float = 10.0
    rerank_depth: int = RERANK_POOL  # the fused rows a rerank reorders (DEFAULT_RERANK_DEPTH when by default)
    rerank_blend: float | None = None  # the reranker's share against the fused score (None: reranker alone)
    # observations without stored token vectors the reranker may compute (None: all of them);
    # services/search/faro.py sets FRESH_TOKENS_PER_SEARCH while the embedding queue is busy
    fresh_tokens: int | None = None
    associative: bool = False
    # the open session's first goal, as folded content words: matching rows are boosted
    goal_words: frozenset[str] = frozenset()
    # every goal of the open session: a row whose entity a goal names is boosted × 1.3
    session_goals: tuple[str, ...] = ()
    # run the entity-factoid leg (search/entity_factoid.py) if the query names an entity
    entity_factoid: bool = False


@dataclass
class SearchOutcome:
    results: list[dict]
    fused: list[Fused]
    rows: dict[tuple[str, str], dict]
    degraded_reason: str | None
    notes: dict = field(default_factory=dict)
    # Rows served, by kind, whose access counts the caller should record (testing effect). The
    # search itself only reads: the write is the caller's, after the answer has gone out.
    accessed: dict[str, list[str]] = field(default_factory=dict)


GOAL_BOOST = 0.3
GOAL_NAMES_ENTITY = 1.3  # the boost when a session goal names the row's entity (0.27)
FACTOID_SCOPES = ("all", "observations")  # the scopes the entity-factoid leg may serve


def _merge(lists: list[list[Hit]], limit: int) -> list[Hit]:
    merged = [hit for hits in lists for hit in hits]
    merged.sort(key=lambda h: h.score, reverse=True)
    return merged[:limit]


def _text_branch(store: Store, req: SearchRequest, kinds: tuple[str, ...], width: int,
                 tagged: list[Hit]) -> list[Hit]:
    hits = _merge([store.text_candidates(k, req.query, width, req.filter) for k in kinds], width)
    # Rows carrying an asked-for tag are exact matches of what the caller named: they lead
    # the text branch, the word matches follow.
    seen = {(h.kind, h.id) for h in tagged}
    return tagged + [h for h in hits if (h.kind, h.id) not in seen]


def _vector_branch(store: Store, query_vec: np.ndarray | None, req: SearchRequest,
                   kinds: tuple[str, ...], width: int) -> list[Hit]:
    if query_vec is None or "observation" not in kinds:
        return []
    hits = store.vector_candidates("observation", query_vec, width, req.filter)
    if "episode" in kinds:
        hits += store.vector_candidates("episode", query_vec, width, req.filter)
    return hits


def _bm25_branch(store: Store, req: SearchRequest, kinds: tuple[str, ...], width: int) -> list[Hit]:
    terms = analyze(req.query)
    lists = [store.bm25_candidates(k, terms, width, req.filter) for k in kinds if k in BM25_KINDS]
    return _merge(lists, width)


def _ids_by_kind(items: list[Fused]) -> dict[str, list[str]]:
    by_kind: dict[str, list[str]] = {}
    for item in items:
        by_kind.setdefault(item.kind, []).append(item.id)
    return by_kind


def _hydrate(store: Store, items: list[Fused]) -> dict[tuple[str, str], dict]:
    rows: dict[tuple[str, str], dict] = {}
    for kind, ids in _ids_by_kind(items).items():
        for row_id, row in store.fetch_rows(kind, ids).items():
            rows[(kind, row_id)] = row
    return rows


def _as_it_was(store: Store, rows: dict[tuple[str, str], dict], as_of: str) -> None:
    """Observation rows as the memory held them at ``as_of``: the text and type of the fact
    valid then, marked when that is not what the row says now (corrected or superseded since)."""
    ids = [row_id for kind, row_id in rows if kind == "observation" and "as_of" not in rows[(kind, row_id)]]
    for row_id, fact in store.facts_valid_at(ids, as_of).items():
        row = rows[("observation", row_id)]
        changed = fact["object"] != row["content"] or fact["predicate"] != row["observation_type"]
        row.update(content=fact["object"], observation_type=fact["predicate"],
                   as_of={"valid_from": fact["valid_from"], "valid_to": fact["valid_to"], "changed_since": changed})


def resolve_vec(query_vec):
    """A query vector (or None) from a vector or a Future of one."""
    result = getattr(query_vec, "result", None)
    return result() if callable(result) else query_vec


def pool_size(req: SearchRequest) -> int:
    if req.rerank:
        return max(req.rerank_depth, req.limit)
    if req.diversify:
        return MMR_POOL_FACTOR * req.limit
    return req.limit


def fuse(store: Store, query_vec: np.ndarray | None, req: SearchRequest) -> tuple[list[Fused], dict]:
    """Branches → score fusion → neighbour smoothing → hydrated, deduplicated rows, as deep as
    the pool needs (rows are fetched in slices, not all candidates at once)."""
    named = (entity_factoid.mentioned(store, req.query, req.filter)
             if req.entity_factoid and req.scope in FACTOID_SCOPES else [])
    # A factoid question about a named entity is answered by observations (0.27's rule).
    kinds = SCOPE_KINDS["observations" if named else req.scope]
    width = max(BRANCH_DEPTH, pool_size(req))
    tagged = (store.tag_candidates(req.filter.tags, width, req.filter)
              if req.filter.tags and "observation" in kinds else [])
    text = _text_branch(store, req, kinds, width, tagged)
    bm25 = _bm25_branch(store, req, kinds, width) if req.enable_bm25 else None
    # The lexical branches run first: the query embedding may still be computing in a worker
    # thread meanwhile (services/search.py), so its cost overlaps theirs.
    branches = {"text": text, "vector": _vector_branch(store, resolve_vec(query_vec), req, kinds, width)}
    if bm25 is not None:
        branches["bm25"] = bm25
    weights = BRANCH_WEIGHTS
    if named:
        branches[entity_factoid.BRANCH] = entity_factoid.leg(store, req.query, named, req.limit, req.filter)
        weights = {**BRANCH_WEIGHTS, entity_factoid.BRANCH: entity_factoid.WEIGHT}
    fused = score_fusion(branches, weights, {"vector": _without_vectors(store, branches, req)})
    leaders = [f.id for f in fused[:SMOOTH_TOP] if f.kind == "observation"]
    fused = smooth_neighbours(fused, store.adjacent_observations(leaders, req.filter))
    window = implied_window(req.query)
    if window:
        fused = boost_in_window(fused, _created(store, fused[:TIME_BOOST_TOP]), window)
    if tagged:
        # The caller named these tags: rows carrying one lead, in fused order; the rest follow.
        wanted = {h.id for h in tagged}
        fused.sort(key=lambda f: not (f.kind == "observation" and f.id in wanted))
    return _hydrate_deduped(store, fused, max(pool_size(req), req.limit), req.filter.as_of)


def _without_vectors(store: Store, branches: dict[str, list[Hit]], req: SearchRequest) -> set[tuple[str, str]]:
    """The lexical branches' observations and episodes that have no vector stored yet (the
    background queue's): the vector branch could not score them (see score_fusion). Asked only
    when the searched projects hold such rows, so a settled store pays one indexed probe."""
    if not branches.get("vector") or not store.has_unembedded(req.filter.scope):
        return set()
    scored = {(h.kind, h.id) for h in branches["vector"]}
    wanted: dict[str, list[str]] = {}
    for name, hits in branches.items():
        if name == "vector":
            continue
        for hit in hits:
            if hit.kind in VECTOR_KINDS and (hit.kind, hit.id) not in scored:
                wanted.setdefault(hit.kind, []).append(hit.id)
    return {(kind, row_id) for kind, ids in wanted.items()
            for row_id in store.unembedded_ids(kind, list(dict.fromkeys(ids)))}


def _created(store: Store, items: list[Fused]) -> dict[tuple[str, str], str]:
    return {(kind, row_id): when for kind, ids in _ids_by_kind(items).items()
            for row_id, when in store.created_times(kind, ids).items()}


def _hydrate_deduped(store: Store, fused: list[Fused], wanted: int,
                     as_of: str | None = None) -> tuple[list[Fused], dict]:
    rows: dict[tuple[str, str], dict] = {}
    kept: list[Fused] = []
    start = 0
    while len(kept) < wanted and start < len(fused):
        piece = fused[start:start + 2 * wanted]
        start += len(piece)
        rows.update(_hydrate(store, piece))
        if as_of:
            _as_it_was(store, rows, as_of)
        present = [f for f in kept + piece if f.key in rows]
        # An error is an occurrence, not a claim: four identical timeouts are four incidents (one
        # may hold the solution), so errors are never folded into each other as near-duplicates.
        kept = dedup(present, {f.key: row_content(f.kind, rows[f.key]) for f in present if f.kind != "error"})
    return kept, rows


def finish(store: Store, req: SearchRequest, fused: list[Fused], rows: dict, reranker=None) -> tuple[list[Fused], dict]:
    """Pool → rerank → MMR or cut. Returns the chosen rows and notes."""
    notes: dict = {}
    if req.goal_words or req.session_goals:
        fused = session_boost(fused, rows, req.goal_words, req.session_goals)
    pool = fused[: pool_size(req)]
    if req.rerank:
        head, why = _reranked(store, req, pool[: req.rerank_depth], rows, reranker)
        pool = head + pool[req.rerank_depth:]
        if why:
            notes["reranker_degraded"] = True
            notes["reranker_degraded_reason"] = why
    if req.diversify:
        order = mmr_order([f.score for f in pool], [row_content(f.kind, rows[f.key]) for f in pool],
                          req.mmr_lambda, req.limit)
        chosen = [pool[i] for i in order]
    else:
        chosen = pool[: req.limit]
    return chosen, notes


def session_boost(fused: list[Fused], rows: dict, goal_words: frozenset[str],
                  goals: tuple[str, ...] = ()) -> list[Fused]:
    """The original's session boost (0.27), re-sorted: × 1.3 when any goal of the open session
    names the row's entity (its words, in order, as whole words); otherwise
    × (1 + 0.3 · overlap / |goal words|) against the first goal's content words."""
    goal_tokens = [words(goal) for goal in goals]
    named: dict[str, bool] = {}
    for item in fused:
        row = rows[item.key]
        entity = _entity_of(item.kind, row)
        if entity and entity not in named:
            name_words = words(entity)
            named[entity] = any(contains_words(tokens, name_words) for tokens in goal_tokens)
        if entity and named[entity]:
            factor = GOAL_NAMES_ENTITY
        elif goal_words:
            overlap = len(goal_words & set(words(row_content(item.kind, row))))
            factor = 1 + GOAL_BOOST * overlap / len(goal_words)
        else:
            factor = 1.0
        if factor != 1.0:
            item.score *= factor
            item.branch_scores["session"] = round(factor, 6)
    return sorted(fused, key=lambda f: f.score, reverse=True)


def _entity_of(kind: str, row: dict) -> str:
    """The name of the entity a row is about ('' for an error, which belongs to none)."""
    if kind == "entity":
        return str(row.get("name") or "")
    return "" if kind == "error" else str(row.get("entity_name") or "")


def _reranked(store: Store, req: SearchRequest, pool: list[Fused], rows: dict,
              reranker) -> tuple[list[Fused], str | None]:
    """The pool in the reranker's order, or as fused with the reason it stays so."""
    if reranker is None:
        return pool, NO_RERANKER
    stored = stored_tokens(store, pool, reranker)
    slots = _rerankable(pool, stored, req.fresh_tokens)
    chosen = [pool[i] for i in slots]
    order, why = rerank_order(reranker, req.query, [row_content(f.kind, rows[f.key]) for f in chosen],
                              req.rerank_budget_s, None if stored is None else [stored[i] for i in slots],
                              prior=[f.score for f in chosen], blend=req.rerank_blend)
    if order is None:
        return pool, why
    out = list(pool)
    for slot, picked in zip(slots, order, strict=True):  # reordered among their own places
        out[slot] = chosen[picked]
    return out, None


def _rerankable(pool: list[Fused], stored: list[bytes | None] | None, limit: int | None) -> list[int]:
    """Places in ``pool`` the reranker reorders: all of them, but of the observations without
    stored token vectors only the first ``limit`` (the others keep their place)."""
    if stored is None or limit is None:
        return list(range(len(pool)))
    out, fresh = [], 0
    for i, item in enumerate(pool):
        if item.kind == "observation" and stored[i] is None:
            fresh += 1
            if fresh > limit:
                continue
        out.append(i)
    return out


def stored_tokens(store: Store, pool: list[Fused], reranker) -> list[bytes | None] | None:
    """The pool's token vectors as the store holds them (blobs the embedding queue wrote, in the
    reranker's own format; None where a row has none yet), for a reranker that reads them; None
    for one that does not."""
    if not getattr(reranker, "reads_stored_tokens", False):
        return None
    ids = [f.id for f in pool if f.kind == "observation"]
    blobs = store.token_vectors_of(ids) if ids else {}
    return [blobs.get(f.id) if f.kind == "observation" else None for f in pool]


def format_results(req: SearchRequest, chosen: list[Fused], rows: dict) -> list[dict]:
    make_row = compact_row if req.format == "compact" else verbose_row
    formatted = [make_row(f, rows[f.key], req.compact_chars) for f in chosen]
    return budget_rows(formatted, req.max_tokens, "c" if req.format == "compact" else "content")


def run_search(store: Store, embedder, req: SearchRequest, *, query_vec: np.ndarray | None = None,
               expand=None, reranker=None) -> SearchOutcome:
    """The whole pipeline. ``expand(fused, rows)`` may add associative hits (never removing any)."""
    degraded = None
    if embedder is None:
        degraded = "no embedding model is loaded; results come from the lexical branches only"
    elif query_vec is None:
        query_vec = embedder.embed_query(req.query)
    fused, rows = fuse(store, query_vec, req)
    if expand is not None:
        fused, rows = expand(fused, rows)
    chosen, notes = finish(store, req, fused, rows, reranker)
    accessed = ({kind: [f.id for f in chosen if f.kind == kind] for kind in ("observation", "entity")}
                if req.track_access else {})
    return SearchOutcome(results=format_results(req, chosen, rows), fused=chosen, rows=rows,
                         degraded_reason=degraded, notes=notes, accessed=accessed)
