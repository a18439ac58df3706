"""Graph reports kept between calls on large graphs (services/graph/reports.py), on both
backends: served while the graph is unchanged, recomputed when it changes, refreshed by the
consolidation cycle. The size threshold is lowered so a small graph counts as large."""

from __future__ import annotations

import pytest

from cuba_memorys.server import catalog
from cuba_memorys.services.graph import relations, reports
from cuba_memorys.services.lifecycle import rem
from cuba_memorys.services.observations import write


@pytest.fixture
def graph(memory, monkeypatch):
    monkeypatch.setattr(reports, "CACHE_ABOVE", 3)
    for name in ("api", "db", "cache", "queue"):
        write.add(memory, None, entity_name=name, content=f"The {name} is part of the backend")
    relations.create(memory, None, from_entity="api", to_entity="db", relation_type="uses")
    relations.create(memory, None, from_entity="api", to_entity="cache", relation_type="uses")
    return memory


def service(tool: str, action: str):
    return catalog.tool(tool).action(action).service


def test_an_unchanged_graph_is_answered_from_the_stored_report(graph):
    bridges = service("cuba_vigia", "bridges")
    first = bridges(graph, None)
    again = bridges(graph, None)
    assert again == first and "computed_at" in first  # the same computation, said when it was made
    relations.create(graph, None, from_entity="db", to_entity="queue", relation_type="depends_on")
    changed = bridges(graph, None)
    assert changed["computed_at"] >= first["computed_at"] and changed["bridge_entities"] != first["bridge_entities"]


def test_small_graphs_are_computed_every_time(memory):
    write.add(memory, None, entity_name="api", content="The API is small")
    answer = service("cuba_reflexion", "analyze")(memory, None)
    assert "computed_at" not in answer  # below the threshold: always current, nothing stored


def test_the_cycle_stores_the_reports_for_the_next_calls(graph):
    done = rem.run_cycle(graph)
    assert done["error"] is None and "3 graph reports stored" in done["notes"]["reports"]
    stored = graph.store.get_meta("report:reflexion:*:0")
    assert stored and service("cuba_reflexion", "analyze")(graph, None)["computed_at"] in stored
