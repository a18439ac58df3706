"""Read-only sync peers over HTTP (issue 17, item 7): CUBA_PEER_TOKEN, cuba_sync pull, notify, fetch.

Two real `serve` daemons on loopback, started once for the module per backend (A on the backend
under test, B on the other one when both are tested: one SQLite, one PostgreSQL), driven with
the official MCP client: the peer token reaches only cuba_sync status, pull and notify (directly,
through cuba_call, an alias, tools/list, resources, /events); pull pages and refuses to mix two
bundles; notify shows in status and at cuba_jornada start; B fetches A and gets its rows, and a
second fetch costs one call of one piece (no inbox made). A bundle over 3 MiB (no limit patched)
travels in pages each under 3 MiB as sent over HTTP (structured and text content, escaped), and
arrives whole. A hostile peer (a real process serving MCP) whose page
names a path out of the inbox is refused and nothing is imported. The page cutter and the inbox
are also checked in process, against the bundle export writes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import httpx
import pytest

from conftest import BACKENDS, SERVER_BIN, StoreLocation, new_location
from cuba_memorys.errors import ConfigError, Conflict, InvalidInput
from cuba_memorys.services.sync import export, peer_inbox, peers
from test_answers import keys_problem
from test_http import Server, free_port, mcp_session

PEER_TOKEN = "peer-" + "p" * 40
A_TOKEN, B_TOKEN = "opa-" + "a" * 40, "opb-" + "b" * 40
FACTS = [("payments", "The payments service retries Stripe webhooks three times with backoff."),
         ("payments", "Payments keeps its ledger in PostgreSQL 16, schema ledger."),
         ("search-index", "The search index is rebuilt nightly at 03:00 UTC by the indexer job.")]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def principal(where: StoreLocation, tokens: Path, *args: str) -> dict:
    proc = subprocess.run([str(SERVER_BIN), "principal", *args, "--json"], capture_output=True, text=True,
                          env=where.env(CUBA_TOKENS_FILE=str(tokens), CUBA_EMBED_MODEL="none"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


async def steps(server: Server, token: str, calls: list[tuple[str, dict]]) -> list[tuple[str, object]]:
    """Each (tool, args) in one MCP session: ("ok", structured answer) or ("error", its text)."""
    async with mcp_session(server.url, bearer(token)) as session:
        out: list[tuple[str, object]] = []
        for tool, args in calls:
            result = await session.call_tool(tool, args)
            out.append(("error", result.content[0].text) if result.is_error else ("ok", result.structured_content))
        return out


def run(server: Server, token: str, *calls: tuple[str, dict]) -> list[tuple[str, object]]:
    return anyio.run(steps, server, token, list(calls))


def ok(server: Server, token: str, tool: str, **args) -> dict:
    [(status, answer)] = run(server, token, (tool, args))
    assert status == "ok", answer
    assert isinstance(answer, dict)
    return answer


def error(server: Server, token: str, tool: str, **args) -> str:
    [(status, answer)] = run(server, token, (tool, args))
    assert status == "error", f"{tool} {args} should have failed: {str(answer)[:300]}"
    return str(answer)


@dataclass
class Pair:
    a: Server  # pulled from: has the rows, a principal and the peer token
    b: Server  # fetches from a with the same peer token
    reader: str  # the token of a principal of A with '*=reader'
    b_sync: Path


@pytest.fixture(scope="module")
def pair(backend: str, tmp_path_factory, request) -> Iterator[Pair]:
    base = tmp_path_factory.mktemp("peers")
    other = next((b for b in BACKENDS if b != backend), backend)
    where_a, drop_a = new_location(backend, base / "a", request)
    where_b, drop_b = new_location(other, base / "b", request)
    tokens = base / "tokens.json"
    reader = principal(where_a, tokens, "add", "rita", "--grant=*=reader")["token"]
    a = Server(where_a, base / "a.log", CUBA_HTTP_TOKEN=A_TOKEN, CUBA_PEER_TOKEN=PEER_TOKEN,
               CUBA_TOKENS_FILE=str(tokens), CUBA_SYNC_DIR=str(base / "a-sync"), CUBA_NODE_NAME="node-a")
    b = Server(where_b, base / "b.log", CUBA_HTTP_TOKEN=B_TOKEN, CUBA_PEER_TOKEN=PEER_TOKEN,
               CUBA_SYNC_DIR=str(base / "b-sync"), CUBA_NODE_NAME="node-b")
    try:
        a.start(wait=False)
        b.start(wait=False)
        a.wait_ready()
        b.wait_ready()
        run(a, A_TOKEN, *(("cuba_cronica", {"action": "add", "entity_name": e, "content": c}) for e, c in FACTS))
        yield Pair(a, b, reader, base / "b-sync")
    finally:
        a.stop()
        b.stop()
        drop_a()
        drop_b()


# -- serve refuses a peer token that is someone else's ---------------------------------------------
def test_serve_refuses_a_peer_token_equal_to_the_operators_or_a_principals(tmp_path: Path):
    data = tmp_path / "data"
    tokens = tmp_path / "tokens.json"
    shared = "s" * 43
    tokens.write_text(json.dumps({"tokens": [{"principal": "rita", "sha256": hashlib.sha256(
        shared.encode()).hexdigest()}]}))
    where = StoreLocation("sqlite", data)
    for env, says in (({"CUBA_HTTP_TOKEN": shared, "CUBA_PEER_TOKEN": shared},
                       "CUBA_PEER_TOKEN equals CUBA_HTTP_TOKEN"),
                      ({"CUBA_TOKENS_FILE": str(tokens), "CUBA_PEER_TOKEN": shared}, "token of principal 'rita'"),
                      ({"CUBA_HTTP_TOKEN": "h" * 43, "CUBA_PEER_TOKEN": "short"}, "at least 32")):
        host = "0.0.0.0" if env["CUBA_PEER_TOKEN"] == "short" else "127.0.0.1"
        proc = subprocess.run([str(SERVER_BIN), "serve", f"{host}:{free_port()}"], capture_output=True, text=True,
                              env=where.env(**env), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert says in proc.stderr and "refusing to serve" in proc.stderr
    assert not data.exists()  # refused before the store was opened


# -- what the peer token reaches --------------------------------------------------------------------
def test_the_peer_token_reaches_only_status_pull_and_notify(pair: Pair):
    a = pair.a

    async def as_peer():
        async with mcp_session(a.url, bearer(PEER_TOKEN)) as session:
            listed = [t.name for t in (await session.list_tools()).tools]
            resources = (await session.list_resources()).resources
            calls = {}
            for key, tool, args in (
                    ("faro", "cuba_faro", {"query": "payments"}),
                    ("alias", "memory_faro", {"query": "payments"}),
                    ("call", "cuba_call", {"tool": "cuba_faro", "args": {"query": "payments"}}),
                    ("call_sync", "cuba_call", {"tool": "cuba_sync", "args": {"action": "status"}}),
                    ("tools", "cuba_tools", {}),
                    ("whoami", "cuba_whoami", {}),
                    ("export", "cuba_sync", {"action": "export", "scope": "all"}),
                    ("import", "cuba_sync", {"action": "import"}),
                    ("fetch", "cuba_sync", {"action": "fetch", "url": "http://127.0.0.1:9"}),
                    ("status_dir", "cuba_sync", {"action": "status", "dir": "/etc"}),
                    ("status", "cuba_sync", {"action": "status"}),
                    ("alias_status", "memory_sync", {"action": "status"}),
                    ("pull", "cuba_sync", {"action": "pull", "limit": 1})):
                result = await session.call_tool(tool, args)
                calls[key] = (result.is_error, result.content[0].text)
            try:
                await session.read_resource("cuba://project/default")
                read = "read"
            except Exception as exc:  # the SDK raises the JSON-RPC error
                read = str(exc)
            return listed, resources, calls, read

    listed, resources, calls, read = anyio.run(as_peer)
    assert listed == ["cuba_sync"] and resources == []
    for key in ("faro", "alias", "call", "call_sync", "tools", "whoami", "export", "import", "fetch"):
        failed, text = calls[key]
        assert failed and "peer token (CUBA_PEER_TOKEN) reaches only cuba_sync" in text, (key, text)
    assert calls["status_dir"][0] and "a peer may not name a folder" in calls["status_dir"][1]
    for key in ("status", "alias_status", "pull"):
        assert not calls[key][0], calls[key]
    assert json.loads(calls["pull"][1])["files"]
    assert "peer token" in read and "payments" not in read
    # the operator still reaches everything, and tools/list is the whole catalogue
    assert ok(a, A_TOKEN, "cuba_faro", query="Stripe webhooks")["results"]


def test_events_tickets_and_health_refuse_the_peer_its_extras(pair: Pair):
    a = pair.a
    ticket = httpx.post(a.base + "/events/ticket", headers=bearer(PEER_TOKEN), timeout=10)
    assert ticket.status_code == 403 and "CUBA_PEER_TOKEN" in ticket.json()["error"]
    events = httpx.get(a.base + "/events", headers=bearer(PEER_TOKEN), timeout=10)
    assert events.status_code == 403
    assert httpx.get(a.base + f"/events?token={PEER_TOKEN}", timeout=10).status_code == 403
    public = httpx.get(a.base + "/health", headers=bearer(PEER_TOKEN), timeout=10).json()
    operator = httpx.get(a.base + "/health", headers=bearer(A_TOKEN), timeout=10).json()
    assert "runtime" not in public and "clients" not in public and public["database"] == "up"
    assert "runtime" in operator and "clients" in operator
    assert httpx.post(a.base + "/events/ticket", headers=bearer(A_TOKEN), timeout=10).status_code == 200


def test_a_reader_principal_may_not_pull_or_notify(pair: Pair):
    pulled = error(pair.a, pair.reader, "cuba_sync", action="pull", limit=1)
    assert "rita may not pull" in pulled and "'*' grant of admin" in pulled
    told = error(pair.a, pair.reader, "cuba_sync", action="notify", summary="x", node_id="n")
    assert "rita may not notify" in told


# -- pull --------------------------------------------------------------------------------------------
def test_pull_pages_and_refuses_to_mix_two_bundles(pair: Pair):
    a = pair.a
    first = ok(a, PEER_TOKEN, "cuba_sync", action="pull", limit=2)
    digest, total = first["manifest_hash"], first["total_pieces"]
    assert first["offset"] == 0 and len(first["files"]) == 2 and first["has_more"] and first["next_offset"] == 2
    assert first["with_embeddings"] is True  # a model is recorded: the vectors travel by default
    assert keys_problem("cuba_sync", "pull", first) is None
    pages, offset = [first], 2
    while pages[-1]["has_more"]:
        page = ok(a, PEER_TOKEN, "cuba_sync", action="pull", limit=2, offset=offset, manifest_hash=digest)
        assert page["manifest_hash"] == digest and page["offset"] == offset and len(page["files"]) <= 2
        pages.append(page)
        offset = page["next_offset"] if page["has_more"] else offset + len(page["files"])
    files = [f for p in pages for f in p["files"]]
    paths = [f["path"] for f in files]
    assert len(files) == total == first["total_files"] and len(set(paths)) == total
    assert paths == ["manifest.json", *sorted(paths[1:])]  # manifest.json first (small), then by path
    assert sum(p.startswith("entities/") for p in paths) == 2
    by_path = {f["path"]: f for f in files}
    assert set(by_path["embeddings.bin.zst"]) == {"path", "hex"}
    assert json.loads(by_path["manifest.json"]["text"])["manifest_hash"] == digest
    assert pages[-1]["next_offset"] is None
    # the same bundle, asked again from the start, is the same hash (the export was kept)
    assert ok(a, PEER_TOKEN, "cuba_sync", action="pull", limit=1)["manifest_hash"] == digest

    ok(a, A_TOKEN, "cuba_cronica", action="add", entity_name="payments", content="Payments now also take SEPA debits.")
    midway = error(a, PEER_TOKEN, "cuba_sync", action="pull", limit=2, offset=2, manifest_hash=digest)
    assert "the bundle changed while it was being pulled" in midway and "offset 0" in midway
    again = ok(a, PEER_TOKEN, "cuba_sync", action="pull", limit=2)
    assert again["manifest_hash"] != digest
    assert "offset" in error(a, PEER_TOKEN, "cuba_sync", action="pull", offset=10_000,
                             manifest_hash=again["manifest_hash"])


# -- notify ------------------------------------------------------------------------------------------
def test_notify_shows_in_status_and_at_jornada_start(pair: Pair):
    a = pair.a
    told = ok(a, PEER_TOKEN, "cuba_sync", action="notify", summary="node-c wrote 3 observations about billing",
              node_id="node-c-id", node_name="node-c", manifest_hash="c" * 64)
    assert told["recorded"] is True and told["id"] and keys_problem("cuba_sync", "notify", told) is None
    too_long = error(a, PEER_TOKEN, "cuba_sync", action="notify", summary="x" * 2001, node_id="node-c-id")
    assert "summary" in too_long and "2000" in too_long
    assert "node_id" in error(a, PEER_TOKEN, "cuba_sync", action="notify", summary="no node")
    status = ok(a, PEER_TOKEN, "cuba_sync", action="status")
    notices = [n for n in status["peer_notices"] if n["node_id"] == "node-c-id"]
    assert [n["id"] for n in notices] == [told["id"]]  # the refused one left nothing behind
    started = ok(a, A_TOKEN, "cuba_jornada", action="start", name="after the peer spoke")
    assert told["id"] in [n["id"] for n in started["peer_notices"]]
    assert started["peer_notices"][0]["summary"] == "node-c wrote 3 observations about billing"
    assert keys_problem("cuba_jornada", "start", started) is None


# -- fetch -------------------------------------------------------------------------------------------
def test_fetch_brings_the_peers_rows_then_stops_early_when_nothing_changed(pair: Pair):
    a, b = pair.a, pair.b
    # an artifact of a few hundred kB: artifacts.json is the bundle's first file by path, yet the
    # one-piece first pull sends manifest.json (it sent the whole artifacts.json, 1.2 MB for three)
    ok(a, A_TOKEN, "cuba_artefacto", action="put", path="plans/rollout.md",
       content=("Step: check the queue, then drain the workers. " * 8000)[:300_000])
    digest = ok(a, PEER_TOKEN, "cuba_sync", action="pull", limit=1)["manifest_hash"]
    # A announces its bundle to B; the fetch that imports it closes the notice
    ok(b, PEER_TOKEN, "cuba_sync", action="notify", summary="node-a has new payments notes", node_id="node-a",
       manifest_hash=digest)
    assert "no URL for peer 'default'" in error(b, B_TOKEN, "cuba_sync", action="fetch")
    got = ok(b, B_TOKEN, "cuba_sync", action="fetch", url=a.base + "/mcp")
    assert got["unchanged"] is False and got["url"] == a.base and got["manifest_hash"] == digest
    assert got["files_received"] >= 10 and got["notices_closed"] >= 1
    assert got["imported"]["rows_inserted"] > 0 and got["imported"]["skipped"] is False
    assert keys_problem("cuba_sync", "fetch", got) is None and keys_problem("cuba_sync", "import", got["imported"]) \
        is None
    inbox = pair.b_sync / ".peer-inbox" / "default"
    assert (inbox / "manifest.json").is_file() and (pair.b_sync / ".peer-inbox" / ".gitignore").read_text() == "*\n"
    found = ok(b, B_TOKEN, "cuba_faro", query="Stripe webhooks retries")
    assert any("Stripe webhooks" in r["c"] for r in found["results"])
    status = ok(b, B_TOKEN, "cuba_sync", action="status")
    assert all(n["manifest_hash"] != digest for n in status["peer_notices"])

    assert got["pages_pulled"] >= 2  # one piece first, then the rest
    taken = (inbox / "manifest.json").stat().st_mtime_ns
    again = ok(b, B_TOKEN, "cuba_sync", action="fetch")  # the url is remembered
    assert again["unchanged"] is True and again["imported"] is None and again["files_received"] == 0
    # one call, of one piece: a small fraction of the bundle it did not need (with its vectors)
    assert again["pages_pulled"] == 1 and again["bytes_pulled"] < 2000 < got["bytes_pulled"] / 4
    assert [p.name for p in (pair.b_sync / ".peer-inbox").iterdir() if p.name.startswith(".default")] == []
    assert (inbox / "manifest.json").stat().st_mtime_ns == taken  # no inbox was made, the last one stays
    assert again["url"] == a.base and "first page" in again["note"] and keys_problem("cuba_sync", "fetch", again) \
        is None

    ok(a, A_TOKEN, "cuba_cronica", action="add", entity_name="search-index", content="The indexer runs on 4 workers.")
    third = ok(b, B_TOKEN, "cuba_sync", action="fetch")
    assert third["unchanged"] is False and third["manifest_hash"] != digest and third["pages_pulled"] >= 2
    assert any("4 workers" in r["c"] for r in ok(b, B_TOKEN, "cuba_faro", query="indexer workers")["results"])


HOSTILE = '''
import sys
import uvicorn
from mcp.server.mcpserver import MCPServer

app = MCPServer("hostile")
FILES = [[{"path": "manifest.json", "text": "{}"}, {"path": "entities/x-12345678.json", "text": "{}"}],
         [{"path": sys.argv[2], "text": "{\\"owned\\": true}"}]]


@app.tool()
def cuba_sync(action: str, offset: int = 0, manifest_hash: str | None = None, limit: int | None = None) -> dict:
    page = 0 if offset == 0 else 1
    return {"action": "pull", "manifest_hash": "f" * 64, "node_id": "evil", "schema_version": 2,
            "with_embeddings": False, "total_files": 3, "offset": offset, "files": FILES[page],
            "has_more": page == 0, "next_offset": 2 if page == 0 else None, "note": ""}


uvicorn.run(app.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Iterator[str]:
    """A real MCP server whose second pull page names a file out of the inbox."""
    script = tmp_path_factory.mktemp("hostile") / "hostile.py"
    script.write_text(HOSTILE)
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script), str(port), "../../escape.json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    give_up = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "the hostile server exited"
        try:
            httpx.get(base + "/mcp", timeout=2)
            break
        except httpx.TransportError:
            assert time.monotonic() < give_up, "the hostile server did not start"
            time.sleep(0.05)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def test_fetch_refuses_a_page_naming_a_path_out_of_the_inbox(location: StoreLocation, tmp_path: Path,
                                                              hostile: str):
    from conftest import settings_for
    from cuba_memorys.services.memory import Memory

    sync = tmp_path / "work" / "sync"
    proc = subprocess.run([str(SERVER_BIN), "sync", "fetch", "--url", hostile, "--json"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120,
                          env=location.env(CUBA_PEER_TOKEN=PEER_TOKEN, CUBA_SYNC_DIR=str(sync),
                                           CUBA_EMBED_MODEL="none"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'../../escape.json'" in proc.stderr and "nothing was imported" in proc.stderr
    assert not (sync / "escape.json").exists() and not (tmp_path / "work" / "escape.json").exists()
    assert [p.name for p in (sync / ".peer-inbox").iterdir()] == [".gitignore"]  # no inbox, no staging left
    mem = Memory.open(settings_for(location), check_model=False)
    try:
        assert mem.store.sync_imports(5) == [] and mem.store.counts()["entities"] == 0
        assert "escape.json" in mem.store.peer_get("default")["last_error"]
    finally:
        mem.close()


# -- in process: the page cutter, the inbox, the notices' cap, fetch's own checks ---------------------
def drain_all(memory, root: Path, **args) -> tuple[list[dict], Path]:
    drain = peer_inbox.Drain("http://test", lambda digest: False,
                             lambda: peer_inbox.Inbox(root, "default", "http://test"))
    page_args: dict = dict(args)
    pages = []
    while True:
        page = peers.pull(memory, None, **page_args)
        pages.append(page)
        following = drain.page(json.loads(json.dumps(page)))  # as it travels
        if following is None:
            break
        page_args = {**args, "offset": following, "manifest_hash": page["manifest_hash"]}
    assert drain.inbox is not None and drain.manifest_hash is not None
    return pages, drain.inbox.finish(drain.manifest_hash)


def test_big_files_travel_in_parts_and_the_inbox_is_the_exported_bundle(memory, tmp_path: Path, monkeypatch):
    from cuba_memorys.services.observations import write

    for n in range(12):
        write.add(memory, None, entity_name="runbook", content=f"Step {n}: restart the worker pool number {n}"
                                                                f" and check {'the queue depth ' * 8}")
    monkeypatch.setattr(peers, "PAGE_BYTES", 4000)
    monkeypatch.setattr(peers, "ENVELOPE_BYTES", 0)
    monkeypatch.setattr(peers, "PIECE_BYTES", 800)
    pages, inbox = drain_all(memory, tmp_path / "sync", limit=50)
    assert len(pages) > 1 and pages[0]["total_pieces"] > pages[0]["total_files"]  # some files were cut
    cut = [f for p in pages for f in p["files"] if "part" in f]
    assert cut and all(set(f) == {"path", "hex", "part", "parts"} for f in cut)
    assert {f["path"] for f in cut} >= {"embeddings.bin.zst"} and any(f["path"].startswith("entities/") for f in cut)
    assert all(sum(peers._weight(f) for f in p["files"]) <= 4000 for p in pages)  # as sent: twice, escaped
    exported = tmp_path / "exported"
    export.export(memory, None, dir=str(exported), scope="all", with_embeddings=True)
    want = {p.relative_to(exported).as_posix(): p.read_bytes() for p in exported.rglob("*") if p.is_file()}
    got = {p.relative_to(inbox).as_posix(): p.read_bytes() for p in inbox.rglob("*") if p.is_file()}
    assert set(got) == set(want) and "embeddings.bin.zst" in got
    assert {k: v for k, v in got.items() if k != "manifest.json"} == \
           {k: v for k, v in want.items() if k != "manifest.json"}
    # a second drain replaces the inbox whole (no file of the first stays behind)
    (inbox / "entities" / "stale-00000000.json").write_text("{}")
    _, again = drain_all(memory, tmp_path / "sync")
    assert again == inbox and not (inbox / "entities" / "stale-00000000.json").exists()


GOOD = {"path": "manifest.json", "text": "{}"}


@pytest.mark.parametrize(("entries", "says"), [
    ([{"path": "/etc/passwd", "text": "x"}], "not a path inside its inbox"),
    ([{"path": "entities/../../x.json", "text": "x"}], "not a path inside its inbox"),
    ([{"path": ".git/config", "text": "x"}], "not a path inside its inbox"),
    ([{"path": "a\\b.json", "text": "x"}], "not a path inside its inbox"),
    ([{"path": "errors/e.json"}], "exactly one of text or hex"),
    ([{"path": "errors/e.json", "text": "x", "hex": "00"}], "exactly one of text or hex"),
    ([{"path": "embeddings.bin.zst", "hex": "zz"}], "hex that is not hex"),
    ([{"path": "embeddings.bin.zst", "hex": "00", "part": 1, "parts": 2}], "out of order"),
    ([GOOD, GOOD], "twice"),
    ([{"path": "entities", "text": "x"}, {"path": "entities/e.json", "text": "x"}], "cannot be written"),
    (["not an object"], "not an object"),
])
def test_the_inbox_refuses_hostile_entries(tmp_path: Path, entries: list, says: str):
    root = tmp_path / "sync"
    drain = peer_inbox.Drain("http://evil", lambda digest: False, lambda: peer_inbox.Inbox(root, "default",
                                                                                           "http://evil"))
    page = {"manifest_hash": "f" * 64, "total_files": len(entries), "offset": 0, "files": entries,
            "has_more": False}
    with pytest.raises(InvalidInput, match=says):
        drain.page(page)
    assert not (tmp_path / "x.json").exists() and not (root / "errors").exists()


def test_the_inbox_refuses_a_bundle_that_does_not_add_up(memory, tmp_path: Path):
    from cuba_memorys.services.observations import write

    write.add(memory, None, entity_name="api", content="The API gateway listens on 8443.")
    drain = peer_inbox.Drain("http://test", lambda digest: False, lambda: peer_inbox.Inbox(tmp_path, "p", "x"))
    page = peers.pull(memory, None)
    page["files"] = [f for f in page["files"] if not f["path"].startswith("entities/")]  # one file lost
    assert drain.page(page) is None
    with pytest.raises(InvalidInput, match="do not add up to the manifest hash"):
        drain.inbox.finish(drain.manifest_hash)
    stuck = peer_inbox.Drain("http://test", lambda digest: False, lambda: peer_inbox.Inbox(tmp_path, "q", "x"))
    with pytest.raises(InvalidInput, match="does not move on"):
        stuck.page({**peers.pull(memory, None), "files": [], "has_more": True, "next_offset": 0})


def test_a_first_page_of_a_bundle_taken_already_ends_the_drain_without_an_inbox(tmp_path: Path):
    made: list[str] = []

    def inbox() -> peer_inbox.Inbox:
        made.append("inbox")
        return peer_inbox.Inbox(tmp_path, "p", "x")

    page = {"manifest_hash": "a" * 64, "total_pieces": 40, "offset": 0, "has_more": True, "next_offset": 1,
            "files": [{"path": "artifacts.json", "text": "[]\n"}]}
    taken = peer_inbox.Drain("http://test", lambda digest: digest == "a" * 64, inbox)
    assert taken.page(page) is None and (taken.calls, taken.pages, made) == (1, 0, [])
    assert not (tmp_path / peer_inbox.INBOX).exists()
    new = peer_inbox.Drain("http://test", lambda digest: False, inbox)
    assert new.page(page) == 1 and made == ["inbox"] and new.pages == 1  # a new bundle: on to the next page
    new.inbox.discard()


def test_notices_are_capped_per_node_and_close_when_imported(memory):
    for n in range(205):
        peers.notify(memory, None, summary=f"notice {n}", node_id="busy-node", manifest_hash=f"{n:064x}")
    peers.notify(memory, None, summary="quiet", node_id="quiet-node")
    assert memory.store.peer_notice_count("busy-node") == 200
    assert memory.store.peer_notice_count("quiet-node") == 1
    open_ = memory.store.open_peer_notices(500)
    assert "notice 0" not in {n["summary"] for n in open_} and "notice 204" in {n["summary"] for n in open_}
    assert len(peers.pending_notices(memory)) == 20
    with pytest.raises(InvalidInput, match="summary"):
        peers.notify(memory, None, summary="y" * 2001, node_id="busy-node")
    assert memory.store.peer_notice_count(None) == 201


def test_fetch_says_what_is_missing_before_any_network(memory, open_memory, tmp_path: Path):
    with pytest.raises(ConfigError, match="CUBA_PEER_TOKEN"):
        peers.fetch(memory, None, url="http://127.0.0.1:9")
    with_token = open_memory(peer_token=PEER_TOKEN, sync_dir=tmp_path / "sync")
    with pytest.raises(InvalidInput, match="no URL for peer 'default'"):
        peers.fetch(with_token, None)
    with pytest.raises(InvalidInput, match="not an http"):
        peers.fetch(with_token, None, url="ftp://peer")
    with pytest.raises(InvalidInput, match="peer"):
        peers.fetch(with_token, None, peer="../up", url="http://127.0.0.1:9")
    with pytest.raises(InvalidInput, match="conflict"):
        peers.fetch(with_token, None, url="http://127.0.0.1:9", conflict="sideways")
    port = free_port()  # nothing listens there
    with pytest.raises(InvalidInput, match="could not be reached"):
        peers.fetch(with_token, None, url=f"http://127.0.0.1:{port}")
    assert "could not be reached" in with_token.store.peer_get("default")["last_error"]
    with pytest.raises(Conflict, match="changed while it was being pulled"):
        peers.pull(with_token, None, offset=1, manifest_hash="0" * 64)
    assert not (tmp_path / "sync" / ".peer-inbox" / "default").exists()


def test_doctor_checks_the_peer_token(open_memory, tmp_path: Path):
    from cuba_memorys.services.admin.doctor import doctor

    def peer_warnings(**settings) -> list[str]:
        report = doctor(open_memory(**settings))
        assert report["peers"]["token_set"] is bool(settings.get("peer_token"))
        return [w for w in report["warnings"] if "CUBA_PEER_TOKEN" in w]

    assert peer_warnings() == []
    assert peer_warnings(peer_token=PEER_TOKEN, http_token=A_TOKEN) == []
    same = peer_warnings(peer_token=A_TOKEN, http_token=A_TOKEN)
    assert len(same) == 1 and "equals CUBA_HTTP_TOKEN" in same[0]
    short = peer_warnings(peer_token="short", http_token=A_TOKEN, http_addr="0.0.0.0:8787")
    assert len(short) == 1 and "5 characters" in short[0]
    alone = peer_warnings(peer_token=PEER_TOKEN)
    assert len(alone) == 1 and "restricts nothing" in alone[0]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": "rita", "sha256": hashlib.sha256(
        PEER_TOKEN.encode()).hexdigest()}]}))
    owned = peer_warnings(peer_token=PEER_TOKEN, http_token=A_TOKEN, tokens_file=tokens)
    assert len(owned) == 1 and "principal rita's token" in owned[0]


# -- a bundle over 3 MiB, unpatched: pages under 3 MiB as sent --------------------------------------
WORDS = ('the "primary" node', r"C:\deploy\bin", "café", "naïve retry", "queue", "backoff", "ledger", "índice")


def raw_pages(server: Server, token: str) -> list[tuple[int, dict]]:
    """Every pull page as plain JSON-RPC over HTTP: (the HTTP body's bytes, the page)."""
    headers = {**bearer(token), "Accept": "application/json, text/event-stream"}
    pages: list[tuple[int, dict]] = []
    with httpx.Client(timeout=120) as http:
        def rpc(number: int | None, method: str, params: dict) -> httpx.Response:
            message = {"jsonrpc": "2.0", "method": method, "params": params} | ({"id": number} if number else {})
            done = http.post(server.url, headers=headers, json=message)
            assert done.status_code in (200, 202), done.text[:300]
            return done

        first = rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                      "clientInfo": {"name": "raw", "version": "1"}})
        headers["Mcp-Session-Id"] = first.headers["mcp-session-id"]
        rpc(None, "notifications/initialized", {})
        args: dict = {"action": "pull"}
        while True:
            done = rpc(len(pages) + 2, "tools/call", {"name": "cuba_sync", "arguments": args})
            text = done.text
            body = "".join(x[5:].strip() for x in text.splitlines() if x.startswith("data:")) or text
            page = json.loads(body)["result"]["structuredContent"]
            pages.append((len(done.content), page))
            if not page["has_more"]:
                return pages
            args = {"action": "pull", "offset": page["next_offset"], "manifest_hash": page["manifest_hash"]}


