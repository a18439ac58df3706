"""Drop-in details a third-party client meets (the official MCP client over stdio, and raw
JSON-RPC lines for what a client library would never send): misspelled and stray parameters,
clamped numbers, enums and real defaults in the schemas, the original's extra parameters, the
call time limit, the handshake limit, and an answer for every line that is not a message."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import pytest

from conftest import SERVER_BIN, settings_for
from cuba_memorys.services.memory import Memory
from mcp_helpers import run_stdio


# -- parameters --------------------------------------------------------------------------------
def test_a_misspelled_parameter_is_an_error_naming_it_and_the_closest(location):
    async def body(agent):
        typo = await agent.error("cuba_cronica", action="add", entity_name="e", content="A decision was made",
                                 observaton_type="decision")
        limit = await agent.error("cuba_faro", query="anything", limt=3)
        listed = await agent.session.call_tool("cuba_cronica", {"action": "list", "entity_name": "e"})
        return typo, limit, listed

    typo, limit, listed = run_stdio(location, body)
    assert "observaton_type" in typo and "did you mean observation_type" in typo
    assert "limt" in limit and "did you mean limit" in limit
    assert listed.is_error  # nothing was stored: the entity does not even exist


def test_an_argument_of_another_action_is_ignored_and_the_answer_names_it(location):
    """Issue 32: the original accepts a parameter of the tool's other actions (and ignores it);
    here such a call was refused. A misspelled name is still refused (the test above)."""
    async def body(agent):
        await agent.call("cuba_alma", action="create", name="svc")
        return (await agent.call("cuba_faro", query="x", mode="verify", limit=5),
                await agent.call("cuba_ingesta", action="ingest", entity_name="elsewhere",
                                 items=[{"entity_name": "svc", "content": "The service listens on port 8443"}]),
                await agent.call("cuba_cronica", action="add", entity_name="svc", actors=["ana"],
                                 content="The service restarts nightly at 03:00"),
                await agent.call("cuba_alma", action="get", name="svc", new_name="other"),
                await agent.call("cuba_faro", query="x", mode="verify", limit=10))

    verified, ingested, added, got, defaults = run_stdio(location, body)
    assert verified["ignored"] == ["limit"] and verified["mode"] == "verify"
    assert ingested["ignored"] == ["entity_name"] and ingested["added"] == 1
    assert added["ignored"] == ["actors"] and added["entity_name"] == "svc"
    assert got["ignored"] == ["new_name"] and got["entity"]["name"] == "svc"  # nothing was renamed
    assert "ignored" not in defaults  # a value equal to the default is no argument to ignore


def one_sentence(message: str) -> bool:
    return "\n" not in message and "pydantic" not in message and "validation error" not in message


def test_a_refused_argument_is_one_sentence_naming_the_parameter_value_and_what_is_accepted(location):
    """Issue 32: schema-level refusals were pydantic's dump (several lines and a link)."""
    calls = [("cuba_faro", {"query": "x", "mode": "bogus"}, "mode: unknown value 'bogus' (accepted: hybrid | verify"),
             ("cuba_faro", {"query": "x", "scope": "nowhere"},
              "scope: unknown value 'nowhere' (accepted: all | entities | observations | errors"),
             ("cuba_faro", {"query": "x", "format": "tiny"},
              "format: unknown value 'tiny' (accepted: compact | verbose"),
             ("cuba_cronica", {"action": "append"}, "action: unknown value 'append' (accepted: add | delete | list"),
             ("cuba_cronica", {"entity_name": "e"}, "action: is required (accepted: add | delete | list"),
             ("cuba_vigia", {"metric": "speed"}, "metric: unknown value 'speed' (accepted: summary | health"),
             ("cuba_faro", {"query": "x", "limit": "many"},
              "limit: 'many' is a string (accepted: an integer; default 10)"),
             ("cuba_faro", {"query": "x", "diversify": "yes"}, "diversify: 'yes' is a string (accepted: true or false"),
             ("cuba_faro", {"query": "x", "ood_threshold": -1}, "ood_threshold: -1 should be greater than or equal"),
             ("cuba_faro", {}, "query: is required (accepted: a string)")]

    async def body(agent):
        return [await agent.error(tool, **args) for tool, args, _ in calls]

    for message, (tool, args, expected) in zip(run_stdio(location, body), calls):
        assert expected in message and one_sentence(message), (tool, args, message)
        assert message.startswith(f"Error executing tool {tool}: ")  # as the SDK frames every tool error


