"""cuba_decreto (decisions), cuba_receta (procedures) and cuba_pizarra (working memory):
services on both backends, then the tools over stdio with the official MCP client."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conftest import BACKENDS, StoreLocation, settings_for
from cuba_memorys.errors import InvalidInput, NotFound, SecretRefused
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.admin.migrate import to_postgres
from cuba_memorys.services.graph import projects
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.workflow import decisions, procedures
from cuba_memorys.services.workflow import working_memory as scratch
from mcp_helpers import run_stdio

TOKEN = "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
STEPS = [{"do": "Bump the version", "run": "make bump"}, {"do": "Push the tag", "expect": "CI publishes the wheel"}]


def _decision_count(mem) -> int:
    return decisions.list_recent(mem, None)["count"]


# -- reliability ----------------------------------------------------------------------------
def test_wilson_lower_bound_matches_the_original_numbers():
    assert round(procedures.wilson_lower_bound(1, 0), 2) == 0.21
    assert round(procedures.wilson_lower_bound(47, 3), 2) == 0.84
    assert procedures.wilson_lower_bound(0, 0) == 0


def test_reliability_is_reported_from_recorded_outcomes(memory):
    assert procedures.add(memory, None, name="release", steps=STEPS)["reliability"] == 0
    procedures.outcome(memory, None, "release", True)
    assert round(procedures.get(memory, None, "release")["reliability"], 2) == 0.21
    for i in range(49):
        last = procedures.outcome(memory, None, "release", i >= 3)  # 3 failures, 46 more successes
    assert (last["successes"], last["failures"], round(last["reliability"], 2)) == (47, 3, 0.84)
    assert last["last_outcome"] == "success" and last["last_used_at"]


# -- procedures -----------------------------------------------------------------------------
def test_readding_a_procedure_updates_it_and_keeps_its_counts(memory):
    first = procedures.add(memory, None, name="release", trigger="cutting a release", steps=STEPS,
                           preconditions="main is green", verification="pip install works")
    procedures.outcome(memory, None, "release", True)
    again = procedures.add(memory, None, name="release", steps=[{"do": "Run the release workflow"}])
    assert again["id"] == first["id"] and again["updated"] is True and first["updated"] is False
    assert again["successes"] == 1 and again["steps"] == [{"do": "Run the release workflow"}]
    assert again["trigger"] is None  # every field is replaced, only the counts stay
    got = procedures.get(memory, None, "release")
    assert got["action"] == "get" and got["markdown"].startswith("# release\n")
    assert "1. Run the release workflow" in got["markdown"]
    assert procedures.list_all(memory, None)["count"] == 1


def test_markdown_has_every_part_of_the_recipe(memory):
    procedures.add(memory, None, name="release", trigger="cutting a release", steps=STEPS,
                   preconditions="main is green", verification="pip install works")
    md = procedures.get(memory, None, "release")["markdown"]
    for part in ("**When:** cutting a release", "## Preconditions", "main is green", "1. Bump the version",
                 "make bump", "2. Push the tag", "Expect: CI publishes the wheel", "## Verification"):
        assert part in md, part


def test_search_and_list_rank_by_reliability(memory):
    for name, trigger in (("deploy staging", "deploy to staging"), ("deploy production", "deploy to production"),
                          ("rotate keys", "rotate the signing keys")):
        procedures.add(memory, None, name=name, trigger=trigger, steps=[{"do": f"follow {name}"}])
    procedures.outcome(memory, None, "deploy staging", True)
    for _ in range(5):
        procedures.outcome(memory, None, "deploy production", True)
    found = procedures.search(memory, None, "how to deploy")
    assert [p["name"] for p in found["procedures"]] == ["deploy production", "deploy staging"]
    assert found["count"] == 2 and found["query"] == "how to deploy"
    assert procedures.search(memory, None, "deploy", limit=1)["count"] == 1
    assert procedures.search(memory, None, "kubernetes upgrade")["count"] == 0
    listed = procedures.list_all(memory, None)
    assert [p["name"] for p in listed["procedures"]] == ["deploy production", "deploy staging", "rotate keys"]
    assert procedures.list_all(memory, None, limit=2)["count"] == 2


def test_repeated_failures_give_a_hint(memory):
    procedures.add(memory, None, name="flaky", steps=[{"do": "retry"}])
    assert "hint" not in procedures.outcome(memory, None, "flaky", False)
    second = procedures.outcome(memory, None, "flaky", False)
    assert second["failures"] == 2 and "revise" in second["hint"] and second["last_outcome"] == "failure"
    assert "hint" not in procedures.outcome(memory, None, "flaky", True)


def test_delete_removes_and_a_missing_procedure_is_an_error(memory):
    procedures.add(memory, None, name="release", steps=STEPS)
    assert procedures.delete(memory, None, "release") == {"action": "delete", "name": "release", "deleted": True}
    for call in (lambda: procedures.delete(memory, None, "release"), lambda: procedures.get(memory, None, "release"),
                 lambda: procedures.outcome(memory, None, "release", True)):
        with pytest.raises(NotFound, match="release"):
            call()


def test_procedures_belong_to_their_project(memory):
    projects.switch(memory, None, "alpha")
    alpha = procedures.add(memory, None, name="deploy", steps=[{"do": "alpha's way"}])
    procedures.outcome(memory, None, "deploy", True)
    projects.switch(memory, None, "beta")
    with pytest.raises(NotFound):
        procedures.get(memory, None, "deploy")
    assert procedures.list_all(memory, None)["count"] == 0
    beta = procedures.add(memory, None, name="deploy", steps=[{"do": "beta's way"}])
    assert beta["id"] != alpha["id"] and beta["successes"] == 0 and beta["updated"] is False
    projects.switch(memory, None, "alpha")
    assert procedures.get(memory, None, "deploy")["steps"] == [{"do": "alpha's way"}]


def test_row_level_security_covers_procedures_and_working_memory(memory, backend):
    """PostgreSQL only: with beta bound, SQL itself sees none of alpha's recipes or notes."""
    if backend != "postgresql":
        pytest.skip("SQLite has no row-level security; the scope conditions isolate projects")
    projects.switch(memory, None, "alpha")
    procedures.add(memory, None, name="deploy", steps=[{"do": "alpha's way"}])
    scratch.write(memory, None, content="alpha's note")
    projects.switch(memory, None, "beta")
    with memory.store.bind_project(memory.client(None).project_id):
        for table in ("procedures", "working_memory"):
            assert memory.store._q(f"SELECT count(*) FROM {table}")[0][0] == 0
            assert memory.store._exec(f"DELETE FROM {table}").rowcount == 0
    with memory.store.bind_project(None):
        assert memory.store._q("SELECT count(*) FROM procedures")[0][0] == 1


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="needs the PostgreSQL test server")
def test_recipes_and_notes_come_along_when_migrating_to_postgresql(tmp_path, postgres):
    embedded = settings_for(StoreLocation("sqlite", tmp_path / "data"))
    mem = Memory.open(embedded)
    procedures.add(mem, None, name="release", steps=STEPS)
    procedures.outcome(mem, None, "release", True)
    scratch.write(mem, None, content="halfway through the refactor", tag="task")
    mem.close()
    url = postgres.new_database(empty=True)
    try:
        report = to_postgres(embedded, url)
        assert report["copied"]["procedures"] == 1 and report["copied"]["working_memory"] == 1
        moved = Memory.open(settings_for(StoreLocation("postgresql", tmp_path / "data", url)))
        try:
            assert procedures.get(moved, None, "release")["successes"] == 1
            assert scratch.read(moved, None)["entries"][0]["tag"] == "task"
        finally:
            moved.close()
    finally:
        postgres.drop(url)


