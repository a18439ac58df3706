"""Which graph library: python-igraph (Leiden built in), leidenalg (Leiden on igraph graphs) and
networkx, timed on the same seeded power-law graphs (Barabási–Albert, m = 5: 10k nodes / 50k
edges and 100k / 500k, edge weights uniform in [0.1, 1]).

Each operation is the median of 3 runs (seconds, wall clock, one thread). Sampled betweenness and
harmonic closeness use the same k random sources in every library, so the work is comparable;
an operation whose estimated time exceeds --limit seconds is not run and reports why.

    .venv/bin/pip install leidenalg networkx   # the two candidates not chosen are not dependencies
    .venv/bin/python bench/graph_libs.py [--sizes 10000,100000] [--runs 3] [--limit 60] [--networkx-exact]

The numbers and the choice are in docs/benchmarks.md and docs/architecture.md ("Graph analysis").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import igraph as ig
import leidenalg
import networkx as nx
from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python

SEED = 14


def timed(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def graphs(n: int) -> tuple[ig.Graph, nx.Graph]:
    g = ig.Graph.Barabasi(n, 5, directed=False)  # igraph's generator honours random.seed
    rng = random.Random(SEED)
    g.es["weight"] = [rng.uniform(0.1, 1.0) for _ in range(g.ecount())]
    h = nx.Graph()
    h.add_nodes_from(range(n))
    h.add_weighted_edges_from((e.source, e.target, e["weight"]) for e in g.es)
    return g, h


def igraph_ops(g: ig.Graph, sources: list[int], exact: bool) -> dict[str, Callable[[], Any]]:
    ops: dict[str, Callable[[], Any]] = {
        "pagerank": lambda: g.pagerank(damping=0.85, weights="weight"),
        "leiden_modularity": lambda: g.community_leiden(objective_function="modularity", weights="weight",
                                                        n_iterations=2),
        "betweenness_sampled": lambda: g.betweenness(sources=sources),
        "harmonic_sampled": lambda: g.distances(source=sources),
        "kcore": g.coreness,
    }
    if exact:
        ops["betweenness_exact"] = g.betweenness
        ops["harmonic_exact"] = g.harmonic_centrality
    return ops


def leidenalg_ops(g: ig.Graph) -> dict[str, Callable[[], Any]]:
    return {"leiden_modularity": lambda: leidenalg.find_partition(g, leidenalg.ModularityVertexPartition,
                                                                  weights="weight", n_iterations=2, seed=SEED)}


def _twenty_iterations(h: nx.Graph) -> None:
    # exactly 20 power iterations, as the original: the library stops there and says so
    with contextlib.suppress(nx.PowerIterationFailedConvergence):
        _pagerank_python(h, alpha=0.85, max_iter=20, tol=1e-12, weight="weight")


def networkx_ops(h: nx.Graph, sources: list[int], exact: bool) -> dict[str, Callable[[], Any]]:
    ops: dict[str, Callable[[], Any]] = {
        # networkx has no Leiden of its own (its leiden_communities needs a backend): Louvain instead
        # nx.pagerank needs scipy; its pure-Python form is the same algorithm (power iteration)
        "pagerank": lambda: _twenty_iterations(h),
        "louvain_modularity": lambda: nx.community.louvain_communities(h, weight="weight", seed=SEED),
        "betweenness_sampled": lambda: nx.betweenness_centrality_subset(h, sources, list(h.nodes)),
        "harmonic_sampled": lambda: [nx.single_source_shortest_path_length(h, s) for s in sources],
        "kcore": lambda: nx.core_number(h),
    }
    if exact:  # about 100× its 100-source sampled time (≈ 10 min at 10k): only with --networkx-exact
        ops["betweenness_exact"] = lambda: nx.betweenness_centrality(h)
        ops["harmonic_exact"] = lambda: nx.harmonic_centrality(h)
    return ops


def run(n: int, runs: int, limit: float, networkx_exact: bool) -> dict[str, Any]:
    g, h = graphs(n)
    sources = random.Random(SEED).sample(range(n), 10 if n > 50_000 else 100)
    exact = n <= 10_000
    result: dict[str, Any] = {"nodes": g.vcount(), "edges": g.ecount(), "sampled_sources": len(sources)}
    for lib, ops in (("igraph", igraph_ops(g, sources, exact)), ("leidenalg", leidenalg_ops(g)),
                     ("networkx", networkx_ops(h, sources, exact and networkx_exact))):
        timings: dict[str, Any] = {}
        for name, fn in ops.items():
            first = timed(fn, 1)  # one run first: a slow operation is measured once, not three times
            timings[name] = first if first > limit else timed(fn, runs)
            print(f"{n} {lib} {name} {timings[name]}", flush=True)
        result[lib] = timings
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=float, default=60.0, help="a run slower than this is not repeated")
    parser.add_argument("--networkx-exact", action="store_true", help="also networkx's exact forms (slow)")
    args = parser.parse_args()
    random.seed(SEED)
    report = {str(n): run(n, args.runs, args.limit, args.networkx_exact) for n in map(int, args.sizes.split(","))}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
