"""Graph reasoning (issue 14): cuba_reflexion analyze, cuba_hipotesis explain, cuba_puente predict
and the NPMI link (CLI and consolidation cycle), on small graphs whose answers are worked out by
hand below, on both backends; the tools through the official MCP client, bad values included."""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import replace

import pytest

from conftest import SERVER_BIN, StoreLocation
from cuba_memorys.errors import InvalidInput
from cuba_memorys.services.graph import entities, hipotesis, link, predict, reflexion, relations
from cuba_memorys.services.lifecycle import rem
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sessions import sessions
from mcp_helpers import run_stdio


# -- helpers -----------------------------------------------------------------------------------
def set_importance(mem: Memory, **values: float) -> None:
    for name, importance in values.items():
        mem.store._exec("UPDATE entities SET importance = ? WHERE name = ?", (importance, name))


def edge(mem: Memory, a: str, b: str, kind: str = "related_to", strength: float | None = None) -> None:
    relations.create(mem, None, a, b, relation_type=kind)
    if strength is not None:
        mem.store._exec("UPDATE relations SET strength = ? WHERE from_entity_id = (SELECT id FROM entities"
                        " WHERE name = ?) AND to_entity_id = (SELECT id FROM entities WHERE name = ?)",
                        (strength, a, b))


def all_relations(mem: Memory) -> list[tuple]:
    rows = mem.store._q("SELECT f.name, t.name, r.relation_type, r.strength, r.bidirectional, r.provenance"
                        " FROM relations r JOIN entities f ON f.id = r.from_entity_id"
                        " JOIN entities t ON t.id = r.to_entity_id ORDER BY f.name, t.name, r.relation_type")
    return [tuple(r) for r in rows]


# -- cuba_reflexion ----------------------------------------------------------------------------
FACTS = ["The API is served by FastAPI", "Requests are logged as JSON lines", "Rate limits are 100 per minute",
         "Tokens expire after one hour", "Pagination uses opaque cursors"]


def build_reflexion_graph(mem: Memory) -> None:
    """Six entities, four types; A (concept) links to B and C (technology); D, E (person) and F
    (config) have no relation. A holds 5 facts and a decision, nothing else has observations."""
    for name, kind in [("A", "concept"), ("B", "technology"), ("C", "technology"), ("D", "person"),
                       ("E", "person"), ("F", "config")]:
        entities.create(mem, None, name, kind)
    for fact in FACTS:
        write.add(mem, None, entity_name="A", content=fact)
    write.add(mem, None, entity_name="A", content="We chose cursor pagination over offsets",
              observation_type="decision")
    edge(mem, "A", "B")
    edge(mem, "A", "C", "uses")
    set_importance(mem, A=0.9, B=0.3, C=0.3, D=0.6, E=0.2, F=0.1)


def test_reflexion_finds_the_five_gaps_of_a_known_graph(memory: Memory):
    build_reflexion_graph(memory)
    got = reflexion.analyze(memory, None)
    gaps = got["gaps"]
    assert gaps["isolated_entities"] == [{"name": "D", "entity_type": "person"}, {"name": "E", "entity_type": "person"},
                                         {"name": "F", "entity_type": "config"}]
    # importance > 0.4 and degree < 3: A (0.9, 2) and D (0.6, 0); B and C are not important enough
    assert gaps["underconnected_high_importance"] == [{"name": "A", "importance": 0.9, "degree": 2},
                                                      {"name": "D", "importance": 0.6, "degree": 0}]
    # only concept-technology is joined; every other pair of the four present types is a silo
    assert {(s["type_a"], s["type_b"]) for s in gaps["type_silos"]} == {
        ("concept", "config"), ("concept", "person"), ("config", "person"), ("config", "technology"),
        ("person", "technology")}
    assert gaps["observation_gaps"] == [{"name": "A", "facts": 5, "decisions": 1, "lessons": 0}]
    # obs counts [6,0,0,0,0,0]: mean 1, std sqrt(5) → z = 5/sqrt(5) = 2.236; degrees [2,1,1,0,0,0]:
    # std 0.745 is floored to 1.0 → z = 2 - 2/3 = 1.333
    assert gaps["density_anomalies"] == [{"name": "A", "obs_count": 6, "rel_count": 2,
                                          "obs_zscore": round(math.sqrt(5), 3), "rel_zscore": 1.333}]
    assert got["summary"]["entities"] == 6 and got["summary"]["total_gaps"] == 3 + 2 + 5 + 1 + 1
    assert len(got["recommendations"]) == 12
    assert all(r.endswith(".") and r.count(". ") == 0 for r in got["recommendations"])  # one sentence each