@pytest.mark.parametrize("args, param", [
    ({"name": "", "steps": STEPS}, "name"),
    ({"name": "x" * 201, "steps": STEPS}, "name"),
    ({"name": "r", "steps": []}, "steps"),
    ({"name": "r", "steps": "do it"}, "steps"),
    ({"name": "r", "steps": ["do it"]}, "steps[0]"),
    ({"name": "r", "steps": [{"run": "make"}]}, "steps[0].do"),
    ({"name": "r", "steps": [{"do": "a"}, {"do": "b", "when": "now"}]}, "steps[1].when"),
    ({"name": "r", "steps": [{"do": "a", "run": 5}]}, "steps[0].run"),
    ({"name": "r", "steps": [{"do": "a", "run": f"export {TOKEN}"}]}, "steps[0].run"),
    ({"name": "r", "steps": STEPS, "trigger": 3}, "trigger"),
    ({"name": "r", "steps": STEPS, "preconditions": TOKEN}, "preconditions"),
    ({"name": "r", "steps": STEPS, "verification": "x" * 10001}, "verification"),
])
def test_bad_procedure_input_names_the_parameter_and_writes_nothing(memory, args, param):
    with pytest.raises((InvalidInput, SecretRefused)) as caught:
        procedures.add(memory, None, **args)
    assert param in str(caught.value)
    assert procedures.list_all(memory, None)["count"] == 0


