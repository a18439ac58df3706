"""Principals and grants on a shared `serve`: each bearer token is a principal, and every call is
checked against its grants — over HTTP with the official client, on both backends; on
PostgreSQL the restrictive row-level policies hold the same line below the server's checks."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import anyio
import httpx
import pytest

from conftest import SERVER_BIN, StoreLocation, settings_for
from cuba_memorys.services.admin import principals as principal_svc
from cuba_memorys.services.memory import Memory
from test_http import make_server, mcp_session  # noqa: F401 - make_server is a fixture


def principal(where: StoreLocation, tokens: Path, *args: str) -> dict:
    proc = subprocess.run([str(SERVER_BIN), "principal", *args, "--json"], capture_output=True, text=True,
                          env=where.env(CUBA_TOKENS_FILE=str(tokens), CUBA_EMBED_MODEL="none"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def team(location: StoreLocation, tmp_path: Path, make_server):  # noqa: F811
    """Five principals on one `serve`. The first is made by the CLI, as an operator would; the
    other four in process, by the same service function the CLI calls (one process start each
    saved), into the token file the CLI wrote."""
    tokens = tmp_path / "tokens.json"
    keys = {"rita": principal(location, tokens, "add", "rita", "--grant=alpha=reader")["token"]}
    mem = Memory.open(replace(settings_for(location), embed_model="none"), check_model=False)
    try:
        for name, grants in {"walt": ["alpha=writer"], "ada": ["alpha=admin"], "bo": ["beta=admin"],
                             "root": ["*=admin"]}.items():
            keys[name] = principal_svc.add(mem, tokens, name, grants)["token"]
    finally:
        mem.close()
    server = make_server(CUBA_TOKENS_FILE=str(tokens)).start()
    return server, keys


async def as_(server, token: str, steps):
    async with mcp_session(server.url, {"Authorization": f"Bearer {token}"}) as session:
        out = []
        for tool, args in steps:
            result = await session.call_tool(tool, args)
            out.append(("error", result.content[0].text) if result.is_error else ("ok", result.structured_content))
        return out


def run(server, token: str, *steps) -> list[tuple[str, object]]:
    return anyio.run(as_, server, token, list(steps))


SWITCH_ALPHA = ("cuba_proyecto", {"action": "switch", "name": "alpha"})
ADD = ("cuba_cronica", {"action": "add", "entity_name": "api", "content": "The API gateway runs on port 8443"})


def test_a_reader_reads_and_cannot_write(team):
    server, keys = team
    run(server, keys["walt"], SWITCH_ALPHA, ADD)
    out = run(server, keys["rita"], SWITCH_ALPHA, ("cuba_faro", {"query": "API gateway port"}), ADD,
              ("cuba_alma", {"action": "delete", "name": "api"}))
    assert out[0][0] == "ok" and out[1][0] == "ok" and out[1][1]["results"]
    assert out[2] == ("error", out[2][1]) and "rita needs writer on project 'alpha'" in out[2][1]
    assert out[3][0] == "error" and "needs admin" in out[3][1]


def test_a_writer_of_one_project_cannot_touch_another(team):
    server, keys = team
    run(server, keys["bo"], ("cuba_proyecto", {"action": "switch", "name": "beta"}),
        ("cuba_cronica", {"action": "add", "entity_name": "beta-db", "content": "Beta keeps its data in MySQL 8"}))
    out = run(server, keys["walt"], ("cuba_proyecto", {"action": "switch", "name": "beta"}),
              ("cuba_faro", {"query": "MySQL"}), ("cuba_proyecto", {"action": "stats", "name": "beta"}),
              SWITCH_ALPHA, ADD, ("cuba_proyecto", {"action": "list"}),
              ("cuba_call", {"tool": "cuba_proyecto", "args": {"action": "switch", "name": "beta"}}))
    assert out[0][0] == "error" and "no grant on project 'beta'" in out[0][1]
    assert out[1][0] == "error" and "no active project" in out[1][1]  # and no '*' grant: no search at all
    assert out[2][0] == "error" and "beta" in out[2][1]
    assert out[3][0] == "ok" and out[4][0] == "ok"
    assert [p["name"] for p in out[5][1]["projects"]] == ["alpha"]  # beta is not even listed
    assert out[6][0] == "error"  # cuba_call is checked like a direct call


def test_an_admin_of_one_project_cannot_merge_another_into_it(team):
    server, keys = team
    run(server, keys["bo"], ("cuba_proyecto", {"action": "switch", "name": "beta"}))
    out = run(server, keys["ada"], SWITCH_ALPHA,
              ("cuba_proyecto", {"action": "merge", "name": "beta", "to": "alpha"}),
              ("cuba_proyecto", {"action": "rename", "name": "beta", "to": "gamma"}),
              ("cuba_proyecto", {"action": "rename", "name": "alpha", "to": "alpha2"}))
    assert out[1][0] == "error" and "needs admin on project 'beta'" in out[1][1]
    assert out[2][0] == "error"
    assert out[3][0] == "ok" and out[3][1]["to"] == "alpha2"
    root = run(server, keys["root"], ("cuba_proyecto", {"action": "list"}))
    assert {p["name"] for p in root[0][1]["projects"]} == {"alpha2", "beta"}  # beta was not merged


def test_tokens_are_checked_and_principals_do_not_share_state(team):
    server, keys = team
    assert httpx.post(server.url, headers={"Authorization": "Bearer " + "x" * 43}, json={}).status_code == 401
    assert httpx.post(server.url, json={}).status_code == 401
    walt = run(server, keys["walt"], SWITCH_ALPHA, ("cuba_proyecto", {"action": "current"}))
    ada = run(server, keys["ada"], ("cuba_proyecto", {"action": "current"}))
    assert walt[1][1]["project"]["name"] == "alpha" and ada[0][1]["project"] is None


def test_the_database_enforces_grants_too(memory):
    """Below the server's checks: bound to what a principal may read and write, the store itself
    (PostgreSQL's restrictive policies) hides and protects the other projects' rows."""
    from cuba_memorys.errors import StorageError
    from cuba_memorys.services.graph import projects
    from cuba_memorys.services.observations import write as observations

    if memory.store.backend != "postgresql":
        pytest.skip("SQLite has no row-level security: the services' checks are its one wall")
    for name in ("alpha", "beta"):
        projects.switch(memory, name, name)
        observations.add(memory, name, entity_name=f"{name}-svc", content=f"{name} service listens on 80")
    alpha, beta = (memory.store.get_project(n)["id"] for n in ("alpha", "beta"))
    with memory.store.bind_access(frozenset({alpha}), frozenset()):
        seen = {r["project_id"] for r in memory.store._q("SELECT project_id FROM observations")}
        changed = memory.store._exec("UPDATE observations SET importance = 0.9").rowcount
    assert seen == {alpha} and changed == 0  # a reader of alpha: sees alpha only, changes nothing
    with memory.store.bind_access(frozenset({alpha}), frozenset({alpha})):
        assert memory.store._exec("UPDATE observations SET importance = 0.9").rowcount == 1
        with pytest.raises(StorageError, match="row-level security|policy"):
            memory.store._exec("UPDATE observations SET project_id = ? WHERE project_id = ?", (beta, alpha))
