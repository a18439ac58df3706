"""The graph as a whole: PageRank blended into importance and Leiden communities (cuba_zafra
pagerank / communities, and the consolidation cycle's steps 11-12), and cuba_vigia's graph
metrics (communities, bridges, structural). The algorithms are graph/analysis.py (python-igraph);
this module reads the scope's graph, shapes the answers and persists what is persisted.

- **PageRank** (weighted by strength, damping 0.85) is stored per entity in ``node_metrics`` and
  blended into the importance of every entity with at least one relation:
  importance ← 0.7·importance + 0.3·pagerank/max(pagerank). An isolated entity's importance is
  left alone: with no edges its rank only says it has none, which cuba_reflexion reports.
- **Communities** are Leiden's (modularity), stored per entity with the algorithm and the
  modularity. cuba_vigia computes them afresh and writes nothing (the tool is read-only); over
  LIVE_LIMIT entities it answers from the last stored computation and says when that was.
- **Bridges and structure** are always computed (betweenness and closeness sampled on large
  graphs: the answer's ``algorithm`` says which).

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from
evaluated annotations.)
"""

from collections import Counter
from typing import Any, NotRequired, TypedDict

from cuba_memorys.graph import analysis as ga
from cuba_memorys.models import Scope, iso, utc_now
from cuba_memorys.services.memory import Memory

KEEP = 0.7  # the share of an entity's importance a PageRank refresh keeps
FORMULA = "importance ← 0.7·importance + 0.3·pagerank/max(pagerank), for entities with a relation"
ALGORITHM = "leiden"
TOP = 10  # entities listed per ranking
LISTED_COMMUNITIES = 20  # the largest communities listed (count says how many there are)
LISTED_MEMBERS = 20  # members listed per community, most important first
LIVE_LIMIT = 20_000  # above this many entities vigia communities reads the stored computation


# -- answers ---------------------------------------------------------------------------------
class PageRanked(TypedDict):
    action: str
    updated: int  # entities whose importance was blended
    energy_refreshed: int  # node_metrics rows (stored PageRank) written
    nodes: int
    edges: int
    algorithm: str
    damping: float
    formula: str
    top: list[dict[str, Any]]
    project_scoped: bool


class CommunitiesFound(TypedDict):
    action: str
    communities: int
    nodes_tagged: int
    algorithm: str
    modularity: float
    project_scoped: bool


class VigiaCommunities(TypedDict):
    metric: str
    algorithm: str
    persisted: bool
    nodes_tagged: int
    communities: list[dict[str, Any]]
    count: int
    modularity: float
    computed_at: NotRequired[str]
    note: NotRequired[str]


class VigiaBridges(TypedDict):
    metric: str
    algorithm: str
    bridge_entities: list[dict[str, Any]]
    interpretation: str
    sampled_sources: int
    nodes: int
    computed_at: NotRequired[str]  # served from the stored report of an unchanged large graph


class VigiaStructural(TypedDict):
    metric: str
    closeness_harmonic: list[dict[str, Any]]
    kcore: list[dict[str, Any]]
    kcore_distribution: dict[str, int]
    algorithm: str
    sampled_sources: int
    interpretation: str
    computed_at: NotRequired[str]  # served from the stored report of an unchanged large graph


# -- reading the graph -----------------------------------------------------------------------
class _Scoped:
    """The scope's nodes (in ``graph.ids`` order) and its graph."""

    def __init__(self, mem: Memory, scope: Scope) -> None:
        self.nodes = mem.store.graph_nodes(scope)
        edges = mem.store.graph_edges(scope)
        self.graph = ga.build([n["id"] for n in self.nodes],
                              ((e["from_id"], e["to_id"], e["strength"], e["bidirectional"]) for e in edges))
        self.edges = len(edges)

    def name(self, i: int) -> str:
        return self.nodes[i]["name"]


# -- PageRank --------------------------------------------------------------------------------
def refresh_pagerank(mem: Memory, scope: Scope) -> dict[str, Any]:
    """Compute, store and blend PageRank over ``scope``, in one transaction (the cycle's step 11)."""
    view = _Scoped(mem, scope)
    ranks = ga.pagerank(view.graph)
    degree = view.graph.undirected.degree()
    peak = max(ranks, default=0.0) or 1.0
    at = iso(utc_now())
    with mem.store.transaction():
        stored = mem.store.save_pagerank(
            [(n["id"], n["project_id"], ranks[i]) for i, n in enumerate(view.nodes)], at)
        blended = mem.store.blend_importance(
            [(n["id"], ranks[i] / peak) for i, n in enumerate(view.nodes) if degree[i] > 0], KEEP)
    best = ga.top(ranks, TOP)
    return {"updated": blended, "energy_refreshed": stored, "nodes": view.graph.size, "edges": view.edges,
            "top": [{"entity": view.name(i), "pagerank": round(ranks[i], 6)} for i in best if degree[i] > 0]}


def pagerank(mem: Memory, client: str | None) -> PageRanked:
    done = refresh_pagerank(mem, mem.scope(client))
    return {"action": "pagerank", "updated": done["updated"], "energy_refreshed": done["energy_refreshed"],
            "nodes": done["nodes"], "edges": done["edges"], "algorithm": "pagerank_prpack",
            "damping": ga.DAMPING, "formula": FORMULA, "top": done["top"],
            "project_scoped": mem.project_scoped(client)}