def test_bad_search_list_and_outcome_input(memory):
    procedures.add(memory, None, name="r", steps=STEPS)
    for call, param in ((lambda: procedures.search(memory, None, "r", limit="26"), "limit"),
                        (lambda: procedures.search(memory, None, ""), "query"),
                        (lambda: procedures.list_all(memory, None, limit=1.5), "limit"),
                        (lambda: procedures.outcome(memory, None, "r", None), "success"),
                        (lambda: procedures.outcome(memory, None, "r", "yes"), "success")):
        with pytest.raises(InvalidInput, match=param):
            call()
    assert procedures.get(memory, None, "r")["successes"] == 0
    # out-of-range limits are clamped, as the original does, and the answer says so
    assert procedures.search(memory, None, "r", limit=26)["clamped"] == {"limit": {"given": 26, "used": 25}}
    assert procedures.search(memory, None, "r", limit=0)["clamped"] == {"limit": {"given": 0, "used": 1}}
    listed = procedures.list_all(memory, None, limit=101)
    assert listed["clamped"] == {"limit": {"given": 101, "used": 100}} and listed["count"] == 1
    assert "clamped" not in procedures.list_all(memory, None, limit=100)


# -- decisions ------------------------------------------------------------------------------
def test_a_decision_is_a_decision_observation_found_by_meaning(memory):
    recorded = decisions.record(memory, None, title="Database for shared mode",
                                context="Several agents share one memory",
                                alternatives=["SQLite on NFS", "PostgreSQL"], chosen="PostgreSQL",
                                rationale="Row-level security and concurrent writers")
    decisions.record(memory, None, title="Indentation", chosen="four spaces", rationale="PEP 8")
    assert recorded["action"] == "record" and recorded["title"] == "Database for shared mode"
    stored = observations.list_for(memory, None, decisions.DECISIONS_ENTITY)["observations"]
    row = next(o for o in stored if o["id"] == recorded["id"])
    assert row["type"] == "decision" and row["importance"] >= 0.8
    assert row["content"].startswith("Decision: Database for shared mode\nContext:")
    assert "Alternatives: SQLite on NFS; PostgreSQL" in row["content"]
    found = decisions.query(memory, None, "which database do the agents share?")
    assert found["similarity_method"] == "cosine" and "degraded" not in found
    assert found["results"][0]["id"] == recorded["id"] and found["results"][0]["similarity"] > 0.2
    assert set(found["results"][0]) == {"id", "content", "similarity"}
    assert "decision" in decisions.NEVER_DECAYS


