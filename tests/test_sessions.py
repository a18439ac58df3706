"""cuba_jornada: work sessions per client, their diff, and what they change in cuba_faro."""

from __future__ import annotations

import pytest

from cuba_memorys.errors import InvalidInput, SecretRefused
from cuba_memorys.server import catalog
from cuba_memorys.server.runtime import pick_action
from cuba_memorys.services.graph import episodes, projects
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.services.sessions import sessions
from mcp_helpers import run_stdio


def test_a_session_from_start_to_end(memory):
    started = sessions.start(memory, "agent-a", name="auth refactor", goals=["move login to OAuth"],
                             project="webapp")
    assert started["action"] == "started" and "previous_session" not in started
    session = started["session"]
    assert session["session_name"] == "auth refactor" and session["project_name"] == "webapp"
    assert projects.current(memory, "agent-a")["project"]["name"] == "webapp"

    observations.add(memory, "agent-a", entity_name="login", content="Login now redirects to the OAuth provider")
    observations.add(memory, "agent-a", entity_name="login", content="Keep the legacy form for admins",
                     observation_type="decision")
    episodes.add(memory, "agent-a", entity_name="login", content="Paired with Ana on the callback handler")
    now = sessions.current(memory, "agent-a")
    assert now["session"]["id"] == session["id"] and now["session"]["goals"] == ["move login to OAuth"]
    assert now["session"]["obs_count_in_session"] == 2 and now["compaction_hint"] is False

    ended = sessions.end(memory, "agent-a", outcome="partial", summary="callback done, tests missing")
    assert ended == {"action": "ended", "outcome": "partial", "updated": True,
                     "session_diff": {"decision": 1, "fact": 1, "episodes": 1}}
    assert sessions.current(memory, "agent-a")["session"] is None
    again = sessions.start(memory, "agent-a", name="tests")
    assert again["previous_session"] == {"name": "auth refactor", "summary": "callback done, tests missing",
                                         "outcome": "partial"}
    listed = sessions.list_all(memory, "agent-a")
    assert [s["name"] for s in listed["sessions"]] == ["tests", "auth refactor"]


def test_sessions_are_per_client_and_survive_a_restart(open_memory):
    mem = open_memory()
    a = sessions.start(mem, "agent-a", name="a-work")["session"]["id"]
    b = sessions.start(mem, "agent-b", name="b-work")["session"]["id"]
    assert a != b
    assert sessions.end(mem, "agent-b")["updated"] is True
    assert sessions.current(mem, "agent-a")["session"]["id"] == a  # b ending did not touch a's
    mem.close()
    reopened = open_memory()
    assert sessions.current(reopened, "agent-a")["session"]["id"] == a
    assert sessions.end(reopened, "agent-b") == {
        "action": "ended", "updated": False,
        "reason": "you have no open session; start one with cuba_jornada action=start"}


def test_starting_again_ends_the_open_session_as_abandoned(memory):
    sessions.start(memory, None, name="first")
    second = sessions.start(memory, None, name="second")
    assert second["previous_session"]["name"] == "first" and second["previous_session"]["outcome"] == "abandoned"


def test_bad_session_input_is_refused_and_changes_nothing(memory):
    cases = [({"name": "x" * 201}, "name"), ({"goals": "not a list"}, "goals"), ({"goals": [3]}, "goals"),
             ({"name": "deploy with AKIAJQ4Z7R2HX3NM5KPW"}, "name")]
    for args, param in cases:
        with pytest.raises((InvalidInput, SecretRefused)) as err:
            sessions.start(memory, None, **args)
        assert param in str(err.value)
    assert sessions.list_all(memory, None)["count"] == 0
    sessions.start(memory, None, name="ok")
    with pytest.raises(InvalidInput, match="outcome"):
        sessions.end(memory, None, outcome="great")
    assert sessions.current(memory, None)["session"]["name"] == "ok"  # still open
    with pytest.raises(InvalidInput, match="action"):
        pick_action(catalog.tool("cuba_jornada"), {"action": "pause"})


