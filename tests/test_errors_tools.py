"""cuba_alarma / cuba_remedio / cuba_expediente (errors) and cuba_proyecto stats, rename, merge:
services on both backends, then the tools over stdio with the official MCP client."""

from __future__ import annotations

import pytest

from cuba_memorys.errors import InvalidInput, NotFound, SecretRefused
from cuba_memorys.services import incidents
from cuba_memorys.services.graph import entities, episodes, projects, relations
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.workflow import procedures
from cuba_memorys.services.workflow import working_memory as scratch
from mcp_helpers import run_stdio

TOKEN = "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
REFUSED = "connection refused to postgres at localhost:5432 while running the migrations"


def _report(mem, message=REFUSED, client=None, **args):
    return incidents.report(mem, client, error_type=args.pop("error_type", "ConnectionError"),
                            error_message=message, **args)


def _error_count(mem) -> int:
    return mem.store.counts()["errors"]


# -- cuba_alarma ----------------------------------------------------------------------------
def test_report_answers_the_spec_keys_and_stores_the_error(memory):
    first = _report(memory, context={"file": "db.py", "tried": "restart postgres"})
    assert set(first) == {"error_id", "error_type", "project", "similar_errors"}
    assert first["project"] == "default" and first["similar_errors"] == 0
    stored = memory.store.get_error(first["error_id"], memory.scope(None))
    assert stored["error_message"] == REFUSED and stored["context"] == {"file": "db.py", "tried": "restart postgres"}
    assert stored["resolved"] is False and stored["project_id"] is None
    projects.switch(memory, None, "billing")
    labelled = _report(memory, "stripe webhook signature mismatch")
    assert labelled["project"] == "billing"  # the active project's name is the default label
    assert _report(memory, "stripe timeout", project="payments")["project"] == "payments"
    assert (memory.store.get_error(labelled["error_id"], memory.scope(None))["project_id"]
            == memory.client(None).project_id)


def test_a_long_message_is_cut_to_5000_bytes_on_a_character(memory):
    answer = _report(memory, "é" * 4000)  # 8000 bytes
    stored = memory.store.get_error(answer["error_id"], memory.scope(None))["error_message"]
    assert answer["message_truncated"] is True and stored == "é" * 2500 and len(stored.encode()) == 5000


def test_pattern_warning_from_three_similar_errors(memory):
    answers = [_report(memory, f"{REFUSED} (attempt {i})") for i in range(4)]
    assert [a["similar_errors"] for a in answers] == [0, 1, 2, 3]
    assert all("pattern_warning" not in a for a in answers[:3])
    assert "3 similar errors" in answers[3]["pattern_warning"]
    assert _report(memory, "KeyError: 'user_id' in the signup handler")["similar_errors"] == 0
    # each recurrence strengthened the earlier reports (synapse_weight +0.1 per similar report)
    weight = memory.store.get_error(answers[0]["error_id"], memory.scope(None))["synapse_weight"]
    assert weight == pytest.approx(1.3)


def test_a_recurring_error_that_was_solved_says_how(memory):
    old = _report(memory)
    incidents.resolve(memory, None, error_id=old["error_id"], solution="start the db container first")
    again = _report(memory, REFUSED + " again")
    assert again["known_solutions"] == [{"error_id": old["error_id"], "solution": "start the db container first",
                                         "similarity": again["known_solutions"][0]["similarity"]}]