def test_list_is_the_20_newest_including_decisions_written_with_cronica(memory):
    batch = observations.batch_add(memory, None, [
        {"entity_name": f"svc{i}", "content": f"Service {i} is written in Go version 1.{i}",
         "observation_type": "decision", "created_at": f"2024-01-{i + 1:02d}T00:00:00Z"} for i in range(21)])
    observations.add(memory, None, entity_name="svc0", content="Service 0 runs on port 80")  # a fact
    newest = decisions.record(memory, None, title="Queue", chosen="NATS")
    listed = decisions.list_recent(memory, None)
    assert listed["count"] == 20 and listed["decisions"][0]["id"] == newest["id"]
    listed_ids = [d["id"] for d in listed["decisions"]]
    assert batch["ids"][1] not in listed_ids and batch["ids"][2] in listed_ids  # the 2 oldest of 22 dropped out
    assert len(decisions.query(memory, None, "what is service 3 written in")["results"]) <= 10


def test_recording_the_same_decision_twice_keeps_one(memory):
    first = decisions.record(memory, None, title="Queue", chosen="NATS", rationale="simple")
    again = decisions.record(memory, None, title="Queue", chosen="NATS", rationale="simple")
    assert again["id"] == first["id"] and again["deduplicated"] is True and _decision_count(memory) == 1


def test_query_without_a_model_uses_trigrams_and_says_so(open_memory):
    mem = open_memory(embed_model="none")
    recorded = decisions.record(mem, None, title="Use PostgreSQL for shared mode", chosen="PostgreSQL")
    decisions.record(mem, None, title="Indentation", chosen="four spaces")
    found = decisions.query(mem, None, "postgresql shared")
    assert found["similarity_method"] == "trigram" and found["degraded"] is True and found["degraded_reason"]
    assert [r["id"] for r in found["results"]] == [recorded["id"]]


@pytest.mark.parametrize("args, param", [
    ({}, "chosen"),
    ({"title": ""}, "chosen"),
    ({"title": "x" * 201, "chosen": "a"}, "title"),
    ({"title": 5, "chosen": "a"}, "title"),
    ({"chosen": "a", "alternatives": "a or b"}, "alternatives"),
    ({"chosen": "a", "alternatives": ["a", ""]}, "alternatives[1]"),
    ({"chosen": "a", "context": 3}, "context"),
    ({"chosen": f"use {TOKEN}"}, "chosen"),
    ({"chosen": "a", "rationale": TOKEN}, "rationale"),
    ({"chosen": "a", "alternatives": [TOKEN]}, "alternatives[0]"),
    ({"chosen": "a", "context": "c" * 6000, "rationale": "r" * 5000}, "context"),
])
def test_bad_decision_input_names_the_parameter_and_writes_nothing(memory, args, param):
    with pytest.raises((InvalidInput, SecretRefused)) as caught:
        decisions.record(memory, None, **args)
    assert param in str(caught.value)
    assert _decision_count(memory) == 0 and memory.store.counts()["entities"] == 0


def test_a_secret_is_stored_when_allowed(memory):
    decisions.record(memory, None, chosen="a", rationale=TOKEN, allow_secret=True)
    assert _decision_count(memory) == 1
    with pytest.raises(InvalidInput, match="query"):
        decisions.query(memory, None, "")


# -- working memory -------------------------------------------------------------------------
def test_write_read_clear_by_tag_and_all(memory):
    first = scratch.write(memory, None, content="Refactoring search.py, step 2 of 4", tag="task")
    scratch.write(memory, None, content="pytest -k faro is slow", tag="note", ttl_seconds=60)
    assert first["session_id"] is None and first["ttl_seconds"] == 3600 and first["tag"] == "task"
    read = scratch.read(memory, None)
    assert read["count"] == 2 and read["session_id"] is None
    assert read["entries"][0]["content"] == "pytest -k faro is slow"  # newest first
    assert set(read["entries"][0]) == {"id", "content", "tag", "created_at", "expires_at"}
    assert [e["tag"] for e in scratch.read(memory, None, tag="task")["entries"]] == ["task"]
    assert scratch.clear(memory, None, tag="task") == {"action": "clear", "deleted": 1, "tag": "task",
                                                        "session_id": None}
    assert scratch.clear(memory, None)["deleted"] == 1 and scratch.read(memory, None)["count"] == 0