def test_reflexion_of_an_empty_graph_has_no_gaps(memory: Memory):
    got = reflexion.analyze(memory, None)
    assert all(found == [] for found in got["gaps"].values()) and got["recommendations"] == []


# -- cuba_hipotesis ----------------------------------------------------------------------------
def build_causal_graph(mem: Memory) -> None:
    """Y causes Z (0.8), W causes Z (0.5), X causes Y (0.5), Z causes X (0.9: a cycle X→Y→Z→X),
    U uses Z (not a causal kind). Importances Y 0.5, W 0.9, X 0.9, U 1.0."""
    for name in "XYZWU":
        entities.create(mem, None, name)
    edge(mem, "Y", "Z", "causes", 0.8)
    edge(mem, "W", "Z", "causes", 0.5)
    edge(mem, "X", "Y", "causes", 0.5)
    edge(mem, "Z", "X", "causes", 0.9)
    edge(mem, "U", "Z", "uses", 1.0)
    set_importance(mem, X=0.9, Y=0.5, Z=0.5, W=0.9, U=1.0)


def test_hipotesis_ranks_causes_by_path_strength_times_importance_without_cycles(memory: Memory):
    build_causal_graph(memory)
    got = hipotesis.explain(memory, None, effect="Z")
    # W: 0.5 × 0.9 = 0.45; Y: 0.8 × 0.5 = 0.40; X: 0.8 × 0.5 = 0.40 path × 0.9 = 0.36. Z itself
    # (reachable again through the cycle) and U (a 'uses' edge) are not causes.
    assert [(h["cause"], h["hops"], h["path_strength"], h["plausibility"]) for h in got["hypotheses"]] == [
        ("W", 1, 0.5, 0.45), ("Y", 1, 0.8, 0.4), ("X", 2, 0.4, 0.36)]
    assert got["count"] == 3 and got["max_depth"] == 3 and "scoring" in got
    shallow = hipotesis.explain(memory, None, effect="Z", max_depth=1)
    assert [h["cause"] for h in shallow["hypotheses"]] == ["W", "Y"]
    deep = hipotesis.explain(memory, None, effect="Z", max_depth=9, limit=1)
    assert deep["max_depth"] == 5 and deep["clamped"]["max_depth"] == {"given": 9, "used": 5}
    assert [h["cause"] for h in deep["hypotheses"]] == ["W"]
    # from X the walk goes X ← Z ← {Y ← X (stop: on the path), W}: Y is reached once, at 2 hops
    from_x = hipotesis.explain(memory, None, effect="X", max_depth=5)
    assert sorted((h["cause"], h["hops"]) for h in from_x["hypotheses"]) == [("W", 2), ("Y", 2), ("Z", 1)]


def test_hipotesis_of_an_unknown_effect_is_empty_with_a_note(memory: Memory):
    got = hipotesis.explain(memory, None, effect="nothing-like-this")
    assert got["hypotheses"] == [] and got["count"] == 0 and "not found" in got["note"]
    with pytest.raises(InvalidInput, match="effect"):
        hipotesis.explain(memory, None, effect="")
    with pytest.raises(InvalidInput, match="max_depth"):
        hipotesis.explain(memory, None, effect="Z", max_depth="3")


