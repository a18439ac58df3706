"""Every tool's answer, action by action, has the keys its typed answer declares.

One agent session over stdio calls every action of every tool in the catalogue; each answer's
keys are checked against the action's ``TypedDict`` (services/answers.py): a key the type does
not declare fails, and so does a required key the answer lacks. The last test checks that the
session really reached every action the catalogue lists.
"""

from __future__ import annotations

import json
import tempfile
import typing
from pathlib import Path
from typing import Any

import pytest

from cuba_memorys.server import catalog
from mcp_helpers import run_stdio

TOKEN_FREE = "Sessions expire after 30 minutes of inactivity"


def allowed_keys(answer_type: Any) -> list[tuple[frozenset[str], frozenset[str]]]:
    """(required, all) key sets of each TypedDict the answer may be."""
    members = typing.get_args(answer_type) or (answer_type,)
    return [(frozenset(m.__required_keys__), frozenset(m.__required_keys__ | m.__optional_keys__)) for m in members]


def keys_problem(tool: str, action: str, answer: Any) -> str | None:
    expected = catalog.tool(tool).action(action).answer
    if expected is str:
        return None if isinstance(answer, str) else f"expected text, got {type(answer).__name__}"
    problems = []
    for required, everything in allowed_keys(expected):
        extra = set(answer) - everything
        if tool == "cuba_proyecto" and action == "stats":  # one count per table that has a project
            extra = {k for k in extra if not isinstance(answer[k], int)}
        missing = required - set(answer)
        if not extra and not missing:
            return None
        problems.append(f"undeclared {sorted(extra)}, missing {sorted(missing)}")
    return f"{tool} {action or '(call)'}: " + " / ".join(problems)


def another_machines_text(bundle_dir: Path) -> None:
    """Rewrite one observation of an exported bundle, as another machine's edit would."""
    for path in sorted((bundle_dir / "entities").glob("*.json")):
        entity = json.loads(path.read_text())
        if entity["observations"]:
            entity["observations"][0]["content"] = "another machine says something else about this"
            path.write_text(json.dumps(entity, indent=2))
            return
    raise AssertionError(f"the bundle in {bundle_dir} has no observation to edit")


