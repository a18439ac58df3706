"""cuba_centinela (reminders) and cuba_ingesta (bulk writes): services on both backends, then
each tool over stdio with the official MCP client (auto_extract with and without sampling)."""

from __future__ import annotations

import json
from datetime import timedelta

import anyio
import pytest
from mcp import StdioServerParameters, types
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from conftest import SERVER_BIN
from cuba_memorys.errors import InvalidInput, NotFound, SecretRefused
from cuba_memorys.models import iso, utc_now
from cuba_memorys.server import catalog
from cuba_memorys.server.runtime import pick_action
from cuba_memorys.services import reminders
from cuba_memorys.services.graph import entities, projects
from cuba_memorys.services.observations import ingest
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.services.sessions import sessions
from mcp_helpers import Agent, run_stdio

TOKEN = "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
FIRED_KEYS = {"trigger_id", "entity_pattern", "message", "from_agent", "fire_count", "deactivated"}
NO_MODEL = {"CUBA_EMBED_MODEL": "none"}  # the stdio tests need no embeddings


def _remind(mem, client=None, pattern="auth*", condition="on_access", **args) -> dict:
    return reminders.create(mem, client, entity_pattern=pattern, condition_type=condition,
                            message=f"remember {pattern}", **args)


def _fired(response: dict) -> list[dict]:
    return response.get("triggered_reminders", [])


# -- reminders: where each condition fires --------------------------------------------------
def test_on_access_fires_on_read_and_write_of_a_matching_entity(memory):
    created = _remind(memory, "agent-a", "auth*", max_fires=-1)
    assert created == {"action": "create", "trigger_id": created["trigger_id"], "entity_pattern": "auth*",
                       "condition_type": "on_access", "message": "remember auth*", "max_fires": -1,
                       "expires_at": None, "from_agent": "agent-a"}
    added = observations.add(memory, "agent-b", entity_name="Auth-Service", content="Tokens expire after an hour")
    (fired,) = _fired(added)
    assert set(fired) == FIRED_KEYS and fired["trigger_id"] == created["trigger_id"]
    assert (fired["from_agent"], fired["fire_count"], fired["deactivated"]) == ("agent-a", 1, False)
    assert _fired(observations.list_for(memory, None, "Auth-Service"))[0]["fire_count"] == 2
    assert _fired(entities.get(memory, None, "Auth-Service"))[0]["fire_count"] == 3
    batch = observations.batch_add(memory, None, [{"entity_name": "auth", "content": "Sessions live in Redis"},
                                                  {"entity_name": "auth", "content": "Login rate limit is 5/min"}])
    assert [f["fire_count"] for f in _fired(batch)] == [4]  # once per call, not per item
    for other in (observations.add(memory, None, entity_name="billing", content="Invoices are monthly"),
                  entities.get(memory, None, "billing"), observations.list_for(memory, None, "billing")):
        assert "triggered_reminders" not in other
    assert "triggered_reminders" not in observations.add(memory, None, entity_name="oauth",
                                                         content="The provider is Keycloak")  # whole name


def test_on_session_start_fires_on_project_name_or_goals(memory):
    # made in billing-v2: a reminder belongs to its project, and one of no project is out of a project's scope
    projects.switch(memory, None, "billing-v2")
    every = _remind(memory, None, "*", "on_session_start")
    billing = _remind(memory, None, "billing", "on_session_start", max_fires=-1)
    _remind(memory, None, "payroll", "on_session_start")
    started = sessions.start(memory, "agent-a", name="invoices", goals=["fix the Billing export"])
    assert {f["trigger_id"] for f in _fired(started)} == {every["trigger_id"], billing["trigger_id"]}
    again = sessions.start(memory, "agent-a", name="cleanup", project="billing-v2")
    assert [f["trigger_id"] for f in _fired(again)] == [billing["trigger_id"]]  # "*" fired its once
    assert "triggered_reminders" not in sessions.start(memory, "agent-a", name="docs", project="website")