# -- cuba_puente predict -----------------------------------------------------------------------
def build_prediction_graph(mem: Memory) -> None:
    """S–N1, S–N2, N1–T1, N1–T2, N2–T1 (and S causes K). deg N1 = 3, deg N2 = 2, deg K = 1."""
    for name in ("S", "N1", "N2", "T1", "T2", "K"):
        entities.create(mem, None, name)
    edge(mem, "S", "N1")
    edge(mem, "N2", "S")
    edge(mem, "N1", "T1")
    edge(mem, "T2", "N1", "uses")
    edge(mem, "N2", "T1")
    edge(mem, "S", "K", "causes")


AA_T1 = 1 / math.log(3) + 1 / math.log(2)  # common neighbours N1 (degree 3) and N2 (degree 2)
AA_T2 = 1 / math.log(3)  # N1 only


def test_predict_scores_adamic_adar_and_persist_writes_predicted_edges_only(memory: Memory):
    build_prediction_graph(memory)
    before = all_relations(memory)
    got = predict.predict(memory, None, entity_name="S")
    assert [(p["entity"], p["adamic_adar_score"]) for p in got["predictions"]] == [
        ("T1", round(AA_T1 / (AA_T1 + 1), 4)), ("T2", round(AA_T2 / (AA_T2 + 1), 4))]
    assert got["persisted"] is False and got["relations_created"] == 0 and all_relations(memory) == before
    assert "'N1'" in got["predictions"][0]["recommendation"]
    saved = predict.predict(memory, None, start_entity="S", persist=True)
    assert saved["persisted"] is True and saved["relations_created"] == 2
    after = all_relations(memory)
    assert set(before) <= set(after)  # every existing edge exactly as it was
    new = sorted(set(after) - set(before))
    assert new == [("S", "T1", "related_to", pytest.approx(AA_T1 / (AA_T1 + 1)), 1, "predicted"),
                   ("S", "T2", "related_to", pytest.approx(AA_T2 / (AA_T2 + 1)), 1, "predicted")]
    walked = relations.traverse(memory, None, start_entity="S", max_depth=1)
    assert {n["name"]: n["provenance"] for n in walked["nodes"]}["T1"] == "predicted"
    assert {n["name"]: n["provenance"] for n in walked["nodes"]}["N1"] == "extracted"
    context = relations.neighbours(memory, None, [entities.find_entity(memory, None, "T2").id], 5)
    assert {n["name"]: n["provenance"] for n in next(iter(context.values()))} == {"S": "predicted",
                                                                                 "N1": "extracted"}
    after = all_relations(memory)  # (the traversal strengthened the edges it walked)
    again = predict.predict(memory, None, entity_name="S", persist=True)  # now neighbours: nothing new
    assert again["relations_created"] == 0 and all_relations(memory) == after


def test_predict_refuses_bad_values_and_answers_unknown_entities_with_a_note(memory: Memory):
    build_prediction_graph(memory)
    before = all_relations(memory)
    unknown = predict.predict(memory, None, entity_name="nobody")
    assert unknown["predictions"] == [] and "not found" in unknown["note"]
    with pytest.raises(InvalidInput, match="entity_name"):
        predict.predict(memory, None)
    with pytest.raises(InvalidInput, match="persist"):
        predict.predict(memory, None, entity_name="S", persist="yes")
    clamped = predict.predict(memory, None, entity_name="S", limit=500)
    assert clamped["clamped"]["limit"] == {"given": 500, "used": 50}
    assert all_relations(memory) == before


# -- NPMI link ---------------------------------------------------------------------------------
# Four sessions; a in s1 s2, b in s1 s2, e in s1 s2 s3, d in all four, c in s3 only.
# N = 4. NPMI(a,b) = ln(.5/(.5·.5)) / −ln .5 = 1.0; NPMI(a,e) = NPMI(b,e) = ln(.5/(.5·.75)) / ln 2
# = 0.41504; pairs with d have NPMI 0 (d is everywhere); c shares one session with e only.
MEMBERS = {"s1": "abde", "s2": "abde", "s3": "cde", "s4": "d"}
NPMI_AE = math.log(0.5 / (0.5 * 0.75)) / math.log(2)


