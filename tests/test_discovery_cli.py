"""Tool discovery (cuba_tools, cuba_call), CUBA_TOOL_PROFILE, tool annotations, cuba:// resources,
and the hook verbs `recall` and `setup [check|hook|print|claude|mcp|cursor]` — through the real binary, as
clients use them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from conftest import SERVER_BIN, StoreLocation
from cuba_memorys.config import Settings
from cuba_memorys.server import catalog
from cuba_memorys.services import incidents
from cuba_memorys.services.sessions import sessions
from cuba_memorys.services.workflow import procedures
from mcp_helpers import run_stdio

FAST = {"CUBA_EMBED_MODEL": "none"}  # nothing here needs vectors; the server starts faster
LEAN_CORE = {"cuba_faro", "cuba_expediente", "cuba_decreto", "cuba_jornada", "cuba_cronica", "cuba_ingesta",
             "cuba_alarma", "cuba_remedio", "cuba_receta", "cuba_pizarra",
             "cuba_whoami", "cuba_artefacto", "cuba_contexto"}  # the newest original's lean: 13
# The annotation audit: tools that change nothing stored, and tools that can delete or overwrite.
READ_ONLY = {"cuba_faro", "cuba_expediente", "search_hipocampo", "cuba_tools", "cuba_vigia", "cuba_reflexion",
             "cuba_hipotesis", "cuba_whoami", "cuba_contexto"}
DESTRUCTIVE = {"cuba_alma", "cuba_cronica", "cuba_puente", "cuba_proyecto", "cuba_receta", "cuba_pizarra",
               "cuba_remedio", "cuba_centinela", "cuba_call"}


async def proxy(agent, tool: str, args: object = None, fails: bool = False):
    """cuba_call (Agent.call's own first parameter is named `tool`)."""
    result = await agent.session.call_tool("cuba_call", {"tool": tool, **({} if args is None else {"args": args})})
    assert result.is_error == fails, result.content[0].text[:300]
    if fails:
        return result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def canonical(name: str) -> str:
    """The tool a name serves (memory_artifact is cuba_artefacto's alias: not always cuba_<rest>)."""
    row = catalog.tool(name)
    return row.name if row is not None else name


# -- tools/list, annotations, profiles ------------------------------------------------------
def test_every_tool_is_annotated_and_full_lists_everything(location):
    async def body(agent):
        tools = {t.name: t for t in (await agent.session.list_tools()).tools}
        catalogue = await agent.call("cuba_tools", detail="names")
        return tools, catalogue

    tools, catalogue = run_stdio(location, body, **FAST)
    assert {"cuba_tools", "cuba_call", "memory_tools", "memory_call", "cuba_alma", "memory_alma"} <= set(tools)
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is not None, f"{name} has no readOnlyHint"
        if not hints.read_only_hint:
            assert hints.destructive_hint is not None, f"{name} writes but says nothing of destructiveHint"
        assert hints.read_only_hint == (canonical(name) in READ_ONLY), name
        if canonical(name) in DESTRUCTIVE:
            assert hints.destructive_hint is True, name
        if name.startswith("memory_"):  # an alias carries its tool's annotations
            assert hints == tools[canonical(name)].annotations
    # cuba_tools' catalogue: every registered tool but the aliases and the meta tools
    assert set(catalogue["tools"]) == {n for n in tools if not n.startswith("memory_")} - {"cuba_tools", "cuba_call"}
    assert catalogue["count"] == catalogue["total_tools"] == len(catalogue["tools"]) and catalogue["profile"] == "full"


def test_lean_lists_the_core_and_still_reaches_every_tool(location):
    async def body(agent):
        listed = {t.name for t in (await agent.session.list_tools()).tools}
        catalogue = (await agent.call("cuba_tools", detail="names"))["tools"]
        # cuba_alma and cuba_proyecto are not advertised under lean: reached through cuba_call
        created = await proxy(agent, "cuba_alma", {"action": "create", "name": "billing"})
        via_alias = await proxy(agent, "memory_alma", {"action": "get", "name": "billing"})
        direct = await agent.call("cuba_alma", action="get", name="billing")  # still callable directly
        projects = await proxy(agent, "cuba_proyecto", {"action": "list"})
        return listed, catalogue, created, via_alias, direct, projects

    listed, catalogue, created, via_alias, direct, projects = run_stdio(location, body, CUBA_TOOL_PROFILE="lean",
                                                                        **FAST)
    registered = set(catalogue) | {"cuba_tools", "cuba_call"}
    assert {n for n in listed if n.startswith("cuba_")} == (LEAN_CORE | {"cuba_tools", "cuba_call"}) & registered
    assert {"cuba_faro", "cuba_jornada", "cuba_cronica", "cuba_tools", "cuba_call"} <= listed
    assert "cuba_alma" not in listed and "cuba_alma" in catalogue and "memory_alma" not in listed
    # each listed tool beside its alias (issue 32), the alias as a pointer to it
    assert {n for n in listed if n.startswith("memory_")} == {catalog.tool(n).alias_name for n in listed
                                                               if not n.startswith("memory_")}
    assert created["entity"]["name"] == "billing" and created["already_existed"] is False
    assert via_alias["entity"]["name"] == direct["entity"]["name"] == "billing"
    assert projects["action"] == "list"
    assert {n for n in catalog.advertised("lean") if n.startswith("cuba_")} == LEAN_CORE | {"cuba_tools", "cuba_call"}


def test_an_unknown_profile_serves_full_and_says_so(location, monkeypatch):
    """Issue 32: it refused to start; the original serves full."""
    monkeypatch.setenv("CUBA_TOOL_PROFILE", "tiny")
    settings = Settings.from_env()
    assert settings.tool_profile == "full" and settings.tool_profile_unknown == "tiny"

    async def body(agent):
        return {t.name for t in (await agent.session.list_tools()).tools}

    listed = run_stdio(location, body, CUBA_TOOL_PROFILE="tiny", **FAST)
    assert {"cuba_alma", "memory_alma", "cuba_sync", "cuba_tools"} <= listed  # full: every tool
    run = subprocess.run([str(SERVER_BIN)], env=location.env(CUBA_TOOL_PROFILE="tiny", CUBA_HANDSHAKE_TIMEOUT_SECS="1",
                                                              **FAST), input="", capture_output=True, text=True,
                         timeout=60)
    assert "warning: CUBA_TOOL_PROFILE='tiny' is not a tool profile" in run.stderr and "serving full" in run.stderr
    doctor = subprocess.run([str(SERVER_BIN), "doctor", "--json"], env=location.env(CUBA_TOOL_PROFILE="tiny", **FAST),
                            capture_output=True, text=True, timeout=120)
    report = json.loads(doctor.stdout)
    assert report["tool_profile"] == "full"
    assert any("CUBA_TOOL_PROFILE='tiny'" in w and "full" in w for w in report["warnings"]), report["warnings"]


# -- cuba_tools / cuba_call -----------------------------------------------------------------
def test_cuba_tools_details_filters_and_cuba_call_errors(location):
    async def body(agent):
        summary = await agent.call("cuba_tools", query="ERROR")
        full = await agent.call("cuba_tools", query="cuba_faro", detail="full")
        nothing = await agent.call("cuba_tools", query="no tool says this")
        bad_detail = await agent.error("cuba_tools", detail="everything")
        unknown = await proxy(agent, "cuba_nada", fails=True)
        itself = await proxy(agent, "cuba_call", {"tool": "cuba_faro"}, fails=True)
        proxied_fail = await proxy(agent, "cuba_alma", {"action": "get", "name": "ghost"}, fails=True)
        direct_fail = await agent.error("cuba_alma", action="get", name="ghost")
        proxied_bad = await proxy(agent, "cuba_alma", {"action": "explode", "name": "x"}, fails=True)
        not_object = await proxy(agent, "cuba_alma", ["get"], fails=True)
        return summary, full, nothing, bad_detail, unknown, itself, proxied_fail, direct_fail, proxied_bad, not_object

    (summary, full, nothing, bad_detail, unknown, itself, proxied_fail, direct_fail, proxied_bad,
     not_object) = run_stdio(location, body, **FAST)
    names = {t["name"] for t in summary["tools"]}
    assert {"cuba_alarma", "cuba_remedio", "cuba_expediente"} <= names and summary["detail"] == "summary"
    assert all(set(t) == {"name", "description", "read_only"} for t in summary["tools"])
    assert summary["count"] == len(summary["tools"]) < summary["total_tools"] and "cuba_call" in summary["hint"]
    [faro] = [t for t in full["tools"] if t["name"] == "cuba_faro"]  # others may mention it
    assert faro["read_only"] is True and faro["annotations"]["readOnlyHint"] is True
    assert "query" in faro["inputSchema"]["properties"] and "query" in faro["inputSchema"]["required"]
    assert nothing["count"] == 0 and nothing["tools"] == []
    assert "detail" in bad_detail
    assert "unknown tool 'cuba_nada'" in unknown and "cuba_alma" in unknown and "cuba_faro" in unknown
    assert "cuba_call cannot be invoked through cuba_call" in itself
    assert proxied_fail == direct_fail and "Entity 'ghost' not found" in proxied_fail  # the tool's own error
    assert "cuba_alma" in proxied_bad and "action" in proxied_bad
    assert "args" in not_object


# -- resources --------------------------------------------------------------------------------
def test_resources_read_in_the_callers_scope(location):
    async def read(agent, uri):
        result = await agent.session.read_resource(uri)
        [content] = result.contents
        return content.mime_type, content.text

    async def missing(agent, uri):
        with pytest.raises(MCPError) as caught:
            await agent.session.read_resource(uri)
        assert caught.value.error.code == -32002, caught.value.error  # MCP's "resource not found"
        assert caught.value.error.data == {"uri": uri}
        return str(caught.value)

    async def body(agent):
        templates = {t.uri_template: t.mime_type
                     for t in (await agent.session.list_resource_templates()).resource_templates}
        await agent.call("cuba_jornada", action="start", name="shop work", goals=["ship checkout"], project="shop")
        await agent.call("cuba_cronica", action="add", entity_name="checkout/v2",
                         content="Checkout calls the payments API")
        await agent.call("cuba_cronica", action="add", entity_name="checkout/v2",
                         content="Refunds go through the same API")
        await agent.call("cuba_alma", action="create", name="payments")
        await agent.call("cuba_puente", action="create", from_entity="checkout/v2", to_entity="payments",
                         relation_type="depends_on")
        snap = await agent.call("cuba_pre_compact", action="snapshot")
        listed = {r.uri: r for r in (await agent.session.list_resources()).resources}
        first = json.loads((await read(agent, "cuba://entity/checkout%2Fv2"))[1])
        second = json.loads((await read(agent, "cuba://entity/checkout%2Fv2"))[1])
        shop = await read(agent, "cuba://project/shop")
        snapshot = await read(agent, f"cuba://snapshot/{snap['snapshot_id']}")
        errors = [await missing(agent, "cuba://entity/ghost"), await missing(agent, "cuba://snapshot/nope"),
                  await missing(agent, "cuba://project/nowhere")]
        await agent.call("cuba_proyecto", action="switch", name="other")  # out of shop's scope now
        hidden = [await missing(agent, "cuba://entity/checkout%2Fv2"), await missing(agent, "cuba://project/shop"),
                  await missing(agent, f"cuba://snapshot/{snap['snapshot_id']}")]
        listed_elsewhere = {str(r.uri) for r in (await agent.session.list_resources()).resources}
        return templates, first, second, shop, snapshot, snap, errors, hidden, listed, listed_elsewhere

    (templates, first, second, shop, snapshot, snap, errors, hidden, listed,
     elsewhere) = run_stdio(location, body, **FAST)
    listed = {str(uri): r for uri, r in listed.items()}
    assert {"cuba://project/shop", "cuba://entity/checkout%2Fv2",
            f"cuba://snapshot/{snap['snapshot_id']}"} <= set(listed)
    assert listed["cuba://entity/checkout%2Fv2"].name == "checkout/v2"
    assert listed["cuba://entity/checkout%2Fv2"].mime_type == "application/json"
    assert not {u for u in elsewhere if "shop" in u or "checkout" in u or "snapshot" in u}  # another scope
    assert templates == {"cuba://entity/{name}": "application/json", "cuba://project/{name}": "application/json",
                         "cuba://snapshot/{id}": "text/markdown"}
    assert first["name"] == "checkout/v2" and first["entity_type"] == "concept"
    assert sorted(o["content"] for o in first["observations"]) == ["Checkout calls the payments API",
                                                                   "Refunds go through the same API"]
    assert first["relations"] == [{"entity": "payments", "type": "depends_on", "direction": "outgoing",
                                   "strength": first["relations"][0]["strength"]}]
    assert second["access_count"] == first["access_count"]  # reading a resource counts no access
    mime, text = shop
    counts = json.loads(text)
    assert mime == "application/json" and counts["name"] == "shop" and counts["entities"] == 2
    assert counts["observations"] == 2 and counts["relations"] == 1 and counts["sessions"] == 1
    assert snapshot == ("text/markdown", snap["summary_md"]) and snapshot[1].startswith("# Session: shop work")
    assert "Entity 'ghost' not found" in errors[0] and "Snapshot 'nope' not found" in errors[1]
    assert "Project 'nowhere' not found" in errors[2]
    assert "not found" in hidden[0] and "not found in your scope" in hidden[1] and "not found" in hidden[2]


# -- recall -----------------------------------------------------------------------------------
def cli(where: StoreLocation, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SERVER_BIN), *args], env=where.env(**FAST, **env), capture_output=True,
                          text=True, timeout=120)


