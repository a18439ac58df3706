"""cuba_alma get reads its relations' other ends in one query, however many relations there are."""

from __future__ import annotations

from cuba_memorys.services.graph import entities, relations
from cuba_memorys.services.observations import write as observations


def count_statements(store, monkeypatch) -> list[str]:
    seen: list[str] = []
    for name in ("_q", "_one", "_exec"):
        original = getattr(store, name)

        def counted(sql, params=(), _original=original):
            seen.append(sql)
            return _original(sql, params)

        monkeypatch.setattr(store, name, counted)
    return seen


def statements_for_get(memory, monkeypatch, neighbours: int) -> int:
    hub = f"hub{neighbours}"
    observations.add(memory, None, entity_name=hub, content=f"The {hub} service routes every request")
    for n in range(neighbours):
        entities.create(memory, None, f"{hub}-leaf{n}")
        relations.create(memory, None, hub, f"{hub}-leaf{n}", "uses")
    seen = count_statements(memory.store, monkeypatch)
    got = entities.get(memory, None, hub)
    assert len(got["relations"]) == neighbours
    monkeypatch.undo()
    return len(seen)


def test_get_does_not_look_up_each_neighbour_on_its_own(memory, monkeypatch):
    few = statements_for_get(memory, monkeypatch, 2)
    many = statements_for_get(memory, monkeypatch, 12)
    assert many == few, f"{few} statements for 2 relations but {many} for 12 (one lookup per neighbour)"


def test_relation_views_name_both_directions_and_hide_other_projects(memory):
    from cuba_memorys.services.graph import projects

    entities.create(memory, None, "shared-db")
    projects.switch(memory, "a", "alpha")
    entities.create(memory, "a", "api")
    entities.create(memory, "a", "worker")
    relations.create(memory, "a", "api", "worker", "causes")
    relations.create(memory, "a", "worker", "api", "depends_on")
    projects.switch(memory, "b", "beta")
    entities.create(memory, "b", "beta-only")
    api = entities.find_entity(memory, "a", "api")
    views = entities.relation_views(memory, "a", api)
    assert {(v["entity"], v["type"], v["direction"]) for v in views} == {
        ("worker", "causes", "outgoing"), ("worker", "depends_on", "incoming")}
