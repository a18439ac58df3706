"""cuba_artefacto: shared, versioned texts between agents, driven through the official MCP client
on both backends, over stdio and over HTTP (`serve`): every action, bad input (each refused with
an error naming what was wrong, nothing written), leases, project scoping, the version history,
project merges, events, row-level security, and the race of two agents on one daemon, run 100
times: exactly one put of a base wins, the other is told the current version and hash, and its
retry keeps both texts."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from conftest import StoreLocation
from cuba_memorys.errors import Conflict
from cuba_memorys.services.agents import artifacts
from cuba_memorys.services.graph import projects
from mcp_helpers import Agent, run_stdio
from test_http import make_server, mcp_session  # noqa: F401 - make_server is a fixture

TOOL = "cuba_artefacto"
PLAN_V1 = "# Plan\n- step one\n- step two\n"
PLAN_V2 = PLAN_V1 + "- step three\n"
GITHUB_TOKEN = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
MAX_CONTENT = 2 * 1024 * 1024


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def expire_lease(where: StoreLocation, path: str) -> None:
    """Move a lease's end into the past in the database itself, as time passing would."""
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat(timespec="microseconds")
    if where.database_url:
        import psycopg

        with psycopg.connect(where.database_url, autocommit=True) as conn:
            assert conn.execute("UPDATE artifacts SET lock_until = %s WHERE path = %s", (past, path)).rowcount == 1
    else:
        with closing(sqlite3.connect(where.data_dir / "memory.db", timeout=30)) as conn:
            assert conn.execute("UPDATE artifacts SET lock_until = ? WHERE path = ?", (past, path)).rowcount == 1
            conn.commit()


# -- every action, over stdio and over HTTP ------------------------------------------------------
async def every_action(agent: Agent) -> dict:
    def art(**args):
        return agent.call(TOOL, **args)

    seen = {"hint": await art(action="watch_hint"), "empty": await art(action="list")}
    seen["made"] = await art(action="put", path="docs/plan.md", content=PLAN_V1)
    seen["first"] = await art(action="get", path="docs/plan.md")
    seen["second"] = await art(action="put", path="docs/plan.md", content=PLAN_V2, base_version=1)
    seen["patched"] = await art(action="patch", path="docs/plan.md", find="step two", replace="step 2")
    seen["current"] = await art(action="get", path="docs/plan.md")
    seen["v1"] = await art(action="get", path="docs/plan.md", version=1)
    seen["v2"] = await art(action="get", path="docs/plan.md", version=2)
    seen["locked"] = await art(action="lock", path="docs/plan.md", ttl_seconds=600)
    seen["listed_locked"] = await art(action="list")
    seen["unlocked"] = await art(action="unlock", path="docs/plan.md")
    seen["listed_free"] = await art(action="list")
    await art(action="put", path="notes/todo.md", content="- write the tests\n")
    await art(action="put", path="docs/api.md", content="GET /health\n")
    seen["docs"] = await art(action="list", prefix="docs/")
    seen["one"] = await art(action="list", limit=1)
    seen["limit0"] = await art(action="list", limit=0)
    seen["short_lease"] = await art(action="lock", path="notes/todo.md", ttl_seconds=1)
    seen["alias"] = await agent.call("memory_artifact", action="get", path="docs/api.md")
    seen["hidden_alias"] = await agent.call("memory_artefacto", action="get", path="docs/api.md")
    seen["tools"] = {t.name for t in (await agent.session.list_tools()).tools}
    return seen