# -- cuba_remedio ---------------------------------------------------------------------------
def test_resolve_cross_references_similar_unresolved_errors(memory):
    target, twin, cousin = (_report(memory, f"{REFUSED} {suffix}") for suffix in ("(ci)", "(local)", "(staging)"))
    done = _report(memory, f"{REFUSED} (prod)")
    incidents.resolve(memory, None, error_id=done["error_id"], solution="open the firewall")
    _report(memory, "KeyError: 'user_id' in the signup handler")
    answer = incidents.resolve(memory, None, error_id=target["error_id"], solution="start postgres first")
    assert answer["resolved"] is True and answer["solution"] == "start postgres first"
    assert {r["id"] for r in answer["similar_unresolved"]} == {twin["error_id"], cousin["error_id"]}
    assert answer["similar_count"] == 2 and "hint" in answer
    assert all(set(r) == {"id", "error_message", "similarity"} and len(r["error_message"]) <= 100
               for r in answer["similar_unresolved"])
    stored = memory.store.get_error(target["error_id"], memory.scope(None))
    assert stored["resolved"] is True and stored["solution"] == "start postgres first" and stored["resolved_at"]
    again = incidents.resolve(memory, None, error_id=target["error_id"], solution="use the socket instead")
    assert again["previous_solution"] == "start postgres first"


def test_resolving_an_unknown_error_is_not_found(memory):
    with pytest.raises(NotFound, match="not found"):
        incidents.resolve(memory, None, error_id="00000000-0000-4000-8000-000000000000", solution="x")


# -- cuba_expediente ------------------------------------------------------------------------
def test_search_finds_ranks_and_filters(memory):
    refused = _report(memory)
    fixed = _report(memory, "ImportError: No module named yaml", error_type="ImportError")
    incidents.resolve(memory, None, error_id=fixed["error_id"], solution="pip install pyyaml")
    _report(memory, "TimeoutError: redis did not answer in 5 s", error_type="TimeoutError", project="cache")
    found = incidents.search(memory, None, query="postgres connection refused")
    assert found["query"] == "postgres connection refused" and found["results"][0]["id"] == refused["error_id"]
    assert set(found["results"][0]) >= {"id", "error_type", "error_message", "solution", "resolved", "project",
                                        "similarity"}
    assert found["count"] == len(found["results"]) and "anti_repetition_warning" not in found
    assert incidents.search(memory, None, query="conection refusd postgress")["results"][0]["id"] == refused["error_id"]
    solved = incidents.search(memory, None, query="module yaml", resolved_only=True)
    assert [(r["id"], r["solution"]) for r in solved["results"]] == [(fixed["error_id"], "pip install pyyaml")]
    assert incidents.search(memory, None, query="postgres", resolved_only=True)["count"] == 0
    assert [r["project"] for r in incidents.search(memory, None, query="redis timeout",
                                                   project="cache")["results"]] == ["cache"]
    assert incidents.search(memory, None, query="redis timeout", project="default")["count"] == 0


def test_search_returns_at_most_20(memory):
    for i in range(23):
        _report(memory, f"disk full on build agent {i} while writing the cache")
    assert incidents.search(memory, None, query="disk full build agent")["count"] == 20


def test_anti_repetition_warns_about_an_approach_that_failed(memory):
    failed = _report(memory, "alembic upgrade head failed: relation users already exists",
                     error_type="MigrationError",
                     context={"tried": "drop the users table and rerun alembic upgrade head"})
    warned = incidents.search(memory, None, query="migration",
                              proposed_action="drop the users table and rerun the upgrade")
    assert "already failed" in warned["anti_repetition_warning"] and "unresolved" in warned["anti_repetition_warning"]
    attempt = warned["failed_attempts"][0]
    assert attempt["id"] == failed["error_id"] and attempt["resolved"] is False and attempt["resemblance"] >= 0.6
    # an action resembling the failure's own report counts too
    by_message = incidents.search(memory, None, query="alembic", proposed_action="alembic upgrade head")
    assert by_message["failed_attempts"][0]["id"] == failed["error_id"]
    for unrelated in ("add an index on orders.created_at", "update the README"):
        assert "anti_repetition_warning" not in incidents.search(memory, None, query="migration",
                                                                 proposed_action=unrelated)