def test_on_error_match_fires_through_fire_and_check(memory):
    timeout = _remind(memory, "agent-a", "timeout", "on_error_match", max_fires=-1)
    _remind(memory, "agent-a", "auth*", "on_access")  # another condition never fires here
    (fired,) = reminders.fire(memory, "agent-b", "on_error_match", "TimeoutError: read timed out after 30 s")
    assert fired["trigger_id"] == timeout["trigger_id"] and fired["from_agent"] == "agent-a"
    assert reminders.fire(memory, None, "on_error_match", "KeyError: 'user'") == []
    checked = reminders.check(memory, None, entity_pattern="DB timeout on deploy", condition_type="on_error_match")
    assert checked["count"] == 1 and checked["triggered"][0]["fire_count"] == 2
    on_access = reminders.check(memory, None, entity_pattern="authz")
    assert on_access["condition_type"] == "on_access" and on_access["count"] == 1
    with pytest.raises(InvalidInput, match="condition_type"):
        reminders.fire(memory, None, "on_lunch", "x")


# -- reminders: limits, expiry, scope ---------------------------------------------------------
@pytest.mark.parametrize("max_fires, firings", [(None, 1), (1, 1), (3, 3), (-1, 6)])
def test_max_fires(memory, max_fires, firings):
    trigger = _remind(memory, None, "cache", **({} if max_fires is None else {"max_fires": max_fires}))
    fired = [f for _ in range(6) for f in reminders.fire(memory, None, "on_access", "cache")]
    assert [f["fire_count"] for f in fired] == list(range(1, firings + 1))
    # the firing that reaches max_fires says it switched the trigger off; an unlimited one never does
    assert [f["deactivated"] for f in fired] == [max_fires != -1 and n == firings for n in range(1, firings + 1)]
    (row,) = reminders.list_all(memory, None)["triggers"]
    assert row["id"] == trigger["trigger_id"] and row["fire_count"] == firings
    assert row["active"] is (max_fires == -1) and row["max_fires"] == (max_fires or 1)


def test_an_expired_trigger_never_fires_and_is_switched_off(memory, monkeypatch):
    soon = iso(utc_now() + timedelta(hours=1))
    trigger = _remind(memory, None, "cache", max_fires=-1, expires_at=soon)
    assert trigger["expires_at"] == soon
    assert reminders.fire(memory, None, "on_access", "cache")[0]["fire_count"] == 1
    later = utc_now() + timedelta(hours=2)
    monkeypatch.setattr(reminders, "utc_now", lambda: later)
    assert reminders.fire(memory, None, "on_access", "cache") == []
    (row,) = reminders.list_all(memory, None)["triggers"]
    assert row["active"] is False and row["fire_count"] == 1


def test_expires_at_must_be_a_valid_future_date_time(memory):
    for bad in ("next tuesday", "2026-13-45T00:00:00Z", 1735689600):
        with pytest.raises(InvalidInput, match="expires_at"):
            _remind(memory, None, expires_at=bad)
    with pytest.raises(InvalidInput, match="expires_at.*passed"):
        _remind(memory, None, expires_at="2020-01-01T00:00:00Z")
    assert reminders.list_all(memory, None)["count"] == 0  # nothing written by a failed call
    accepted = _remind(memory, None, expires_at="2999-01-01T10:00:00+02:00")
    assert accepted["expires_at"].startswith("2999-01-01T08:00:00")


def test_triggers_belong_to_the_project_they_were_created_in(memory):
    projects.switch(memory, "agent-a", "webapp")
    webapp = _remind(memory, "agent-a", "auth*", max_fires=-1)
    projects.switch(memory, "agent-b", "mobile")
    assert reminders.list_all(memory, "agent-b")["count"] == 0
    assert reminders.fire(memory, "agent-b", "on_access", "auth") == []
    with pytest.raises(NotFound):
        reminders.delete(memory, "agent-b", webapp["trigger_id"])
    projects.switch(memory, "agent-b", "webapp")
    assert reminders.fire(memory, "agent-b", "on_access", "auth")[0]["from_agent"] == "agent-a"
    assert reminders.list_all(memory, "agent-b")["triggers"][0]["id"] == webapp["trigger_id"]


