"""Breadth-first traversal with path strength (product of edge strengths along the path)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Edge:
    relation_id: str
    target: str
    relation_type: str
    strength: float
    provenance: str


@dataclass(frozen=True)
class Reached:
    node: str
    depth: int
    via: Edge
    path_strength: float


def walk(start: str, edges_of: Callable[[list[str]], dict[str, list[Edge]]],
         max_depth: int) -> list[Reached]:
    """Every node reachable from ``start`` within ``max_depth`` hops, each at its shortest
    depth, keeping the strongest path among equally short ones. ``edges_of`` is asked once
    per level with the whole frontier, so a store answers in one query per hop."""
    best: dict[str, Reached] = {}
    frontier = {start: 1.0}
    for depth in range(1, max_depth + 1):
        if not frontier:
            break
        edges = edges_of(list(frontier))
        reached_now: dict[str, Reached] = {}
        for source, strength_so_far in frontier.items():
            for edge in edges.get(source, []):
                if edge.target == start or edge.target in best:
                    continue
                strength = strength_so_far * edge.strength
                current = reached_now.get(edge.target)
                if current is None or strength > current.path_strength:
                    reached_now[edge.target] = Reached(edge.target, depth, edge, strength)
        best.update(reached_now)
        frontier = {node: r.path_strength for node, r in reached_now.items()}
    return sorted(best.values(), key=lambda r: (r.depth, -r.path_strength))