def seed(mem) -> dict:
    """Two projects; the last session was shop's."""
    sessions.start(mem, "agent-y", name="other work", project="other")
    incidents.report(mem, "agent-y", error_type="OtherProjectError", error_message="only other sees this")
    sessions.end(mem, "agent-y", outcome="success", summary="other done")
    sessions.start(mem, "agent-x", name="fix auth", goals=["OAuth login"], project="shop")
    error = incidents.report(mem, "agent-x", error_type="ImportError", error_message="No module named 'jwt'")
    procedures.add(mem, "agent-x", name="run the tests", steps=[{"do": "run them", "run": "make test"}],
                   trigger="before every commit")
    procedures.outcome(mem, "agent-x", "run the tests", True)
    reminder = None
    if hasattr(mem.store, "add_trigger"):  # reminders (cuba_centinela) are in this build
        shop = mem.store.get_project("shop")["id"]
        reminder = mem.store.add_trigger("*", "on_session_start", "Rotate the staging key today", 1, None,
                                         "agent-x", shop)
    sessions.end(mem, "agent-x", outcome="partial", summary="login works; refresh tokens left")
    return {"error": error, "reminder": reminder}


def test_recall_prints_the_session_start_block(location, open_memory):
    mem = open_memory(embed_model="none")
    empty = cli(location, "recall", "--quiet")
    assert empty.returncode == 0 and empty.stdout == ""
    seeded = seed(mem)
    run = cli(location, "recall")
    assert run.returncode == 0, run.stderr
    text = run.stdout
    assert "Project: shop" in text and "fix auth (partial" in text and "refresh tokens left" in text
    assert "ImportError: No module named 'jwt'" in text and seeded["error"]["error_id"] in text
    assert "run the tests (reliability 0.21, 1/1): before every commit" in text
    assert "OtherProjectError" not in text and len(text) <= 2001
    data = json.loads(cli(location, "recall", "--json").stdout)
    assert data["project"] == {"id": data["project"]["id"], "name": "shop", "chosen_by": "last session"}
    assert data["last_session"]["outcome"] == "partial" and data["truncated"] is False
    assert [e["error_type"] for e in data["unresolved_errors"]] == ["ImportError"]
    if seeded["reminder"] is not None:
        assert "Rotate the staging key today" in text
        assert [r["message"] for r in data["reminders"]] == ["Rotate the staging key today"]
        fired = mem.store.get_trigger(seeded["reminder"]["id"], mem.scope(None))
        assert fired["fire_count"] == 0 and fired["active"] is True  # recall fires nothing
    other = json.loads(cli(location, "recall", "--json", "-p", "other").stdout)  # the original's -p: --project
    assert other["project"]["chosen_by"] == "named" and other["last_session"]["summary"] == "other done"
    assert [e["error_type"] for e in other["unresolved_errors"]] == ["OtherProjectError"] and other["recipes"] == []