def check_every_action(seen: dict, actor: str | None = None) -> None:
    assert seen["hint"]["events_url"] == "/events" and seen["hint"]["ticket_url"] == "/events/ticket"
    kinds = {"artifact.updated", "artifact.locked", "artifact.unlocked", "artifact.conflict"}
    assert kinds <= set(seen["hint"]["kinds"])
    assert seen["empty"] == {"action": "list", "artifacts": [], "count": 0, "prefix": None}
    made = seen["made"]
    assert (made["version"], made["created"], made["previous_version"]) == (1, True, None)
    assert made["content_hash"] == sha(PLAN_V1) and made["path"] == "docs/plan.md"
    first = seen["first"]
    assert (first["content"], first["version"], first["id"]) == (PLAN_V1, 1, made["id"])
    assert first["current_version"] == first["oldest_version"] == 1
    actor = actor or first["actor"]
    assert first["actor"] == actor and actor
    assert (seen["second"]["version"], seen["second"]["previous_version"], seen["second"]["created"]) == (2, 1, False)
    patched_text = PLAN_V2.replace("step two", "step 2")
    assert seen["patched"]["action"] == "patch" and seen["patched"]["version"] == 3
    current = seen["current"]
    assert (current["content"], current["content_hash"], current["version"]) == (patched_text, sha(patched_text), 3)
    assert (current["oldest_version"], current["current_version"]) == (1, 3) and "replaced_at" not in current
    for key, text, version in (("v1", PLAN_V1, 1), ("v2", PLAN_V2, 2)):
        old = seen[key]
        assert (old["content"], old["content_hash"], old["version"], old["current_version"]) == (text, sha(text),
                                                                                                 version, 3)
        assert old["replaced_at"] >= old["updated_at"] and old["actor"] == actor
    locked = seen["locked"]
    assert (locked["locked_by"], locked["version"], locked["ttl_seconds"]) == (actor, 3, 600)
    assert "clamped" not in locked and locked["lock_until"] > datetime.now(UTC).isoformat()
    row = seen["listed_locked"]["artifacts"][0]
    assert (row["path"], row["locked_by"], row["lock_until"]) == ("docs/plan.md", actor, locked["lock_until"])
    assert "content" not in row
    assert seen["unlocked"] == {"action": "unlock", "path": "docs/plan.md", "released": True}
    assert seen["listed_free"]["artifacts"][0]["locked_by"] is None
    assert [a["path"] for a in seen["docs"]["artifacts"]] == ["docs/api.md", "docs/plan.md"]
    assert seen["docs"]["prefix"] == "docs/"
    assert [a["path"] for a in seen["one"]["artifacts"]] == ["docs/api.md"] and seen["one"]["count"] == 1
    assert seen["limit0"]["clamped"] == {"limit": {"given": 0, "used": 1}} and seen["limit0"]["count"] == 1
    assert seen["short_lease"]["ttl_seconds"] == 5
    assert seen["short_lease"]["clamped"] == {"ttl_seconds": {"given": 1, "used": 5}}
    assert seen["alias"]["content"] == seen["hidden_alias"]["content"] == "GET /health\n"
    assert "memory_artifact" in seen["tools"] and TOOL in seen["tools"]
    assert "memory_artefacto" not in seen["tools"]  # callable, never listed


def test_every_action_over_stdio(location: StoreLocation):
    check_every_action(run_stdio(location, every_action))


def test_every_action_over_http(make_server):  # noqa: F811 - the imported fixture
    server = make_server().start()

    async def go():
        async with mcp_session(server.url, {"Mcp-Client-Id": "agent-a"}) as session:
            return await every_action(Agent(session))

    check_every_action(anyio.run(go), actor="agent-a")