def test_anti_repetition_of_a_resolved_failure_gives_the_fix_but_not_for_the_fix_itself(memory):
    error = _report(memory, "npm run build fails with ERR_OSSL_EVP_UNSUPPORTED", error_type="BuildError",
                    context={"approach": "downgrade node to 16"})
    incidents.resolve(memory, None, error_id=error["error_id"], solution="set NODE_OPTIONS=--openssl-legacy-provider")
    warned = incidents.search(memory, None, query="build", proposed_action="downgrade node to 16")
    assert "openssl-legacy-provider" in warned["anti_repetition_warning"]
    fix = incidents.search(memory, None, query="build", proposed_action="set NODE_OPTIONS=--openssl-legacy-provider")
    assert "anti_repetition_warning" not in fix


def test_errors_belong_to_their_project(memory):
    projects.switch(memory, None, "alpha")
    alpha = _report(memory, context={"tried": "restart postgres"})
    projects.switch(memory, None, "beta")
    assert incidents.search(memory, None, query="postgres refused", proposed_action="restart postgres") == {
        "query": "postgres refused", "results": [], "count": 0}
    assert _report(memory)["similar_errors"] == 0
    with pytest.raises(NotFound):
        incidents.resolve(memory, None, error_id=alpha["error_id"], solution="x")
    projects.switch(memory, None, "alpha")
    assert incidents.search(memory, None, query="postgres refused")["count"] == 1


def test_quarantined_errors_are_never_served(memory):
    bad = _report(memory)
    memory.store._exec("UPDATE errors SET trust = 'quarantined' WHERE id = ?", (bad["error_id"],))
    assert incidents.search(memory, None, query="postgres refused")["count"] == 0
    assert _report(memory)["similar_errors"] == 0


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("args, param", [
    ({"error_type": "", "error_message": "m"}, "error_type"),
    ({"error_type": "x" * 201, "error_message": "m"}, "error_type"),
    ({"error_type": 5, "error_message": "m"}, "error_type"),
    ({"error_type": "E", "error_message": ""}, "error_message"),
    ({"error_type": "E", "error_message": "   "}, "error_message"),
    ({"error_type": "E", "error_message": ["m"]}, "error_message"),
    ({"error_type": "E", "error_message": "m" * 100_001}, "error_message"),
    ({"error_type": "E", "error_message": "m", "context": "file=a.py"}, "context"),
    ({"error_type": "E", "error_message": "m", "context": {"when": {1, 2}}}, "context"),
    ({"error_type": "E", "error_message": "m", "context": {"log": "x" * 10_001}}, "context"),
    ({"error_type": "E", "error_message": "m", "project": "p" * 201}, "project"),
    ({"error_type": "E", "error_message": "m", "project": 7}, "project"),
    ({"error_type": "E", "error_message": f"login failed with {TOKEN}"}, "error_message"),
    ({"error_type": "E", "error_message": "m", "context": {"env": TOKEN}}, "context"),
    ({"error_type": "E", "error_message": "m", "allow_secret": "yes"}, "allow_secret"),
])
def test_bad_report_input_names_the_parameter_and_writes_nothing(memory, args, param):
    with pytest.raises((InvalidInput, SecretRefused)) as caught:
        incidents.report(memory, None, **args)
    assert param in str(caught.value)
    assert _error_count(memory) == 0


def test_a_secret_is_stored_when_allowed(memory):
    _report(memory, f"login failed with {TOKEN}", allow_secret=True)
    assert _error_count(memory) == 1


@pytest.mark.parametrize("args, param", [
    ({"error_id": "", "solution": "s"}, "error_id"),
    ({"error_id": "not-a-uuid", "solution": "s"}, "error_id"),
    ({"error_id": 42, "solution": "s"}, "error_id"),
    ({"solution": ""}, "solution"),
    ({"solution": "s" * 10_001}, "solution"),
    ({"solution": f"export {TOKEN}"}, "solution"),
    ({"solution": "s", "allow_secret": 1}, "allow_secret"),
])
def test_bad_resolve_input_names_the_parameter_and_resolves_nothing(memory, args, param):
    error_id = _report(memory)["error_id"]
    with pytest.raises((InvalidInput, SecretRefused)) as caught:
        incidents.resolve(memory, None, **{"error_id": error_id, **args})
    assert param in str(caught.value)
    assert memory.store.get_error(error_id, memory.scope(None))["resolved"] is False


