"""Graph analysis on a graph with known answers: Zachary's karate club (34 members, 78
friendships), written as entities and bidirectional relations. PageRank order, the communities,
the top bridge and the k-core numbers are checked against python-igraph's own values on the raw
graph; then cuba_zafra pagerank / communities and cuba_vigia communities / bridges / structural
through the official MCP client, the consolidation cycle's graph steps, and bad values."""

from __future__ import annotations

import random

import igraph as ig
import pytest

from cuba_memorys.graph import analysis as ga
from cuba_memorys.services.graph import analysis, entities, relations
from cuba_memorys.services.lifecycle import rem
from cuba_memorys.services.memory import Memory
from mcp_helpers import run_stdio

KARATE = ig.Graph.Famous("Zachary")
EDGES = [tuple(e.tuple) for e in KARATE.es]


def member(i: int) -> str:
    return f"member-{i:02d}"


def seed_karate(mem: Memory) -> None:
    for i in range(KARATE.vcount()):
        entities.create(mem, None, name=member(i), entity_type="person")
    for a, b in EDGES:
        relations.create(mem, None, from_entity=member(a), to_entity=member(b), bidirectional=True)


def importance_of(mem: Memory) -> dict[str, float]:
    return {n["name"]: n["importance"] for n in mem.store.graph_nodes(mem.scope(None))}


def reference_leiden() -> list[int]:
    random.seed(ga.SEED)
    return KARATE.community_leiden(objective_function="modularity", weights=[1.0] * len(EDGES),
                                   n_iterations=ga.LEIDEN_ITERATIONS).membership


def same_partition(a: list[int], b: list[int]) -> bool:
    """Equal up to the communities' numbering."""
    return len({(x, y) for x, y in zip(a, b)}) == len(set(a)) == len(set(b))


def test_the_library_wrapper_matches_igraph_on_the_raw_graph():
    ids = [member(i) for i in range(34)]
    graph = ga.build(ids, [(member(a), member(b), 0.5, True) for a, b in EDGES])
    assert graph.undirected.ecount() == 78
    assert ga.pagerank(graph) == pytest.approx(KARATE.pagerank(damping=0.85))
    assert ga.kcore(graph) == KARATE.coreness()
    found = ga.communities(graph)
    assert same_partition(found.membership, reference_leiden())
    assert found.membership[0] != found.membership[33]  # the instructor's and the president's factions
    assert found.modularity == pytest.approx(KARATE.modularity(reference_leiden()))
    exact = ga.betweenness(graph)
    n = 34
    assert exact.algorithm == "brandes"
    assert exact.values == pytest.approx([v / ((n - 1) * (n - 2) / 2) for v in KARATE.betweenness()])
    harmonic, closeness = ga.harmonic(graph)
    assert harmonic.values == pytest.approx(KARATE.harmonic_centrality(normalized=True))
    assert closeness == pytest.approx(KARATE.closeness())


def test_sampled_betweenness_is_the_subset_form_scaled_and_says_so(monkeypatch):
    graph = ga.build([member(i) for i in range(34)], [(member(a), member(b), 0.5, True) for a, b in EDGES])
    monkeypatch.setattr(ga, "WORK_BUDGET", 100)  # force sampling on a small graph
    scores = ga.betweenness(graph)
    assert scores.algorithm == "brandes_sampled" and scores.sources == ga.MIN_SOURCES
    sources = sorted(random.Random(ga.SEED).sample(range(34), ga.MIN_SOURCES))
    subset = KARATE.betweenness(sources=sources)
    assert scores.values == pytest.approx([v * 34 / ga.MIN_SOURCES / (33 * 32 / 2) for v in subset])
    harmonic, _ = ga.harmonic(graph)
    assert harmonic.algorithm == "harmonic_sampled" and harmonic.sources == ga.MIN_SOURCES
    # the subset form over every source is the exact one, which is what the scaling relies on
    assert KARATE.betweenness(sources=list(range(34))) == pytest.approx(KARATE.betweenness())


def test_an_empty_or_edgeless_graph_answers_zeroes():
    empty = ga.build([], [])
    assert ga.pagerank(empty) == [] and ga.communities(empty).count == 0 and ga.kcore(empty) == []
    lonely = ga.build(["a", "b"], [("a", "ghost", 0.5, False), ("a", "a", 0.5, False)])  # both ignored
    assert lonely.undirected.ecount() == 0 and ga.betweenness(lonely).values == [0.0, 0.0]


def test_pagerank_is_stored_and_blended_into_importance(memory: Memory):
    seed_karate(memory)
    entities.create(memory, None, name="loner")  # no relation: its importance is left alone
    before = importance_of(memory)
    result = analysis.pagerank(memory, None)
    assert result["action"] == "pagerank" and result["updated"] == 34 and result["energy_refreshed"] == 35
    with_loner = KARATE.copy()
    with_loner.add_vertices(1)  # the reference on the same 35 nodes
    reference = with_loner.pagerank(damping=0.85)
    order = sorted(range(34), key=lambda i: (-reference[i], i))
    assert [t["entity"] for t in result["top"]] == [member(i) for i in order[:10]]
    stored = {r["name"]: r["pagerank"] for r in memory.store.node_metrics(memory.scope(None))}
    assert [stored[member(i)] for i in range(34)] == pytest.approx(reference[:34])
    after = importance_of(memory)
    assert after["loner"] == before["loner"]
    ranks = [stored[member(i)] for i in range(34)]
    for i in range(34):
        assert after[member(i)] == pytest.approx(0.7 * before[member(i)] + 0.3 * ranks[i] / max(ranks), abs=1e-6)
    assert after[member(33)] > after[member(11)]  # the best connected gained over a one-friend member