def test_a_number_sent_as_a_string_is_refused_saying_how_to_send_it(location):
    """Issue 32: limit "5" got pydantic's dump. It is still refused (the server validates strictly,
    and the original never reads "5" as 5: it takes the default), now in a sentence that says how."""
    async def body(agent):
        return (await agent.error("cuba_faro", query="x", limit="5"),
                await agent.error("cuba_faro", query="x", mmr_lambda="0.5"),
                await agent.error("cuba_artefacto", action="lock", path="docs/plan.md", ttl_seconds=" 60"))

    limit, mmr, ttl = run_stdio(location, body, CUBA_EMBED_MODEL="none")
    assert "limit: '5' is a string, not a number: send 5 without quotes (accepted: an integer; default 10)" in limit
    assert "mmr_lambda: '0.5' is a string, not a number: send 0.5 without quotes (accepted: a number" in mmr
    assert "ttl_seconds: ' 60' is a string, not a number: send 60 without quotes" in ttl
    assert all(one_sentence(m) for m in (limit, mmr, ttl))


def test_the_originals_extra_parameters_are_accepted_and_do_something(location):
    async def body(agent):
        hidden = await agent.call("cuba_cronica", action="add", entity_name="vault", trust="quarantined",
                                  content="The staging vault token rotates every Monday")
        found = await agent.call("cuba_faro", query="staging vault token rotation", track_access=False)
        await agent.call("cuba_alma", action="create", name="a")
        for name in ("b", "c", "d"):
            await agent.call("cuba_alma", action="create", name=name)
            await agent.call("cuba_puente", action="create", from_entity="a", to_entity=name)
        walked = await agent.call("cuba_puente", action="traverse", start_entity="a", limit=2)
        extracted = await agent.call("cuba_ingesta", action="auto_extract", text="notes", budget_secs=5)
        return hidden, found, walked, extracted

    hidden, found, walked, extracted = run_stdio(location, body)
    assert hidden["trust"] == "quarantined" and hidden["id"] not in {r["id"] for r in found["results"]}
    assert walked["count"] == 2
    assert extracted["degraded"] is True and extracted["reason"] == "no_backend"  # this client cannot sample


def test_out_of_range_numbers_are_clamped_and_the_answer_says_so(location):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="e", content="Ports are assigned from 8000 up")
        return (await agent.call("cuba_faro", query="ports", limit=500, max_tokens=0),
                await agent.call("cuba_puente", action="traverse", start_entity="e", max_depth=9),
                await agent.call("cuba_receta", action="list", limit=1000),
                await agent.error("cuba_faro", query="ports", limit="many"))

    search, walk, recipes, malformed = run_stdio(location, body)
    assert search["clamped"] == {"limit": {"given": 500, "used": 50}, "max_tokens": {"given": 0, "used": 1}}
    assert walk["max_depth"] == 5 and walk["clamped"] == {"max_depth": {"given": 9, "used": 5}}
    assert recipes["clamped"] == {"limit": {"given": 1000, "used": 100}}
    assert "limit" in malformed  # the wrong type is still refused