@pytest.mark.parametrize("args, param", [
    ({"query": ""}, "query"),
    ({"query": None}, "query"),
    ({"query": "q", "project": "p" * 201}, "project"),
    ({"query": "q", "resolved_only": "true"}, "resolved_only"),
    ({"query": "q", "proposed_action": 3}, "proposed_action"),
    ({"query": "q", "proposed_action": "a" * 10_001}, "proposed_action"),
])
def test_bad_search_input_names_the_parameter(memory, args, param):
    with pytest.raises(InvalidInput, match=param):
        incidents.search(memory, None, **args)


# -- cuba_proyecto stats / rename / merge ---------------------------------------------------
def _fill(mem, client, project):
    """One row of every kind in ``project`` (entity 'auth' is in both test projects)."""
    projects.switch(mem, client, project)
    observations.add(mem, client, entity_name="auth", content=f"{project}: tokens expire after one hour")
    observations.add(mem, client, entity_name=f"{project}-api", content=f"{project} api is written in Go")
    relations.create(mem, client, from_entity="auth", to_entity=f"{project}-api", relation_type="uses")
    episodes.add(mem, client, entity_name="auth", content=f"{project}: rotated the signing key")
    _report(mem, f"{project}: {REFUSED}", client=client)
    procedures.add(mem, client, name="deploy", steps=[{"do": f"{project}'s way"}])
    procedures.outcome(mem, client, "deploy", True)
    scratch.write(mem, client, content=f"{project}: halfway through the refactor")
    project_id = mem.client(client).project_id
    mem.store.start_session(f"{project} session", ["ship it"], client or "default", project_id)
    mem.store.add_verify_log("tokens expire", "auth", 0.9, "verified", "heuristic", project_id)


def test_stats_counts_every_kind_of_row(memory):
    assert projects.stats(memory, None) == {"action": "stats", "project": None,
                                            "note": "No active project: name one, or switch to one first."}
    _fill(memory, None, "alpha")
    stats = projects.stats(memory, None)
    assert stats["project"] == "alpha" and stats["project_id"] == memory.client(None).project_id
    expected = {"entities": 2, "observations": 2, "episodes": 1, "relations": 1, "errors": 1, "sessions": 1,
                "procedures": 1, "working_memory": 1, "verify_log": 1, "unresolved_errors": 1}
    assert {k: stats[k] for k in expected} == expected
    projects.switch(memory, None, "beta")
    assert projects.stats(memory, None, "alpha")["observations"] == 2  # another project, counted in full
    assert projects.stats(memory, None)["observations"] == 0
    with pytest.raises(NotFound, match="ghost"):
        projects.stats(memory, None, "ghost")


def test_rename_keeps_rows_labels_and_the_active_project(memory, open_memory):
    _fill(memory, None, "alpha")
    renamed = projects.rename(memory, None, "alpha", "gamma")
    assert {k: renamed[k] for k in ("action", "from", "to", "renamed")} == {
        "action": "rename", "from": "alpha", "to": "gamma", "renamed": True}
    assert projects.current(memory, None)["project"]["name"] == "gamma"
    assert memory.store.get_project("alpha") is None
    assert [r["project"] for r in incidents.search(memory, None, query="postgres refused")["results"]] == ["gamma"]
    assert projects.stats(memory, None)["observations"] == 2
    reopened = open_memory()  # the active project is stored by name: it follows the rename
    assert projects.current(reopened, None)["project"]["name"] == "gamma"


def test_rename_refuses_a_missing_project_or_a_taken_name(memory):
    projects.switch(memory, None, "alpha")
    projects.switch(memory, None, "beta")
    for name, to, error, param in (("ghost", "x", NotFound, "ghost"), ("alpha", "beta", InvalidInput, "to"),
                                   ("alpha", "alpha", InvalidInput, "to"), ("alpha", "*", InvalidInput, "to"),
                                   ("alpha", "", InvalidInput, "to"), ("", "x", InvalidInput, "name")):
        with pytest.raises(error, match=param):
            projects.rename(memory, None, name, to)
    assert sorted(p["name"] for p in projects.list_all(memory, None)["projects"]) == ["alpha", "beta"]