def test_communities_are_persisted_with_the_algorithm_and_modularity(memory: Memory):
    seed_karate(memory)
    result = analysis.communities(memory, None)
    reference = reference_leiden()
    assert result == {"action": "communities", "communities": len(set(reference)), "nodes_tagged": 34,
                      "algorithm": "leiden", "modularity": pytest.approx(KARATE.modularity(reference), abs=1e-6),
                      "project_scoped": False}
    rows = {r["name"]: r for r in memory.store.node_metrics(memory.scope(None))}
    assert same_partition([rows[member(i)]["community_id"] for i in range(34)], reference)
    assert rows[member(0)]["community_id"] != rows[member(33)]["community_id"]
    assert {r["community_algorithm"] for r in rows.values()} == {"leiden"}
    entities.delete(memory, None, name=member(5))  # a metric row goes with its entity
    assert member(5) not in {r["name"] for r in memory.store.node_metrics(memory.scope(None))}


def test_the_cycle_runs_pagerank_and_communities(memory: Memory):
    seed_karate(memory)
    result = rem.run_cycle(memory, trigger="cli")
    assert result["error"] is None and result["communities"] == len(set(reference_leiden()))
    assert "pagerank" not in result["skipped_steps"] and "communities" not in result["skipped_steps"]
    assert result["notes"]["pagerank"].startswith("34 entities blended")
    [row] = memory.store.rem_cycles(1)
    assert row["communities"] == result["communities"]
    assert all(r["pagerank"] is not None and r["community_id"] is not None
               for r in memory.store.node_metrics(memory.scope(None)))


def test_a_pagerank_failure_fails_the_cycle_a_communities_failure_is_noted(memory: Memory, monkeypatch):
    seed_karate(memory)

    def broken(graph):
        raise RuntimeError("the library broke")

    monkeypatch.setattr(ga, "communities", broken)
    result = rem.run_cycle(memory, trigger="cli")
    assert result["error"] is None and result["communities"] == 0
    assert "the library broke" in result["notes"]["communities"]
    assert all(r["community_id"] is None for r in memory.store.node_metrics(memory.scope(None)))
    monkeypatch.setattr(ga, "pagerank", broken)
    before = importance_of(memory)
    result = rem.run_cycle(memory, trigger="cli")
    assert "the library broke" in result["error"] and result["communities"] == 0
    assert importance_of(memory) == before  # the whole cycle rolled back
    assert memory.store.rem_cycles(1)[0]["error"] == result["error"]


def test_over_mcp(memory: Memory, location):
    seed_karate(memory)
    reference = KARATE.pagerank(damping=0.85)

    async def body(agent):
        ranked = await agent.call("cuba_zafra", action="pagerank")
        assert (ranked["updated"], ranked["energy_refreshed"]) == (34, 34)
        assert ranked["top"][0]["entity"] == member(max(range(34), key=lambda i: reference[i]))
        found = await agent.call("cuba_zafra", action="communities")
        assert found["algorithm"] == "leiden" and found["nodes_tagged"] == 34
        assert found["communities"] == len(set(reference_leiden()))

        groups = await agent.call("cuba_vigia", metric="communities")
        assert groups["count"] == found["communities"] and groups["persisted"] is False
        assert sum(c["size"] for c in groups["communities"]) == 34
        home = {name: c["community_id"] for c in groups["communities"] for name in c["members"]}
        assert home[member(0)] != home[member(33)]

        bridges = await agent.call("cuba_vigia", metric="bridges")
        assert bridges["algorithm"] == "brandes" and bridges["bridge_entities"][0]["entity"] == member(0)
        top = max(KARATE.betweenness())
        assert bridges["bridge_entities"][0]["centrality"] == pytest.approx(top / (33 * 32 / 2), abs=1e-6)

        structure = await agent.call("cuba_vigia", metric="structural")
        cores = KARATE.coreness()
        assert structure["kcore_distribution"] == {str(k): cores.count(k) for k in sorted(set(cores))}
        assert {row["entity"]: row["kcore"] for row in structure["kcore"]} == {
            member(i): cores[i] for i in range(34) if member(i) in {r["entity"] for r in structure["kcore"]}}
        assert structure["kcore"][0]["kcore"] == max(cores) == 4
        harmonic = KARATE.harmonic_centrality(normalized=True)
        assert structure["closeness_harmonic"][0]["entity"] == member(max(range(34), key=lambda i: harmonic[i]))

        # bad values: an unknown metric; another action's parameter is ignored and named (issue 32)
        assert "metric" in await agent.error("cuba_vigia", metric="centrality")
        assert (await agent.call("cuba_zafra", action="pagerank", threshold=0.5))["ignored"] == ["threshold"]
        return None

    run_stdio(location, body)
    assert len(memory.store.node_metrics(memory.scope(None))) == 34


def test_bad_values_write_nothing(memory: Memory, location):
    seed_karate(memory)

    async def body(agent):
        assert "action" in await agent.error("cuba_zafra", action="pagerankk")
        assert "action" in await agent.error("cuba_zafra", action="communitie", threshold=0.2)

    run_stdio(location, body)
    assert memory.store.node_metrics(memory.scope(None)) == []