# -- bad input: a clear error, nothing written -------------------------------------------------
async def bad_input(agent: Agent) -> dict:
    await agent.call(TOOL, action="put", path="docs/plan.md", content=PLAN_V1)
    await agent.call(TOOL, action="put", path="docs/aaa.md", content="baaab")
    errors = {}
    cases = {
        "empty_path": {"action": "get", "path": ""},
        "blank_path": {"action": "put", "path": "   ", "content": "x"},
        "long_path": {"action": "put", "path": "é" * 257, "content": "x"},  # 257 characters, 514 bytes
        "nul_path": {"action": "put", "path": "docs/\x00plan.md", "content": "x"},
        "secret_path": {"action": "put", "path": f"keys/{GITHUB_TOKEN}", "content": "x"},
        "no_content": {"action": "put", "path": "docs/new.md"},
        "too_big": {"action": "put", "path": "docs/big.md", "content": "a" * (MAX_CONTENT + 1)},
        "nul_content": {"action": "put", "path": "docs/new.md", "content": "a\x00b"},
        "secret": {"action": "put", "path": "docs/new.md", "content": f"token: {GITHUB_TOKEN}"},
        "stale": {"action": "put", "path": "docs/plan.md", "content": "mine", "base_version": 0},
        "ahead": {"action": "put", "path": "docs/plan.md", "content": "mine", "base_version": 7},
        "missing_base": {"action": "put", "path": "docs/plan.md", "content": "mine"},
        "negative_base": {"action": "put", "path": "docs/plan.md", "content": "mine", "base_version": -1},
        "string_base": {"action": "put", "path": "docs/plan.md", "content": "mine", "base_version": "1"},
        "base_for_new": {"action": "put", "path": "docs/new.md", "content": "mine", "base_version": 3},
        "patch_none": {"action": "patch", "path": "docs/plan.md", "find": "step nine", "replace": "x"},
        "patch_two": {"action": "patch", "path": "docs/plan.md", "find": "- step", "replace": "* step"},
        "patch_overlap": {"action": "patch", "path": "docs/aaa.md", "find": "aa", "replace": "a"},  # at 1 and at 2
        "patch_missing": {"action": "patch", "path": "docs/none.md", "find": "x", "replace": "y"},
        "patch_secret": {"action": "patch", "path": "docs/plan.md", "find": "step one", "replace": GITHUB_TOKEN},
        "get_missing": {"action": "get", "path": "docs/none.md"},
        "get_future": {"action": "get", "path": "docs/plan.md", "version": 2},
        "get_zero": {"action": "get", "path": "docs/plan.md", "version": 0},
        "lock_missing": {"action": "lock", "path": "docs/none.md"},
        "ttl_type": {"action": "lock", "path": "docs/plan.md", "ttl_seconds": "60"},
        "unknown_action": {"action": "delete", "path": "docs/plan.md"},
    }
    for name, args in cases.items():
        errors[name] = await agent.error(TOOL, **args)
    errors["__after"] = await agent.call(TOOL, action="get", path="docs/plan.md")
    errors["__list"] = await agent.call(TOOL, action="list")
    errors["__other_action"] = await agent.call(TOOL, action="list", path="docs/plan.md")  # get's: ignored
    errors["__exact_512"] = await agent.call(TOOL, action="put", path="é" * 256, content="x")
    errors["__max_content"] = await agent.call(TOOL, action="put", path="docs/max.md", content="a" * MAX_CONTENT)
    errors["__allowed_secret"] = await agent.call(TOOL, action="put", path="docs/key.md",
                                                  content=f"token: {GITHUB_TOKEN}", allow_secret=True)
    return errors


def test_bad_input_is_refused_clearly_and_writes_nothing(location: StoreLocation):
    got = run_stdio(location, bad_input)
    for name in ("empty_path", "blank_path", "long_path", "nul_path", "secret_path"):
        assert "path" in got[name], (name, got[name])
    assert "514 bytes" in got["long_path"] and "at most 512" in got["long_path"]
    assert "NUL" in got["nul_path"] and "credential" in got["secret_path"] and GITHUB_TOKEN not in got["secret_path"]
    assert "content" in got["no_content"] and "required" in got["no_content"]
    assert "content" in got["too_big"] and "at most 2 MiB" in got["too_big"] and "2,097,153 bytes" in got["too_big"]
    assert "content" in got["nul_content"] and "NUL" in got["nul_content"]
    assert "GitHub token" in got["secret"] and "allow_secret" in got["secret"]
    state = f"version 1 (content_hash {sha(PLAN_V1)})"
    for name in ("stale", "ahead"):
        assert "conflict" in got[name] and "stale" in got[name] and state in got[name], got[name]
        assert "base_version=1" in got[name]
    assert "base_version" in got["missing_base"] and "required" in got["missing_base"] and state in got["missing_base"]
    assert "base_version" in got["negative_base"] and "base_version" in got["string_base"]
    assert "does not exist" in got["base_for_new"]
    assert "find" in got["patch_none"] and "does not occur" in got["patch_none"]
    assert "occurs 2 times" in got["patch_two"] and "ambiguous" in got["patch_two"]
    assert "occurs 2 times" in got["patch_overlap"]
    assert "No artifact at 'docs/none.md'" in got["patch_missing"] and "No artifact" in got["get_missing"]
    assert "replace" in got["patch_secret"] and "GitHub token" in got["patch_secret"]
    assert "no version 2" in got["get_future"] and "version" in got["get_zero"]
    assert "No artifact" in got["lock_missing"] and "ttl_seconds" in got["ttl_type"]
    assert got["__other_action"]["ignored"] == ["path"]
    assert "action" in got["unknown_action"] and "watch_hint" in got["unknown_action"]
    after = got["__after"]
    assert (after["version"], after["content"], after["oldest_version"]) == (1, PLAN_V1, 1)  # nothing was written
    paths = [a["path"] for a in got["__list"]["artifacts"]]
    assert paths == ["docs/aaa.md", "docs/plan.md"]  # none of the refused puts created a path
    assert got["__list"]["artifacts"][0]["version"] == 1  # nor did a refused patch write
    assert got["__exact_512"]["version"] == 1 and got["__max_content"]["version"] == 1
    assert got["__allowed_secret"]["version"] == 1