def test_delete(memory):
    trigger = _remind(memory, None)
    assert reminders.delete(memory, None, trigger["trigger_id"]) == {"action": "delete",
                                                                     "trigger_id": trigger["trigger_id"]}
    assert reminders.fire(memory, None, "on_access", "auth") == []
    with pytest.raises(NotFound, match="not found"):
        reminders.delete(memory, None, trigger["trigger_id"])
    for bad in (None, "", "not-a-uuid", 42):
        with pytest.raises(InvalidInput, match="trigger_id"):
            reminders.delete(memory, None, bad)


@pytest.mark.parametrize("args, param", [
    ({"entity_pattern": None}, "entity_pattern"), ({"entity_pattern": "  "}, "entity_pattern"),
    ({"entity_pattern": "x" * 201}, "entity_pattern"), ({"entity_pattern": 7}, "entity_pattern"),
    ({"condition_type": None}, "condition_type"), ({"condition_type": "on_lunch"}, "condition_type"),
    ({"message": None}, "message"), ({"message": ""}, "message"), ({"message": "x" * 10_001}, "message"),
    ({"max_fires": 0}, "max_fires"),
    ({"max_fires": "3"}, "max_fires"), ({"max_fires": True}, "max_fires"), ({"max_fires": 1.5}, "max_fires"),
    ({"allow_secret": "yes"}, "allow_secret"),
])
def test_create_refuses_bad_input(memory, args, param):
    full = {"entity_pattern": "auth*", "condition_type": "on_access", "message": "check the token TTL", **args}
    with pytest.raises(InvalidInput, match=param):
        reminders.create(memory, None, **full)
    assert reminders.list_all(memory, None)["count"] == 0


def test_secrets_check_and_unknown_actions(memory):
    with pytest.raises(SecretRefused):
        reminders.create(memory, None, entity_pattern="deploy", condition_type="on_access", message=TOKEN)
    assert reminders.create(memory, None, entity_pattern="deploy", condition_type="on_access", message=TOKEN,
                            allow_secret=True)["max_fires"] == 1
    assert reminders.create(memory, None, entity_pattern="deploy", condition_type="on_access", message="ok",
                            max_fires=10_000)["max_fires"] == 10_000
    with pytest.raises(InvalidInput, match="entity_pattern"):
        reminders.check(memory, None)
    with pytest.raises(InvalidInput, match="condition_type"):
        reminders.check(memory, None, entity_pattern="deploy", condition_type="sometimes")
    with pytest.raises(InvalidInput, match="action"):
        pick_action(catalog.tool("cuba_centinela"), {"action": "snooze"})