def test_faro_boosts_the_first_goal_and_marks_what_others_wrote(memory):
    observations.batch_add(memory, "agent-b", [
        {"entity_name": "cache", "content": "The cache layer uses Redis with a five minute TTL"},
        {"entity_name": "cache", "content": "The cache layer warms up from the nightly snapshot"}])
    assert memory.wait_for_embeddings(120)  # both searches must see the same vectors: only the boost differs
    before = {r["c"]: r["s"] for r in search.faro(memory, "agent-a", query="cache layer",
                                                   track_access=False)["results"]}
    sessions.start(memory, "agent-a", name="ttl", goals=["tune the Redis TTL"])
    boosted = search.faro(memory, "agent-a", query="cache layer", track_access=False)
    after = {r["c"]: r["s"] for r in boosted["results"]}
    redis = "The cache layer uses Redis with a five minute TTL"
    warm = "The cache layer warms up from the nightly snapshot"
    assert after[redis] > before[redis] and after[warm] == pytest.approx(before[warm], rel=1e-3)
    assert "new_since_you_started" not in boosted  # written before the session started

    mine = observations.add(memory, "agent-a", entity_name="cache", content="I set the Redis TTL to ten minutes")
    theirs = observations.add(memory, "agent-b", entity_name="cache", content="Redis TTL alerts page the on-call")
    found = search.faro(memory, "agent-a", query="Redis TTL", track_access=False)
    ids = [r["id"] for r in found["results"]]
    assert [ids[i] for i in found["new_since_you_started"]] == [theirs["id"]]
    assert mine["id"] in ids and "after your session started" in found["new_since_you_started_note"]


def test_jornada_over_mcp(location):
    async def body(agent):
        out = {"start": await agent.call("cuba_jornada", action="start", name="mcp", goals=["ship it"]),
               "write": await agent.call("cuba_cronica", action="add", entity_name="x", content="Shipped v2 today")}
        out["current"] = await agent.call("memory_jornada", action="current")
        out["end"] = await agent.call("cuba_jornada", action="end", summary="done")
        out["list"] = await agent.call("cuba_jornada", action="list")
        out["errors"] = [await agent.error("cuba_jornada", action="pause"),
                         await agent.error("cuba_jornada", action="end", outcome="great"),
                         await agent.error("cuba_jornada", action="start", goals="one")]
        return out

    out = run_stdio(location, body)
    assert out["current"]["session"]["obs_count_in_session"] == 1
    assert out["end"]["session_diff"] == {"fact": 1, "episodes": 0}
    assert out["list"]["sessions"][0]["summary"] == "done" and out["list"]["sessions"][0]["outcome"] == "success"
    for message, param in zip(out["errors"], ("action", "outcome", "goals")):
        assert param in message and "internal error" not in message


def test_snapshot_before_compaction_and_restore(memory):
    from cuba_memorys.services.sessions import compaction

    assert compaction.snapshot(memory, None)["session_id"] is None  # no session: nothing to keep
    sessions.start(memory, None, name="billing", goals=["fix invoice rounding"])
    observations.add(memory, None, entity_name="invoices", content="Rounding happens per line, not per invoice",
                     observation_type="lesson")
    observations.add(memory, None, entity_name="invoices", content="Use banker's rounding for EUR totals",
                     observation_type="decision")
    memory.store._exec("INSERT INTO errors(id, error_type, error_message, created_at) VALUES ('e1', 'ValueError',"
                       " 'total off by one cent', '2026-11-30T00:00:00+00:00')")
    restored_early = compaction.restore(memory, None)
    assert restored_early["snapshot"] is None and "no snapshot" in restored_early["note"]

    snap = compaction.snapshot(memory, None)
    assert snap["obs_count"] == 2 and snap["active_goals"] == ["fix invoice rounding"]
    assert {o["type"] for o in snap["key_observations"]} == {"lesson", "decision"}
    assert snap["decisions"][0]["content"] == "Use banker's rounding for EUR totals"
    assert snap["unresolved_errors"] == [{"id": "e1", "error_type": "ValueError", "message": "total off by one cent"}]
    assert "## Decisions" in snap["summary_md"] and "fix invoice rounding" in snap["summary_md"]
    assert sessions.current(memory, None)["last_snapshot"]["id"] == snap["snapshot_id"]

    back = compaction.restore(memory, None)
    assert back["snapshot"]["id"] == snap["snapshot_id"]
    assert back["snapshot"]["summary_md"] == snap["summary_md"]
    assert back["snapshot"]["key_observations"] == snap["key_observations"]
    with pytest.raises(InvalidInput, match="action"):
        pick_action(catalog.tool("cuba_pre_compact"), {"action": "forget"})


def test_starting_a_session_in_another_project_from_an_active_one(memory):
    """The session row belongs to the project the start switched to: on PostgreSQL the call's
    row-level binding must follow the switch (found by the fuzzer: the insert was refused)."""
    projects.switch(memory, None, "alpha")
    sessions.start(memory, None, name="alpha work")
    with memory.acting_for(None):  # as the server runs every call: bound to the caller's project
        started = sessions.start(memory, None, name="beta work", project="beta")
    assert started["session"]["project_name"] == "beta"
    assert sessions.current(memory, None)["session"]["name"] == "beta work"
    projects.switch(memory, None, "*")
    outcomes = {s["name"]: s["outcome"] for s in sessions.list_all(memory, None)["sessions"]}
    assert outcomes == {"alpha work": "abandoned", "beta work": None}  # the left one was really ended