def test_recall_is_bounded_and_refuses_bad_input(location, open_memory):
    mem = open_memory(embed_model="none")
    sessions.start(mem, "agent-x", name="long", project="big")
    for n in range(5):
        incidents.report(mem, "agent-x", error_type=f"Error{n}", error_message=f"failure number {n} " + "x" * 300)
    short = cli(location, "recall", "--max-chars", "400")
    assert short.returncode == 0 and len(short.stdout.rstrip("\n")) <= 400
    assert "Project: big" in short.stdout and short.stdout.rstrip().endswith("search it with cuba_faro)")
    assert "Error4" in short.stdout and "Error3" not in short.stdout  # newest first, whole lines only
    tokens = json.loads(cli(location, "recall", "--json", "--max-tokens", "40").stdout)
    assert tokens["truncated"] is True and tokens["text"].startswith("# Memory (cuba-memorys)\nProject: big")
    assert "Unresolved errors" not in tokens["text"]  # no title left without its items
    from cuba_memorys.search.tokens import count_tokens

    assert count_tokens(tokens["text"]) <= 40
    missing = cli(location, "recall", "--project", "atlantis")
    assert missing.returncode == 2 and "Project 'atlantis' not found" in missing.stderr
    tiny = cli(location, "recall", "--max-chars", "10")
    assert tiny.returncode == 2 and "--max-chars" in tiny.stderr


