"""CLI verbs for wiring the memory into an agent: `recall` (for a session-start hook) and
`setup [check|hook|print|claude|mcp|cursor]` (the MCP client's configuration)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import click

from cuba_memorys.cli.app import command, print_json, usage_error
from cuba_memorys.code import repo
from cuba_memorys.config import Settings
from cuba_memorys.services.admin import setup as setup_svc
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sessions import recall as recall_svc

NO_REPOSITORY = ("(--diff: no git repository here, so nothing came from the change at hand; run it inside one,"
                 " or set CUBA_CODE_ROOT)")


@command
@click.option("--project", "-p", default=None, help="Project to recall (default: the active one, else the project of"
                                               " the most recent session).")
@click.option("--max-chars", default=recall_svc.DEFAULT_MAX_CHARS, show_default=True,
              type=click.IntRange(recall_svc.MIN_CHARS), help="Size bound of the printed block.")
@click.option("--max-tokens", default=None, type=click.IntRange(1),
              help="Also bound it in tokens (cl100k_base, counted exactly).")
@click.option("--json", "as_json", is_flag=True, help="Print the data as JSON (with the text block as `text`).")
@click.option("--quiet", is_flag=True, help="Print nothing when there is nothing to recall.")
@click.option("--diff", "from_diff", is_flag=True,
              help="Also what the memory knows about the code being changed: memories anchored to the files"
                   " and lines of `git diff HEAD` (staged and not), errors of the tests it touches.")
def recall(project: str | None, max_chars: int, max_tokens: int | None, as_json: bool, quiet: bool,
           from_diff: bool) -> None:
    """Print what an agent should know at the start of a session: the active project, how the
    last session ended, unresolved errors, pending reminders and the most reliable recipes.

    For a session-start hook (Claude Code: a SessionStart hook running `cuba-memorys recall`).
    Reads only: counts no access and fires no reminder; no embedding model is loaded.
    """
    # Nothing here embeds: skip loading the model (a hook should answer fast).
    memory = Memory.open(replace(Settings.from_env(), embed_model="none"), check_model=False)
    try:
        diff, note = None, None
        if from_diff:
            root = code_anchors.code_root(memory)
            if root is None:  # a session-start hook outside a repository: the plain recall, not a failure
                note = NO_REPOSITORY
            else:
                diff = repo.working_diff(root)
        result = recall_svc.recall(memory, None, project, max_chars, max_tokens, diff)
    finally:
        memory.close()
    if quiet and recall_svc.is_empty(result):
        return
    if as_json:
        print_json({**result, "note": note} if note else result)
    else:
        click.echo(result["text"])
        if note:
            click.echo(note)


MODES = ("check", "hook", "print", *setup_svc.TARGETS)


@command
@click.argument("mode", required=False, type=click.Choice(MODES))
@click.option("--client", type=click.Choice(setup_svc.CLIENTS), default="claude", show_default=True,
              help="claude: Claude Code's configuration; generic: any client's JSON file with mcpServers (--config).")
@click.option("--scope", type=click.Choice(setup_svc.SCOPES), default="user", show_default=True,
              help="Claude Code: user = ~/.claude.json (every project); project = ./.mcp.json (shared)."
                   " For `hook`: ~/.claude/settings.json or ./.claude/settings.json.")
@click.option("--config", "config", default=None, help="The JSON file to write or check (overrides --scope).")
@click.option("--name", default=setup_svc.DEFAULT_NAME, show_default=True, help="Server name in mcpServers.")
@click.option("--env", "env", multiple=True, metavar="NAME[=VALUE]",
              help="Put this CUBA_* or DATABASE_URL variable in the entry (NAME: its current value). Repeatable;"
                   " nothing else from your environment is copied.")
@click.option("--apply", "do_it", is_flag=True, help="claude, mcp, cursor: write the plan they show (without it"
                                                     " nothing is written). The other modes write (or read) as"
                                                     " they always do; accepted there for the original's scripts.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
@click.pass_context
def setup(ctx: click.Context, mode: str | None, client: str, scope: str, config: str | None, name: str,
          env: tuple[str, ...], do_it: bool, as_json: bool) -> None:
    """Register this installation's cuba-memorys with an MCP client, `check` the registration, or
    install Claude Code's session-start `hook` (runs `cuba-memorys recall --quiet`; what it prints
    starts the agent's context).

    Writes one entry, mcpServers[NAME] = {command: <absolute path of this cuba-memorys>, args, env},
    keeping every other key and server of the file; backs the file up first; running it again
    with the same options changes nothing. `check` reports where the server is configured and
    whether its command exists (exit status 1 when it is missing or broken).

    The original's targets: `print` prints the {"mcpServers": …} block to paste anywhere (writes
    nothing); `claude` (~/.claude.json), `mcp` (~/.mcp.json) and `cursor` (~/.cursor/mcp.json)
    show what they would write, and write it with --apply.
    """
    home, cwd = Path.home(), Path.cwd()
    this = setup_svc.executable()
    if mode in setup_svc.TARGETS or mode == "print":
        _only_defaults(ctx, mode, ("client", "scope", "config"))
    if mode == "check" and env:
        usage_error("--env is for writing the entry; `setup check` reads only")
    if mode == "hook" and client != "claude":
        usage_error("session-start hooks are a Claude Code feature: use --client claude (the default)")
    values = setup_svc.env_values(list(env), os.environ) if mode != "check" else {}
    if mode == "print":
        print_json(setup_svc.block(name, "claude", this, values))
        return
    result = _run_setup(mode, client, scope, config, name, values, do_it, home, cwd, this)
    if mode != "check":  # the folders written for names not set here (setup_svc.FOLDER_DEFAULTS)
        result["env_defaults"] = setup_svc.env_defaults(list(env), os.environ)
        for var, value in result["env_defaults"].items():
            click.echo(f"{var} is not set here: the entry gets the folder the server would use without it, {value}",
                       err=as_json)
    if as_json:
        print_json(result)
    else:
        {"check": _print_check, "hook": _print_hook}.get(mode or "", _print_setup)(result)
    if mode == "check" and not result["ok"]:
        raise SystemExit(1)


def _run_setup(mode: str | None, client: str, scope: str, config: str | None, name: str, values: dict[str, str],
               do_it: bool, home: Path, cwd: Path, this: Path) -> dict:
    """The service call of each mode but print."""
    if mode == "check":
        return setup_svc.check(client, scope, config, name, home, cwd, this)
    if mode == "hook":
        return setup_svc.install_hook(setup_svc.hook_path(scope, config, home, cwd), this, values)
    if mode in setup_svc.TARGETS:
        path, target_client = setup_svc.target_path(mode, home)
        return setup_svc.install(path, target_client, name, this, values, apply=do_it)
    path = setup_svc.config_path(client, scope, config, home, cwd)
    return setup_svc.install(path, client, name, this, values)


def _only_defaults(ctx: click.Context, mode: str, names: tuple[str, ...]) -> None:
    """A named target decides the file and the client: --client, --scope, --config contradict it."""
    for param in names:
        if ctx.get_parameter_source(param) is not click.core.ParameterSource.DEFAULT:
            usage_error(f"--{param} does not go with `setup {mode}` (it names its own file); use plain"
                        f" `setup --{param} …` instead")


def _print_setup(r: dict) -> None:
    if not r["applied"]:
        _print_plan(r)
        return
    if not r["changed"]:
        click.echo(f"{r['path']}: {r['server']} already configured as asked; nothing written.")
        return
    verb = "created" if r["created"] else "updated"
    click.echo(f"{r['path']}: {verb}, mcpServers.{r['server']} -> {r['command']}")
    if r["env"]:
        click.echo(f"env: {', '.join(r['env'])}")
    if r["backup"]:
        click.echo(f"backup of the previous file: {r['backup']}")
    if r["client"] == "claude":
        click.echo("Restart Claude Code (or run /mcp) to connect it.")


def _print_plan(r: dict) -> None:
    if not r["would_change"]:
        click.echo(f"{r['path']}: {r['server']} is already configured as this would write it; nothing to do.")
        return
    click.echo(f"Would write into {r['path']}{' (a new file)' if r['created'] else ''}:")
    click.echo(json.dumps({"mcpServers": {r["server"]: r["entry"]}}, indent=2, ensure_ascii=False))
    click.echo("This was the plan: nothing was written. Pass --apply to write it (the file is backed up first).")


def _print_hook(r: dict) -> None:
    if not r["changed"]:
        click.echo(f"{r['path']}: the {r['event']} hook is already there; nothing written.")
        return
    click.echo(f"{r['path']}: {'created' if r['created'] else 'updated'}, {r['event']} hook -> {r['command']}")
    if r["backup"]:
        click.echo(f"backup of the previous file: {r['backup']}")
    click.echo("New Claude Code sessions start with this memory's recall block in context.")


def _print_check(r: dict) -> None:
    for entry in r["entries"]:
        state = "ok" if not entry["problems"] else "; ".join(entry["problems"])
        mine = " (this installation)" if entry.get("this_installation") else ""
        click.echo(f"{entry['where']}: {entry['path']}: {r['server']} -> {entry.get('command')}{mine}: {state}")
        if entry.get("env"):
            click.echo(f"  env: {', '.join(entry['env'])}")
    for problem in r["problems"]:
        click.echo(f"problem: {problem}")
    click.echo("OK" if r["ok"] else "Not ready (see above).")