# -- leases between two agents over HTTP ------------------------------------------------------------
def test_leases_between_two_agents(make_server, location: StoreLocation):  # noqa: F811
    server = make_server().start()

    async def go():
        async with mcp_session(server.url, {"Mcp-Client-Id": "agent-a"}) as sa, \
                mcp_session(server.url, {"Mcp-Client-Id": "agent-b"}) as sb:
            a, b = Agent(sa), Agent(sb)
            await a.call(TOOL, action="put", path="docs/lease.md", content="v1\n")
            held = await a.call(TOOL, action="lock", path="docs/lease.md", ttl_seconds=600)
            refused = {
                "put": await b.error(TOOL, action="put", path="docs/lease.md", content="b\n", base_version=1),
                "patch": await b.error(TOOL, action="patch", path="docs/lease.md", find="v1", replace="b"),
                "lock": await b.error(TOOL, action="lock", path="docs/lease.md"),
                "unlock": await b.error(TOOL, action="unlock", path="docs/lease.md"),
            }
            untouched = await b.call(TOOL, action="get", path="docs/lease.md")
            holder_put = await a.call(TOOL, action="put", path="docs/lease.md", content="v2\n", base_version=1)
            renewed = await a.call(TOOL, action="lock", path="docs/lease.md", ttl_seconds=600)
            expire_lease(location, "docs/lease.md")
            free = await b.call(TOOL, action="list")
            after_expiry = await b.call(TOOL, action="put", path="docs/lease.md", content="v3\n", base_version=2)
            cleared = await b.call(TOOL, action="get", path="docs/lease.md")
            b_lock = await b.call(TOOL, action="lock", path="docs/lease.md", ttl_seconds=60)
            a_refused = await a.error(TOOL, action="unlock", path="docs/lease.md")
            b_unlock = await b.call(TOOL, action="unlock", path="docs/lease.md")
            await a.call(TOOL, action="lock", path="docs/lease.md")
            expire_lease(location, "docs/lease.md")
            stale_unlock = await b.call(TOOL, action="unlock", path="docs/lease.md")
            final = await b.call(TOOL, action="list")
            return held, refused, untouched, holder_put, renewed, free, after_expiry, cleared, b_lock, a_refused, \
                b_unlock, stale_unlock, final

    (held, refused, untouched, holder_put, renewed, free, after_expiry, cleared, b_lock, a_refused, b_unlock,
     stale_unlock, final) = anyio.run(go)
    assert held["locked_by"] == "agent-a"
    for action, text in refused.items():
        assert f"locked by agent-a until {held['lock_until']}" in text, (action, text)
    assert "only its holder" in refused["unlock"]
    assert (untouched["version"], untouched["content"], untouched["locked_by"]) == (1, "v1\n", "agent-a")
    assert holder_put["version"] == 2  # the holder writes through its own lease
    assert renewed["lock_until"] >= held["lock_until"]
    assert free["artifacts"][0]["locked_by"] is None and free["artifacts"][0]["lock_until"] is None
    assert after_expiry["version"] == 3  # an expired lease frees itself
    assert (cleared["content"], cleared["locked_by"]) == ("v3\n", None)
    assert b_lock["locked_by"] == "agent-b"
    assert "locked by agent-b" in a_refused
    assert b_unlock["released"] is True
    assert stale_unlock == {"action": "unlock", "path": "docs/lease.md", "released": False}  # anyone, after expiry
    assert final["artifacts"][0]["locked_by"] is None


