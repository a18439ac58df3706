"""Link prediction formulas, pure: Adamic-Adar over common neighbours, NPMI over co-occurrence."""

from __future__ import annotations

import math
from collections.abc import Iterable


def neighbour_sets(pairs: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """(entity, neighbour) pairs → each entity's distinct neighbours (edges are undirected here)."""
    out: dict[str, set[str]] = {}
    for a, b in pairs:
        out.setdefault(a, set()).add(b)
    return out


def adamic_adar(start: str, neighbours: set[str], around: dict[str, set[str]]) -> dict[str, tuple[float, list[str]]]:
    """Candidates not yet linked to ``start``: Σ over common neighbours z of 1 / ln(deg z), with
    the common neighbours. ``around`` holds each neighbour's own neighbours. A common neighbour
    has degree ≥ 2 (it touches both ends), so ln(deg) > 0."""
    scores: dict[str, tuple[float, list[str]]] = {}
    for z in sorted(neighbours):
        others = around.get(z, set())
        weight = 1.0 / math.log(len(others)) if len(others) >= 2 else 0.0
        for y in others:
            if y == start or y in neighbours or weight == 0.0:
                continue
            score, via = scores.get(y, (0.0, []))
            scores[y] = (score + weight, [*via, z])
    return scores


def normalised(score: float) -> float:
    """s / (s + 1): Adamic-Adar's unbounded sum mapped into [0, 1)."""
    return score / (score + 1.0)


def npmi(together: int, a: int, b: int, total: int) -> float | None:
    """ln(p_ab / (p_a p_b)) / (−ln p_ab); None where undefined (a zero count, or p_ab ≥ 1)."""
    if min(together, a, b, total) <= 0 or together >= total:
        return None
    p_ab, p_a, p_b = together / total, a / total, b / total
    return math.log(p_ab / (p_a * p_b)) / -math.log(p_ab)
