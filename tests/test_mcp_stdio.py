"""The server over stdio, driven by the official MCP client exactly as an agent drives it."""

from __future__ import annotations

import pytest

from mcp_helpers import embeddings_settled, run_stdio

CORE = ["cuba_alma", "cuba_cronica", "cuba_puente", "cuba_faro", "cuba_proyecto"]


def test_tools_and_aliases_are_listed(location):
    async def body(agent):
        return (await agent.session.list_tools()).tools

    tools = {t.name: t for t in run_stdio(location, body)}
    for name in CORE:
        assert name in tools and "memory_" + name.removeprefix("cuba_") in tools
        assert tools["memory_" + name.removeprefix("cuba_")].description.startswith(f"[alias of {name}]")
    faro = tools["cuba_faro"].input_schema["properties"]
    # The original clamps limit to 1-50 rather than refusing: no bound in the schema, the range
    # in the description (tests/test_dropin.py checks the clamping itself).
    assert faro["limit"]["default"] == 10 and "1-50" in faro["limit"]["description"]
    assert "maximum" not in faro["limit"]
    assert faro["format"]["default"] == "compact"
    assert tools["cuba_faro"].annotations.read_only_hint is True
    assert tools["cuba_alma"].annotations.destructive_hint is True


def test_agent_session_write_link_search(location):
    async def body(agent):
        batch = await agent.call("cuba_cronica", action="batch_add", observations=[
            {"entity_name": "ci", "content": "CI runs pytest with coverage on every push"},
            {"entity_name": "ci", "content": "Nightly builds publish wheels to the internal index"},
            {"entity_name": "packaging", "content": "Wheels are built with hatchling"},
        ])
        await agent.call("cuba_puente", action="create", from_entity="ci", to_entity="packaging", relation_type="uses")
        found = await agent.call("cuba_faro", query="how are wheels built?", limit=5)
        alias = await agent.call("memory_faro", query="how are wheels built?", limit=5, track_access=False)
        walk = await agent.call("cuba_puente", action="traverse", start_entity="ci")
        return batch, found, alias, walk

    batch, found, alias, walk = run_stdio(location, body)
    assert len(batch["ids"]) == 3 and batch["added"] == 3
    top = [r for r in found["results"] if r["t"] != "entity"][0]
    assert top["id"] == batch["ids"][2] and top["c"] == "Wheels are built with hatchling"
    assert [r["id"] for r in alias["results"]] == [r["id"] for r in found["results"]]
    assert walk["nodes"][0]["name"] == "packaging" and walk["count"] == 1


def test_data_survives_a_server_restart(location):
    async def write(agent):
        return await agent.call("cuba_cronica", action="add", entity_name="oncall",
                                content="The on-call rotation changes every Monday at 09:00")

    async def read(agent):
        return await agent.call("cuba_faro", query="when does on-call rotate")

    written = run_stdio(location, write)
    found = run_stdio(location, read)
    assert written["id"] in [r["id"] for r in found["results"]]


BAD_CALLS = [
    ("cuba_faro", {"query": "x", "limit": "abc"}, "limit"),
    ("cuba_faro", {"query": "x", "limit": 2.5}, "limit"),
    ("cuba_faro", {"query": "x", "after": "not-a-date"}, "after"),
    ("cuba_faro", {"query": "x", "before": "2024-02-30T00:00:00Z"}, "before"),
    ("cuba_faro", {"limit": 5}, "query"),
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": ""}, "content"),
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": "x" * 10001}, "content"),
    ("cuba_cronica", {"action": "add", "content": "no entity"}, "entity_name"),
    ("cuba_cronica", {"action": "explode", "entity_name": "e"}, "action"),
    ("cuba_cronica", {"action": "list", "entity_name": "ghost"}, "ghost"),
    ("cuba_cronica", {"action": "batch_add",
                      "observations": [{"entity_name": "e", "content": "ok"}, {"entity_name": "e"}]},
     "observations[1].content"),
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
     "allow_secret"),
    ("cuba_alma", {"action": "get", "name": "ghost"}, "ghost"),
    ("cuba_alma", {"action": "create", "name": "x", "entity_type": "animal"}, "entity_type"),
    ("cuba_alma", {"action": "update", "name": "e"}, "new_name"),
    ("cuba_puente", {"action": "create", "from_entity": "e", "to_entity": "ghost"}, "ghost"),
    ("cuba_proyecto", {"action": "teleport"}, "action"),
]