def test_expired_entries_are_never_returned_and_are_purged(memory, monkeypatch):
    short = scratch.write(memory, None, content="short-lived", ttl_seconds=5)
    scratch.write(memory, None, content="long-lived", ttl_seconds=3600)
    later = utc_now() + timedelta(seconds=10)
    # the store's filter alone hides it, before any purge
    rows = memory.store.working_memory_entries("default", None, memory.scope(None), None,
                                               iso(later), 100)
    assert [r["content"] for r in rows] == ["long-lived"]
    monkeypatch.setattr(scratch, "utc_now", lambda: later)
    assert [e["content"] for e in scratch.read(memory, None)["entries"]] == ["long-lived"]
    left = memory.store._q("SELECT id FROM working_memory")
    assert short["id"] not in [r[0] for r in left] and len(left) == 1


def test_each_client_has_its_own_working_memory(memory):
    scratch.write(memory, "agent-a", content="a's note")
    assert scratch.read(memory, "agent-b")["count"] == 0
    assert scratch.clear(memory, "agent-b")["deleted"] == 0
    assert scratch.read(memory, "agent-a")["entries"][0]["content"] == "a's note"


@pytest.mark.parametrize("args, param", [
    ({"content": ""}, "content"),
    ({"content": "   "}, "content"),
    ({"content": "x" * 10001}, "content"),
    ({"content": "note", "ttl_seconds": 0}, "ttl_seconds"),
    ({"content": "note", "ttl_seconds": -5}, "ttl_seconds"),
    ({"content": "note", "ttl_seconds": "soon"}, "ttl_seconds"),
    ({"content": "note", "tag": "t" * 201}, "tag"),
    ({"content": TOKEN}, "allow_secret"),
])
def test_bad_working_memory_input_names_the_parameter_and_writes_nothing(memory, args, param):
    with pytest.raises((InvalidInput, SecretRefused)) as caught:
        scratch.write(memory, None, **args)
    assert param in str(caught.value)
    assert scratch.read(memory, None)["count"] == 0


# -- over MCP -------------------------------------------------------------------------------
def test_the_three_tools_over_mcp(location):
    async def body(agent):
        out = {"tools": {t.name: t for t in (await agent.session.list_tools()).tools}}
        out["record"] = await agent.call("cuba_decreto", action="record", title="Cache layer", chosen="Redis",
                                         alternatives=["Memcached", "Redis"], rationale="persistence")
        out["query"] = await agent.call("memory_decreto", action="query", query="which cache do we use")
        out["decisions"] = await agent.call("cuba_decreto", action="list")
        out["add"] = await agent.call("cuba_receta", action="add", name="release", trigger="cut a release",
                                      steps=STEPS)
        out["outcome"] = await agent.call("cuba_receta", action="outcome", name="release", success=True)
        out["get"] = await agent.call("memory_receta", action="get", name="release")
        out["search"] = await agent.call("cuba_receta", action="search", query="release")
        out["list"] = await agent.call("cuba_receta", action="list", limit=100)
        out["delete"] = await agent.call("cuba_receta", action="delete", name="release")
        out["write"] = await agent.call("cuba_pizarra", action="write", content="halfway through the refactor",
                                        tag="task")
        out["read"] = await agent.call("memory_pizarra", action="read")
        out["clear"] = await agent.call("cuba_pizarra", action="clear")
        return out

    out = run_stdio(location, body)
    tools = out["tools"]
    for name in ("cuba_decreto", "cuba_receta", "cuba_pizarra"):
        assert name in tools and "memory_" + name.removeprefix("cuba_") in tools
    assert tools["cuba_receta"].annotations.destructive_hint is True
    assert tools["cuba_pizarra"].annotations.destructive_hint is True
    assert tools["cuba_decreto"].annotations.destructive_hint is False
    assert tools["cuba_pizarra"].input_schema["properties"]["ttl_seconds"]["default"] == 3600
    assert out["query"]["results"][0]["id"] == out["record"]["id"] and out["query"]["count"] >= 1
    assert out["decisions"]["decisions"][0]["id"] == out["record"]["id"]
    assert out["add"]["action"] == "add" and out["add"]["steps"] == STEPS
    assert out["outcome"]["successes"] == 1 and round(out["outcome"]["reliability"], 2) == 0.21
    assert "make bump" in out["get"]["markdown"]
    assert out["search"]["procedures"][0]["name"] == "release" and out["list"]["count"] == 1
    assert out["delete"] == {"action": "delete", "name": "release", "deleted": True}
    assert out["write"]["session_id"] is None and out["write"]["ttl_seconds"] == 3600
    assert out["read"]["entries"][0]["content"] == "halfway through the refactor"
    assert out["clear"]["deleted"] == 1


