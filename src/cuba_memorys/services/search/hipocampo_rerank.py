"""search_hipocampo's rerank: auto | always | never over the top ``rerank_top_k`` rows.

``auto`` with the offline late-interaction reranker (the default when no cross-encoder is installed)
reranks the top rows always: their token vectors were computed at write time (issue 31), so it
costs a few milliseconds. With a cross-encoder it reranks only when that can change the decision:
when the fused scores of the top rows are within 15% of each other, so their order is a near tie
the fused scores cannot settle; a clear leader is left alone (a cross-encoder pass costs far more
than the search on a CPU).
"""

from __future__ import annotations

from cuba_memorys.search.format import row_content
from cuba_memorys.search.hybrid import stored_tokens
from cuba_memorys.search.rerank import NO_RERANKER, rerank_order
from cuba_memorys.services.memory import Memory

AUTO_MARGIN = 0.15  # relative gap between the best and the top_k-th fused score below which auto reranks


def apply(mem: Memory, page) -> dict:
    """Rerank ``page.items`` in place when the mode says so; returns the report for the response."""
    out = page.out
    report = {"mode": out.rerank, "applied": False, "reason": None, "top_k": out.rerank_top_k,
              "budget_ms": out.rerank_budget_ms}
    head = page.items[: out.rerank_top_k]
    if out.rerank == "never":
        return report | {"reason": "rerank=never"}
    # always: a missing reranker is what the caller most needs to hear, so it is checked first
    reranker = mem.reranker() if out.rerank == "always" else None
    if out.rerank == "always" and reranker is None:
        return report | {"reason": mem.reranker_reason() or NO_RERANKER}
    if not page.ranked or len(head) < 2:
        return report | {"reason": "nothing to rerank (fewer than two ranked rows)"}
    if out.rerank == "auto" and mem.token_model() is not None:
        reranker = mem.token_model()
    elif out.rerank == "auto":
        if not _near_tie([item.score for item in head]):
            return report | {"reason": f"auto: the fused order of the top {len(head)} is clear (gap over"
                                        f" {AUTO_MARGIN:.0%}), so reranking could not change the decision"}
        reranker = mem.reranker()
        if reranker is None:
            return report | {"reason": mem.reranker_reason() or NO_RERANKER}
    assert reranker is not None  # rerank is auto | always (validated), and each returned above without one
    passages = [row_content(item.kind, page.rows[item.key]) for item in head]
    order, why = rerank_order(reranker, page.sel.search_text, passages, out.rerank_budget_ms / 1000,
                              stored_tokens(mem.store, head, reranker))
    if order is None:
        return report | {"reason": why}
    reordered = [head[i] for i in order]
    # The reranker decides the order; the head keeps its fused scores' scale, handed out in the
    # new order, so relevance (score / the first's) stays at most 1 and falls down the list.
    for item, score in zip(reordered, sorted((item.score for item in head), reverse=True)):
        item.score = score
    page.items[: len(head)] = reordered
    return report | {"applied": True, "reason": f"reranked the top {len(head)} with {reranker.name}"}


def _near_tie(scores: list[float]) -> bool:
    best, last = scores[0], scores[-1]
    return best <= 0 or (best - last) <= AUTO_MARGIN * best