# -- projects ----------------------------------------------------------------------------------------
async def in_projects(agent: Agent) -> dict:
    async def switch(name):
        await agent.call("cuba_proyecto", action="switch", name=name)

    seen = {}
    await switch("alpha")
    await agent.call(TOOL, action="put", path="docs/plan.md", content="alpha's plan")
    await agent.call(TOOL, action="put", path="alpha-only.md", content="a")
    await switch("beta")
    seen["beta_list"] = await agent.call(TOOL, action="list")
    seen["beta_get"] = await agent.error(TOOL, action="get", path="docs/plan.md")
    seen["beta_put"] = await agent.call(TOOL, action="put", path="docs/plan.md", content="beta's plan")
    await switch("*")
    seen["none_list"] = await agent.call(TOOL, action="list")
    seen["none_put"] = await agent.call(TOOL, action="put", path="docs/plan.md", content="nobody's plan")
    await switch("alpha")
    seen["alpha_get"] = await agent.call(TOOL, action="get", path="docs/plan.md")
    seen["alpha_list"] = await agent.call(TOOL, action="list")
    seen["merge_refused"] = await agent.error("cuba_proyecto", action="merge", name="beta", to="alpha")
    await switch("beta")
    seen["beta_after"] = await agent.call(TOOL, action="list")
    await switch("gamma")
    await agent.call(TOOL, action="put", path="notes.md", content="gamma 1")
    await agent.call(TOOL, action="put", path="notes.md", content="gamma 2", base_version=1)
    seen["merged"] = await agent.call("cuba_proyecto", action="merge", name="gamma", to="alpha")
    await switch("alpha")
    seen["moved"] = await agent.call(TOOL, action="get", path="notes.md")
    seen["moved_v1"] = await agent.call(TOOL, action="get", path="notes.md", version=1)
    return seen


def test_artifacts_are_scoped_to_the_project_and_merges_refuse_colliding_paths(location: StoreLocation):
    seen = run_stdio(location, in_projects)
    assert seen["beta_list"]["count"] == 0 and "No artifact" in seen["beta_get"]
    assert seen["beta_put"]["version"] == 1 and seen["beta_put"]["created"] is True  # its own artifact
    assert seen["none_list"]["count"] == 0 and seen["none_put"]["version"] == 1  # no project: the unscoped rows
    assert seen["alpha_get"]["content"] == "alpha's plan" and seen["alpha_get"]["version"] == 1
    assert [a["path"] for a in seen["alpha_list"]["artifacts"]] == ["alpha-only.md", "docs/plan.md"]
    refused = seen["merge_refused"]
    assert "'docs/plan.md'" in refused and "1 path(s)" in refused and "Nothing was moved" in refused
    assert "alpha-only.md" not in refused
    assert [a["path"] for a in seen["beta_after"]["artifacts"]] == ["docs/plan.md"]  # beta is still there
    assert seen["merged"]["moved"]["artifacts"] == 1 and seen["merged"]["moved"]["artifact_versions"] == 1
    assert (seen["moved"]["content"], seen["moved"]["version"]) == ("gamma 2", 2)
    assert seen["moved_v1"]["content"] == "gamma 1"  # the history moved with it


# -- the version history ----------------------------------------------------------------------------
def test_the_newest_fifty_replaced_versions_are_kept(location: StoreLocation):
    async def body(agent: Agent):
        await agent.call(TOOL, action="put", path="log.md", content="v1")
        for version in range(2, 56):
            await agent.call(TOOL, action="put", path="log.md", content=f"v{version}", base_version=version - 1)
        current = await agent.call(TOOL, action="get", path="log.md")
        kept = [await agent.call(TOOL, action="get", path="log.md", version=v) for v in (5, 6, 30, 54)]
        gone = await agent.error(TOOL, action="get", path="log.md", version=4)
        return current, kept, gone

    current, kept, gone = run_stdio(location, body)
    assert (current["version"], current["content"], current["oldest_version"]) == (55, "v55", 5)
    assert [k["content"] for k in kept] == ["v5", "v6", "v30", "v54"]
    assert [k["content_hash"] for k in kept] == [sha(t) for t in ("v5", "v6", "v30", "v54")]
    assert "no longer kept" in gone and "5-55" in gone