BAD_CALLS = [
    ("cuba_decreto", {"action": "decide"}, "action"),
    ("cuba_decreto", {"action": "record"}, "chosen"),
    ("cuba_decreto", {"action": "record", "chosen": "a", "alternatives": "a, b"}, "alternatives"),
    ("cuba_decreto", {"action": "record", "rationale": TOKEN}, "allow_secret"),
    ("cuba_decreto", {"action": "query"}, "query"),
    ("cuba_receta", {"action": "add", "steps": STEPS}, "name"),
    ("cuba_receta", {"action": "add", "name": "r"}, "steps"),
    ("cuba_receta", {"action": "add", "name": "r", "steps": [{"do": ""}]}, "steps[0].do"),
    ("cuba_receta", {"action": "get", "name": "ghost"}, "ghost"),
    ("cuba_receta", {"action": "delete", "name": "ghost"}, "ghost"),
    ("cuba_receta", {"action": "outcome", "name": "ghost"}, "success"),
    ("cuba_receta", {"action": "search", "query": "x", "limit": "many"}, "limit"),
    ("cuba_receta", {"action": "list", "limit": 2.5}, "limit"),
    ("cuba_pizarra", {"action": "write"}, "content"),
    ("cuba_pizarra", {"action": "write", "content": "n", "ttl_seconds": 0}, "ttl_seconds"),
    ("cuba_pizarra", {"action": "write", "content": "n", "ttl_seconds": "soon"}, "ttl_seconds"),
    ("cuba_pizarra", {"action": "erase"}, "action"),
]


def test_bad_input_over_mcp_is_a_clear_error_and_writes_nothing(location):
    async def body(agent):
        messages = [(param, await agent.error(tool, **args)) for tool, args, param in BAD_CALLS]
        state = (await agent.call("cuba_decreto", action="list"), await agent.call("cuba_receta", action="list"),
                 await agent.call("cuba_pizarra", action="read"))
        return messages, state

    messages, (decided, recipes, notes) = run_stdio(location, body)
    for param, message in messages:
        assert param in message, message
        assert "internal error" not in message
    assert decided["count"] == 0 and recipes["count"] == 0 and notes["count"] == 0


def test_a_ttl_beyond_a_year_is_clamped_and_said(memory):
    written = scratch.write(memory, None, content="keep this a while", ttl_seconds=10 ** 12)
    assert written["ttl_seconds"] == scratch.MAX_TTL_SECONDS
    assert written["clamped"] == {"ttl_seconds": {"given": 10 ** 12, "used": scratch.MAX_TTL_SECONDS}}
    assert scratch.read(memory, None)["count"] == 1