# -- ingest ----------------------------------------------------------------------------------
def test_ingest_stores_valid_items_and_reports_invalid_ones_by_index(memory):
    items = [
        {"entity_name": "api", "content": "The API listens on port 8080"},
        {"content": "no entity"},
        "just a string",
        {"entity_name": "api", "content": "Typed wrongly", "observation_type": "rumour"},
        {"entity_name": "api", "content": TOKEN},
        {"entity_name": "api", "content": "Quarantine me", "trust": "quarantined"},
        {"entity_name": "api", "content": "Bad trust", "trust": "maybe"},
        {"entity_name": "db", "content": "We decided on PostgreSQL 16", "observation_type": "decision",
         "source": "user", "created_at": "2026-01-02T03:04:05Z"},
    ]
    result = ingest.ingest(memory, None, items=items)
    assert result["action"] == "ingest" and result["total_items"] == 8
    assert (result["added"], result["total_processed"], result["skipped_invalid"]) == (3, 3, 5)
    assert [i["index"] for i in result["invalid"]] == [1, 2, 3, 4, 6]
    reasons = {i["index"]: i["reason"] for i in result["invalid"]}
    assert "items[1].entity_name" in reasons[1] and "items[2]" in reasons[2]
    assert "items[3].observation_type" in reasons[3]
    assert "items[4].content" in reasons[4] and "items[6].trust" in reasons[6]
    ids = result["ids"]
    assert [i is None for i in ids] == [False, True, True, True, True, False, True, False]
    decision = memory.store.get_observation(ids[7], memory.scope(None))
    assert (decision.observation_type, decision.source, decision.created_at[:19]) == ("decision", "user",
                                                                                    "2026-01-02T03:04:05")
    assert memory.store.get_observation(ids[5], memory.scope(None)).trust == "quarantined"
    assert memory.store.get_observation(ids[0], memory.scope(None)).trust == "trusted"
    again = ingest.ingest(memory, None, items=items[:1])
    assert again["deduplicated"] == 1 and again["ids"] == ids[:1]


def test_ingest_limits(memory):
    for bad in (None, [], "items", {"entity_name": "a", "content": "b"}):
        with pytest.raises(InvalidInput, match="items"):
            ingest.ingest(memory, None, items=bad)
    with pytest.raises(InvalidInput, match="201 items"):
        ingest.ingest(memory, None, items=[{"entity_name": "a", "content": f"fact {i}"} for i in range(201)])
    full = ingest.ingest(memory, None, items=[{"content": "no entity"}] * 200)  # 200 is allowed
    assert full["skipped_invalid"] == 200 and full["added"] == 0 and full["ids"] == [None] * 200
    for flag in ("untrusted", "allow_secret"):
        with pytest.raises(InvalidInput, match=flag):
            ingest.ingest(memory, None, items=[{"entity_name": "a", "content": "b"}], **{flag: "true"})


def test_untrusted_rows_are_quarantined_and_never_searched(memory):
    result = ingest.ingest(memory, None, untrusted=True, items=[
        {"entity_name": "vendor", "content": "The zephyrine gateway rotates keys every Tuesday"}])
    assert result["trust"] == "quarantined" and "note" in result
    row = memory.store.get_observation(result["ids"][0], memory.scope(None))
    assert row.trust == "quarantined"
    found = search.faro(memory, None, query="zephyrine gateway rotates keys")
    assert all(r["id"] != row.id for r in found["results"])
    # The same text written trusted later is stored (not absorbed by the quarantined row) and found.
    trusted = observations.add(memory, None, entity_name="vendor",
                               content="The zephyrine gateway rotates keys every Tuesday")
    assert trusted["id"] != row.id and "deduplicated" not in trusted
    assert [r["id"] for r in search.faro(memory, None, query="zephyrine gateway")["results"]
            if r["id"] in (row.id, trusted["id"])] == [trusted["id"]]


def test_ingest_fires_on_access_reminders(memory):
    _remind(memory, "agent-a", "api")
    result = ingest.ingest(memory, None, items=[{"entity_name": "api", "content": "Rate limit is 100/s"}])
    assert result["triggered_reminders"][0]["deactivated"] is True


# -- parse -----------------------------------------------------------------------------------
PARSE_TEXT = """We decided to use PostgreSQL instead of MySQL for the ledger.

Lesson learned: never run migrations during peak hours.

The nightly build failed with a segmentation fault in the image resizer.

Fixed the resizer crash by pinning libvips to 8.14.

I prefer small pull requests over large ones.

The API listens on port 8080.

ok

Decidimos usar Redis para las sesiones.

Aprendimos que la caché se invalida al desplegar.

La conexión falló con un timeout de 30 segundos.

La solución fue subir el pool de conexiones a 20.

Preferimos tabuladores en los Makefiles."""