def build_sessions(mem: Memory) -> None:
    for session, members in MEMBERS.items():
        sessions.start(mem, None, name=session)
        for name in members:
            write.add(mem, None, entity_name=name, content=f"{name} was worked on in session {session}")
        sessions.end(mem, None)
    write.add(mem, None, entity_name="c", content="c was also touched outside any session")
    edge(mem, "a", "b")  # an existing edge the link must leave as it is


def test_link_plans_by_default_and_apply_writes_predicted_edges_without_touching_existing(memory: Memory):
    build_sessions(memory)
    before = all_relations(memory)
    plan = link.link(memory, None)
    assert plan["dry_run"] and plan["sessions"] == 4 and plan["candidates"] == 3 and plan["edges_created"] == 0
    got = [(p["a"] + p["b"], p["npmi"], p["shared_sessions"]) for p in plan["pairs"]]
    assert got[0] == ("ab", 1.0, 2) and sorted(got[1:]) == [("ae", round(NPMI_AE, 4), 2), ("be", round(NPMI_AE, 4), 2)]
    assert all_relations(memory) == before
    strict = link.link(memory, None, threshold=0.5)
    assert [(p["a"], p["b"]) for p in strict["pairs"]] == [("a", "b")]
    done = link.link(memory, None, apply=True)
    assert done["edges_created"] == 2 and done["already_linked"] == 1
    after = all_relations(memory)
    assert set(before) <= set(after)
    new = sorted(set(after) - set(before))
    # each edge's direction follows its ends' ids (random per run): compare the unordered pairs
    assert sorted((sorted((r[0], r[1])), r[2], r[4], r[5]) for r in new) == [
        (["a", "e"], "related_to", 1, "predicted"), (["b", "e"], "related_to", 1, "predicted")]
    assert all(r[3] == pytest.approx(NPMI_AE) for r in new)
    [event] = [e for e in memory.store.audit_tail(memory.scope(None), 10) if e["action"] == "graph.autolink"]
    assert json.loads(event["payload"]) == {"candidates": 3, "edges_created": 2, "threshold": 0.3, "min_sessions": 2}
    assert link.link(memory, None, apply=True)["edges_created"] == 0 and all_relations(memory) == after


def test_link_refuses_bad_values_and_writes_nothing(memory: Memory):
    build_sessions(memory)
    before = all_relations(memory)
    for bad in ({"threshold": 2.0}, {"threshold": "0.3"}, {"min_sessions": 0}, {"show": -1}, {"apply": "yes"}):
        with pytest.raises(InvalidInput, match=next(iter(bad))):
            link.link(memory, None, **bad)
    assert all_relations(memory) == before


def test_the_consolidation_cycle_autolinks_unless_switched_off(memory: Memory):
    build_sessions(memory)
    off = replace(memory.settings, rem_autolink=False)
    saved = memory.settings
    memory.settings = off
    quiet = rem.run_cycle(memory)
    assert quiet["autolink_edges"] == 0 and "autolink" in quiet["notes"] and "autolink" not in quiet["skipped_steps"]
    memory.settings = saved
    cycle = rem.run_cycle(memory)
    assert cycle["error"] is None and cycle["autolink_edges"] == 2
    assert memory.store.rem_cycles(1)[0]["autolink_edges"] == 2
    assert sum(1 for r in all_relations(memory) if r[5] == "predicted") == 2


