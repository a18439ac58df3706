"""`serve`'s /events, /events/ticket, /connect and /health (spec §4a), and the events themselves.

The stream is read by a real HTTP client (httpx, streaming) from a real `cuba-memorys serve`
while agents write over MCP streamable HTTP; the bus's lagging and the cycle's event are tested
in-process, where a subscription's capacity and the clock can be set.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import tomllib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from cuba_memorys.server import events_http, health
from cuba_memorys.server.events_http import Caller, Tickets, event_frames
from cuba_memorys.services import access
from cuba_memorys.services.events import EventBus
from cuba_memorys.services.lifecycle import rem
from test_grants import principal
from test_http import call, make_server, mcp_session  # noqa: F401 - make_server is a fixture

TOKEN = "operator-token-for-the-events-tests-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
BASIC_KEYS = {"status", "version", "uptime_secs", "requests_served", "database", "ready", "connect", "events",
              "clients_count", "backend", "graph_db", "observations", "embedder"}
PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline';"
                               " connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none';"
                               " frame-ancestors 'none'",
    "x-frame-options": "DENY", "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


# -- reading a stream ------------------------------------------------------------------------------

class Frames:
    """Server-sent events off an httpx streaming response: ``next()`` is the next event or comment
    block as {"event", "data", "comments", "retry"}."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def next(self, timeout: float = 30.0) -> dict[str, Any]:
        block: dict[str, Any] = {"event": None, "data": None, "comments": [], "retry": None}
        with anyio.fail_after(timeout):
            async for line in self.lines:
                if line == "":
                    if block["event"] or block["comments"] or block["retry"]:
                        return block
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "":
                    block["comments"].append(value)
                elif field == "data":
                    block["data"] = json.loads(value)
                elif field in ("event", "retry"):
                    block[field] = value
        raise EOFError("the stream ended")

    async def event(self, timeout: float = 30.0) -> dict[str, Any]:
        """The next event, past comments."""
        while True:
            block = await self.next(timeout)
            if block["event"]:
                return block


