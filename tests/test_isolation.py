"""Projects are isolated: with project beta active, nothing of project alpha can be read,
searched, changed or deleted through any tool. On PostgreSQL row-level security enforces
the same rule a second time, below the server's own checks, which is tested directly too."""

from __future__ import annotations

import json

import pytest

from mcp_helpers import ToolFailed, run_stdio

ALPHA_FACTS = [
    {"entity_name": "billing", "content": "Alpha's billing retries Stripe webhooks five times"},
    {"entity_name": "billing", "content": "Alpha's invoices are rendered with WeasyPrint at 02:00"},
    {"entity_name": "stripe", "content": "Alpha keeps the Stripe API version pinned to 2024-06"},
]


async def _seed_alpha(agent) -> dict:
    await agent.call("cuba_proyecto", action="switch", name="alpha")
    batch = await agent.call("cuba_cronica", action="batch_add", observations=ALPHA_FACTS)
    episode = await agent.call("cuba_cronica", action="episode_add", entity_name="billing",
                               content="Alpha's team debugged the webhook storm on Friday")
    await agent.call("cuba_puente", action="create", from_entity="billing", to_entity="stripe",
                     relation_type="depends_on")
    return {"ids": batch["ids"], "episode": episode}


async def _beta_attempts(agent, alpha: dict) -> dict:
    """Everything beta tries against alpha's rows; each must fail or come back empty."""
    await agent.call("cuba_proyecto", action="switch", name="beta")
    out = {"errors": {}}
    for label, tool, args in (
        ("get", "cuba_alma", {"action": "get", "name": "billing"}),
        ("rename", "cuba_alma", {"action": "update", "name": "billing", "new_name": "stolen"}),
        ("delete_entity", "cuba_alma", {"action": "delete", "name": "billing"}),
        ("list", "cuba_cronica", {"action": "list", "entity_name": "billing"}),
        ("episodes", "cuba_cronica", {"action": "episode_list", "entity_name": "billing"}),
        ("delete_obs", "cuba_cronica", {"action": "delete", "observation_id": alpha["ids"][0]}),
        ("traverse", "cuba_puente", {"action": "traverse", "start_entity": "billing"}),
        ("unlink", "cuba_puente", {"action": "delete", "from_entity": "billing", "to_entity": "stripe"}),
    ):
        try:
            out["errors"][label] = ("answered", await agent.call(tool, **args))
        except ToolFailed as exc:
            out["errors"][label] = ("error", str(exc))
    out["faro"] = await agent.call("cuba_faro", query="Stripe webhooks billing invoices", limit=50)
    out["faro_alias"] = await agent.call("memory_faro", query="webhook storm Friday", limit=50)
    out["hipocampo_ids"] = await _text(agent, "search_hipocampo", query="billing", ids=alpha["ids"], format="json")
    out["hipocampo_seq"] = await _text(agent, "search_hipocampo", query="#1 #2 #3 webhooks", format="full")
    out["hipocampo_code"] = await _text(agent, "search_hipocampo", query="code:billing webhooks", format="json")
    # beta may have its own "billing": a different entity, alpha's stays untouched
    out["own"] = await agent.call("cuba_cronica", action="add", entity_name="billing",
                                  content="Beta bills through Paddle, not Stripe")
    out["own_list"] = await agent.call("cuba_cronica", action="list", entity_name="billing")
    return out


async def _text(agent, tool: str, **args) -> str:
    result = await agent.session.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.content[0].text


def _ids_in(result: dict) -> set[str]:
    return {row["id"] for row in result.get("results", [])}


def test_project_b_cannot_touch_project_a_through_any_tool(location):
    async def body(agent):
        alpha = await _seed_alpha(agent)
        beta = await _beta_attempts(agent, alpha)
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        after = {
            "list": await agent.call("cuba_cronica", action="list", entity_name="billing"),
            "get": await agent.call("cuba_alma", action="get", name="billing"),
            "walk": await agent.call("cuba_puente", action="traverse", start_entity="billing"),
            "faro": await agent.call("cuba_faro", query="Stripe webhooks billing invoices", limit=50),
        }
        return alpha, beta, after

    alpha, beta, after = run_stdio(location, body)
    for label, (outcome, payload) in beta["errors"].items():
        if outcome == "answered":  # an answer is only acceptable when it reveals nothing
            assert label == "list" and payload["count"] == 0, (label, payload)
        else:
            assert "not found" in payload.lower() or "no " in payload.lower(), (label, payload)
    alpha_ids = set(alpha["ids"]) | {alpha["episode"]["id"]}
    for key in ("faro", "faro_alias"):
        assert not (_ids_in(beta[key]) & alpha_ids), key
        assert "Alpha" not in str(beta[key]), key
    for key in ("hipocampo_ids", "hipocampo_code"):  # JSON text; its filter echo repeats the ids asked
        found = json.loads(beta[key])["results"]
        assert found == [] or "Alpha" not in str(found), (key, found)
    assert "Alpha" not in beta["hipocampo_seq"]
    assert [o["content"] for o in beta["own_list"]["observations"]] == ["Beta bills through Paddle, not Stripe"]

    # back in alpha: every row, the name and the edge are as they were
    assert after["list"]["count"] == 2 and after["get"]["entity"]["name"] == "billing"
    assert after["get"]["observation_count"] == 2
    assert [n["name"] for n in after["walk"]["nodes"]] == ["stripe"]
    assert set(alpha["ids"]) <= _ids_in(after["faro"])
    assert "Beta" not in str(after["list"])


def test_row_level_security_binds_below_the_server(memory, backend):
    """PostgreSQL only: with beta bound, SQL itself cannot see, change or delete alpha's rows,
    nor write a row into alpha (the policy's WITH CHECK)."""
    if backend != "postgresql":
        pytest.skip("SQLite has no row-level security; the server's scope checks (test above) isolate it")
    from cuba_memorys.errors import StorageError
    from cuba_memorys.services.graph import projects
    from cuba_memorys.services.observations import write as observations

    projects.switch(memory, None, "alpha")
    written = observations.add(memory, None, entity_name="billing", content="Alpha's secret plan")
    alpha_id = memory.client(None).project_id
    projects.switch(memory, None, "beta")
    beta_id = memory.client(None).project_id
    store = memory.store
    assert store.runtime_role()["superuser"] is False  # the suite's databases are secured
    with store.bind_project(beta_id):
        assert store._q("SELECT count(*) FROM observations")[0][0] == 0
        assert store._q("SELECT count(*) FROM entities")[0][0] == 0
        assert store._exec("UPDATE observations SET content = 'pwned' WHERE id = ?", (written["id"],)).rowcount == 0
        assert store._exec("DELETE FROM observations WHERE id = ?", (written["id"],)).rowcount == 0
        with pytest.raises(StorageError, match="row-level security"):
            store._exec("INSERT INTO entities(id, name, project_id, created_at, updated_at)"
                        " VALUES ('e1', 'intruder', ?, 'x', 'x')", (alpha_id,))
    with store.bind_project(alpha_id):
        rows = store._q("SELECT content FROM observations")
    assert [r[0] for r in rows] == ["Alpha's secret plan"]
