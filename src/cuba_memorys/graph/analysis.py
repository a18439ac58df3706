"""Whole-graph analysis over python-igraph: weighted PageRank, Leiden communities, betweenness,
harmonic closeness and k-core numbers. The library was chosen by measuring (bench/graph_libs.py,
docs/architecture.md "Graph analysis"); nothing here re-implements an algorithm, it only
turns the memory's relations into an igraph graph and sizes the work.

Two views of one edge list:
- PageRank reads the directed graph: a relation points from its ``from`` entity to its ``to``
  entity, a bidirectional one both ways, weighted by strength (importance flows along edges);
- communities, betweenness, closeness and k-core read the undirected simple graph (structure:
  who is connected to whom), parallel relations folded into one edge whose weight is the sum.

Betweenness and closeness are O(V·E) exactly: above WORK_BUDGET they are estimated from k
random source nodes (Brandes & Pich 2007 for betweenness, Eppstein & Wang 2004 for closeness),
seeded so two calls on the same graph agree, and the result says which it is.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import igraph as ig

DAMPING = 0.85
# An exact betweenness or closeness runs one breadth-first search per node (≈ V·E steps); above
# this many steps we sample k sources with k·E ≈ this budget (≈ 0.3 s at 500k edges, measured).
WORK_BUDGET = 5_000_000
MIN_SOURCES = 8
SEED = 14
LEIDEN_ITERATIONS = -1  # until the partition no longer changes (the library's own stopping rule)


@dataclass(frozen=True)
class Graph:
    ids: list[str]  # vertex i is entity ids[i]
    directed: ig.Graph  # for PageRank
    undirected: ig.Graph  # simple, weights summed, for structure

    @property
    def size(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Communities:
    membership: list[int]  # community of each vertex, numbered by decreasing size
    modularity: float
    count: int


@dataclass(frozen=True)
class Scores:
    values: list[float]
    algorithm: str  # "brandes" / "harmonic" when exact, "..._sampled" when estimated
    sources: int  # breadth-first searches run (= size when exact)


def build(ids: Sequence[str], edges: Iterable[tuple[str, str, float, bool]]) -> Graph:
    """The graph of ``ids`` (every entity, isolated ones included) and ``edges``
    (from_id, to_id, strength, bidirectional); an edge to an id not in ``ids`` is ignored."""
    index = {node: i for i, node in enumerate(ids)}
    pairs: list[tuple[int, int]] = []
    weights: list[float] = []
    for source, target, strength, both in edges:
        a, b = index.get(source), index.get(target)
        if a is None or b is None or a == b:
            continue
        weight = max(float(strength), 1e-6)  # a zero-strength edge still connects, barely
        pairs.append((a, b))
        weights.append(weight)
        if both:
            pairs.append((b, a))
            weights.append(weight)
    directed = ig.Graph(n=len(ids), edges=pairs, directed=True)
    directed.es["weight"] = weights
    undirected = directed.as_undirected(combine_edges={"weight": "sum"})
    return Graph(list(ids), directed, undirected)


def pagerank(graph: Graph) -> list[float]:
    """Weighted PageRank, damping 0.85, summing to 1. PRPACK solves it to convergence, which is
    what the original's 20 power iterations approximate; dangling nodes teleport uniformly."""
    if graph.size == 0:
        return []
    return list(graph.directed.pagerank(damping=DAMPING, weights="weight", directed=True))


def communities(graph: Graph) -> Communities:
    """Leiden, optimising weighted modularity, seeded (the same graph gives the same split)."""
    if graph.size == 0:
        return Communities([], 0.0, 0)
    state = random.getstate()
    random.seed(SEED)  # igraph draws from Python's random module
    try:
        found = graph.undirected.community_leiden(objective_function="modularity", weights="weight",
                                                  n_iterations=LEIDEN_ITERATIONS)
    finally:
        random.setstate(state)
    # renumber by decreasing size, so community 0 is the largest whatever the library's order
    sizes = sorted(range(len(found)), key=lambda c: (-len(found[c]), min(found[c])))
    rank = {c: i for i, c in enumerate(sizes)}
    membership = [rank[c] for c in found.membership]
    return Communities(membership, float(found.modularity), len(found))


def _sources(graph: Graph) -> list[int] | None:
    """None when the exact form fits the budget, else the sampled source vertices."""
    n, m = graph.size, max(graph.undirected.ecount(), 1)
    if n * m <= WORK_BUDGET:
        return None
    k = min(n, max(MIN_SOURCES, WORK_BUDGET // m))
    return sorted(random.Random(SEED).sample(range(n), k))


def betweenness(graph: Graph) -> Scores:
    """Unweighted betweenness normalised to [0, 1] by (n−1)(n−2)/2; estimated from sampled
    sources (scaled by n/k) when the exact form is over budget."""
    n = graph.size
    if n < 3:
        return Scores([0.0] * n, "brandes", n)
    sources = _sources(graph)
    if sources is None:
        raw, algorithm, used = graph.undirected.betweenness(directed=False), "brandes", n
    else:
        # the library's subset form over every source equals the exact one (checked in
        # tests/test_graph_analysis.py), so k of n sources are scaled by n/k
        raw = graph.undirected.betweenness(directed=False, sources=sources)
        raw = [value * n / len(sources) for value in raw]
        algorithm, used = "brandes_sampled", len(sources)
    pairs = (n - 1) * (n - 2) / 2
    return Scores([value / pairs for value in raw], algorithm, used)


def harmonic(graph: Graph) -> tuple[Scores, list[float]]:
    """Harmonic centrality (mean of 1/distance to every other node, in [0, 1]) and closeness
    (reachable nodes / sum of their distances), both over hops; from sampled sources when over budget."""
    n = graph.size
    if n < 2:
        return Scores([0.0] * n, "harmonic", n), [0.0] * n
    sources = _sources(graph)
    if sources is None:
        values = graph.undirected.harmonic_centrality(normalized=True)
        closeness = graph.undirected.closeness(normalized=True)
        return Scores(list(values), "harmonic", n), [0.0 if c != c else float(c) for c in closeness]
    rows = graph.undirected.distances(source=sources)  # k × n hop counts (inf: unreachable)
    inverse = [0.0] * n
    total = [0.0] * n
    reached = [0] * n
    for row in rows:
        for v, d in enumerate(row):
            if 0 < d < float("inf"):
                inverse[v] += 1.0 / d
                total[v] += d
                reached[v] += 1
    k = len(sources)
    values = [inverse[v] / k for v in range(n)]  # E[1/d] over sources ≈ harmonic / (n−1)
    closeness = [reached[v] / total[v] if total[v] else 0.0 for v in range(n)]
    return Scores(values, "harmonic_sampled", k), closeness


def kcore(graph: Graph) -> list[int]:
    """The k-core number of each node (the largest k such that it is in a subgraph where every
    node has at least k neighbours)."""
    return list(graph.undirected.coreness()) if graph.size else []


def top(values: Sequence[float], limit: int) -> list[int]:
    """Indices of the ``limit`` largest values, ties by index."""
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:limit]