def test_parse_types_paragraphs_by_cue_words_and_stores_them(memory):
    result = ingest.parse(memory, None, entity_name="notes", text=PARSE_TEXT)
    types_ = [p["observation_type"] for p in result["parsed"]]
    assert types_ == ["decision", "lesson", "error", "solution", "preference", "fact",
                      "decision", "lesson", "error", "solution", "preference"]
    assert result["action"] == "parse" and result["entity_name"] == "notes"
    assert result["parsed_count"] == 11 and result["added"] == 11 and result["skipped_invalid"] == 0
    stored = {o["content"]: o["type"] for o in observations.list_for(memory, None, "notes")["observations"]}
    assert stored["I prefer small pull requests over large ones."] == "preference"
    assert "ok" not in stored


def test_parse_edge_cases(memory):
    empty = ingest.parse(memory, None, entity_name="notes", text="ok\n\nshort\n\n   ")
    assert empty == {"action": "parse", "entity_name": "notes", "parsed_count": 0, "note": empty["note"]}
    quarantined = ingest.parse(memory, None, entity_name="notes", text="A longer paragraph here.", untrusted=True)
    assert quarantined["trust"] == "quarantined"
    assert memory.store.get_observation(quarantined["ids"][0], memory.scope(None)).trust == "quarantined"
    with pytest.raises(InvalidInput, match="201 paragraphs"):
        ingest.parse(memory, None, entity_name="notes", text="\n\n".join(f"paragraph number {i}" for i in range(201)))
    for args, param in (({"entity_name": None}, "entity_name"), ({"entity_name": "x" * 201}, "entity_name"),
                        ({"text": None}, "text"), ({"text": ""}, "text"), ({"text": 5}, "text"),
                        ({"untrusted": 1}, "untrusted")):
        with pytest.raises(InvalidInput, match=param):
            ingest.parse(memory, None, **{"entity_name": "notes", "text": "Some paragraph of text.", **args})
    with pytest.raises(InvalidInput, match="action"):
        pick_action(catalog.tool("cuba_ingesta"), {"action": "slurp"})


# -- auto_extract (the model is a function here; over stdio it is the client's) -----------------
MODEL_ANSWER = {
    "facts": [{"entity_name": "billing", "content": "Invoices are generated on the first day of the month",
               "observation_type": "fact"},
              {"entity_name": "billing", "content": "Stripe is the payment provider", "observation_type": "insight"},
              {"content": "Retries use exponential backoff", "observation_type": "decision"},
              {"entity_name": "billing"}],
    "relations": [{"from": "billing", "to": "payments", "relation_type": "depends_on"},
                  {"from": "billing", "to": "nowhere", "relation_type": "uses"}],
}


def _model(answer):
    def ask(system, prompt, max_tokens, timeout):
        if isinstance(answer, Exception):
            raise answer
        return (answer if isinstance(answer, str) else json.dumps(answer)), "scripted"
    return ask


def test_auto_extract_stores_what_the_model_extracts(memory):
    entities.create(memory, None, "payments")
    result = ingest.auto_extract(memory, None, _model(MODEL_ANSWER), text="Meeting notes ...", entity_hint="billing")
    assert result["action"] == "auto_extract" and result["backend"] == "sampling" and result["model"] == "scripted"
    assert (result["extracted"], result["added"], result["skipped_invalid"]) == (4, 3, 1)
    assert result["invalid"][0]["index"] == 3 and result["relations_linked"] == 1
    assert result["relations_skipped"][0]["index"] == 1
    listed = observations.list_for(memory, None, "billing")["observations"]
    assert {o["type"] for o in listed} == {"fact", "decision"} and {o["source"] for o in listed} == {"inference"}
    assert entities.get(memory, None, "billing")["relations"][0]["entity"] == "payments"
    untrusted = ingest.auto_extract(memory, None,
                                    _model({"facts": [{"entity_name": "ops", "content": "Pager rota is weekly"}],
                                            "relations": [{"from": "ops", "to": "payments"}]}),
                                    text="notes", untrusted=True)
    assert untrusted["trust"] == "quarantined" and untrusted["relations_linked"] == 0


