"""cuba_archivo: the hash-chained audit log, over stdio with the official MCP client on both
backends. Hashes are recomputed here by hand from the raw rows; tampering goes through the raw
driver (SQLite: the file, its trigger dropped; PostgreSQL: the superuser login with triggers
off), as someone with access to the database but not to the server would."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from conftest import SERVER_BIN, StoreLocation
from cuba_memorys.errors import StorageError
from cuba_memorys.services import audit
from mcp_helpers import Agent, run_stdio, stdio_agent

GENESIS = "0" * 64
KEY = "a-test-key-that-only-this-test-knows"


def serve(where: StoreLocation, home: Path, body, **env: str) -> Any:
    return run_stdio(where, body, HOME=str(home), CUBA_EMBED_MODEL="none", **env)


@contextmanager
def raw(where: StoreLocation) -> Iterator[Any]:
    """A connection around the server: the SQLite file itself, or PostgreSQL's superuser login
    (the test databases' URL logs in as it; only the server switches to the app role)."""
    if where.backend == "sqlite":
        conn = sqlite3.connect(where.data_dir / "memory.db", isolation_level=None)
    else:
        import psycopg

        conn = psycopg.connect(where.database_url, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def raw_rows(where: StoreLocation) -> list[dict[str, Any]]:
    with raw(where) as conn:
        cur = conn.execute("SELECT id, prev_hash, action, payload, current_hash, project_id, created_at"
                           " FROM audit_log ORDER BY id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


def tamper(where: StoreLocation, sql: str, params: tuple = ()) -> None:
    """Change the log behind the server's back, past the database's own refusal."""
    with raw(where) as conn:
        if where.backend == "sqlite":
            conn.execute("DROP TRIGGER audit_log_no_update")
            conn.execute("DROP TRIGGER audit_log_no_delete")
            conn.execute(sql, params)
            conn.execute("CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN"
                         " SELECT RAISE(ABORT, 'audit_log is append-only'); END")
            conn.execute("CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN"
                         " SELECT RAISE(ABORT, 'audit_log is append-only'); END")
        else:
            conn.execute("SET session_replication_role = replica")  # superuser only: triggers do not fire
            conn.execute(sql.replace("?", "%s"), params)


def by_hand(key: str | None, row: dict[str, Any]) -> str:
    """The documented formula: prev_hash | action | payload | created_at [| project_id]."""
    parts = [row["prev_hash"], row["action"], row["payload"], row["created_at"]]
    if row["project_id"] is not None:
        parts.append(row["project_id"])
    message = "|".join(parts).encode("utf-8")
    if key is None:
        return hashlib.sha256(message).hexdigest()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


# -- the three actions ------------------------------------------------------------------------
def test_append_tail_and_verify_answer_as_the_interface_says(location, home):
    async def body(agent: Agent) -> dict:
        first = await agent.call("cuba_archivo", action="append", event_action="deploy.approved",
                                 payload={"ticket": "OPS-12", "by": "ana"})
        second = await agent.call("cuba_archivo", action="append", event_action="deploy.done")
        return {"first": first, "second": second, "tail": await agent.call("cuba_archivo", action="tail"),
                "verify": await agent.call("cuba_archivo", action="verify"),
                "alias": await agent.call("memory_archivo", action="tail", limit=1)}

    got = serve(location, home, body)
    first, second = got["first"], got["second"]
    assert set(first) == {"action", "id", "current_hash", "retries"}
    assert first["action"] == "append" and first["retries"] == 0
    assert isinstance(first["id"], int) and second["id"] > first["id"]
    assert len(first["current_hash"]) == 64 and int(first["current_hash"], 16) >= 0
    tail = got["tail"]
    assert tail["action"] == "tail" and tail["count"] == 2
    assert [e["id"] for e in tail["entries"]] == [second["id"], first["id"]]  # newest first
    assert tail["entries"][1]["payload"] == {"ticket": "OPS-12", "by": "ana"}  # decoded, not JSON text
    assert tail["entries"][0]["payload"] == {} and tail["entries"][0]["action"] == "deploy.done"
    assert set(tail["entries"][0]) == {"id", "action", "payload", "created_at"}
    verify = got["verify"]
    assert verify["ok"] is True and verify["rows_checked"] == 2 and verify["unprotected_rows"] == 2
    assert "recompute" in verify["what_this_does_not_establish"]
    assert got["alias"]["count"] == 1 and got["alias"]["entries"][0]["id"] == second["id"]


def test_bad_values_are_refused_clearly_and_write_nothing(location, home):
    async def body(agent: Agent) -> dict:
        errors = {
            "missing": await agent.error("cuba_archivo", action="append"),
            "empty": await agent.error("cuba_archivo", action="append", event_action="   "),
            "long": await agent.error("cuba_archivo", action="append", event_action="x" * 201),
            "list": await agent.error("cuba_archivo", action="append", event_action="a", payload=[1, 2]),
            "text": await agent.error("cuba_archivo", action="append", event_action="a", payload="a note"),
            "secret": await agent.error("cuba_archivo", action="append", event_action="key.rotated",
                                        payload={"new": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}),
            "limit_type": await agent.error("cuba_archivo", action="verify", limit="many"),
        }
        clamped = {"verify": await agent.call("cuba_archivo", action="verify", limit=0),
                   "tail": await agent.call("cuba_archivo", action="tail", limit=5000),
                   # another action's parameter: ignored, as the original does, and named (issue 32)
                   "other_action": await agent.call("cuba_archivo", action="tail", event_action="a")}
        return {"errors": errors, "clamped": clamped, "tail": await agent.call("cuba_archivo", action="tail")}

    got = serve(location, home, body)
    errors = got["errors"]
    assert "event_action" in errors["missing"] and "required" in errors["missing"]
    assert "event_action" in errors["empty"] and "empty" in errors["empty"]
    assert "event_action" in errors["long"] and "1-200" in errors["long"]
    assert "payload" in errors["list"] and "payload" in errors["text"]
    assert "payload" in errors["secret"] and "never be edited" in errors["secret"]
    assert "ghp_" not in errors["secret"]
    assert got["clamped"]["other_action"]["ignored"] == ["event_action"]
    assert "limit" in errors["limit_type"]
    assert got["clamped"]["verify"]["clamped"] == {"limit": {"given": 0, "used": 1}}
    assert got["clamped"]["tail"]["clamped"] == {"limit": {"given": 5000, "used": 200}}
    assert got["tail"]["count"] == 0 and raw_rows(location) == []  # nothing was written


# -- the hash, by hand ------------------------------------------------------------------------
@pytest.mark.parametrize("key", [None, KEY], ids=["plain-sha256", "hmac"])
def test_each_hash_is_the_documented_formula(location, home, key):
    env = {"CUBA_AUDIT_KEY": key} if key else {}
    payload = {"zeta": "café ☕", "alpha": [1, 2.5, None, True], "nested": {"b": 1, "a": "\u00e9"}}

    async def body(agent: Agent) -> list[dict]:
        one = await agent.call("cuba_archivo", action="append", event_action="note.kept", payload=payload)
        await agent.call("cuba_proyecto", action="switch", name="shop")
        two = await agent.call("cuba_archivo", action="append", event_action="note.scoped", payload={"n": 2})
        return [one, two]

    appended = serve(location, home, body, **env)
    rows = raw_rows(location)
    assert [r["id"] for r in rows] == [a["id"] for a in appended]
    assert rows[0]["prev_hash"] == GENESIS and rows[1]["prev_hash"] == rows[0]["current_hash"]
    # Stored exactly as hashed: canonical JSON, sorted keys, no spaces, UTF-8 rather than escapes.
    assert rows[0]["payload"] == '{"alpha":[1,2.5,null,true],"nested":{"a":"é","b":1},"zeta":"café ☕"}'
    assert rows[0]["project_id"] is None and rows[1]["project_id"] is not None  # the active project
    assert len(rows[0]["created_at"]) == len("2026-01-31T09:30:00.123456+00:00")
    assert rows[0]["created_at"].endswith("+00:00")
    for row, answer in zip(rows, appended):
        assert by_hand(key, row) == row["current_hash"] == answer["current_hash"]
        assert by_hand(None if key else KEY, row) != row["current_hash"]


def test_the_key_file_signs_the_chain_when_no_key_is_set(location, home):
    key_file = home / ".cache" / "cuba-memorys" / "audit_key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text("from-the-key-file\n")

    async def body(agent: Agent) -> dict:
        await agent.call("cuba_archivo", action="append", event_action="signed")
        return await agent.call("cuba_archivo", action="verify")

    verify = serve(location, home, body)
    (row,) = raw_rows(location)
    assert row["current_hash"] == by_hand("from-the-key-file", row)  # surrounding whitespace stripped
    assert verify == {"action": "verify", "ok": True, "rows_checked": 1, "unprotected_rows": 0}


# -- tampering --------------------------------------------------------------------------------
def test_verify_finds_the_first_row_changed_outside_the_server(location, home):
    """One server answers every verify: it reads the rows again each time, so the changes made
    behind its back between two calls are what it finds."""

    async def main() -> None:
        async with stdio_agent(location, HOME=str(home), CUBA_EMBED_MODEL="none", CUBA_AUDIT_KEY=KEY) as agent:
            async def verify() -> dict:
                return await agent.call("cuba_archivo", action="verify")

            ids = [(await agent.call("cuba_archivo", action="append", event_action=f"step.{i}",
                                     payload={"i": i, "note": "ok"}))["id"] for i in range(5)]
            assert (await verify())["ok"] is True
            # One byte of one row's payload: "ok" becomes "ik".
            tamper(location, "UPDATE audit_log SET payload = replace(payload, '\"ok\"', '\"ik\"') WHERE id = ?",
                   (ids[3],))
            broken = await verify()
            assert broken["ok"] is False and broken["first_break_id"] == ids[3]
            assert set(broken) == {"action", "ok", "first_break_id", "reason"} and "changed" in broken["reason"]
            # Put back, then move an older row to another project (project_id is hashed too).
            tamper(location, "UPDATE audit_log SET payload = replace(payload, '\"ik\"', '\"ok\"') WHERE id = ?",
                   (ids[3],))
            assert (await verify())["ok"] is True
            tamper(location, "UPDATE audit_log SET project_id = 'elsewhere' WHERE id = ?", (ids[1],))
            assert (await verify())["first_break_id"] == ids[1]
            tamper(location, "UPDATE audit_log SET project_id = NULL WHERE id = ?", (ids[1],))
            # A removed row breaks the link of the row after it.
            tamper(location, "DELETE FROM audit_log WHERE id = ?", (ids[2],))
            removed = await verify()
            assert removed["ok"] is False and removed["first_break_id"] == ids[3] and "prev_hash" in removed["reason"]

    anyio.run(main)


def test_a_plain_row_after_hmac_rows_is_a_downgrade(location, home):
    """Two servers on the one store, one with the key and one without, called in turn."""

    async def main() -> None:
        async with stdio_agent(location, HOME=str(home), CUBA_EMBED_MODEL="none") as keyless, \
                stdio_agent(location, HOME=str(home), CUBA_EMBED_MODEL="none", CUBA_AUDIT_KEY=KEY) as keyed:
            async def append(agent: Agent) -> int:
                return (await agent.call("cuba_archivo", action="append", event_action="event"))["id"]

            async def verify(agent: Agent) -> dict:
                return await agent.call("cuba_archivo", action="verify")

            plain_first = await append(keyless)  # before the key existed: unprotected, not broken
            await append(keyed)
            mixed = await verify(keyed)
            assert mixed["ok"] is True and mixed["rows_checked"] == 2 and mixed["unprotected_rows"] == 1
            assert "1 of the 2 rows" in mixed["what_this_does_not_establish"]
            # Without the key the HMAC row cannot be checked, and the answer says why.
            no_key = await verify(keyless)
            assert no_key["ok"] is False and no_key["first_break_id"] == plain_first + 1
            assert "CUBA_AUDIT_KEY" in no_key["reason"] and "without the key" in no_key["reason"]
            downgraded = await append(keyless)  # a server without the key appends after a sealed row
            after = await verify(keyed)
            assert after["ok"] is False and after["first_break_id"] == downgraded and "downgrade" in after["reason"]

    anyio.run(main)


def test_verify_checks_the_oldest_rows_up_to_the_limit(location, home):
    async def body(agent: Agent) -> dict:
        for i in range(3):
            await agent.call("cuba_archivo", action="append", event_action=f"e{i}")
        return await agent.call("cuba_archivo", action="verify", limit=2)

    got = serve(location, home, body)
    assert got["ok"] is True and got["rows_checked"] == 2 and "larger limit" in got["note"]


# -- the database itself refuses --------------------------------------------------------------
def test_the_database_refuses_to_change_or_remove_a_row(memory, location, home, backend):
    audit.append(memory, None, event_action="kept", payload={"a": 1})
    store: Any = memory.store
    for statement in ("UPDATE audit_log SET payload = '{}'", "DELETE FROM audit_log"):
        with pytest.raises(StorageError):
            store._exec(statement)  # the server's own connection
    with raw(location) as conn:
        if backend == "sqlite":
            for statement in ("UPDATE audit_log SET action = 'x'", "DELETE FROM audit_log"):
                with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                    conn.execute(statement)
        else:
            import psycopg

            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute("UPDATE audit_log SET action = 'x'")  # even the owner: the trigger
            conn.execute("SET ROLE cuba_app")
            for statement in ("UPDATE audit_log SET action = 'x'", "DELETE FROM audit_log",
                              "TRUNCATE audit_log"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
    assert [r["action"] for r in raw_rows(location)] == ["kept"]
    assert audit.verify(memory, None)["ok"] is True


def test_record_commits_and_rolls_back_with_the_callers_transaction(memory, home):
    store = memory.store
    with store.transaction():
        first = audit.record(memory, None, "memory.test", {"n": 1})
    with pytest.raises(RuntimeError), store.transaction():
        audit.record(memory, None, "memory.test", {"n": 2})
        raise RuntimeError("the caller's change failed")
    with store.transaction(), store.transaction():
        third = audit.record(memory, None, "memory.test", {"n": 3})
    assert [e["payload"]["n"] for e in audit.tail(memory, None)["entries"]] == [3, 1]
    assert third > first and audit.verify(memory, None)["rows_checked"] == 2


# -- appends from two processes ---------------------------------------------------------------
def test_concurrent_appends_from_two_server_processes_make_one_valid_chain(location, home):
    params = StdioServerParameters(command=str(SERVER_BIN), args=[],
                                   env=location.env(HOME=str(home), CUBA_EMBED_MODEL="none", CUBA_AUDIT_KEY=KEY))
    per_task, tasks_per_server = 8, 3

    async def appends(session: ClientSession, tag: str) -> None:
        for i in range(per_task):
            result = await session.call_tool("cuba_archivo", {"action": "append", "event_action": f"{tag}.{i}"})
            assert not result.is_error, result.content[0].text

    async def main() -> dict:
        async with stdio_client(params) as (r1, w1), ClientSession(r1, w1) as one, \
                stdio_client(params) as (r2, w2), ClientSession(r2, w2) as two:
            await one.initialize()
            await two.initialize()
            async with anyio.create_task_group() as group:
                for n in range(tasks_per_server):
                    group.start_soon(appends, one, f"one{n}")
                    group.start_soon(appends, two, f"two{n}")
            result = await one.call_tool("cuba_archivo", {"action": "verify"})
            return json.loads(result.content[0].text)

    verify = anyio.run(main)
    total = 2 * tasks_per_server * per_task
    assert verify == {"action": "verify", "ok": True, "rows_checked": total, "unprotected_rows": 0}
    rows = raw_rows(location)
    assert len({r["prev_hash"] for r in rows}) == total  # no two links on the same predecessor