async def every_action(agent) -> dict[tuple[str, str], Any]:
    seen: dict[tuple[str, str], Any] = {}

    async def call(tool: str, **args: Any) -> Any:
        row = catalog.tool(tool)
        action = args.get(row.selector, "hybrid" if tool == "cuba_faro" else "") if row.selector else ""
        if row.selector and not action:
            action = row.actions[0].name
        result = await agent.session.call_tool(tool, args)
        assert not result.is_error, (tool, args, result.content[0].text)
        text = result.content[0].text
        seen[(tool, action)] = result.structured_content if result.structured_content is not None else text
        if tool == "search_hipocampo":
            seen[(tool, action)] = text
        return seen[(tool, action)]

    await call("cuba_jornada", action="start", name="answers", goals=["check every answer"])
    await call("cuba_jornada", action="current")
    await call("cuba_alma", action="create", name="cache")
    await call("cuba_alma", action="update", name="cache", new_name="session-cache")
    first = await call("cuba_cronica", action="add", entity_name="session-cache",
                       content="We use Redis for session storage")
    batch = await call("cuba_cronica", action="batch_add", observations=[
        {"entity_name": "session-cache", "content": "We do not use Redis for session storage"},
        {"entity_name": "session-cache", "content": TOKEN_FREE}])
    await call("cuba_cronica", action="list", entity_name="session-cache")
    await call("cuba_cronica", action="episode_add", entity_name="session-cache", content="Moved sessions to Redis")
    await call("cuba_cronica", action="episode_list", entity_name="session-cache")
    await call("cuba_cronica", action="timeline", entity_name="session-cache")
    await call("cuba_alma", action="get", name="session-cache")
    await call("cuba_alma", action="create", name="worker")
    await call("cuba_alma", action="create", name="queue")
    await call("cuba_puente", action="create", from_entity="session-cache", to_entity="worker", relation_type="uses")
    await call("cuba_puente", action="create", from_entity="worker", to_entity="queue")
    await call("cuba_puente", action="traverse", start_entity="session-cache")
    await call("cuba_puente", action="infer", start_entity="session-cache")
    await call("cuba_puente", action="delete", from_entity="worker", to_entity="queue")
    await call("cuba_faro", query="where are sessions stored")
    await call("cuba_faro", query="Sessions are stored in Redis", mode="verify")
    await call("search_hipocampo", query="sessions redis")
    await call("cuba_juez", action="judge_pair", observation_a=first["id"], observation_b=batch["ids"][0])
    await call("cuba_juez", action="scan_entity", entity_name="session-cache")
    await call("cuba_contradiccion", action="scan", entity_name="session-cache")
    await call("cuba_decreto", action="record", title="Session store", chosen="Redis", rationale="TTL support")
    await call("cuba_decreto", action="query", query="session store")
    await call("cuba_decreto", action="list")
    await call("cuba_receta", action="add", name="flush", steps=[{"do": "flush the cache", "run": "redis-cli FLUSHDB"}])
    await call("cuba_receta", action="get", name="flush")
    await call("cuba_receta", action="search", query="flush cache")
    await call("cuba_receta", action="outcome", name="flush", success=True)
    await call("cuba_receta", action="list")
    await call("cuba_receta", action="delete", name="flush")
    await call("cuba_pizarra", action="write", content="check the TTL next", tag="todo")
    await call("cuba_pizarra", action="read")
    await call("cuba_artefacto", action="put", path="docs/plan.md", content="step one")
    await call("cuba_artefacto", action="patch", path="docs/plan.md", find="one", replace="two")
    await call("cuba_artefacto", action="get", path="docs/plan.md", version=1)
    await call("cuba_artefacto", action="lock", path="docs/plan.md")
    await call("cuba_artefacto", action="unlock", path="docs/plan.md")
    await call("cuba_artefacto", action="list", prefix="docs/")
    await call("cuba_artefacto", action="watch_hint")
    await call("cuba_whoami")
    await call("cuba_contexto")
    # a folder of its own, never the repository's .cuba-memorys, removed afterwards
    with tempfile.TemporaryDirectory(prefix="answers-bundle-") as bundle_dir:
        await call("cuba_sync", action="export", dir=bundle_dir)
        await call("cuba_sync", action="status", dir=bundle_dir)
        await call("cuba_sync", action="pull", limit=2)
        await call("cuba_sync", action="notify", summary="node-x wrote 2 rows", node_id="node-x")
        another_machines_text(Path(bundle_dir))
        await call("cuba_sync", action="diff", dir=bundle_dir)
        await call("cuba_sync", action="import", dir=bundle_dir)
        opened = await call("cuba_sync", action="conflicts")
        await call("cuba_sync", action="resolve", id=opened["conflicts"][0]["id"], keep="both")
    await call("cuba_pizarra", action="clear", tag="todo")
    await call("cuba_centinela", action="create", entity_pattern="timeout", condition_type="on_error_match",
               message="look at the proxy first", max_fires=-1)
    error = await call("cuba_alarma", error_type="TimeoutError", error_message="timeout talking to redis",
                       context={"tried": "raise the timeout"})
    await call("cuba_remedio", error_id=error["error_id"], solution="pool connections")
    await call("cuba_expediente", query="redis timeout", proposed_action="raise the timeout")
    listed = await call("cuba_centinela", action="list")
    await call("cuba_centinela", action="check", entity_pattern="timeout", condition_type="on_error_match")
    await call("cuba_centinela", action="delete", trigger_id=listed["triggers"][0]["id"])
    await call("cuba_ingesta", action="ingest", items=[{"entity_name": "worker", "content": "Workers poll every 5 s"},
                                                       {"entity_name": "worker"}])
    await call("cuba_ingesta", action="parse", entity_name="worker", text="We decided to use Celery.\n\nIt works well.")
    await call("cuba_ingesta", action="auto_extract", text="Meeting notes about workers")
    await call("cuba_vigia", metric="summary")
    await call("cuba_vigia", metric="health")
    await call("cuba_vigia", metric="drift")
    await call("cuba_vigia", metric="communities")
    await call("cuba_vigia", metric="bridges")
    await call("cuba_vigia", metric="structural")
    await call("cuba_reflexion", action="analyze")
    await call("cuba_hipotesis", action="explain", effect="worker")
    await call("cuba_puente", action="predict", entity_name="session-cache")
    await call("cuba_zafra", action="decay")
    await call("cuba_zafra", action="decay_episodes")
    await call("cuba_zafra", action="stats")
    await call("cuba_zafra", action="find_duplicates")
    await call("cuba_zafra", action="export")
    await call("cuba_zafra", action="reembed")
    await call("cuba_zafra", action="prune")
    await call("cuba_zafra", action="merge")
    await call("cuba_zafra", action="pagerank")
    await call("cuba_zafra", action="communities")
    await call("cuba_eco", action="positive", observation_id=first["id"])
    await call("cuba_eco", action="negative", entity_name="session-cache")
    await call("cuba_eco", action="quarantine", observation_id=batch["ids"][1])
    await call("cuba_eco", action="pending")
    await call("cuba_eco", action="promote", observation_id=batch["ids"][1])
    await call("cuba_eco", action="correct", observation_id=batch["ids"][1],
               correction="Sessions expire after 45 minutes of inactivity")
    await call("cuba_zafra", action="summarize", entity_name="worker", compressed_summary="Celery workers poll")
    await call("cuba_archivo", action="append", event_action="deploy.approved", payload={"by": "ci"})
    await call("cuba_archivo", action="tail")
    await call("cuba_archivo", action="verify")
    logged = await call("cuba_calibrar", action="history", limit=5)
    await call("cuba_calibrar", action="resolve", verify_id=logged["entries"][0]["id"], outcome="correct")
    await call("cuba_calibrar", action="stats")
    await call("cuba_calibrar", action="trust")
    await call("cuba_calibrar", action="metrics")
    await call("cuba_pre_compact", action="snapshot")
    await call("cuba_pre_compact", action="restore")
    await call("cuba_jornada", action="list")
    await call("cuba_jornada", action="end", summary="checked")
    await call("cuba_proyecto", action="switch", name="alpha")
    await call("cuba_proyecto", action="current")
    await call("cuba_proyecto", action="stats")
    await call("cuba_proyecto", action="list")
    await call("cuba_proyecto", action="switch", name="beta")
    await call("cuba_proyecto", action="rename", name="beta", to="gamma")
    await call("cuba_proyecto", action="merge", name="gamma", to="alpha")
    await call("cuba_proyecto", action="backfill", name="alpha", confirm=True)
    await call("cuba_cronica", action="delete", observation_id=first["id"])
    await call("cuba_alma", action="delete", name="queue")
    await agent.call("cuba_proyecto", action="switch", name="*")  # "worker" is shared: forgotten with no project
    await call("cuba_forget", entity_name="worker", confirm=True)
    seen[("cuba_tools", "")] = await agent.call("cuba_tools", detail="names")
    return seen


@pytest.fixture(scope="module")
def answers(module_location):
    return run_stdio(module_location, every_action)


def test_every_answer_has_the_keys_its_type_declares(answers):
    problems = [p for (tool, action), answer in answers.items() if tool != "cuba_tools"
                if (p := keys_problem(tool, action, answer))]
    assert not problems, "\n".join(problems)


def test_every_action_of_the_catalogue_was_checked(answers):
    listed = {(t.name, a.name) for t in catalog.catalogue() for a in t.actions}
    # fetch needs a second daemon to pull from: tests/test_sync_peers.py checks its answer's keys
    assert listed - set(answers) - {("cuba_sync", "fetch")} == set()


def test_cuba_tools_answer(answers):
    from cuba_memorys.services.answers import ToolCatalogue

    got = answers[("cuba_tools", "")]
    assert set(got) == set(ToolCatalogue.__required_keys__)