def test_schemas_carry_enums_real_defaults_and_item_shapes(location):
    async def body(agent):
        return {t.name: t.input_schema for t in (await agent.session.list_tools()).tools}

    schemas = run_stdio(location, body)

    def prop(tool: str, name: str) -> dict:
        return schemas[tool]["properties"][name]

    assert "decision" in prop("cuba_cronica", "observation_type")["enum"]
    assert prop("cuba_cronica", "observation_type")["default"] == "fact"
    assert prop("cuba_cronica", "source")["default"] == "agent" and "user" in prop("cuba_cronica", "source")["enum"]
    assert prop("cuba_jornada", "outcome")["enum"] == ["success", "partial", "failed", "abandoned"]
    assert prop("cuba_jornada", "outcome")["default"] == "success"
    condition = prop("cuba_centinela", "condition_type")  # optional: its type, default null (issue 32)
    assert condition["enum"] == ["on_access", "on_session_start", "on_error_match"] and condition["default"] is None
    assert prop("cuba_alma", "entity_type")["default"] == "concept"
    assert prop("cuba_centinela", "max_fires")["default"] == 1 and prop("cuba_jornada", "name")["default"] == "unnamed"
    assert prop("cuba_pizarra", "ttl_seconds")["default"] == 3600 and prop("cuba_puente", "max_depth")["default"] == 3
    assert prop("cuba_faro", "include_unscoped")["default"] is False
    item = prop("cuba_ingesta", "items")["items"]
    assert item["required"] == ["entity_name", "content"] and "trust" in item["properties"]
    assert prop("cuba_cronica", "observations")["items"]["properties"]["observation_type"]["enum"]


def test_a_bad_enum_value_keeps_its_clear_message(location):
    async def body(agent):
        return await agent.error("cuba_cronica", action="add", entity_name="e", content="x y z",
                                 observation_type="rumour")

    message = run_stdio(location, body)
    assert "observation_type: unknown value 'rumour' (accepted: fact | decision" in message


