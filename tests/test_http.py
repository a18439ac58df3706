"""`cuba-memorys serve HOST:PORT`: the real daemon over streamable HTTP, driven by the official MCP client.

Every test starts its own server process on a free loopback port with its own data folder,
waits for GET /health (polled, with a timeout), and stops the process afterwards.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import SERVER_BIN, StoreLocation

READY_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]




class Server:
    """One `cuba-memorys serve` process; stderr goes to a file (a pipe could fill and block)."""

    def __init__(self, where: StoreLocation, log: Path, *, host: str = "127.0.0.1", port: int | None = None,
                 **env: str) -> None:
        self.where, self.data_dir, self.log_path = where, where.data_dir, log
        self.host, self.port = host, port or free_port()
        self.own_port = port is None  # a free port found here, which another process may take first
        self.env = where.env(**env)
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, wait: bool = True) -> Server:
        with open(self.log_path, "ab") as log_file:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen([str(SERVER_BIN), "serve", f"{self.host}:{self.port}"],
                                         env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=log_file, stderr=log_file)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, tries: int = 3) -> dict:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.own_port and tries > 1 and "address already in use" in self.log():
                    # The free port was taken between free_port() and the bind, by another test
                    # process (the suite runs in parallel workers): a new port, a new start.
                    self.port = free_port()
                    return self.start(wait=False).wait_ready(tries - 1)
                pytest.fail(f"server exited early with {self.proc.returncode}:\n{self.log()}")
            try:
                response = httpx.get(self.base + "/health", timeout=2)
                if response.status_code == 200:
                    return response.json()
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        pytest.fail(f"server not ready after {READY_TIMEOUT}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def make_server(tmp_path: Path, location: StoreLocation) -> Iterator:
    started: list[Server] = []

    def _make(**kwargs: Any) -> Server:
        kwargs.setdefault("where", location)
        server = Server(log=tmp_path / f"server-{len(started)}.log", **kwargs)
        started.append(server)
        return server

    yield _make
    for server in started:
        server.stop()


@pytest.fixture
def server(make_server) -> Server:
    return make_server().start()


@asynccontextmanager
async def mcp_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, args: dict) -> dict:
    result = await session.call_tool(tool, args)
    assert not result.is_error, f"{tool}({args}) failed: {result.content[0].text}"
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def run(fn, *args):
    return anyio.run(fn, *args)


FACTS = [
    {"entity_name": "billing-service",
     "content": "The billing service retries failed Stripe webhooks three times with exponential backoff."},
    {"entity_name": "postgres",
     "content": "Production runs PostgreSQL 16; migrations live in db/migrations and run with alembic."},
    {"entity_name": "billing-service",
     "content": "Invoices are generated nightly at 02:00 UTC by a cron job in jobs/invoices.py."},
    {"entity_name": "frontend",
     "content": "The admin dashboard is a React app bundled with Vite and served from the CDN."},
]


# -- tests ---------------------------------------------------------------------------------------

def test_health(server: Server) -> None:
    response = httpx.get(server.base + "/health", timeout=5)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["backend"] == server.where.backend
    assert body["observations"] == 0
    assert body["embedder"] == "multilingual-e5-small"
    if server.where.backend == "sqlite":
        assert (server.data_dir / "memory.db").exists()


def test_tools_batch_add_and_search(server: Server) -> None:
    async def go() -> None:
        async with mcp_session(server.url) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert {"cuba_faro", "memory_faro", "cuba_cronica", "memory_cronica", "cuba_proyecto"} <= names

            added = await call(session, "cuba_cronica", {"action": "batch_add", "observations": FACTS})
            ids = added["ids"]
            assert len(ids) == len(FACTS) and len(set(ids)) == len(FACTS)
            assert added["added"] == len(FACTS) and added["total_processed"] == len(FACTS)

            # ids come back in input order: each id lists under its own entity with its own text
            for fact, obs_id in zip(FACTS, ids):
                listed = await call(session, "cuba_cronica", {"action": "list", "entity_name": fact["entity_name"]})
                by_id = {o["id"]: o["content"] for o in listed["observations"]}
                assert by_id.get(obs_id) == fact["content"]

            found = await call(session, "cuba_faro", {"query": "Stripe webhook retries", "limit": 3})
            assert found["results"], found
            assert all("id" in row for row in found["results"])
            assert found["results"][0]["id"] == ids[0]
            assert found["count"] == len(found["results"]) <= 3
            assert not found.get("degraded")

            found = await call(session, "memory_faro", {"query": "which database version runs in production"})
            assert ids[1] in [row["id"] for row in found["results"][:2]]

        assert httpx.get(server.base + "/health", timeout=5).json()["observations"] == len(FACTS)

    run(go)


INVALID_SEARCHES = [
    ({"query": "x", "limit": "ten"}, "limit"),
    ({"query": "x", "after": "yesterday"}, "after"),
    ({"query": "x", "before": "2024-13-45"}, "before"),
    ({"query": "x", "max_tokens": -1.5}, "max_tokens"),
    ({"query": "x", "scope": "everything"}, "scope"),
]


def test_invalid_search_input_is_a_tool_error(server: Server) -> None:
    async def go() -> None:
        async with mcp_session(server.url) as session:
            for args, param in INVALID_SEARCHES:
                result = await session.call_tool("cuba_faro", args)
                assert result.is_error, args
                assert param in result.content[0].text, (args, result.content[0].text)
            # the session is still usable after tool errors
            ok = await session.call_tool("cuba_faro", {"query": "x"})
            assert not ok.is_error

    run(go)


def test_invalid_batch_item_names_its_index(server: Server) -> None:
    async def go() -> None:
        async with mcp_session(server.url) as session:
            result = await session.call_tool("cuba_cronica", {"action": "batch_add", "observations": [
                FACTS[0], {"entity_name": "x", "content": "fine", "created_at": "not a date"}]})
            assert result.is_error
            assert "observations[1].created_at" in result.content[0].text
            # all items are validated before anything is written
            found = await call(session, "cuba_faro", {"query": "Stripe webhooks"})
            assert found["results"] == []

    run(go)


def test_public_bind_without_token_is_refused(make_server) -> None:
    server = make_server(host="0.0.0.0").start(wait=False)
    try:
        code = server.proc.wait(timeout=READY_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("server bound 0.0.0.0 without CUBA_HTTP_TOKEN and kept running")
    assert code != 0
    assert "CUBA_HTTP_TOKEN" in server.log()
    assert not (server.data_dir / "memory.db").exists()  # refused before touching any data
    with pytest.raises(httpx.TransportError):
        httpx.get(server.base + "/health", timeout=1)


def test_bearer_token(make_server) -> None:
    server = make_server(CUBA_HTTP_TOKEN="secret").start()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    accept = {"Accept": "application/json, text/event-stream"}

    assert httpx.get(server.base + "/health", timeout=5).status_code == 200  # health needs no token
    assert httpx.post(server.url, json=init, headers=accept, timeout=5).status_code == 401
    wrong = httpx.post(server.url, json=init, headers={**accept, "Authorization": "Bearer secreT"}, timeout=5)
    assert wrong.status_code == 401
    assert "CUBA_HTTP_TOKEN" in wrong.text
    right = httpx.post(server.url, json=init, headers={**accept, "Authorization": "Bearer secret"}, timeout=5)
    assert right.status_code == 200

    async def go() -> None:
        async with mcp_session(server.url, {"Authorization": "Bearer secret"}) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert "cuba_faro" in names
            added = await call(session, "cuba_cronica", {"action": "add", "entity_name": "auth",
                                                         "content": "Tokens are rotated every 90 days."})
            found = await call(session, "cuba_faro", {"query": "token rotation"})
            assert added["id"] in [row["id"] for row in found["results"]]

    run(go)


def test_clients_keep_their_own_project(server: Server) -> None:
    a_headers, b_headers = {"Mcp-Client-Id": "agent-a"}, {"Mcp-Client-Id": "agent-b"}

    async def go() -> None:
        async with mcp_session(server.url, a_headers) as a, mcp_session(server.url, b_headers) as b:
            switched = await call(a, "cuba_proyecto", {"action": "switch", "name": "alpha"})
            assert switched["project"]["name"] == "alpha"
            written = await call(a, "cuba_cronica", {"action": "batch_add", "observations": [
                {"entity_name": "alpha-api", "content": "The alpha API paginates with opaque cursor tokens."}]})
            alpha_id = written["ids"][0]

            current_a = await call(a, "cuba_proyecto", {"action": "current"})
            current_b = await call(b, "cuba_proyecto", {"action": "current"})
            assert current_a["project"]["name"] == "alpha"
            assert current_b["project"] is None

            # A reads its own project; B, with no active project, sees every row
            for session in (a, b):
                found = await call(session, "cuba_faro", {"query": "alpha API pagination cursor"})
                assert alpha_id in [row["id"] for row in found["results"]]

            # a client in another project does not see alpha's rows
            await call(b, "cuba_proyecto", {"action": "switch", "name": "beta"})
            found = await call(b, "cuba_faro", {"query": "alpha API pagination cursor"})
            assert alpha_id not in [row["id"] for row in found["results"]]
            assert (await call(a, "cuba_proyecto", {"action": "current"}))["project"]["name"] == "alpha"

        # the active project belongs to the client id, not to the HTTP session
        async with mcp_session(server.url, a_headers) as again:
            assert (await call(again, "cuba_proyecto", {"action": "current"}))["project"]["name"] == "alpha"

    run(go)


def test_two_agents_on_one_daemon_keep_their_own_sessions(server: Server) -> None:
    async def go() -> dict:
        async with mcp_session(server.url, {"Mcp-Client-Id": "agent-a"}) as a, \
                mcp_session(server.url, {"Mcp-Client-Id": "agent-b"}) as b:
            await call(a, "cuba_jornada", {"action": "start", "name": "a-task", "goals": ["refactor auth"]})
            await call(b, "cuba_jornada", {"action": "start", "name": "b-task"})
            await call(a, "cuba_cronica", {"action": "add", "entity_name": "auth", "content": "Sessions move to JWT"})
            ended_b = await call(b, "cuba_jornada", {"action": "end"})
            current_a = await call(a, "cuba_jornada", {"action": "current"})
            return {"ended_b": ended_b, "current_a": current_a}

    out = run(go)
    assert out["ended_b"]["session_diff"] == {"episodes": 0}  # a's write is not b's
    assert out["current_a"]["session"]["name"] == "a-task"
    assert out["current_a"]["session"]["obs_count_in_session"] == 1


def test_data_survives_restart(make_server) -> None:
    first = make_server().start()

    async def write() -> list[str]:
        async with mcp_session(first.url) as session:
            return (await call(session, "cuba_cronica", {"action": "batch_add", "observations": FACTS}))["ids"]

    ids = run(write)
    first.stop()

    second = make_server(port=first.port)
    health = second.start().wait_ready()
    assert health["observations"] == len(FACTS)

    async def read() -> None:
        async with mcp_session(second.url) as session:
            found = await call(session, "cuba_faro", {"query": "nightly invoice generation cron job"})
            assert ids[2] in [row["id"] for row in found["results"][:2]]
            assert not found.get("degraded")
            listed = await call(session, "cuba_cronica", {"action": "list", "entity_name": "billing-service"})
            assert {o["id"] for o in listed["observations"]} == {ids[0], ids[2]}

    run(read)


def test_sigterm_closes_the_database_cleanly(make_server) -> None:
    server = make_server().start()

    async def write() -> None:
        async with mcp_session(server.url) as session:
            await call(session, "cuba_cronica", {"action": "add", "entity_name": "e", "content": "kept after SIGTERM"})

    run(write)
    server.proc.terminate()
    assert server.proc.wait(timeout=15) == 0
    if server.where.backend == "postgresql":
        import psycopg

        with psycopg.connect(server.where.database_url) as conn:  # committed, and every connection closed
            assert conn.execute("SELECT content FROM observations").fetchall() == [("kept after SIGTERM",)]
            assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND pid <> pg_backend_pid()").fetchone()[0] == 0
        return
    wal = server.data_dir / "memory.db-wal"
    # the last connection's close checkpoints the WAL into memory.db and removes it
    assert not wal.exists() or wal.stat().st_size == 0
    import sqlite3

    with sqlite3.connect(server.data_dir / "memory.db") as conn:
        assert conn.execute("SELECT content FROM observations").fetchall() == [("kept after SIGTERM",)]