@pytest.mark.parametrize("answer, reason", [(None, "no_backend"), (TimeoutError(), "out_of_budget"),
                                            (RuntimeError("refused"), "backend_failed"),
                                            ("Sure! Here are the facts: none", "backend_failed"),
                                            ({"facts": "none"}, "backend_failed")])
def test_auto_extract_without_a_usable_model_is_degraded(memory, answer, reason):
    ask = None if answer is None else _model(answer)
    result = ingest.auto_extract(memory, None, ask, text="We moved CI to GitHub Actions.")
    assert result == {"action": "auto_extract", "extracted": 0, "added": 0, "degraded": True, "reason": reason,
                      "note": result["note"]}
    assert memory.store.counts()["observations"] == 0
    with pytest.raises(InvalidInput, match="text"):
        ingest.auto_extract(memory, None, ask, text="x" * (ingest.MAX_EXTRACT_CHARS + 1))
    with pytest.raises(InvalidInput, match="entity_hint"):
        ingest.auto_extract(memory, None, ask, text="ok text", entity_hint=["a"])


# -- over stdio ------------------------------------------------------------------------------
def test_centinela_over_stdio(location):
    async def body(agent: Agent):
        tools = {t.name: t for t in (await agent.session.list_tools()).tools}
        assert tools["cuba_centinela"].annotations.destructive_hint is True
        assert tools["cuba_centinela"].annotations.read_only_hint is False and "memory_centinela" in tools
        created = await agent.call("cuba_centinela", action="create", entity_pattern="auth*",
                                   condition_type="on_access", message="Tokens are rotated on Fridays", max_fires=2)
        added = await agent.call("cuba_cronica", action="add", entity_name="auth-service", content="Uses JWT")
        assert set(added["triggered_reminders"][0]) == FIRED_KEYS
        got = await agent.call("cuba_alma", action="get", name="auth-service")
        assert got["triggered_reminders"][0]["deactivated"] is True
        assert "triggered_reminders" not in await agent.call("cuba_cronica", action="list", entity_name="auth-service")
        await agent.call("cuba_centinela", action="create", entity_pattern="*", condition_type="on_session_start",
                         message="Read the runbook first")
        started = await agent.call("cuba_jornada", action="start", name="oncall")
        assert started["triggered_reminders"][0]["message"] == "Read the runbook first"
        await agent.call("cuba_centinela", action="create", entity_pattern="timeout",
                         condition_type="on_error_match", message="Check the DB pool")
        checked = await agent.call("cuba_centinela", action="check", entity_pattern="TimeoutError: 30 s",
                                   condition_type="on_error_match")
        assert checked["count"] == 1 and checked["triggered"][0]["message"] == "Check the DB pool"
        listed = await agent.call("cuba_centinela", action="list")
        assert listed["count"] == 3 and set(listed["triggers"][0]) >= {
            "id", "entity_pattern", "condition_type", "message", "active", "fire_count", "max_fires",
            "created_at", "expires_at"}
        deleted = await agent.call("cuba_centinela", action="delete", trigger_id=created["trigger_id"])
        assert deleted == {"action": "delete", "trigger_id": created["trigger_id"]}
        assert "not found" in await agent.error("cuba_centinela", action="delete", trigger_id=created["trigger_id"])
        assert "expires_at" in await agent.error("cuba_centinela", action="create", entity_pattern="a",
                                                 condition_type="on_access", message="m", expires_at="soon")
        assert "condition_type" in await agent.error("cuba_centinela", action="create", entity_pattern="a",
                                                     message="m")
        assert "max_fires" in await agent.error("cuba_centinela", action="create", entity_pattern="a",
                                                condition_type="on_access", message="m", max_fires=0)
        await agent.error("cuba_centinela", action="snooze")

    run_stdio(location, body, **NO_MODEL)