def test_bad_input_is_a_clear_tool_error_and_changes_nothing(location):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="e", content="the only observation")
        messages = [(param, await agent.error(tool, **args)) for tool, args, param in BAD_CALLS]
        after = await agent.call("cuba_cronica", action="list", entity_name="e")
        projects = await agent.call("cuba_proyecto", action="list")
        ghost = await agent.session.call_tool("cuba_alma", {"action": "get", "name": "x"})
        return messages, after, projects, ghost

    messages, after, projects, ghost = run_stdio(location, body)
    for param, message in messages:
        assert param in message, message
        assert "internal error" not in message
    assert after["count"] == 1 and after["observations"][0]["content"] == "the only observation"
    assert projects["count"] == 0
    assert ghost.is_error  # the rejected create with a bad entity_type wrote no entity


@pytest.mark.parametrize("model", ["none"])
def test_degraded_search_over_mcp_says_so(location, model):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="e",
                         content="Grafana dashboards live in ops/grafana")
        return await agent.call("cuba_faro", query="grafana dashboards")

    result = run_stdio(location, body, CUBA_EMBED_MODEL=model)
    assert result["degraded"] is True and result["degraded_reason"]
    assert result["results"]


def test_every_faro_parameter_over_mcp(location):
    rows = [{"entity_name": f"svc{i % 5}", "content": f"Service {i} exposes port {8000 + i} and logs to stream {i % 3}"}
            for i in range(55)]
    rows.append({"entity_name": "gateway", "content": "The gateway terminates TLS and forwards to svc0"})

    async def body(agent):
        await agent.call("cuba_cronica", action="batch_add", observations=rows[:50])
        await agent.call("cuba_cronica", action="batch_add", observations=rows[50:])
        await embeddings_settled(agent)  # the vector branch and the OOD fit need the queue's vectors
        await agent.call("cuba_puente", action="create", from_entity="gateway", to_entity="svc0")
        out = {}
        out["verbose"] = await agent.call("cuba_faro", query="which port does service 7 expose", format="verbose",
                                          scope="observations", limit=3, enable_bm25=False, track_access=False)
        out["window"] = await agent.call("cuba_faro", query="service port", after="2000-01-01T00:00:00Z",
                                         before="2999-01-01T00:00:00Z", tags="gateway", max_tokens=400)
        out["mmr"] = await agent.call("cuba_faro", query="service port", diversify=True, mmr_lambda=0.2, limit=4)
        out["ood"] = await agent.call("cuba_faro", query="knitting patterns", abstain_ood=True, ood_threshold=0.0)
        out["assoc"] = await agent.call("cuba_faro", query="gateway", associative=True, format="verbose", limit=20)
        out["rerank"] = await agent.call("cuba_faro", query="service port", rerank=True)
        out["unscoped"] = await agent.call("cuba_faro", query="service port", include_unscoped=False)
        out["errors"] = [await agent.error("cuba_faro", **bad) for bad in (
            {"query": "x", "mmr_lambda": "high"}, {"query": "x", "ood_threshold": -2},
            {"query": "x", "diversify": "maybe"}, {"query": "x", "max_tokens": "lots"},
            {"query": "x", "scope": "galaxy"}, {"query": "x", "format": "yaml"})]
        return out

    out = run_stdio(location, body)
    top = out["verbose"]["results"][0]
    assert "port 8007" in top["content"] and top["bm25_score"] is None and top["vector_score"] is not None
    assert out["window"]["results"] and any(r["e"] == "gateway" for r in out["window"]["results"])
    assert len(out["mmr"]["results"]) == 4
    assert out["ood"]["ood"] is True and out["ood"]["results"] == []
    assert out["assoc"]["results"]  # accepted over MCP; its behaviour is tested in test_faro_params.py
    assert out["rerank"]["reranker_degraded"] is True
    assert out["unscoped"]["results"]  # no project active: include_unscoped changes nothing
    for param, message in zip(("mmr_lambda", "ood_threshold", "diversify", "max_tokens", "scope", "format"),
                              out["errors"]):
        assert param in message, message
