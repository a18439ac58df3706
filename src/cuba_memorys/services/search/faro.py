"""cuba_faro: validate the request, run the hybrid search, shape the response."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import SearchFilter
from cuba_memorys.search.format import budget_rows
from cuba_memorys.search.hybrid import (
    DEFAULT_RERANK_DEPTH,
    FRESH_TOKENS_PER_SEARCH,
    RERANK_POOL,
    SCOPE_KINDS,
    SearchOutcome,
    SearchRequest,
    resolve_vec,
    run_search,
)
from cuba_memorys.search.ood import default_threshold
from cuba_memorys.search.query_class import classify
from cuba_memorys.search.selection import fold_tags, with_query_syntax
from cuba_memorys.services import validate
from cuba_memorys.services.code import search as code_search
from cuba_memorys.services.embedding_queue import wait_before_search
from cuba_memorys.services.graph.relations import neighbours
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.search.associative import expander
from cuba_memorys.services.search.ood import OodState, distance, threshold
from cuba_memorys.services.sessions.sessions import open_session
from cuba_memorys.storage.rows import SessionRow
from cuba_memorys.text import STOPWORDS, words

GRAPH_CONTEXT_ENTITIES = 3
GRAPH_CONTEXT_NEIGHBOURS = 5
# Tags select observations: with another scope a tag filter is ignored (0.26), and so is the
# associative expansion, which only adds observations.
OBSERVATION_SCOPES = ("all", "observations")


TAGS_CHARS = 2000


def _tags(tags: object) -> tuple[str, ...]:
    if tags is None:
        return ()
    if not isinstance(tags, str):
        raise InvalidInput("tags", "must be a string (comma-separated tags)")
    validate.no_nul("tags", tags, "comma-separated tags of ordinary text")
    if len(tags) > TAGS_CHARS:  # stored tags are single words: a filter this long can match nothing
        raise InvalidInput("tags", f"is {len(tags):,} characters long", f"at most {TAGS_CHARS:,} characters of"
                           " comma-separated tags")
    return fold_tags(tags.split(","))  # stored tags are folded: compare alike


def _number(param: str, value: object, low: float, high: float | None, default: float | None) -> float | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(param, f"must be a number, got {value!r}")
    if value < low or (high is not None and value > high):
        raise InvalidInput(param, f"{value} is out of range", f"{low}..{high}" if high is not None else f">= {low}")
    return float(value)


def build_request(mem: Memory, client: str | None, args: dict, clamps: validate.Clamps) -> SearchRequest:
    include_unscoped = validate.flag("include_unscoped", args.get("include_unscoped"), False)
    return SearchRequest(
        query=validate.text("query", args.get("query"), high=10_000),
        scope=validate.choice("scope", args.get("scope"), tuple(SCOPE_KINDS), default="all"),
        limit=clamps.integer("limit", args.get("limit"), 1, 50, 10),
        filter=SearchFilter(scope=mem.scope(client, include_unscoped),
                            after=validate.timestamp("after", args.get("after")),
                            before=validate.timestamp("before", args.get("before")),
                            tags=_tags(args.get("tags")),
                            as_of=validate.timestamp("as_of", args.get("as_of"))),
        format=validate.choice("format", args.get("format"), ("compact", "verbose"), default="compact"),
        max_tokens=clamps.integer("max_tokens", args.get("max_tokens"), 1, 1_000_000, 5000),
        enable_bm25=validate.flag("enable_bm25", args.get("enable_bm25"), True),
        compact_chars=mem.settings.compact_chars,
        track_access=validate.flag("track_access", args.get("track_access"), True),
        diversify=validate.flag("diversify", args.get("diversify"), False),
        mmr_lambda=clamps.number("mmr_lambda", args.get("mmr_lambda"), 0.0, 1.0, 0.7),
        **_rerank(mem, args.get("rerank")),
        rerank_budget_s=mem.settings.rerank_timeout_secs,
        associative=validate.flag("associative", args.get("associative"), False),
    )


def _rerank(mem: Memory, given: object) -> dict:
    """rerank and its depth: true reorders the top 50 with whatever reranker is configured (the
    cross-encoder wins); false none. Not given: the fused top DEFAULT_RERANK_DEPTH by the
    late-interaction reranker when it is the one in use (its passages' token vectors are computed at
    write time, issue 31), the top 50 in CUBA_MODE=completo, else none (a cross-encoder reads
    every passage at query time: too slow to run unasked)."""
    if given is not None:
        wanted = validate.flag("rerank", given, False)
        return {"rerank": wanted, "rerank_depth": RERANK_POOL}
    if mem.settings.mode == "completo":
        return {"rerank": True, "rerank_depth": RERANK_POOL}
    if mem.token_model() is not None:
        return {"rerank": True, "rerank_depth": DEFAULT_RERANK_DEPTH}
    return {"rerank": False, "rerank_depth": RERANK_POOL}


def faro(mem: Memory, client: str | None, **args: object) -> dict:
    """cuba_faro's hybrid search. Arguments as the tool's (query, scope, limit, after, before, as_of,
    tags, format, max_tokens, enable_bm25, diversify, mmr_lambda, abstain_ood, ood_threshold,
    rerank, associative, include_unscoped, track_access); mode=verify is ``verify.verify``."""
    unknown = set(args) - _ACCEPTED
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a cuba_faro parameter", ", ".join(sorted(_ACCEPTED)))
    clamps = validate.Clamps()
    request = build_request(mem, client, args, clamps)
    session = open_session(mem, client)
    if session and session["goals"]:
        request = replace(request, goal_words=frozenset(words(session["goals"][0])) - STOPWORDS,
                          session_goals=tuple(session["goals"]))
    # code:, after:, "phrase", … in the query (explicit arguments win); plain queries are untouched
    request, syntax_notes = with_query_syntax(request)
    request, tag_notes = _tags_for_scope(request)
    query_class = classify(request.query)
    request = replace(request, entity_factoid=mem.settings.entity_factoid and query_class == "factoid")
    abstain = validate.flag("abstain_ood", args.get("abstain_ood"), False)
    ood_arg = _number("ood_threshold", args.get("ood_threshold"), 0.0, None, None)
    query_vec = _embed_query_overlapped(mem, request.query)
    reranker = mem.reranker() if request.rerank else None
    if reranker is not None:
        reranker.prefetch_query(request.query, _RERANK_QUERY)  # beside the query's embedding
    wait_before_search(mem, request.filter.scope)  # a bounded wait for the vectors of queued rows
    if reranker is not None and mem.embedding_queue_busy():  # rows it has not reached: see hybrid.py
        request = replace(request, fresh_tokens=FRESH_TOKENS_PER_SEARCH)
    notes: dict = {**syntax_notes, **tag_notes, "query_class": query_class}
    if abstain:
        query_vec = resolve_vec(query_vec)
        verdict = _ood(mem, request, query_vec, ood_arg, notes)
        if verdict is not None:
            return clamps.note({**verdict, "query_class": query_class})
    expand = (expander(mem, client, request)
              if request.associative and request.scope in OBSERVATION_SCOPES else None)
    change = code_search.parse_context(mem, args.get("context"))
    if change is not None:
        expand = code_search.context_expander(mem, change, request.filter, SCOPE_KINDS[request.scope], expand)
    outcome = run_search(mem.store, mem.embedder, request, query_vec=query_vec, expand=expand, reranker=reranker)
    outcome, _ = code_search.mark_results(mem, client, outcome, change is not None)
    outcome = _within_budget(request, outcome)
    if change is not None:  # counted on what is served, after the budget
        notes["context_matches"] = sum(1 for row in outcome.results if row.get("from_context"))
    # Access counts are written after the answer, off the search's path: on PostgreSQL each
    # counted row is a new tuple version (with entries in every index when it cannot be HOT).
    if not mem.store.read_only:  # a standby serves the search; the counts are the primary's to keep
        mem.after_answer(_record_access, mem.store, outcome.accessed)
    response = _response(mem, client, request, outcome, notes)
    if session:
        _mark_new_since(mem, session, outcome, response)
    return clamps.note(response)


def _within_budget(request: SearchRequest, outcome: SearchOutcome) -> SearchOutcome:
    """The outcome cut to ``max_tokens`` again: the search kept its rows within the budget, then
    the anchored ones gained ``freshness`` and ``anchors`` (and were re-ranked), which cost
    tokens too. Rows past the budget are neither served nor counted as accessed."""
    content_key = "c" if request.format == "compact" else "content"
    results = budget_rows(outcome.results, request.max_tokens, content_key)
    if len(results) == len(outcome.results) and all(a is b for a, b in zip(results, outcome.results)):
        return outcome
    served = {f.key for f in outcome.fused[:len(results)]}
    accessed = {kind: [i for i in ids if (kind, i) in served] for kind, ids in outcome.accessed.items()}
    return replace(outcome, results=results, accessed=accessed)


def _tags_for_scope(request: SearchRequest) -> tuple[SearchRequest, dict]:
    """The request without its tag filter (the tags argument or category: in the query) when
    the scope is not one that holds observations, with the note saying so."""
    flt = request.filter
    if request.scope in OBSERVATION_SCOPES or not (flt.tags or flt.any_tags):
        return request, {}
    request = replace(request, filter=replace(flt, tags=(), any_tags=()))
    return request, {"tags_ignored_reason": f"tags select observations, so they are ignored with"
                                            f" scope={request.scope} (use scope=all or observations)"}


def _record_access(store, accessed: dict[str, list[str]]) -> None:
    for kind, ids in accessed.items():
        store.record_access(kind, ids)


# Two threads where there are two cores: eight agents searching at once on a shared daemon would
# otherwise queue their query embeddings behind one another in a single thread.
_MODEL_THREADS = max(1, min(2, os.cpu_count() or 1))
_QUERY_EMBEDDER = ThreadPoolExecutor(max_workers=_MODEL_THREADS, thread_name_prefix="cuba-query-embed")
# The late-interaction reranker's query vectors, started beside the query's embedding (their own
# thread: on two cores the two models run side by side, both while the lexical branches run).
_RERANK_QUERY = ThreadPoolExecutor(max_workers=_MODEL_THREADS, thread_name_prefix="cuba-rerank-query")


def _embed_query_overlapped(mem: Memory, query: str):
    """A Future of the query's embedding (None without a model). The model runs in C without
    the GIL, so it overlaps the lexical branches, which run first (search/hybrid.py: fuse);
    on a 2-core machine that hides most of the smaller of the two costs."""
    if mem.embedder is None:
        return None
    return _QUERY_EMBEDDER.submit(mem.embedder.embed_query, query)


_ACCEPTED = {"query", "scope", "limit", "before", "after", "as_of", "format", "tags", "max_tokens",
             "enable_bm25", "track_access", "diversify", "mmr_lambda", "abstain_ood", "ood_threshold",
             "rerank", "associative", "include_unscoped", "context"}


def _ood(mem: Memory, request: SearchRequest, query_vec, ood_arg: float | None, notes: dict) -> dict | None:
    """The abstain response when the query is out of distribution; otherwise None (and notes)."""
    if query_vec is None:
        notes["ood_skipped_reason"] = "no embedding model is loaded, so distribution cannot be judged"
        return None
    dist, why = distance(mem, mem.caches.setdefault("ood", OodState()), query_vec)
    if dist is None:
        notes["ood_skipped_reason"] = why
        return None
    limit, source = threshold(mem, ood_arg)
    if limit is None:
        notes.update({"ood": False, "mahalanobis_distance": round(dist, 4), "ood_skipped_reason": (
            "no calibrated threshold: run `cuba-memorys calibrate --dataset your-questions.jsonl --apply`,"
            f" set CUBA_OOD_THRESHOLD or pass ood_threshold (the sqrt(chi2_0.99(d)) default,"
            f" {default_threshold(mem.loaded_embedder().dim):.2f}, would refuse every question with this model)")})
        return None
    if dist <= limit:
        notes.update({"ood": False, "ood_threshold": round(limit, 4)})
        return None
    return {"mode": "hybrid", "query": request.query, "results": [], "count": 0, "ood": True,
            "mahalanobis_distance": round(dist, 4), "ood_threshold": round(limit, 4),
            "ood_threshold_source": source,
            "abstain_reason": (f"the query is out of this memory's distribution (Mahalanobis distance"
                               f" {dist:.2f} > threshold {limit:.2f}); nothing stored is about it"),
            "graphrag_context": []}


def _response(mem: Memory, client: str | None, request: SearchRequest, outcome: SearchOutcome,
              notes: dict) -> dict:
    response = {"mode": "hybrid", "query": request.query, "results": outcome.results,
                "count": len(outcome.results),
                "graphrag_context": _graph_context(mem, client, outcome)}
    if outcome.degraded_reason:
        response["degraded"] = True
        response["degraded_reason"] = outcome.degraded_reason
    elif (unembedded := _unembedded_share(mem)) is not None:
        response["degraded"] = True
        response["unembedded_share"] = round(unembedded, 4)
        remedy = ("the background queue is embedding them" if mem.embeddings_pending()
                  else "run `cuba-memorys reembed`")
        response["degraded_reason"] = (f"{unembedded:.0%} of the stored observations have no embedding yet, so"
                                       f" the vector branch cannot find them: {remedy}")
    if pending := mem.embeddings_pending():  # batch writes' rows, found by keyword until embedded
        response["embedding_pending"] = pending
        if (eta := mem.embeddings_eta()) is not None:
            response["eta_s"] = round(eta, 1)
    response.update(outcome.notes)
    response.update(notes)
    return response


COVERAGE_TTL_SECONDS = 30.0
MOSTLY_UNEMBEDDED = 0.5


def _unembedded_share(mem: Memory) -> float | None:
    """The share of observations without a vector when it is most of them (an interrupted
    `reembed --all`, a model added late), else None. Counted after the answer at most every 30 s,
    so no search waits for the count; the first search after a start does not know yet."""
    seen = mem.caches.get("embedding_coverage")
    if not mem.store.read_only and (seen is None or time.monotonic() - seen[0] > COVERAGE_TTL_SECONDS):
        mem.caches["embedding_coverage"] = (time.monotonic(), seen[1] if seen else None)
        mem.after_answer(_count_coverage, mem)
    coverage = seen[1] if seen else None
    if not coverage or not coverage["observations"]:
        return None
    share = coverage["missing"] / coverage["observations"]
    return share if share > MOSTLY_UNEMBEDDED else None


def _count_coverage(mem: Memory) -> None:
    mem.caches["embedding_coverage"] = (time.monotonic(), mem.store.embedding_coverage("observation"))


NEW_SINCE_TABLES = {"observation": "observations", "episode": "episodes", "error": "errors"}


def _mark_new_since(mem: Memory, session: SessionRow, outcome: SearchOutcome, response: dict) -> None:
    """Which results (0-based indices) others wrote after this client's session started."""
    new: set[tuple[str, str]] = set()
    for kind, table in NEW_SINCE_TABLES.items():
        ids = [f.id for f in outcome.fused if f.kind == kind]
        new |= {(kind, i) for i in mem.store.rows_since(table, ids, session["started_at"], session["id"])}
    indices = [n for n, f in enumerate(outcome.fused[: len(response["results"])]) if f.key in new]
    if indices:
        response["new_since_you_started"] = indices
        response["new_since_you_started_note"] = (f"{len(indices)} of these results were written by someone"
                                                  " else after your session started")


def _graph_context(mem: Memory, client: str | None, outcome: SearchOutcome) -> list[dict]:
    entity_ids: list[str] = []
    for item in outcome.fused:
        row = outcome.rows[item.key]
        entity_id = row["id"] if item.kind == "entity" else row.get("entity_id")
        if entity_id and entity_id not in entity_ids:
            entity_ids.append(entity_id)
        if len(entity_ids) == GRAPH_CONTEXT_ENTITIES:
            break
    if not entity_ids:
        return []
    found = neighbours(mem, client, entity_ids, GRAPH_CONTEXT_NEIGHBOURS)
    names = mem.store.entities_by_ids(entity_ids)
    return [{"entity": names[e].name, "neighbors": found[e]} for e in entity_ids
            if found.get(e) and e in names]