def test_merge_moves_every_row_and_merges_same_name_entities(memory):
    _fill(memory, "agent-a", "alpha")
    _fill(memory, None, "beta")
    before = memory.store.counts()
    alpha_id, beta_id = memory.client("agent-a").project_id, memory.client(None).project_id
    # Bound to beta (as a tool call is): the merge must still see and move alpha's rows.
    with memory.acting_for(None):
        merged = projects.merge(memory, None, "alpha", "beta")
    assert {k: merged[k] for k in ("action", "from", "to", "from_id", "to_id")} == {
        "action": "merge", "from": "alpha", "to": "beta", "from_id": alpha_id, "to_id": beta_id}
    assert merged["entities_merged"] == 1 and merged["procedures_merged"] == 1
    assert merged["rows_moved"] == sum(merged["moved"].values()) and merged["moved"]["observations"] == 2
    after = memory.store.counts()
    assert after["entities"] == before["entities"] - 1 and after["projects"] == before["projects"] - 1
    for kind in ("observations", "episodes", "relations", "errors", "sessions"):
        assert after[kind] == before[kind], kind
    stats = projects.stats(memory, None, "beta")
    assert {k: stats[k] for k in ("entities", "observations", "episodes", "relations", "errors", "sessions",
                                  "procedures", "working_memory", "verify_log")} == {
        "entities": 3, "observations": 4, "episodes": 2, "relations": 2, "errors": 2, "sessions": 2,
        "procedures": 1, "working_memory": 2, "verify_log": 2}
    auth = entities.get(memory, None, "auth")
    assert sorted(o["content"][:5] for o in auth["observations"]) == ["alpha", "beta:"]
    assert {r["entity"] for r in auth["relations"]} == {"alpha-api", "beta-api"}
    deploy = procedures.get(memory, None, "deploy")
    assert deploy["successes"] == 2 and deploy["steps"] == [{"do": "beta's way"}]  # the target's text, both records
    assert projects.current(memory, "agent-a")["project"]["name"] == "beta"  # its project was merged away
    assert memory.store.get_project("alpha") is None
    assert [r["project"]
            for r in incidents.search(memory, None, query="postgres refused")["results"]] == ["beta", "beta"]


def test_merge_refuses_bad_projects_and_changes_nothing(memory):
    _fill(memory, None, "alpha")
    projects.switch(memory, None, "beta")
    before = memory.store.counts()
    for name, to, error, param in (("ghost", "beta", NotFound, "ghost"), ("alpha", "ghost", NotFound, "ghost"),
                                   ("alpha", "alpha", InvalidInput, "to"), ("alpha", "*", InvalidInput, "to"),
                                   ("alpha", None, InvalidInput, "to")):
        with pytest.raises(error, match=param):
            projects.merge(memory, None, name, to)
    assert memory.store.counts() == before and projects.stats(memory, None, "alpha")["observations"] == 2


