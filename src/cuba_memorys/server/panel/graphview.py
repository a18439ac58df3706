"""The graph page's data: the caller's entities and relations laid out once by python-igraph
(Fruchterman-Reingold, cached until the graph changes), coloured by Leiden community, sized by
importance. Above CLUSTER_ABOVE entities each community becomes one node (its size the member
count), so the browser never draws more than a few thousand points; clicking one drills in."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from typing import Any

import igraph as ig

from cuba_memorys.graph import analysis as ga
from cuba_memorys.services.memory import Memory

CLUSTER_ABOVE = 5000  # entities; above this the whole-graph view shows communities
CACHE_SIZE = 8
_cache: dict[str, list[tuple[float, float]]] = {}
_cache_lock = threading.Lock()


def _layout(key: str, graph: ig.Graph) -> list[tuple[float, float]]:
    """The layout of ``graph``, computed once per distinct graph (``key`` hashes its nodes and edges)."""
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    if graph.vcount() == 0:
        coords: list[tuple[float, float]] = []
    else:
        raw = graph.layout_fruchterman_reingold(grid=graph.vcount() > 1000,
                                                niter=300 if graph.vcount() < 2000 else 100)
        xs, ys = [p[0] for p in raw], [p[1] for p in raw]
        lo_x, hi_x, lo_y, hi_y = min(xs), max(xs), min(ys), max(ys)
        span_x, span_y = (hi_x - lo_x) or 1.0, (hi_y - lo_y) or 1.0
        coords = [(round((x - lo_x) / span_x, 4), round((y - lo_y) / span_y, 4)) for x, y in zip(xs, ys)]
    with _cache_lock:
        while len(_cache) >= CACHE_SIZE:
            del _cache[next(iter(_cache))]
        _cache[key] = coords
    return coords


def _key(kind: str, ids: list[str], pairs: list[tuple[int, int]]) -> str:
    digest = hashlib.sha256(kind.encode())
    digest.update("\n".join(ids).encode())
    digest.update(repr(pairs).encode())
    return digest.hexdigest()


def graph_json(mem: Memory, client: str | None, community: int | None = None,
               cluster_above: int = CLUSTER_ABOVE) -> dict[str, Any]:
    """The nodes ({id, name, x, y, size, community}) and edges ([i, j]) the canvas draws."""
    scope = mem.scope(client)
    nodes = mem.store.graph_nodes(scope)
    edges = mem.store.graph_edges(scope)
    graph = ga.build([n["id"] for n in nodes], ((e["from_id"], e["to_id"], e["strength"], e["bidirectional"])
                                                for e in edges))
    membership = ga.communities(graph).membership
    keep = list(range(len(nodes))) if community is None else [i for i, c in enumerate(membership) if c == community]
    if community is None and len(keep) > cluster_above:
        return _clustered(graph, membership)
    sub = graph.undirected if community is None else graph.undirected.induced_subgraph(keep)  # keeps the order
    pairs = [(e.source, e.target) for e in sub.es]
    ids = [nodes[i]["id"] for i in keep]
    coords = _layout(_key("nodes", ids, pairs), sub)
    return {"clustered": False, "community": community, "count": len(keep),
            "nodes": [{"id": nodes[i]["id"], "name": nodes[i]["name"], "x": coords[n][0], "y": coords[n][1],
                       "size": round(float(nodes[i]["importance"]), 3), "community": membership[i]}
                      for n, i in enumerate(keep)],
            "edges": pairs}


def _clustered(graph: ga.Graph, membership: list[int]) -> dict[str, Any]:
    sizes = Counter(membership)
    count = max(sizes) + 1 if sizes else 0
    links: Counter[tuple[int, int]] = Counter()
    for e in graph.undirected.es:
        a, b = membership[e.source], membership[e.target]
        if a != b:
            links[(min(a, b), max(a, b))] += 1
    contracted = ig.Graph(n=count, edges=list(links))
    coords = _layout(_key("communities", [str(sizes[c]) for c in range(count)], list(links)), contracted)
    biggest = max(sizes.values()) if sizes else 1
    return {"clustered": True, "community": None, "count": count, "entities": graph.size,
            "nodes": [{"id": f"community:{c}", "name": f"community {c} ({sizes[c]} entities)",
                       "x": coords[c][0], "y": coords[c][1], "size": round(sizes[c] / biggest, 3), "community": c}
                      for c in range(count)],
            "edges": list(links)}
