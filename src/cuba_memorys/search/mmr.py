"""Maximal marginal relevance over word sets: relevance minus redundancy with what is kept."""

from __future__ import annotations

from collections.abc import Sequence

from cuba_memorys.text import words


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def mmr_order(scores: Sequence[float], texts: Sequence[str], lam: float, k: int) -> list[int]:
    """Indices of the k items chosen greedily by λ·relevance − (1−λ)·max similarity to the
    chosen ones; relevance is the score scaled to 0..1 so λ means the same for every query."""
    if not scores:
        return []
    top = max(scores) or 1.0
    relevance = [s / top for s in scores]
    bags = [set(words(t)) for t in texts]
    chosen: list[int] = []
    left = list(range(len(scores)))
    while left and len(chosen) < k:
        best = max(left, key=lambda i: lam * relevance[i]
                   - (1 - lam) * max((jaccard(bags[i], bags[j]) for j in chosen), default=0.0))
        chosen.append(best)
        left.remove(best)
    return chosen