# -- the call time limit -----------------------------------------------------------------------
@contextmanager
def store_locked(location):
    """Another process's connection holding the store's write lock (SQLite) or an exclusive table
    lock (PostgreSQL) until the block ends: a write meanwhile can only wait."""
    if location.database_url:
        import psycopg

        with psycopg.connect(location.database_url) as conn:
            conn.execute("LOCK TABLE observations IN ACCESS EXCLUSIVE MODE")
            yield
            conn.rollback()
        return
    conn = sqlite3.connect(location.data_dir / "memory.db", isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def test_a_call_waiting_past_the_time_limit_is_stopped_and_writes_nothing(location):
    rows = [{"entity_name": f"bulk{i % 7}", "content": f"Row {i}: the import job wrote batch {i} of the nightly"
                                                         f" sync, with {i * 13} records and checksum {i * 7919}"}
            for i in range(20)]

    async def body(agent):
        await agent.call("cuba_pizarra", action="write", content="the server is up")  # migrated, ready
        with store_locked(location):
            started = time.monotonic()
            message = await agent.error("cuba_cronica", action="batch_add", observations=rows)
            answered = time.monotonic() - started
        time.sleep(3)  # the lock is free again: the stopped worker must not write now either
        return message, answered

    message, answered = run_stdio(location, body, CUBA_HANDLER_TIMEOUT_SECS="2", CUBA_EMBED_QUEUE="off")
    assert "did not finish within 2 s" in message and "CUBA_HANDLER_TIMEOUT_SECS" in message
    assert answered < 20  # the model's seconds do not count; the wait for the lock does
    # Counted in the store itself once the server has stopped, not by a search through it: under
    # that same short limit a search on a busy machine (parallel workers) could be stopped too.
    mem = Memory.open(replace(settings_for(location), embed_model="none"), check_model=False)
    try:
        assert mem.store.counts()["observations"] == 0
    finally:
        mem.close()


def test_a_long_batch_is_not_stopped_for_the_models_time(location):
    """Issue 29: with the queue off, a batch of long texts spends far longer in the model than the
    call's limit; the limit bounds waiting, not that work, so the batch is written whole."""
    words = "the ledger service reconciles card payments against the bank statement every night and"
    rows = [{"entity_name": f"long{i % 5}", "content": f"Entry {i}. " + " ".join([words] * 90)[:8000] + f" {i}."}
            for i in range(12)]

    async def body(agent):
        started = time.monotonic()
        answer = await agent.call("cuba_cronica", action="batch_add", observations=rows)
        return answer, time.monotonic() - started

    answer, took = run_stdio(location, body, CUBA_HANDLER_TIMEOUT_SECS="2", CUBA_EMBED_QUEUE="off")
    assert answer["added"] + answer["deduplicated"] + answer["reinforced"] == 12 and answer["embedding"] == "ready"
    assert took > 2  # it did run past the limit, and was not stopped


# -- stdio: the handshake limit and unreadable lines -------------------------------------------
def serve_raw(location, lines: list[str], pause: float = 2.0, expect: int | None = None,
              **env: str) -> tuple[list[dict], str, int]:
    """Send raw lines to a stdio server, wait ``pause`` s (or, with ``expect``, until that many
    replies came, at most 60 s: a loaded machine starts the server slowly), close stdin;
    (replies, stderr, status)."""
    import threading

    proc = subprocess.Popen([str(SERVER_BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=location.env(CUBA_EMBED_MODEL="none", **env), text=True)
    assert proc.stdin is not None and proc.stdout is not None
    out: list[str] = []
    enough = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            out.append(line)
            if expect is not None and sum(1 for x in out if x.strip()) >= expect:
                enough.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for line in lines:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    if expect is None:
        time.sleep(pause)
    else:
        enough.wait(60)
    proc.stdin.close()  # stdout belongs to the reader thread; stderr is read here
    err = proc.stderr.read() if proc.stderr is not None else ""
    proc.wait(timeout=60)
    reader.join(10)
    return [json.loads(x) for x in out if x.strip()], err, proc.returncode


INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


def test_every_unreadable_request_gets_an_error_reply(location):
    surrogate = ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"cuba_proyecto",'
                 '"arguments":{"action":"list","name":"\\ud800"}}}')
    lines = [INITIALIZE, INITIALIZED, surrogate,
             '{"jsonrpc":"2.0","id":3,"method":"tools/ca',
             '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":[1,2]}',
             '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":' + "[" * 300 + "]" * 300 + "}",
             '{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}',
             '{"jsonrpc":"2.0","id":6,"method":"ping"}']
    replies, _, _ = serve_raw(location, lines, expect=6)
    by_id = {r.get("id"): r for r in replies}
    assert by_id[2]["error"]["code"] == -32700  # the client waiting for id 2 is answered
    assert by_id[None]["error"]["code"] == -32700  # a truncated line: no id can be read
    assert by_id[4]["error"]["code"] == -32600  # JSON, but params is not an object
    assert by_id[5]["error"]["code"] == -32700  # nested deeper than the SDK's parser goes
    assert by_id[6]["result"] == {}  # still serving; the bad notification got no reply
    assert len(replies) == 6  # initialize, 2, null, 4, 5, 6: nothing for the notification


def serve_bytes(location, lines: list[bytes], last_id: int, timeout: float = 60) -> list[dict]:
    """Send raw lines to a stdio server; the replies, read until the one to ``last_id`` (a final
    ping) has come: every earlier line was answered by then or never will be."""
    proc = subprocess.Popen([str(SERVER_BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=location.env(CUBA_EMBED_MODEL="none"))
    assert proc.stdin is not None and proc.stdout is not None
    for line in [*lines, json.dumps({"jsonrpc": "2.0", "id": last_id, "method": "ping"}).encode()]:
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()
    replies: list[dict] = []
    reader = threading.Thread(target=lambda: replies.extend(json.loads(x) for x in iter(proc.stdout.readline, b"")
                                                           if x.strip()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(r.get("id") == last_id for r in list(replies)):
        time.sleep(0.05)
    proc.stdin.close()
    proc.wait(timeout=60)
    reader.join(10)
    return replies


def test_invalid_utf8_is_refused_and_nothing_is_stored(location):
    """Issue 30: the SDK's reader replaced invalid bytes with U+FFFD, and the row was stored and
    acknowledged; over HTTP the same body got -32700. Now stdio refuses it too."""
    add = (b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"cuba_cronica","arguments":'
           b'{"action":"add","entity_name":"bytes","content":"broken \xff\xfe text"}}}')
    listed = (b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"cuba_cronica","arguments":'
              b'{"action":"list","entity_name":"bytes"}}}')
    replies = serve_bytes(location, [INITIALIZE.encode(), INITIALIZED.encode(), add, listed], last_id=99)
    by_id = {r.get("id"): r for r in replies}
    assert by_id[2]["error"]["code"] == -32700 and "UTF-8" in by_id[2]["error"]["data"]
    assert by_id[3]["result"]["isError"] is True  # no entity "bytes": nothing was written


def test_an_initialize_without_protocol_version_gets_the_originals_assumed_one(location):
    """Issue 32: the SDK answered -32602; the original assumes 2024-11-05 (and reads neither
    capabilities nor clientInfo). A version the client names is still what it gets."""
    bare = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    listed = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    by_id = {r.get("id"): r for r in serve_bytes(location, [bare.encode(), INITIALIZED.encode(), listed.encode()],
                                                  last_id=99)}
    assert by_id[1]["result"]["protocolVersion"] == "2024-11-05", by_id[1]
    assert any(t["name"] == "cuba_faro" for t in by_id[2]["result"]["tools"])
    nothing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize"})  # no params at all
    for line, version in ((nothing, "2024-11-05"), (INITIALIZE, "2025-06-18")):
        by_id = {r.get("id"): r for r in serve_bytes(location, [line.encode()], last_id=99)}
        assert by_id[1]["result"]["protocolVersion"] == version, by_id


def test_an_http_initialize_without_protocol_version_is_accepted(location):
    from starlette.testclient import TestClient

    from cuba_memorys.server.app import http_app

    mem = Memory.open(replace(settings_for(location), embed_model="none"), check_model=False)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
    try:
        with TestClient(http_app(mem, "127.0.0.1", ""), base_url="http://127.0.0.1:8787") as client:
            response = client.post("/mcp", json=body, headers=headers)
    finally:
        mem.close()
    assert response.status_code == 200, response.text
    text = response.text
    message = json.loads(text.split("data: ", 1)[1].splitlines()[0] if "data: " in text else text)
    assert message["result"]["protocolVersion"] == "2024-11-05", message


def test_ids_json_rpc_forbids_batches_and_missing_fields_are_answered(location):
    lines = [INITIALIZE, INITIALIZED,
             '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
             '{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
             '{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
             '[{"jsonrpc":"2.0","id":9,"method":"ping"}]',
             '{"jsonrpc":"2.0","id":10}',
             '{"jsonrpc":"2.0","id":11,"method":"ping","params":{"x":"\\ud800"}}']
    replies = serve_bytes(location, [line.encode() for line in lines], last_id=12)
    nulls = [r for r in replies if r.get("id") is None]
    assert [r["error"]["code"] for r in nulls] == [-32600] * 4  # the three bad ids and the batch, each answered
    assert sum("not a string or an integer" in r["error"]["data"] for r in nulls) == 3
    assert any("batch requests" in r["error"]["data"] for r in nulls)
    by_id = {r["id"]: r for r in replies if r.get("id") is not None}
    assert by_id[10]["error"]["code"] == -32600 and "field required: method" in by_id[10]["error"]["data"]
    assert by_id[11]["error"]["code"] == -32700 and "lone UTF-16 surrogate" in by_id[11]["error"]["data"]
    assert by_id[12]["result"] == {}


def test_the_handshake_limit_fires_while_the_client_keeps_stdin_open(location):
    """Issue 32: it used to wait for end of input."""
    proc = subprocess.Popen([str(SERVER_BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=location.env(CUBA_EMBED_MODEL="none", CUBA_HANDSHAKE_TIMEOUT_SECS="2"))
    try:
        status = proc.wait(timeout=45)  # stdin stays open the whole time
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
    assert status == 2 and b"CUBA_HANDSHAKE_TIMEOUT_SECS" in proc.stderr.read()


def test_a_server_that_is_never_initialized_exits(location):
    started = time.monotonic()
    replies, err, status = serve_raw(location, [], pause=4, CUBA_HANDSHAKE_TIMEOUT_SECS="1")
    assert status == 2 and replies == [] and "CUBA_HANDSHAKE_TIMEOUT_SECS" in err
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("value", ["0", "off"])
def test_the_handshake_limit_can_be_turned_off(location, value):
    proc = subprocess.Popen([str(SERVER_BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=location.env(CUBA_EMBED_MODEL="none", CUBA_HANDSHAKE_TIMEOUT_SECS=value))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)  # still waiting for a client
    finally:
        proc.kill()
        proc.wait()


# -- the original's newer names ---------------------------------------------------------------
def test_the_originals_newer_variable_names_are_read_and_win(monkeypatch):
    """Every CUBA_<NAME> is also read as MEMORY_INDUSTRY_<NAME> (the original 0.27's namespace),
    the newer name winning when both are set, as the original's envs::alias; a bad value is
    reported under the name it was read from."""
    from cuba_memorys.config import Settings
    from cuba_memorys.errors import ConfigError

    for name in ("CUBA_TOOL_PROFILE", "MEMORY_INDUSTRY_TOOL_PROFILE", "CUBA_ENTITY_FACTOID",
                 "MEMORY_INDUSTRY_ENTITY_FACTOID", "CUBA_CLIENT_ID", "MEMORY_INDUSTRY_CLIENT_ID", "CUBA_MODE",
                 "MEMORY_INDUSTRY_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORY_INDUSTRY_TOOL_PROFILE", "lean")
    monkeypatch.setenv("MEMORY_INDUSTRY_CLIENT_ID", "workspace-a")
    assert (Settings.from_env().tool_profile, Settings.from_env().client_id) == ("lean", "workspace-a")
    monkeypatch.setenv("CUBA_TOOL_PROFILE", "agent")
    assert Settings.from_env().tool_profile == "lean"  # both set: the newer name
    monkeypatch.setenv("MEMORY_INDUSTRY_TOOL_PROFILE", "  ")
    assert Settings.from_env().tool_profile == "agent"  # blank counts as unset
    for value, expected in (("on", True), ("off", False)):
        monkeypatch.setenv("MEMORY_INDUSTRY_ENTITY_FACTOID", value)
        assert Settings.from_env().entity_factoid is expected
    monkeypatch.setenv("MEMORY_INDUSTRY_MODE", "turbo")
    with pytest.raises(ConfigError, match="MEMORY_INDUSTRY_MODE='turbo'"):
        Settings.from_env()


@pytest.mark.parametrize("variable", ["CUBA_CLIENT_ID", "MEMORY_INDUSTRY_CLIENT_ID"])
def test_a_configured_client_id_names_the_stdio_client(location, variable):
    """Over stdio the original's client_id is the configured one (there is no Mcp-Client-Id
    header); without one it is the name the client declares. Its state follows the id."""
    async def body(agent):
        me = await agent.call("cuba_whoami")
        await agent.call("cuba_proyecto", action="switch", name="shop")
        return me

    named = run_stdio(location, body, **{variable: "workspace-a"})
    assert named["client_id"] == "workspace-a" and named["transport"] == "stdio"

    async def again(agent):
        return await agent.call("cuba_whoami")

    assert run_stdio(location, again, **{variable: "workspace-a"})["project_name"] == "shop"  # same client
    declared = run_stdio(location, again)
    assert declared["client_id"] not in ("workspace-a", "default") and declared["project_name"] != "shop"