# -- setup ------------------------------------------------------------------------------------
def run_setup(home: Path, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    return subprocess.run([str(SERVER_BIN), "setup", *args], env={**base, "HOME": str(home), **env},
                          cwd=cwd or home, capture_output=True, text=True, timeout=60)


OTHERS = {"numStartups": 7, "mcpServers": {"github": {"type": "stdio", "command": "npx", "args": ["-y", "gh"],
                                                      "env": {"TOKEN": "t"}}},
          "projects": {"/w": {"allowedTools": ["Bash"]}}, "tipsHistory": {"x": 1.5, "y": [None, True]}}


def test_setup_writes_claude_code_config_without_clobbering(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    config = home / ".claude.json"
    original = json.dumps(OTHERS)
    config.write_text(original)
    first = run_setup(home, "--env", "CUBA_DATA_DIR", "--env", "CUBA_MODE=red", CUBA_DATA_DIR="/data/mem",
                      DATABASE_URL="postgresql://u:secret@db/x", CUBA_HTTP_TOKEN="secret-token")
    assert first.returncode == 0, first.stderr
    written = json.loads(config.read_text())
    entry = written["mcpServers"].pop("cuba-memorys")
    assert written == OTHERS  # every other key and server, as it was
    assert entry == {"type": "stdio", "command": str(SERVER_BIN), "args": [],
                     "env": {"CUBA_DATA_DIR": "/data/mem", "CUBA_MODE": "red"}}  # nothing copied silently
    assert "secret" not in config.read_text()
    [backup] = list(home.glob(".claude.json.bak-*"))
    assert backup.read_text() == original and "backup" in first.stdout
    before = config.read_bytes()
    again = run_setup(home, "--env", "CUBA_DATA_DIR", "--env", "CUBA_MODE=red", CUBA_DATA_DIR="/data/mem")
    assert again.returncode == 0 and "nothing written" in again.stdout
    assert config.read_bytes() == before and len(list(home.glob(".claude.json.bak-*"))) == 1  # idempotent

    check = run_setup(home, "check", "--json")
    report = json.loads(check.stdout)
    assert check.returncode == 0 and report["ok"] is True
    [found] = report["entries"]
    assert (found["where"] == "user" and found["this_installation"] is True
            and found["env"] == ["CUBA_DATA_DIR", "CUBA_MODE"])
    assert "/data/mem" not in check.stdout  # names, never values


def test_setup_check_reports_missing_and_broken_entries(tmp_path):
    home, project = tmp_path / "home", tmp_path / "repo"
    home.mkdir(), project.mkdir()
    nothing = run_setup(home, "check", cwd=project)
    assert nothing.returncode == 1 and "no MCP server named 'cuba-memorys'" in nothing.stdout
    made = run_setup(home, "--scope", "project", cwd=project)
    assert made.returncode == 0 and json.loads((project / ".mcp.json").read_text())["mcpServers"]["cuba-memorys"][
        "command"] == str(SERVER_BIN)
    assert not (home / ".claude.json").exists()
    ok = run_setup(home, "check", cwd=project)
    assert ok.returncode == 0 and "project:" in ok.stdout and "(this installation): ok" in ok.stdout
    broken = json.loads((project / ".mcp.json").read_text())
    broken["mcpServers"]["cuba-memorys"]["command"] = str(tmp_path / "gone" / "cuba-memorys")
    (project / ".mcp.json").write_text(json.dumps(broken))
    bad = run_setup(home, "check", cwd=project)
    assert bad.returncode == 1 and "does not exist or is not executable" in bad.stdout


def test_setup_generic_file_and_bad_input(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    generic = tmp_path / "client" / "mcp.json"
    made = run_setup(home, "--client", "generic", "--config", str(generic), "--name", "memory")
    assert made.returncode == 0, made.stderr
    assert json.loads(generic.read_text()) == {"mcpServers": {"memory": {"command": str(SERVER_BIN), "args": []}}}
    assert generic.stat().st_mode & 0o777 == 0o600  # a new file may come to hold a password
    assert run_setup(home, "check", "--client", "generic", "--config", str(generic), "--name", "memory").returncode == 0
    no_path = run_setup(home, "--client", "generic")
    assert no_path.returncode == 2 and "config" in no_path.stderr
    not_ours = run_setup(home, "--env", "HOME")
    assert not_ours.returncode == 2 and "CUBA_* or DATABASE_URL" in not_ours.stderr
    unset = run_setup(home, "--env", "CUBA_HTTP_TOKEN")  # no default to write (CUBA_DATA_DIR has: test_newcomer.py)
    assert unset.returncode == 2 and "CUBA_HTTP_TOKEN is not set" in unset.stderr
    corrupt = home / ".claude.json"
    corrupt.write_text("{not json")
    refused = run_setup(home)
    assert refused.returncode == 2 and "not readable JSON" in refused.stderr
    assert corrupt.read_text() == "{not json" and not list(home.glob(".claude.json.bak-*"))


def test_setup_hook_installs_claude_codes_session_start_recall(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    theirs = {"model": "opus",
              "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit"}]}],
                        "SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}]}}
    settings.write_text(json.dumps(theirs))
    made = run_setup(home, "hook", "--env", f"CUBA_DATA_DIR={data}")
    assert made.returncode == 0, made.stderr
    written = json.loads(settings.read_text())
    assert written["model"] == "opus" and written["hooks"]["PreToolUse"] == theirs["hooks"]["PreToolUse"]
    groups = written["hooks"]["SessionStart"]
    assert groups[0] == theirs["hooks"]["SessionStart"][0] and len(groups) == 2
    command = groups[1]["hooks"][0]["command"]
    assert command == f"CUBA_DATA_DIR={data} {SERVER_BIN} recall --quiet"
    assert list(home.joinpath(".claude").glob("settings.json.bak-*"))

    again = run_setup(home, "hook", "--env", f"CUBA_DATA_DIR={data}")
    assert again.returncode == 0 and "nothing written" in again.stdout
    assert json.loads(settings.read_text()) == written
    moved = run_setup(home, "hook", "--env", f"CUBA_DATA_DIR={tmp_path / 'elsewhere'}")
    assert moved.returncode == 0 and "updated" in moved.stdout
    groups = json.loads(settings.read_text())["hooks"]["SessionStart"]
    assert len(groups) == 2 and "elsewhere" in groups[1]["hooks"][0]["command"]  # updated, not added twice

    # what Claude Code runs: a shell command whose output (nothing, for an empty memory) starts the context
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("CUBA_")})
    assert ran.returncode == 0 and ran.stdout == ""


