"""Cross-encoder reranking of the fused pool, within a time budget.

The reranker (judge/onnx_models.Reranker, from CUBA_RERANKER_PATH or the models folder) scores
(query, passage) pairs. When none is installed, or it fails, or the budget runs out before every
passage is scored, the fused order stands and the response says why (``reranker_degraded``):
a partly reranked list would mix two incomparable orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any, Protocol, cast


class Reranker(Protocol):
    name: str

    def scores(self, query: str, passages: Sequence[str], budget_seconds: float | None = None,
               batch_size: int = 4) -> list[float | None]:
        """One relevance score per passage, None for passages the budget left unscored."""
        ...

    def prefetch_query(self, query: str, executor: Executor) -> None:
        """Start what the query alone needs on ``executor`` while the search fuses (nothing for
        a cross-encoder, which reads query and passage together)."""
        ...


NO_RERANKER = ("no reranker is installed (set CUBA_RERANKER_PATH to a cross-encoder model directory,"
               " or `cuba-memorys models install reranker DIR`)")


def rerank_order(reranker: Reranker, query: str, passages: Sequence[str], budget_seconds: float,
                 stored: Sequence[Any] | None = None, prior: Sequence[float] | None = None,
                 blend: float | None = None) -> tuple[list[int] | None, str | None]:
    """(new order as indexes into ``passages``, None) or (None, why the fused order stays).
    ``stored``: the passages' token vectors the store holds (None where it has none), for a
    reranker that reads them (late interaction); a cross-encoder reads only the texts.
    ``blend`` with ``prior`` (the fused scores): order by blend·reranker + (1 − blend)·fused, each
    min-max scaled over these passages; without, by the reranker's scores alone."""
    try:
        if stored is not None and getattr(reranker, "reads_stored_tokens", False):
            scores = reranker.scores(query, passages, budget_seconds=budget_seconds,  # type: ignore[call-arg]
                                     stored=stored)
        else:
            scores = reranker.scores(query, passages, budget_seconds=budget_seconds)
    except Exception as exc:
        return None, f"the reranker failed ({type(exc).__name__}: {exc}); results keep the fused order"
    missing = sum(s is None for s in scores)
    if missing:
        return None, (f"reranker time budget ({budget_seconds:g} s) ran out: {len(scores) - missing} of"
                      f" {len(scores)} passages scored; results keep the fused order")
    scored = cast(list[float], scores)  # no None left: checked just above
    if blend is not None and prior is not None:
        scored = [blend * r + (1 - blend) * f for r, f in zip(minmax(scored), minmax(list(prior)), strict=True)]
    return sorted(range(len(passages)), key=lambda i: -scored[i]), None


def minmax(values: list[float]) -> list[float]:
    """``values`` scaled to [0, 1] (all 1.0 when they are equal)."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    return [1.0 if high == low else (v - low) / (high - low) for v in values]