# -- through the command line and the MCP client ---------------------------------------------
def cli(where: StoreLocation, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SERVER_BIN), *args], env=where.env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == check, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_link_command_plans_applies_and_refuses_bad_values(location: StoreLocation, memory: Memory):
    build_sessions(memory)
    memory.close()
    plan = json.loads(cli(location, "link", "--json").stdout)
    assert plan["dry_run"] and plan["candidates"] == 3
    text = cli(location, "link", "--threshold", "0.5", "--show", "1").stdout
    assert "'a' ~ 'b': npmi 1.000, 2 sessions" in text and "--apply" in text
    assert "threshold" in cli(location, "link", "--threshold", "3", check=2).stderr
    done = cli(location, "link", "--apply", "--min-sessions", "2").stdout
    assert "created 2 edge(s)" in done


async def mcp_session(agent) -> dict:
    out: dict = {}
    await agent.call("cuba_proyecto", action="switch", name="reasoning")
    for name in "XYZW":
        await agent.call("cuba_alma", action="create", name=name)
    for a, b in [("Y", "Z"), ("W", "Z"), ("X", "Y"), ("Z", "X")]:
        await agent.call("cuba_puente", action="create", from_entity=a, to_entity=b, relation_type="causes")
    out["reflexion"] = await agent.call("cuba_reflexion")
    out["reflexion_named"] = await agent.call("memory_reflexion", action="analyze")
    out["explain"] = await agent.call("cuba_hipotesis", action="explain", effect="Z", max_depth=0)
    out["explain_missing"] = await agent.call("cuba_hipotesis", action="explain", effect="nobody")
    out["predict"] = await agent.call("cuba_puente", action="predict", entity_name="X", persist=True)
    out["traverse"] = await agent.call("cuba_puente", action="traverse", start_entity="X", max_depth=1)
    out["errors"] = [
        await agent.error("cuba_reflexion", action="reflect"),
        await agent.error("cuba_hipotesis", action="explain", effect=""),
        await agent.error("cuba_hipotesis", action="explain", effect="Z", max_depth="deep"),
        await agent.error("cuba_puente", action="predict"),
        await agent.error("cuba_puente", action="predict", entity_name="X", persist="yes"),
    ]
    # another action's parameter: ignored and named (issue 32), never a write
    out["foreign"] = await agent.call("cuba_puente", action="traverse", start_entity="X", persist=True)
    out["after_errors"] = await agent.call("cuba_puente", action="traverse", start_entity="X", max_depth=1)
    return out


def test_the_tools_over_mcp(location: StoreLocation):
    got = run_stdio(location, mcp_session)
    assert got["reflexion"]["action"] == "analyze" and got["reflexion"]["summary"]["entities"] == 4
    assert got["reflexion_named"]["gaps"] == got["reflexion"]["gaps"]
    explain = got["explain"]
    assert explain["max_depth"] == 1 and explain["clamped"]["max_depth"] == {"given": 0, "used": 1}
    assert sorted(h["cause"] for h in explain["hypotheses"]) == ["W", "Y"]
    assert got["explain_missing"]["hypotheses"] == [] and "note" in got["explain_missing"]
    # X's neighbours are Y and Z; Z's other neighbour W (deg Z = 3: Y, W, X) is the one prediction
    predicted = got["predict"]
    assert [p["entity"] for p in predicted["predictions"]] == ["W"] and predicted["relations_created"] == 1
    assert predicted["predictions"][0]["adamic_adar_score"] == round((1 / math.log(3)) / (1 / math.log(3) + 1), 4)
    assert {n["name"]: n["provenance"] for n in got["traverse"]["nodes"]}["W"] == "predicted"
    reflect, empty, deep, nameless, persist = got["errors"]
    assert "action" in reflect and "analyze" in reflect
    assert "effect" in empty and "max_depth" in deep
    assert "entity_name" in nameless and "persist" in persist
    assert got["foreign"]["ignored"] == ["persist"]
    names = sorted(n["name"] for n in got["traverse"]["nodes"])
    assert sorted(n["name"] for n in got["after_errors"]["nodes"]) == names  # the failed calls wrote no edge