def test_setup_hook_project_scope_and_bad_input(tmp_path):
    home, project = tmp_path / "home", tmp_path / "repo"
    home.mkdir(), project.mkdir()
    made = run_setup(home, "hook", "--scope", "project", cwd=project)
    assert made.returncode == 0, made.stderr
    assert json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["SessionStart"][0]["hooks"][0][
        "command"] == f"{SERVER_BIN} recall --quiet"
    generic = run_setup(home, "hook", "--client", "generic", "--config", str(tmp_path / "x.json"))
    assert generic.returncode != 0 and "Claude Code" in generic.stderr
    broken = home / ".claude" / "settings.json"
    broken.parent.mkdir()
    broken.write_text('{"hooks": {"SessionStart": {"not": "a list"}}}')
    refused = run_setup(home, "hook")
    assert refused.returncode != 0 and "left untouched" in refused.stderr
    assert broken.read_text() == '{"hooks": {"SessionStart": {"not": "a list"}}}'


def test_setup_print_and_the_originals_named_targets(tmp_path):
    """The original's `setup print` (the block to paste; writes nothing) and `setup claude | mcp |
    cursor` (a plan, written with --apply into ~/.claude.json, ~/.mcp.json, ~/.cursor/mcp.json)."""
    home = tmp_path / "home"
    home.mkdir()
    printed = run_setup(home, "print", "--env", "CUBA_MODE=red")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == {"mcpServers": {"cuba-memorys": {
        "type": "stdio", "command": str(SERVER_BIN), "args": [], "env": {"CUBA_MODE": "red"}}}}
    assert list(home.iterdir()) == []  # nothing written

    plan = run_setup(home, "cursor")
    assert plan.returncode == 0 and "nothing was written" in plan.stdout and "--apply" in plan.stdout
    assert str(home / ".cursor" / "mcp.json") in plan.stdout and not (home / ".cursor").exists()
    for target, path, entry in (
            ("cursor", home / ".cursor" / "mcp.json", {"command": str(SERVER_BIN), "args": []}),
            ("mcp", home / ".mcp.json", {"type": "stdio", "command": str(SERVER_BIN), "args": []}),
            ("claude", home / ".claude.json", {"type": "stdio", "command": str(SERVER_BIN), "args": []})):
        made = run_setup(home, target, "--apply")
        assert made.returncode == 0, made.stderr
        assert json.loads(path.read_text()) == {"mcpServers": {"cuba-memorys": entry}}, target
        again = run_setup(home, target)
        assert again.returncode == 0 and "already configured" in again.stdout  # the plan sees it done
    mixed = run_setup(home, "claude", "--config", str(tmp_path / "x.json"))
    assert mixed.returncode == 2 and "--config does not go with `setup claude`" in mixed.stderr
    assert run_setup(home, "hook", "--apply").returncode == 0  # accepted where setup writes anyway
    assert (home / ".claude" / "settings.json").is_file()