def test_a_bundle_over_3_mib_travels_in_pages_under_3_mib_as_sent(open_memory, tmp_path: Path):
    import random

    from conftest import settings_for
    from cuba_memorys.services.memory import Memory
    from cuba_memorys.services.observations import write

    where = StoreLocation("sqlite", tmp_path / "a")  # B, on the backend under test, fetches from it
    # (two PostgreSQL databases made from one template would share a node id: B would skip A's bundle as its own)
    seeded = Memory.open(replace(settings_for(where), embed_model="none"), check_model=False)
    pick = random.Random(17)
    try:
        for n in range(0, 240, 40):  # ~9,000 characters each, quotes, backslashes and accents among them
            write.batch_add(seeded, None, [{"entity_name": f"runbook-{i % 3}", "content": f"Note {i}: " + " ".join(
                pick.choice(WORDS) for _ in range(700))[:9000]} for i in range(n, n + 40)])
        want = {o["id"]: o["content"] for o in seeded.store.sync_observations(None, True)}
    finally:
        seeded.close()
    a = Server(where, tmp_path / "a.log", CUBA_HTTP_TOKEN=A_TOKEN, CUBA_PEER_TOKEN=PEER_TOKEN,
               CUBA_EMBED_MODEL="none").start()
    try:
        pages = raw_pages(a, PEER_TOKEN)
        files = [f for _, page in pages for f in page["files"]]
        size = sum(len(f["text"].encode()) if "text" in f else len(f["hex"]) // 2 for f in files)
        assert size > 3 * 1024 * 1024 and len(pages) >= 3, (size, len(pages))
        assert all(wire <= peers.PAGE_BYTES for wire, _ in pages), [wire for wire, _ in pages]
        assert any("part" in f for f in files) and any("text" in f for f in files)  # cut files, and whole ones
        b = open_memory(embed_model="none", peer_token=PEER_TOKEN, sync_dir=tmp_path / "b-sync")
        got = peers.fetch(b, None, url=a.base)
    finally:
        a.stop()
    assert got["unchanged"] is False and len(pages) <= got["pages_pulled"] <= len(pages) + 1  # + one piece first
    assert got["manifest_hash"] == pages[0][1]["manifest_hash"] and got["imported"]["rows_inserted"] >= 240
    assert {o["id"]: o["content"] for o in b.store.sync_observations(None, True)} == want
    inbox = tmp_path / "b-sync" / ".peer-inbox" / "default"
    sent: dict[str, bytes] = {}
    for f in files:
        data = f["text"].encode() if "text" in f else bytes.fromhex(f["hex"])
        sent[f["path"]] = sent.get(f["path"], b"") + data
    assert {p.relative_to(inbox).as_posix(): p.read_bytes() for p in inbox.rglob("*") if p.is_file()} == sent