# -- over MCP -------------------------------------------------------------------------------
def test_the_error_tools_and_projects_over_mcp(location):
    async def body(agent):
        out = {"tools": {t.name: t for t in (await agent.session.list_tools()).tools}}
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        out["reports"] = [await agent.call("cuba_alarma", error_type="ConnectionError",
                                           error_message=f"{REFUSED} (attempt {i})",
                                           context={"tried": "restart the postgres container"}) for i in range(4)]
        out["search"] = await agent.call("cuba_expediente", query="postgres connection refused",
                                         proposed_action="restart the postgres container")
        out["unrelated"] = await agent.call("memory_expediente", query="postgres", proposed_action="update the README")
        out["resolve"] = await agent.call("cuba_remedio", error_id=out["reports"][0]["error_id"],
                                          solution="start postgres with docker compose up db")
        out["stats"] = await agent.call("cuba_proyecto", action="stats")
        out["rename"] = await agent.call("cuba_proyecto", action="rename", name="alpha", to="gamma")
        await agent.call("cuba_proyecto", action="switch", name="delta")
        out["merge"] = await agent.call("cuba_proyecto", action="merge", name="gamma", to="delta")
        out["merged"] = await agent.call("cuba_proyecto", action="stats", name="delta")
        return out

    out = run_stdio(location, body)
    tools = out["tools"]
    for name in ("cuba_alarma", "cuba_remedio", "cuba_expediente"):
        assert name in tools and "memory_" + name.removeprefix("cuba_") in tools
    assert tools["cuba_expediente"].annotations.read_only_hint is True
    assert tools["cuba_proyecto"].annotations.destructive_hint is True
    assert set(tools["cuba_alarma"].input_schema["required"]) == {"error_type", "error_message"}
    assert [r["similar_errors"] for r in out["reports"]] == [0, 1, 2, 3] and "pattern_warning" in out["reports"][3]
    assert out["reports"][0]["project"] == "alpha"
    assert out["search"]["count"] == 4 and "anti_repetition_warning" in out["search"]
    assert "anti_repetition_warning" not in out["unrelated"]
    assert out["resolve"]["resolved"] is True and out["resolve"]["similar_count"] == 3
    assert out["stats"]["errors"] == 4 and out["stats"]["unresolved_errors"] == 3
    assert {k: out["rename"][k] for k in ("from", "to", "renamed")} == {"from": "alpha", "to": "gamma", "renamed": True}
    assert out["merge"]["rows_moved"] == 4 and out["merged"]["errors"] == 4


BAD_CALLS = [
    ("cuba_alarma", {"error_message": "m"}, "error_type"),
    ("cuba_alarma", {"error_type": "E"}, "error_message"),
    ("cuba_alarma", {"error_type": "E", "error_message": ""}, "error_message"),
    ("cuba_alarma", {"error_type": "E", "error_message": "m", "context": "a.py"}, "context"),
    ("cuba_alarma", {"error_type": "E", "error_message": "m", "project": "p" * 201}, "project"),
    ("cuba_alarma", {"error_type": "E", "error_message": TOKEN}, "allow_secret"),
    ("cuba_remedio", {"solution": "s"}, "error_id"),
    ("cuba_remedio", {"error_id": "nope", "solution": "s"}, "error_id"),
    ("cuba_remedio", {"error_id": "00000000-0000-4000-8000-000000000000"}, "solution"),
    ("cuba_remedio", {"error_id": "00000000-0000-4000-8000-000000000000", "solution": "s"}, "not found"),
    ("cuba_expediente", {}, "query"),
    ("cuba_expediente", {"query": ""}, "query"),
    ("cuba_expediente", {"query": "q", "proposed_action": "a" * 10_001}, "proposed_action"),
    ("cuba_proyecto", {"action": "rename", "name": "ghost", "to": "x"}, "ghost"),
    ("cuba_proyecto", {"action": "rename", "name": "alpha"}, "to"),
    ("cuba_proyecto", {"action": "merge", "to": "alpha"}, "name"),
    ("cuba_proyecto", {"action": "merge", "name": "alpha", "to": "ghost"}, "ghost"),
    ("cuba_proyecto", {"action": "stats", "name": "ghost"}, "ghost"),
]


def test_bad_input_over_mcp_is_a_clear_error_and_writes_nothing(location):
    async def body(agent):
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        messages = [(param, await agent.error(tool, **args)) for tool, args, param in BAD_CALLS]
        return messages, await agent.call("cuba_proyecto", action="stats")

    messages, stats = run_stdio(location, body)
    for param, message in messages:
        assert param in message, message
        assert "internal error" not in message
    assert stats["errors"] == 0 and stats["project"] == "alpha"