# -- the race: two agents, one daemon, one base --------------------------------------------------
RACES = 100
RACE_PATH = "race/log.md"


async def race_round(agents: dict[str, Agent], i: int) -> tuple[str, str, bool]:
    """Both agents read the same version, then put on it at the same moment (a barrier): one
    wins, the other is told the current version and hash, and its retry keeps both lines.
    Also says whether both puts were in flight at once (each sent before either was answered)."""
    read, answers, arrived, go, sent, back = {}, {}, [], anyio.Event(), {}, {}

    async def one(name: str, agent: Agent) -> None:
        read[name] = await agent.call(TOOL, action="get", path=RACE_PATH)
        arrived.append(name)
        if len(arrived) == len(agents):
            go.set()
        await go.wait()
        sent[name] = time.monotonic()
        answers[name] = await agent.session.call_tool(TOOL, {
            "action": "put", "path": RACE_PATH, "content": read[name]["content"] + f"{name} {i}\n",
            "base_version": read[name]["version"]})
        back[name] = time.monotonic()
        created = await agent.session.call_tool(TOOL, {"action": "put", "path": f"race/new-{i}.md",
                                                       "content": name, "base_version": 0})
        answers[name, "new"] = created

    async with anyio.create_task_group() as group:
        for name, agent in agents.items():
            group.start_soon(one, name, agent)
    base = read["agent-a"]["version"]
    assert read["agent-b"]["version"] == base
    winners = [n for n in agents if not answers[n].is_error]
    assert len(winners) == 1, [answers[n].content[0].text for n in agents]
    winner, loser = winners[0], next(n for n in agents if n not in winners)
    won = answers[winner].structured_content
    assert won["version"] == base + 1
    refusal = answers[loser].content[0].text
    assert f"is at version {base + 1} (content_hash {won['content_hash']})" in refusal, refusal
    new_winners = [n for n in agents if not answers[n, "new"].is_error]
    assert len(new_winners) == 1  # creating a path races the same way
    new_won = answers[new_winners[0], "new"].structured_content
    new_loser = next(n for n in agents if n not in new_winners)
    assert f"version 1 (content_hash {new_won['content_hash']})" in answers[new_loser, "new"].content[0].text
    again = await agents[loser].call(TOOL, action="get", path=RACE_PATH)
    assert again["version"] == base + 1 and again["content"] == read[winner]["content"] + f"{winner} {i}\n"
    retried = await agents[loser].call(TOOL, action="put", path=RACE_PATH, base_version=base + 1,
                                       content=again["content"] + f"{loser} {i}\n")
    assert retried["version"] == base + 2
    return winner, loser, max(sent.values()) < min(back.values())


def test_two_agents_racing_on_one_daemon_lose_nothing(make_server):  # noqa: F811
    server = make_server().start()

    async def go():
        async with mcp_session(server.url, {"Mcp-Client-Id": "agent-a"}) as sa, \
                mcp_session(server.url, {"Mcp-Client-Id": "agent-b"}) as sb:
            agents = {"agent-a": Agent(sa), "agent-b": Agent(sb)}
            await agents["agent-a"].call(TOOL, action="put", path=RACE_PATH, content="race log\n")
            started = time.monotonic()
            order = [await race_round(agents, i) for i in range(RACES)]
            elapsed = time.monotonic() - started
            final = await agents["agent-b"].call(TOOL, action="get", path=RACE_PATH)
            history = {v: await agents["agent-a"].call(TOOL, action="get", path=RACE_PATH, version=v)
                       for v in range(final["oldest_version"], final["version"])}
            return order, final, history, elapsed

    order, final, history, elapsed = anyio.run(go)
    assert sum(overlapped for _, _, overlapped in order) >= 0.9 * RACES  # the puts really met at the server
    lines = ["race log"] + [f"{name} {i}" for i, (*pair, _) in enumerate(order) for name in pair]
    assert final["version"] == 1 + 2 * RACES and final["content"].splitlines() == lines  # nothing lost
    assert final["oldest_version"] == final["version"] - artifacts.KEEP_VERSIONS
    for version, old in history.items():  # every kept version is the log up to that write
        text = "\n".join(lines[:version]) + "\n"
        assert (old["content"], old["content_hash"]) == (text, sha(text)), version
    assert elapsed < 60, f"{RACES} races took {elapsed:.1f} s"


