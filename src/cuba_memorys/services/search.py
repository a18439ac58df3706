"""cuba_faro: validate the request, run the hybrid search, shape the response."""

from __future__ import annotations

from ..errors import InvalidInput, NotAvailableYet
from ..models import SearchFilter
from ..search.hybrid import SCOPE_KINDS, SearchRequest, run_search
from . import validate
from .memory import Memory
from .relations import neighbours

GRAPH_CONTEXT_ENTITIES = 3
GRAPH_CONTEXT_NEIGHBOURS = 5


def faro(mem: Memory, client: str | None, *, query: object, mode: object = None, scope: object = None,
         limit: object = None, before: object = None, after: object = None, format: object = None,
         tags: object = None, max_tokens: object = None, enable_bm25: bool = True,
         track_access: bool = True) -> dict:
    query = validate.text("query", query, high=10_000)
    mode = validate.choice("mode", mode, ("hybrid", "verify"), default="hybrid")
    if mode == "verify":
        raise NotAvailableYet("mode=verify is not available in this build yet.",
                              hint="Use mode=hybrid and judge the returned evidence yourself.")
    tag_list = tuple(t.strip().lower() for t in (tags or "").split(",") if t.strip()) if isinstance(tags, str) else ()
    if tags is not None and not isinstance(tags, str):
        raise InvalidInput("tags", "must be a string (comma-separated tags)")
    request = SearchRequest(
        query=query,
        scope=validate.choice("scope", scope, tuple(SCOPE_KINDS), default="all"),
        limit=validate.int_range("limit", limit, 1, 50, 10),
        filter=SearchFilter(scope=mem.scope(client), after=validate.timestamp("after", after),
                            before=validate.timestamp("before", before), tags=tag_list),
        format=validate.choice("format", format, ("compact", "verbose"), default="compact"),
        max_tokens=validate.int_range("max_tokens", max_tokens, 1, 1_000_000, 5000),
        enable_bm25=bool(enable_bm25),
        compact_chars=mem.settings.compact_chars,
        track_access=bool(track_access),
    )
    outcome = run_search(mem.store, mem.embedder, request)
    response = {"mode": "hybrid", "query": query, "results": outcome.results,
                "count": len(outcome.results),
                "graphrag_context": _graph_context(mem, client, outcome)}
    if outcome.degraded_reason:
        response["degraded"] = True
        response["degraded_reason"] = outcome.degraded_reason
    return response


def _graph_context(mem: Memory, client: str | None, outcome) -> list[dict]:
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
