"""Cross-encoder reranking hook. Which reranker runs is configured elsewhere; until one is
configured, asking for a rerank keeps the fused order and says so (reranker_degraded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Reranker(Protocol):
    name: str

    def score(self, query: str, passages: Sequence[str], budget_s: float) -> list[float]:
        """One relevance score per passage; raises TimeoutError when over budget."""
        ...


NO_RERANKER = "no reranker is configured (set CUBA_RERANKER_PATH to a cross-encoder model directory)"