@asynccontextmanager
async def events(base: str, headers: dict[str, str] | None = None,
                 params: dict[str, str] | None = None) -> AsyncIterator[Frames]:
    """An open /events stream, past its first block (so the server has subscribed it)."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=60)) as client:
        async with client.stream("GET", base + "/events", headers=headers or {}, params=params) as response:
            assert response.status_code == 200, (response.status_code, await response.aread())
            assert response.headers["content-type"].startswith("text/event-stream")
            frames = Frames(response)
            first = await frames.next()
            assert first["retry"] == str(events_http.RETRY_MS) and "subscribed" in first["comments"]
            yield frames


def status_of(base: str, path: str = "/events", **kwargs: Any) -> int:
    """The status of a GET that may be a stream (the body is not read)."""
    with httpx.stream("GET", base + path, timeout=10, **kwargs) as response:
        return response.status_code


ADD_A = {"action": "add", "entity_name": "billing", "content": "Invoices are generated nightly at 02:00 UTC."}
ADD_B = {"action": "add", "entity_name": "gateway", "content": "The API gateway terminates TLS on port 8443."}
ADD_C = {"action": "batch_add", "observations": [
    {"entity_name": "queue", "content": "The job queue is Redis streams with one consumer group per worker."}]}


# -- the stream over a real daemon ------------------------------------------------------------------

def test_a_reader_sees_another_agents_writes_as_they_happen(make_server) -> None:  # noqa: F811
    server = make_server().start()  # no token configured (loopback): /events is open
    got: list[dict] = []

    async def go() -> list[str]:
        async with events(server.base) as frames:
            written: list[str] = []
            done = anyio.Event()

            async def reader() -> None:
                while len(got) < 3:
                    got.append(await frames.event())
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                async with mcp_session(server.url, {"Mcp-Client-Id": "writer-agent"}) as agent:
                    await call(agent, "cuba_faro", {"query": "invoices"})  # read-only: no event
                    written.append((await call(agent, "cuba_cronica", ADD_A))["id"])
                    written.append((await call(agent, "cuba_cronica", ADD_B))["id"])
                    await call(agent, "cuba_alma", {"action": "get", "name": "billing"})  # a read action: none
                    written.extend((await call(agent, "cuba_cronica", ADD_C))["ids"])
                with anyio.fail_after(30):
                    await done.wait()
            return written

    written = anyio.run(go)
    assert [e["event"] for e in got] == ["memory.write"] * 3
    assert [e["data"]["kind"] for e in got] == ["memory.write"] * 3
    assert got[0]["data"]["payload"] == {"tool": "cuba_cronica", "action": "add", "client": "writer-agent",
                                         "project_id": None, "id": written[0]}
    assert got[1]["data"]["payload"]["id"] == written[1]
    assert got[2]["data"]["payload"]["ids"] == [written[2]] and got[2]["data"]["payload"]["action"] == "batch_add"
    assert all(e["data"]["at"].endswith("+00:00") for e in got)


def test_a_failed_write_announces_nothing_and_the_project_is_named(make_server) -> None:  # noqa: F811
    server = make_server().start()

    async def go() -> tuple[dict, str]:
        async with events(server.base) as frames, mcp_session(server.url, {"Mcp-Client-Id": "p"}) as agent:
            bad = await agent.call_tool("cuba_cronica", {"action": "add", "entity_name": "", "content": "x"})
            assert bad.is_error  # refused: nothing written, so nothing announced
            project = (await call(agent, "cuba_proyecto", {"action": "switch", "name": "shop"}))["project"]
            added = await call(agent, "cuba_cronica", ADD_A)
            first = await frames.event()
            assert first["data"]["payload"]["id"] == added["id"]
            return first["data"]["payload"], project["id"]

    payload, project_id = anyio.run(go)
    assert payload["project_id"] == project_id


def test_events_need_a_token_when_one_is_set(make_server) -> None:  # noqa: F811
    server = make_server(CUBA_HTTP_TOKEN=TOKEN).start()
    base = server.base
    assert status_of(base) == 401
    assert status_of(base, headers={"Authorization": "Bearer wrong"}) == 401
    assert status_of(base, params={"token": "wrong"}) == 401
    assert status_of(base, params={"ticket": str(uuid.uuid4())}) == 401
    assert status_of(base, headers=BEARER) == 200
    assert status_of(base, params={"token": TOKEN}) == 200  # the legacy query token
    refused = httpx.get(base + "/events", timeout=10)
    assert "ticket" in refused.json()["error"]
    assert httpx.post(base + "/events/ticket", timeout=10).status_code == 401  # the guard: no token
    assert httpx.post(base + "/events/ticket", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    # the page and /health load without a token; /mcp does not
    assert httpx.get(base + "/connect", timeout=10).status_code == 200
    assert httpx.get(base + "/", timeout=10).status_code == 200
    assert httpx.get(base + "/health", timeout=10).status_code == 200
    assert httpx.post(server.url, json={}, timeout=10).status_code == 401
    # spellings of the open paths reach either the guard or /events' own check, never a stream
    for path in ("/events/", "/%65vents", "/events?x=1", "/connect/../events", "/health/../events", "//events"):
        with httpx.stream("GET", base + path, timeout=10) as response:
            assert response.status_code in (401, 404), path


def test_a_ticket_opens_one_stream(make_server) -> None:  # noqa: F811
    server = make_server(CUBA_HTTP_TOKEN=TOKEN).start()
    issued = httpx.post(server.base + "/events/ticket", headers=BEARER, timeout=10)
    assert issued.status_code == 200
    body = issued.json()
    assert body["expires_in_secs"] == 120 and body["events"] == "/events" and body["single_use"] is True
    assert uuid.UUID(body["ticket"]).version == 4

    async def go() -> dict:
        async with events(server.base, params={"ticket": body["ticket"]}) as frames:
            assert status_of(server.base, params={"ticket": body["ticket"]}) == 401  # used: refused
            async with mcp_session(server.url, BEARER) as agent:
                added = await call(agent, "cuba_cronica", ADD_B)
            event = await frames.event()
            assert event["data"]["payload"]["id"] == added["id"]
            return event

    anyio.run(go)
    assert status_of(server.base, params={"ticket": body["ticket"]}) == 401  # still refused afterwards


def test_principals_tickets_and_what_each_sees(location, tmp_path: Path, make_server) -> None:  # noqa: F811
    tokens = tmp_path / "tokens.json"
    keys = {name: principal(location, tokens, "add", name, f"--grant={grant}")["token"]
            for name, grant in {"root": "*=admin", "sam": "shop=writer", "dora": "docs=writer"}.items()}
    server = make_server(CUBA_TOKENS_FILE=str(tokens)).start()
    as_ = {name: {"Authorization": f"Bearer {key}"} for name, key in keys.items()}

    refused = httpx.post(server.base + "/events/ticket", headers=as_["sam"], timeout=10)
    assert refused.status_code == 403 and "admin" in refused.json()["error"]
    ticket = httpx.post(server.base + "/events/ticket", headers=as_["root"], timeout=10).json()["ticket"]
    assert "clients" not in httpx.get(server.base + "/health", headers=as_["sam"], timeout=10).json()
    assert "clients" in httpx.get(server.base + "/health", headers=as_["root"], timeout=10).json()

    async def go() -> tuple[list, list, list[str]]:
        async with events(server.base, as_["sam"]) as sams, events(server.base, params={"ticket": ticket}) as roots:
            ids = []
            for who, project in (("dora", "docs"), ("sam", "shop")):
                async with mcp_session(server.url, as_[who]) as agent:
                    await call(agent, "cuba_proyecto", {"action": "switch", "name": project})
                    ids.append((await call(agent, "cuba_cronica", ADD_A))["id"])
            sam_saw = [await sams.event()]
            root_saw = [await roots.event(), await roots.event()]
            return sam_saw, root_saw, ids

    sam_saw, root_saw, (docs_id, shop_id) = anyio.run(go)
    assert [e["data"]["payload"]["id"] for e in root_saw] == [docs_id, shop_id]
    assert sam_saw[0]["data"]["payload"]["id"] == shop_id  # docs' write was not sent to sam
    assert sam_saw[0]["data"]["payload"]["client"].startswith("sam/")


def test_recent_events_on_request_and_sigterm_ends_open_streams(make_server) -> None:  # noqa: F811
    server = make_server().start()

    async def go() -> str:
        async with mcp_session(server.url) as agent:
            added = (await call(agent, "cuba_cronica", ADD_A))["id"]
        async with events(server.base, params={"recent": "1"}) as frames:
            replayed = await frames.event()
            assert replayed["data"]["payload"]["id"] == added
            server.proc.terminate()  # with this stream open
            with pytest.raises(EOFError):
                await frames.next(timeout=15)
        return added

    anyio.run(go)
    assert server.proc.wait(timeout=15) == 0


# -- /health and the page ---------------------------------------------------------------------------

def test_health_without_and_with_the_token(make_server) -> None:  # noqa: F811
    server = make_server(CUBA_HTTP_TOKEN=TOKEN).start()
    before = httpx.get(server.base + "/health", timeout=10)
    assert before.status_code == 200
    basic = before.json()
    assert set(basic) == BASIC_KEYS, set(basic) ^ BASIC_KEYS
    assert basic["status"] == "ok" and basic["database"] == "up" and basic["ready"] is True
    assert basic["connect"] == "/connect" and basic["events"] == "/events"
    assert basic["backend"] == server.where.backend and basic["graph_db"] == {"backend": server.where.backend,
                                                                              "reachable": True}
    assert basic["requests_served"] == 0 and basic["clients_count"] == 0 and basic["observations"] == 0
    assert basic["embedder"] == "multilingual-e5-small" and basic["version"]

    async def go() -> None:
        async with mcp_session(server.url, {**BEARER, "Mcp-Client-Id": "health-agent"}) as agent:
            await call(agent, "cuba_cronica", ADD_A)
            await call(agent, "cuba_faro", {"query": "invoices"})

    anyio.run(go)
    wrong = httpx.get(server.base + "/health", headers={"Authorization": "Bearer wrong"}, timeout=10).json()
    assert set(wrong) == BASIC_KEYS  # a wrong token gets the public view, not an error
    assert wrong["requests_served"] == 2 and wrong["clients_count"] == 1 and wrong["observations"] == 1

    full = httpx.get(server.base + "/health", headers=BEARER, timeout=10).json()
    assert set(full) == BASIC_KEYS | {"clients", "runtime", "index_builds"}
    [client] = full["clients"]
    assert client["id"] == "health-agent" and 0 <= client["idle_secs"] < 60
    runtime = full["runtime"]
    assert runtime["mode"] == "local" and runtime["resource_tier"] in ("lean", "standard", "full")  # an embedder
    assert set(runtime["models"]) == {"embedder", "reranker", "nli"}
    assert runtime["models"]["embedder"] == {"state": "loaded", "device": "cpu", "reason": None,
                                             "name": "multilingual-e5-small"}
    assert runtime["models"]["nli"]["state"] == "missing" and runtime["models"]["nli"]["reason"]
    assert runtime["llm"]["configured"] is False and runtime["llm"]["backend"] is None  # CUBA_JUEZ_CLI=none
    assert "CUBA_JUEZ_CLI" in runtime["llm"]["reason"]


def failing_model(tmp_path: Path) -> dict[str, str]:
    """Settings whose embedding model fails to load, with a local path in the reason: the ONNX
    engine alone (no fallback) and a models folder under a file, where it cannot be cached.
    (An unknown CUBA_EMBED_MODEL refuses to start instead: test_newcomer.py.)"""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file")
    return {"CUBA_EMBED_ENGINE": "onnx", "CUBA_MODELS_DIR": str(blocker / "models")}


def test_health_without_the_token_says_what_is_wrong_not_where(make_server, tmp_path: Path) -> None:  # noqa: F811
    """A model's own failure text can name local paths: only the operator reads it."""
    server = make_server(CUBA_HTTP_TOKEN=TOKEN, **failing_model(tmp_path)).start()
    public = httpx.get(server.base + "/health", timeout=10).json()
    full = httpx.get(server.base + "/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
    assert public["status"] == full["status"] == "degraded" and "runtime" not in public
    assert any(w.startswith("no embedding model") for w in public["why"])
    assert not any(str(tmp_path) in w for w in public["why"])
    assert any(str(tmp_path) in w for w in full["why"])


def test_health_is_degraded_without_an_embedder_and_still_200(make_server, tmp_path: Path) -> None:  # noqa: F811
    server = make_server(**failing_model(tmp_path)).start()
    response = httpx.get(server.base + "/health", timeout=10)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded" and body["embedder"] is None and body["database"] == "up"
    assert any("CUBA_EMBED_ENGINE=onnx" in why for why in body["why"])
    # no token configured: the caller is the local operator, who sees the runtime block
    assert body["runtime"]["models"]["embedder"]["state"] == "failed"


def test_without_a_token_only_local_host_names_reach_the_events(make_server) -> None:  # noqa: F811
    """A page that rebinds its own name to 127.0.0.1 reaches a token-less loopback daemon, but names
    itself in the Host header: it gets neither the events, a ticket, nor the runtime block."""
    server = make_server().start()
    evil = {"Host": f"evil.example:{server.port}"}
    assert status_of(server.base, headers=evil) == 403
    assert httpx.post(server.base + "/events/ticket", headers=evil, timeout=10).status_code == 403
    assert set(httpx.get(server.base + "/health", headers=evil, timeout=10).json()) == BASIC_KEYS
    for name in (f"localhost:{server.port}", f"127.0.0.1:{server.port}"):
        assert "runtime" in httpx.get(server.base + "/health", headers={"Host": name}, timeout=10).json()
        assert status_of(server.base, headers={"Host": name}) == 200
    assert httpx.post(server.base + "/events/ticket", timeout=10).status_code == 200
    assert httpx.get(server.base + "/connect", headers=evil, timeout=10).status_code == 200  # static: no harm


def test_local_host_names() -> None:
    def request(host: str) -> Any:
        from starlette.requests import Request

        return Request({"type": "http", "headers": [(b"host", host.encode())] if host else []})

    assert [events_http.local_host(request(h)) for h in ("127.0.0.1:8787", "localhost", "[::1]:9", "LOCALHOST:1")] \
        == [True] * 4
    assert [events_http.local_host(request(h)) for h in ("evil.example:8787", "127.0.0.1.evil:1", "", "[::2]:1")] \
        == [False] * 4


def test_the_connect_page_is_static_and_locked_down(make_server) -> None:  # noqa: F811
    server = make_server(CUBA_HTTP_TOKEN=TOKEN).start()
    packaged = events_http.connect_page()
    for path in ("/", "/connect"):
        page = httpx.get(server.base + path, timeout=10)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for name, value in PAGE_HEADERS.items():
            assert page.headers[name] == value, name
        assert page.text == packaged  # no data embedded: the same bytes whatever the memory holds
    assert TOKEN not in packaged and "sessionStorage" in packaged and "/events/ticket" in packaged
    assert "EventSource" in packaged and '"Mcp-Client-Id"' in packaged and 'location.origin + "/mcp"' in packaged


def test_the_page_is_in_the_wheel() -> None:
    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["cuba_memorys"]
    package = root / "src" / "cuba_memorys"
    assert any(package.joinpath("server/pages/connect.html") in package.glob(pattern) for pattern in data)


def test_health_states_in_process(memory, monkeypatch) -> None:
    class Served:
        requests_served = 7

    body = health.report(memory, Served(), full=False)
    assert body["status"] == "ok" and body["requests_served"] == 7 and "why" not in body
    monkeypatch.setattr(memory.store, "index_builds",
                        lambda: {"missing": [], "building": ["observations_vec_384"], "failed": {}})
    starting = health.report(memory, Served(), full=False)
    assert starting["status"] == "starting" and starting["ready"] is False and starting["database"] == "up"
    assert "observations_vec_384" in starting["why"][0]

    def down() -> dict:
        raise OSError("connection refused")

    monkeypatch.setattr(memory.store, "counts", down)
    broken = health.report(memory, Served(), full=True)
    assert broken["status"] == "degraded" and broken["database"] == "unreachable" and broken["ready"] is False
    assert broken["observations"] is None and broken["graph_db"]["reachable"] is False


def test_idle_clients_are_listed_for_a_day(memory) -> None:
    class Served:
        requests_served = 0

    now = time.time()
    memory.clients_seen.update({"fresh": now - 5, "yesterday": now - 25 * 3600})
    body = health.report(memory, Served(), full=True)
    assert body["clients_count"] == 1 and [c["id"] for c in body["clients"]] == ["fresh"]


# -- the bus, in-process ----------------------------------------------------------------------------

def test_a_full_buffer_yields_one_lagged_event_and_the_publisher_never_waits() -> None:
    bus = EventBus(capacity=4)

    async def go() -> None:
        sub = bus.subscribe()
        # publish from another thread while this loop is blocked (join): publishing must not wait
        # for the reader's loop, nor for the reader
        publisher = threading.Thread(target=lambda: [bus.publish("memory.write", {"n": n}) for n in range(10_000)])
        started = time.monotonic()
        publisher.start()
        publisher.join(timeout=10)
        assert not publisher.is_alive() and time.monotonic() - started < 10
        for _ in range(3):
            await anyio.sleep(0)  # the loop now runs the deliveries
        assert len(sub.buffer) <= 4
        kept = len(sub.buffer)
        lagged = await sub.next()
        assert lagged["kind"] == "lagged" and lagged["payload"]["missed"] == 10_000 - kept
        rest = [(await sub.next())["payload"]["n"] for _ in range(kept)]
        assert rest == list(range(10_000 - kept, 10_000))  # the newest, in order
        bus.publish("memory.write", {"n": "after"})
        await anyio.sleep(0)
        assert (await sub.next())["payload"] == {"n": "after"}  # later events flow again, no second lagged
        bus.unsubscribe(sub)

    anyio.run(go)


def data_of(chunk: str) -> dict:
    return json.loads(chunk.split("data: ", 1)[1])


def test_the_stream_sends_lagged_keepalives_and_ends_on_shutdown() -> None:
    bus = EventBus(capacity=2)

    async def go() -> None:
        stream = event_frames(bus, events_http.OPERATOR, keepalive=0.05)
        assert (await stream.__anext__()).startswith("retry: ")
        assert bus.subscriber_count == 1
        assert await stream.__anext__() == ": keep-alive\n\n"  # nothing came for 0.05 s
        for n in range(5):
            bus.publish("memory.write", {"n": n})
        await anyio.sleep(0)
        lagged = await stream.__anext__()
        assert lagged.startswith("event: lagged\n") and data_of(lagged)["payload"]["missed"] == 4
        last = await stream.__anext__()
        assert last.startswith("event: memory.write\n") and data_of(last)["payload"] == {"n": 4}
        assert events_http.end_streams() >= 1
        with pytest.raises(StopAsyncIteration):
            while True:  # keep-alives may come first; then the stream ends
                assert (await stream.__anext__()) == ": keep-alive\n\n"
        assert bus.subscriber_count == 0  # unsubscribed when it ended

    anyio.run(go)


def test_what_a_principal_sees() -> None:
    shop_writer = Caller(access.Principal("sam", {"p-shop": "writer"}))
    everything = Caller(access.Principal("ro", {None: "reader"}))
    shop, docs = ({"kind": "memory.write", "payload": {"project_id": p}} for p in ("p-shop", "p-docs"))
    unscoped = {"kind": "rem.cycle", "payload": {"cycle_id": 1}}
    lagged = {"kind": "lagged", "payload": {"missed": 3}}
    assert [shop_writer.sees(e) for e in (shop, docs, unscoped, lagged)] == [True, False, False, True]
    assert all(everything.sees(e) for e in (shop, docs, unscoped, lagged))
    assert all(events_http.OPERATOR.sees(e) for e in (shop, docs, unscoped, lagged))
    assert events_http.OPERATOR.admin and not shop_writer.admin and not everything.admin
    assert Caller(access.Principal("root", {None: "admin"})).admin


def test_tickets_are_single_use_and_expire() -> None:
    now = [1000.0]
    tickets = Tickets(clock=lambda: now[0])
    first, second = tickets.issue(events_http.OPERATOR), tickets.issue(events_http.OPERATOR)
    assert first != second
    assert tickets.redeem(first) is events_http.OPERATOR
    assert tickets.redeem(first) is None  # used
    now[0] += 120.0
    assert tickets.redeem(second) is None  # expired at 120 s
    third = tickets.issue(events_http.OPERATOR)
    now[0] += 119.0
    assert tickets.redeem(third) is events_http.OPERATOR
    assert tickets.redeem("not-a-ticket") is None
    now[0] += 500
    tickets.issue(events_http.OPERATOR)
    assert len(tickets._issued) == 1  # expired ones are dropped as new ones are made


def test_a_consolidation_cycle_is_announced(memory) -> None:
    from cuba_memorys.services.observations import write

    write.add(memory, None, entity_name="billing", content="Invoices are generated nightly at 02:00 UTC.")

    async def go() -> tuple[dict, dict]:
        sub = memory.events.subscribe()
        try:
            result = await anyio.to_thread.run_sync(lambda: rem.run_cycle(memory, trigger="test"))
            with anyio.fail_after(10):
                return result, await sub.next()
        finally:
            memory.events.unsubscribe(sub)

    result, event = anyio.run(go)
    assert event["kind"] == "rem.cycle"
    payload = event["payload"]
    assert payload["cycle_id"] == result["cycle_id"] and payload["trigger"] == "test" and payload["error"] is None
    assert {k: payload[k] for k in rem.COUNTS} == {k: result[k] for k in rem.COUNTS}
    assert payload["duration_ms"] == result["duration_ms"]


def test_a_skipped_cycle_is_not_announced(memory) -> None:
    async def go() -> tuple[dict, int]:
        sub = memory.events.subscribe()
        try:
            with memory.store.exclusive(rem.LOCK) as held:
                assert held
                result = await anyio.to_thread.run_sync(lambda: rem.run_cycle(memory))
            await anyio.sleep(0.05)
            return result, len(sub.buffer)
        finally:
            memory.events.unsubscribe(sub)

    result, buffered = anyio.run(go)
    assert result["skipped"] is True and buffered == 0


def test_serve_still_refuses_a_taken_port(make_server) -> None:  # noqa: F811
    first = make_server().start()
    second = make_server(port=first.port).start(wait=False)
    try:
        assert second.proc.wait(timeout=60) != 0
    except subprocess.TimeoutExpired:
        pytest.fail("a second server on a taken port kept running")
