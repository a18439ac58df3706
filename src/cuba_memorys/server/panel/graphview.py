"""The graph page's data: the caller's entities and relations laid out once by python-igraph
(Fruchterman-Reingold, cached until the graph changes), coloured by Leiden community, sized by
importance, ranked by PageRank (the canvas labels the best ranked that fit). Above CLUSTER_ABOVE
entities each community becomes one node (its size the member count), so the browser never draws
more than a few thousand points; clicking one drills in. A filter (project, type, community) that
still matches more keeps the most important entities. ``legend`` says what each colour is: the
PALETTE largest communities drawn get a colour each, the rest share one grey."""

from __future__ import annotations

import hashlib
import weakref
from collections import Counter
from typing import Any

import igraph as ig

from cuba_memorys import locks
from cuba_memorys.graph import analysis as ga
from cuba_memorys.models import Scope
from cuba_memorys.server.panel.cache import Fresh
from cuba_memorys.services.memory import Memory

CLUSTER_ABOVE = 5000  # entities; above this the whole-graph view shows communities
PALETTE = 9  # distinct community colours (static/panel.css --c0 … --c8); more would not tell apart
LEGEND_MEMBERS = 3  # best ranked names shown per community in the legend
CACHE_SIZE = 8
_cache: dict[str, list[tuple[float, float]]] = {}
_cache_lock = locks.lock("panel graph layouts", "cache")
# Keyed by the graph's version (entities and relations), so never refreshed in the background: a
# refresh would run outside the caller's bound policies; a new entity or relation makes a new key.
ANSWER_TTL_SECS = float("inf")
_answers: weakref.WeakKeyDictionary[Memory, Fresh] = weakref.WeakKeyDictionary()


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
               cluster_above: int = CLUSTER_ABOVE, *, project_id: str | None = None,
               entity_type: str | None = None) -> dict[str, Any]:
    """``graph_body``, reused while the scope's entities and the relations are unchanged (building
    the graph and its communities costs most of a second at 10k entities)."""
    scope = mem.scope(client) if project_id is None else Scope(project_id, include_unscoped=False)
    key = (scope.project_id, scope.include_unscoped, community, cluster_above, entity_type,
           mem.store.panel_entities_version(scope), mem.store.panel_relations_version())
    with _cache_lock:
        answers = _answers.get(mem)
        if answers is None:
            answers = _answers[mem] = Fresh(ANSWER_TTL_SECS, max_keys=CACHE_SIZE)  # a 10k body is ~1 MB
    body, _ = answers.get(key, lambda: graph_body(mem, scope, community, cluster_above, entity_type))
    return dict(body)


def graph_body(mem: Memory, scope: Scope, community: int | None, cluster_above: int,
               entity_type: str | None) -> dict[str, Any]:
    """The nodes ({id, name, x, y, size, community, type}) and edges ([i, j]) the canvas draws.

    Filters: ``project_id`` (that project's entities only; the route checks the caller may read
    it), ``entity_type`` and ``community`` (the Leiden community of the project's whole graph, so
    numbers do not shift with the type filter). The whole graph above ``cluster_above`` entities
    is drawn as its communities; a filtered set above it keeps its most important entities
    (``sampled``), so the canvas never holds more than ``cluster_above`` points."""
    nodes = mem.store.panel_graph_nodes(scope)
    edges = mem.store.graph_edges(scope)
    graph = ga.build([n["id"] for n in nodes], ((e["from_id"], e["to_id"], e["strength"], e["bidirectional"])
                                                for e in edges))
    membership = ga.communities(graph).membership
    rank = ga.pagerank(graph)  # of the whole scope's graph, as the consolidation cycle stores it
    types = Counter(str(n["type"]) for n in nodes)
    keep = [i for i, n in enumerate(nodes) if (community is None or membership[i] == community)
            and (entity_type is None or n["type"] == entity_type)]
    filtered = community is not None or entity_type is not None
    if not filtered and len(keep) > cluster_above:
        return {**_clustered(graph, membership, rank, [n["name"] for n in nodes]), "types": sorted(types)}
    matched = len(keep)
    if len(keep) > cluster_above:  # the most important, in their stored order
        chosen = set(sorted(keep, key=lambda i: -nodes[i]["importance"])[:cluster_above])
        keep = [i for i in keep if i in chosen]
    sub = graph.undirected if len(keep) == len(nodes) else graph.undirected.induced_subgraph(keep)  # keeps order
    pairs = [(e.source, e.target) for e in sub.es]
    ids = [nodes[i]["id"] for i in keep]
    coords = _layout(_key("nodes", ids, pairs), sub)
    colours, legend = _legend([(membership[i], rank[i], nodes[i]["name"]) for i in keep])
    return {"clustered": False, "community": community, "type": entity_type, "count": len(keep),
            "matched": matched, "sampled": matched > len(keep), "types": sorted(types), "legend": legend,
            "nodes": [{"id": nodes[i]["id"], "name": nodes[i]["name"], "x": coords[n][0], "y": coords[n][1],
                       "size": round(float(nodes[i]["importance"]), 3), "community": membership[i],
                       "colour": colours[membership[i]], "rank": round(rank[i], 6), "type": nodes[i]["type"]}
                      for n, i in enumerate(keep)],
            "edges": pairs}


def _legend(drawn: list[tuple[int, float, str]]) -> tuple[dict[int, int], dict[str, Any]]:
    """``drawn``: (community, PageRank, name) of each entity drawn or counted. Each community's
    colour (its place among the PALETTE largest; -1: the shared grey) and the legend: per
    coloured community its size and best ranked members, and what the grey holds."""
    sizes = Counter(c for c, _, _ in drawn)
    order = sorted(sizes, key=lambda c: (-sizes[c], c))
    colours = {c: (n if n < PALETTE else -1) for n, c in enumerate(order)}
    members: dict[int, list[tuple[float, str]]] = {}
    for c, score, name in drawn:
        if colours[c] >= 0:
            members.setdefault(c, []).append((score, name))
    rows = [{"community": c, "colour": colours[c], "count": sizes[c],
             "members": [name for _, name in sorted(members[c], key=lambda m: -m[0])[:LEGEND_MEMBERS]]}
            for c in order[:PALETTE]]
    rest = order[PALETTE:]
    return colours, {"communities": rows, "other_communities": len(rest),
                     "other_entities": sum(sizes[c] for c in rest)}


def _clustered(graph: ga.Graph, membership: list[int], rank: list[float], names: list[str]) -> dict[str, Any]:
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
    colours, legend = _legend([(c, rank[i], names[i]) for i, c in enumerate(membership)])
    best: dict[int, int] = {}  # each community's best ranked member names it on the canvas
    weight = [0.0] * count  # and its rank is its members' summed PageRank
    for i, c in enumerate(membership):
        weight[c] += rank[i]
        if c not in best or rank[i] > rank[best[c]]:
            best[c] = i
    return {"clustered": True, "community": None, "count": count, "entities": graph.size, "legend": legend,
            "nodes": [{"id": f"community:{c}", "name": f"community {c} ({sizes[c]} entities)",
                       "label": names[best[c]] + (f" +{sizes[c] - 1}" if sizes[c] > 1 else ""),
                       "x": coords[c][0], "y": coords[c][1], "size": round(sizes[c] / biggest, 3), "community": c,
                       "colour": colours[c], "rank": round(weight[c], 6)}
                      for c in range(count)],
            "edges": list(links)}