def test_ingesta_over_stdio(location):
    async def body(agent: Agent):
        tools = {t.name: t for t in (await agent.session.list_tools()).tools}
        assert tools["cuba_ingesta"].annotations.read_only_hint is False and "memory_ingesta" in tools
        result = await agent.call("cuba_ingesta", action="ingest", items=[
            {"entity_name": "api", "content": "The API listens on port 8080"}, 42, {"entity_name": "api"}])
        assert (result["added"], result["skipped_invalid"], result["total_items"]) == (1, 2, 3)
        assert [i["index"] for i in result["invalid"]] == [1, 2] and result["ids"][1:] == [None, None]
        parsed = await agent.call("cuba_ingesta", action="parse", entity_name="notes", text=PARSE_TEXT)
        assert parsed["parsed_count"] == 11 and parsed["parsed"][0]["observation_type"] == "decision"
        quarantined = await agent.call("cuba_ingesta", action="ingest", untrusted=True, items=[
            {"entity_name": "vendor", "content": "The quasarine relay drops idle sockets"}])
        found = await agent.call("cuba_faro", query="quasarine relay sockets")
        assert quarantined["ids"][0] not in [r["id"] for r in found["results"]]
        degraded = await agent.call("cuba_ingesta", action="auto_extract", text="We moved CI to GitHub Actions.")
        assert degraded == {"action": "auto_extract", "extracted": 0, "added": 0, "degraded": True,
                            "reason": "no_backend", "note": degraded["note"]}
        assert "items" in await agent.error("cuba_ingesta", action="ingest", items=[])
        assert "201 items" in await agent.error("cuba_ingesta", action="ingest",
                                                items=[{"entity_name": "a", "content": "b"}] * 201)
        assert "entity_name" in await agent.error("cuba_ingesta", action="parse", text="Some paragraph of text.")
        assert "text" in await agent.error("cuba_ingesta", action="auto_extract")

    run_stdio(location, body, **NO_MODEL)


def run_with_sampling(location, answer_for, body):
    """Run ``body(agent)`` over stdio with a client whose model answers ``answer_for(prompt)``
    (a dict, sent as JSON); returns (body's result, the prompts the server sent)."""
    prompts: list[str] = []

    async def sampling(context, params: types.CreateMessageRequestParams):
        prompts.append(params.messages[0].content.text)
        text = json.dumps(answer_for(prompts[-1]))
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=text),
                                         model="scripted-test-model", stop_reason="endTurn")

    async def main():
        params = StdioServerParameters(command=str(SERVER_BIN), args=[], env=location.env(**NO_MODEL))
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, sampling_callback=sampling) as session,
        ):
            await session.initialize()
            return await body(Agent(session))

    return anyio.run(main), prompts


def test_auto_extract_over_stdio_asks_the_clients_model(location):
    answer = {"facts": [{"entity_name": "ci", "content": "CI runs on GitHub Actions", "observation_type": "decision"},
                        {"entity_name": "ci", "content": "Builds are cached per branch"}],
              "relations": [{"from": "ci", "to": "github", "relation_type": "uses"}]}

    async def body(agent):
        await agent.call("cuba_alma", action="create", name="github")
        result = await agent.call("cuba_ingesta", action="auto_extract", entity_hint="ci",
                                  text="Today we moved CI from Jenkins to GitHub Actions; "
                                       "builds are cached per branch.")
        return result, await agent.call("cuba_cronica", action="list", entity_name="ci")

    (result, listed), prompts = run_with_sampling(location, lambda prompt: answer, body)
    assert len(prompts) == 1 and "GitHub Actions" in prompts[0] and '"ci"' in prompts[0]
    assert (result["extracted"], result["added"], result["relations_linked"]) == (2, 2, 1)
    assert result["backend"] == "sampling" and result["model"] == "scripted-test-model"
    assert {o["type"] for o in listed["observations"]} == {"decision", "fact"}