# -- in process: events, threads, row-level security ------------------------------------------
def test_writes_publish_their_events(memory):
    artifacts.put(memory, "agent-a", path="docs/plan.md", content=PLAN_V1)
    with pytest.raises(Conflict):
        artifacts.put(memory, "agent-b", path="docs/plan.md", content="mine", base_version=0)
    artifacts.lock(memory, "agent-a", path="docs/plan.md")
    artifacts.unlock(memory, "agent-a", path="docs/plan.md")
    events = [e for e in memory.events.recent() if e["kind"].startswith("artifact.")]
    assert [e["kind"] for e in events] == ["artifact.updated", "artifact.conflict", "artifact.locked",
                                           "artifact.unlocked"]
    for event, actor in zip(events, ("agent-a", "agent-b", "agent-a", "agent-a")):
        payload = event["payload"]
        assert {k: payload[k] for k in ("path", "version", "content_hash", "actor", "project_id")} == {
            "path": "docs/plan.md", "version": 1, "content_hash": sha(PLAN_V1), "actor": actor, "project_id": None}
    assert events[1]["payload"]["base_version"] == 0 and "lock_until" in events[2]["payload"]


def test_text_that_is_not_unicode_is_refused(memory):
    """A lone surrogate (JSON can carry one) cannot be stored as UTF-8: refused, naming the parameter."""
    from cuba_memorys.errors import InvalidInput

    for args, param in (({"path": "docs/\ud800.md", "content": "x"}, "path"),
                        ({"path": "docs/plan.md", "content": "a\udfffb"}, "content")):
        with pytest.raises(InvalidInput, match=f"^{param}: is not valid Unicode"):
            artifacts.put(memory, None, **args)
    assert artifacts.list_all(memory, None)["count"] == 0


def test_threads_putting_on_one_base_have_one_winner(memory):
    """Below the server: six threads put on the same base at once (PostgreSQL: several pooled
    connections, so the row lock decides), ten rounds."""
    artifacts.put(memory, None, path="docs/plan.md", content="0\n")
    def worker(k: int, round_: int, base: dict, barrier: threading.Barrier, outcomes: list) -> None:
        barrier.wait()
        try:
            artifacts.put(memory, f"w{k}", path="docs/plan.md", content=base["content"] + f"{round_}-{k}\n",
                          base_version=base["version"])
            outcomes.append(("won", k))
        except Conflict:
            outcomes.append(("lost", k))

    for round_ in range(10):
        base = artifacts.get(memory, None, path="docs/plan.md")
        barrier, outcomes = threading.Barrier(6), []
        threads = [threading.Thread(target=worker, args=(k, round_, base, barrier, outcomes)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(o for o, _ in outcomes) == ["lost"] * 5 + ["won"]
        after = artifacts.get(memory, None, path="docs/plan.md")
        winner = next(k for o, k in outcomes if o == "won")
        assert after["version"] == base["version"] + 1 and after["content"].endswith(f"{round_}-{winner}\n")


def test_row_level_security_covers_artifacts_and_their_history(memory, backend):
    if backend != "postgresql":
        pytest.skip("SQLite has no row-level security; the namespace conditions (tested above) isolate it")
    projects.switch(memory, None, "alpha")
    artifacts.put(memory, None, path="docs/plan.md", content="alpha 1")
    artifacts.put(memory, None, path="docs/plan.md", content="alpha 2", base_version=1)
    alpha_id = memory.client(None).project_id
    projects.switch(memory, None, "beta")
    beta_id = memory.client(None).project_id
    store = memory.store
    with store.bind_project(beta_id):
        assert store._q("SELECT count(*) FROM artifacts")[0][0] == 0
        assert store._q("SELECT count(*) FROM artifact_versions")[0][0] == 0
        assert store._exec("UPDATE artifacts SET content = 'pwned'").rowcount == 0
    with store.bind_project(alpha_id):
        assert store._q("SELECT count(*) FROM artifacts")[0][0] == 1
        assert store._q("SELECT count(*) FROM artifact_versions")[0][0] == 1
        assert store._q("SELECT content FROM artifacts")[0][0] == "alpha 2"