# -- communities -----------------------------------------------------------------------------
def refresh_communities(mem: Memory, scope: Scope) -> dict[str, Any]:
    """Leiden over ``scope``, stored per entity (the cycle's step 12)."""
    view = _Scoped(mem, scope)
    found = ga.communities(view.graph)
    at = iso(utc_now())
    with mem.store.transaction():
        tagged = mem.store.save_communities(
            [(n["id"], n["project_id"], found.membership[i]) for i, n in enumerate(view.nodes)],
            ALGORITHM, found.modularity, at)
    return {"communities": found.count, "nodes_tagged": tagged, "modularity": round(found.modularity, 6),
            "membership": found.membership, "view": view, "computed_at": at}


def communities(mem: Memory, client: str | None) -> CommunitiesFound:
    done = refresh_communities(mem, mem.scope(client))
    return {"action": "communities", "communities": done["communities"], "nodes_tagged": done["nodes_tagged"],
            "algorithm": ALGORITHM, "modularity": done["modularity"], "project_scoped": mem.project_scoped(client)}


def _listed(groups: dict[int, list[tuple[float, str]]]) -> list[dict[str, Any]]:
    order = sorted(groups, key=lambda c: (-len(groups[c]), c))[:LISTED_COMMUNITIES]
    return [{"community_id": c, "size": len(groups[c]),
             "members": [name for _, name in sorted(groups[c], key=lambda m: (-m[0], m[1]))[:LISTED_MEMBERS]]}
            for c in order]


def vigia_communities(mem: Memory, client: str | None) -> VigiaCommunities:
    scope = mem.scope(client)
    if mem.store.memory_stats(scope)["entities"] > LIVE_LIMIT:
        stored = _stored_communities(mem, scope)
        if stored is not None:
            return stored
    view = _Scoped(mem, scope)
    found = ga.communities(view.graph)
    groups: dict[int, list[tuple[float, str]]] = {}
    for i, c in enumerate(found.membership):
        groups.setdefault(c, []).append((view.nodes[i]["importance"], view.name(i)))
    return {"metric": "communities", "algorithm": ALGORITHM, "persisted": False,
            "nodes_tagged": view.graph.size, "communities": _listed(groups), "count": found.count,
            "modularity": round(found.modularity, 6),
            "note": "computed now; cuba_zafra communities and the consolidation cycle store them per entity"}


def _stored_communities(mem: Memory, scope: Scope) -> VigiaCommunities | None:
    rows = [r for r in mem.store.node_metrics(scope) if r["community_id"] is not None]
    if not rows:
        return None
    groups: dict[int, list[tuple[float, str]]] = {}
    for r in rows:
        groups.setdefault(int(r["community_id"] or 0), []).append((r["pagerank"] or 0.0, r["name"]))
    return {"metric": "communities", "algorithm": rows[0]["community_algorithm"] or ALGORITHM, "persisted": True,
            "nodes_tagged": len(rows), "communities": _listed(groups), "count": len(groups),
            "modularity": round(max(r["modularity"] or 0.0 for r in rows), 6),
            "computed_at": max(r["communities_at"] or "" for r in rows)}


# -- bridges and structure -------------------------------------------------------------------
def _sampling(algorithm: str, sources: int, size: int) -> str:
    if algorithm.endswith("_sampled"):
        return f" Estimated from {sources} of {size} nodes as breadth-first sources (the exact form is O(V·E))."
    return ""


def vigia_bridges(mem: Memory, client: str | None) -> VigiaBridges:
    view = _Scoped(mem, mem.scope(client))
    scores = ga.betweenness(view.graph)
    best = [i for i in ga.top(scores.values, TOP) if scores.values[i] > 0]
    return {"metric": "bridges", "algorithm": scores.algorithm,
            "bridge_entities": [{"entity": view.name(i), "centrality": round(scores.values[i], 6)} for i in best],
            "interpretation": "Entities on many shortest paths between others (normalised betweenness, 0-1):"
                              " removing one splits or lengthens the graph's connections."
                              + _sampling(scores.algorithm, scores.sources, view.graph.size),
            "sampled_sources": scores.sources, "nodes": view.graph.size}


def vigia_structural(mem: Memory, client: str | None) -> VigiaStructural:
    view = _Scoped(mem, mem.scope(client))
    scores, closeness = ga.harmonic(view.graph)
    cores = ga.kcore(view.graph)
    best = [i for i in ga.top(scores.values, TOP) if scores.values[i] > 0]
    deepest = [i for i in ga.top([float(c) for c in cores], TOP) if cores[i] > 0]
    return {"metric": "structural",
            "closeness_harmonic": [{"entity": view.name(i), "harmonic": round(scores.values[i], 6),
                                    "closeness": round(closeness[i], 6)} for i in best],
            "kcore": [{"entity": view.name(i), "kcore": cores[i]} for i in deepest],
            "kcore_distribution": {str(k): n for k, n in sorted(Counter(cores).items())},
            "algorithm": scores.algorithm, "sampled_sources": scores.sources,
            "interpretation": "harmonic: mean of 1/hops to every other entity (0-1; high = central);"
                              " closeness: reachable entities / total hops to them; kcore: the deepest"
                              " k-core an entity belongs to (every member has at least k neighbours in it)."
                              + _sampling(scores.algorithm, scores.sources, view.graph.size)}