def test_an_error_report_fires_on_error_match_reminders(memory):
    from cuba_memorys.services import incidents, reminders

    reminders.create(memory, None, entity_pattern="*timeout*", condition_type="on_error_match",
                     message="Check the connection pool size first")
    answer = incidents.report(memory, None, error_type="TimeoutError", error_message="db query timeout after 30s")
    assert [r["message"] for r in answer["triggered_reminders"]] == ["Check the connection pool size first"]
    quiet = incidents.report(memory, None, error_type="KeyError", error_message="missing key 'user'")
    assert "triggered_reminders" not in quiet


def test_auto_extract_supersedes_the_facts_it_replaces(memory):
    """supersede_conflicts: a new fact in plain conflict with a stored one (a changed number) retires
    it; unrelated facts of the entity stay; without the flag, or from untrusted input, nothing is
    retired."""
    old = observations.add(memory, None, entity_name="api",
                           content="The public API rate limit is 100 requests per minute")
    other = observations.add(memory, None, entity_name="api", content="The API reference lives in docs/api.md")
    newer = {"facts": [{"entity_name": "api", "content": "The public API rate limit is 500 requests per minute"}]}

    untrusted = ingest.auto_extract(memory, None, _model(newer), text="notes", supersede_conflicts=True, untrusted=True)
    assert untrusted["superseded"] == 0 and "untrusted" in untrusted["supersede_note"]
    result = ingest.auto_extract(memory, None, _model(newer), text="notes", supersede_conflicts=True)
    assert result["superseded"] == 1
    [retired] = result["supersessions"]
    assert retired["id"] == old["id"] and retired["superseded_by"] == result["ids"][0]
    assert retired["judgment"]["verdict"] == "contradicts"
    live = {o["id"] for o in observations.list_for(memory, None, "api")["observations"]}
    assert old["id"] not in live and {other["id"], result["ids"][0]} <= live
    found = search.faro(memory, None, query="API rate limit requests per minute", format="verbose")["results"]
    assert old["id"] not in {r["id"] for r in found} and result["ids"][0] in {r["id"] for r in found}

    plain = ingest.auto_extract(memory, None, _model({"facts": [{"entity_name": "api",
                                "content": "The public API rate limit is 900 requests per minute"}]}), text="notes")
    assert "superseded" not in plain and result["ids"][0] in {
        o["id"] for o in observations.list_for(memory, None, "api")["observations"]}


def test_auto_extract_over_stdio_asks_the_clients_model_to_judge_replacements(location):
    def answer_for(prompt):
        if prompt.startswith("Older stored fact:"):
            return {"verdict": "supersedes", "confidence": 0.9, "reason": "the newer size replaces the older"}
        return {"facts": [{"entity_name": "db", "content": "The connection pool holds 40 connections"}]}

    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="db",
                         content="The connection pool holds 10 connections")
        result = await agent.call("cuba_ingesta", action="auto_extract", supersede_conflicts=True,
                                  text="We raised the pool to 40 connections.")
        return result, await agent.call("cuba_cronica", action="list", entity_name="db")

    (result, listed), prompts = run_with_sampling(location, answer_for, body)
    assert any(p.startswith("Older stored fact:\n<older>\nThe connection pool holds 10") for p in prompts)
    assert (result["superseded"] == 1
            and result["supersessions"][0]["judgment"]["verdict"] in ("supersedes", "contradicts"))
    assert [o["content"] for o in listed["observations"]] == ["The connection pool holds 40 connections"]


@pytest.mark.parametrize("given, used", [(-2, -1), (10_001, 10_000)])
def test_max_fires_out_of_range_is_clamped_and_said(memory, given, used):
    created = reminders.create(memory, None, entity_pattern="cache", condition_type="on_access",
                               message="check the TTL", max_fires=given)
    assert created["max_fires"] == used and created["clamped"] == {"max_fires": {"given": given, "used": used}}
