"""Spreading activation from seed entities (the associative expansion of search)."""

from __future__ import annotations

from collections.abc import Callable

DECAY = 0.85
HOPS = 2


def spread(seeds: dict[str, float], neighbours: Callable[[list[str]], dict[str, list[tuple[str, float]]]],
           hops: int = HOPS, decay: float = DECAY) -> dict[str, float]:
    """Activation of every entity reached from ``seeds`` within ``hops``: each hop passes
    activation × edge strength × decay; a node keeps the highest activation it receives.
    Seeds themselves are not in the result."""
    reached: dict[str, float] = {}
    frontier = dict(seeds)
    for _ in range(hops):
        if not frontier:
            break
        edges = neighbours(list(frontier))
        nxt: dict[str, float] = {}
        for node, energy in frontier.items():
            for target, strength in edges.get(node, []):
                if target in seeds:
                    continue
                value = energy * strength * decay
                if value > max(reached.get(target, 0.0), nxt.get(target, 0.0)):
                    nxt[target] = value
        reached.update(nxt)
        frontier = nxt
    return reached
