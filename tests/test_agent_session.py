"""A whole coding session, scripted through the official MCP client as an agent would run it
(issue 6's acceptance test), on both storage backends: start a session with goals, write,
report an error, get warned before repeating the failing approach, resolve it, record a
decision, add and score a recipe, leave a reminder and see it fire, snapshot and restore around a
context compaction, end the session and read its diff."""

from __future__ import annotations

from mcp_helpers import run_stdio

FAILED_APPROACH = "pip install psycopg2 from source on the build image"


async def _session(agent) -> dict:
    seen: dict = {}
    seen["start"] = await agent.call("cuba_jornada", action="start", name="ci-fix", project="shop",
                                     goals=["make the CI build green"])
    seen["write"] = await agent.call("cuba_cronica", action="add", entity_name="ci",
                                     content="The CI build image is python:3.12-slim without libpq headers")
    seen["alarm"] = await agent.call("cuba_alarma", error_type="BuildFailure",
                                     error_message="pg_config executable not found while building psycopg2",
                                     context={"tried": FAILED_APPROACH, "file": "ci/build.sh"})
    seen["warned"] = await agent.call("cuba_expediente", query="pg_config not found psycopg2",
                                      proposed_action=FAILED_APPROACH)
    seen["unrelated"] = await agent.call("cuba_expediente", query="pg_config not found psycopg2",
                                         proposed_action="switch the frontend bundler to esbuild")
    seen["fix"] = await agent.call("cuba_remedio", error_id=seen["alarm"]["error_id"],
                                   solution="Use psycopg[binary] wheels instead of building psycopg2")
    seen["decision"] = await agent.call("cuba_decreto", action="record", title="Binary psycopg wheels in CI",
                                        context="Building from source needs libpq headers",
                                        alternatives=["install libpq-dev", "psycopg[binary]"],
                                        chosen="psycopg[binary]", rationale="no compiler or headers needed")
    seen["recipe"] = await agent.call("cuba_receta", action="add", name="fix-psycopg-build",
                                      trigger="pg_config not found in CI",
                                      steps=[{"do": "replace psycopg2 with psycopg[binary]",
                                              "run": "pip install 'psycopg[binary]'"},
                                             {"do": "re-run the build", "expect": "green"}])
    seen["scored"] = await agent.call("cuba_receta", action="outcome", name="fix-psycopg-build", success=True)
    seen["reminder"] = await agent.call("cuba_centinela", action="create", entity_pattern="ci",
                                        condition_type="on_access", message="CI images are rebuilt on Mondays")
    seen["fired"] = await agent.call("cuba_alma", action="get", name="ci")
    seen["snapshot"] = await agent.call("cuba_pre_compact", action="snapshot")
    seen["restore"] = await agent.call("cuba_pre_compact", action="restore")
    seen["current"] = await agent.call("cuba_jornada", action="current")
    seen["end"] = await agent.call("cuba_jornada", action="end", outcome="success",
                                   summary="CI green with psycopg[binary]")
    seen["next"] = await agent.call("cuba_jornada", action="start", name="follow-up")
    return seen


def test_a_scripted_agent_session(location):
    seen = run_stdio(location, _session)
    assert seen["start"]["session"]["project_name"] == "shop"
    assert "anti_repetition_warning" in seen["warned"] and seen["warned"]["failed_attempts"]
    assert "anti_repetition_warning" not in seen["unrelated"]
    assert seen["fix"]["error_id"] == seen["alarm"]["error_id"]
    assert seen["decision"]["action"] == "record" and seen["decision"]["id"]
    assert seen["scored"]["successes"] == 1 and round(seen["scored"]["reliability"], 2) == 0.21
    assert [r["message"] for r in seen["fired"]["triggered_reminders"]] == ["CI images are rebuilt on Mondays"]

    snapshot = seen["snapshot"]
    assert snapshot["active_goals"] == ["make the CI build green"]
    assert any("libpq" in o["content"] for o in snapshot["key_observations"])
    assert any("psycopg" in d["content"] for d in snapshot["decisions"])
    assert snapshot["unresolved_errors"] == []  # resolved before the snapshot
    assert seen["restore"]["snapshot"]["summary_md"] == snapshot["summary_md"]
    assert seen["current"]["last_snapshot"]["id"] == snapshot["snapshot_id"]

    diff = seen["end"]["session_diff"]
    assert seen["end"]["updated"] is True and diff["fact"] == 1 and diff["decision"] == 1
    assert seen["next"]["previous_session"] == {"name": "ci-fix", "summary": "CI green with psycopg[binary]",
                                                "outcome": "success"}
