"""`cuba-memorys setup [check|hook|print|claude|mcp|cursor]`: register this installation with an
MCP client, check it, print the entry to paste, or install Claude Code's session-start hook that
runs `cuba-memorys recall`.

Where the configuration goes:

- ``claude`` (Claude Code), scope ``user`` (default): ``~/.claude.json``, top-level ``mcpServers``
  — what ``claude mcp add --scope user`` writes; the server is available in every project.
  Scope ``project``: ``.mcp.json`` in the current directory (shared with the team through version
  control; Claude Code asks each user to approve it). ``check`` also looks at the local scope
  (``~/.claude.json`` → ``projects[<cwd>].mcpServers``, what a plain ``claude mcp add`` writes).
- ``generic``: any client's JSON file with an ``mcpServers`` object (Claude Desktop, Cursor,
  …), named with ``config``.
- The original's named targets (:data:`TARGETS`): ``claude`` ``~/.claude.json``, ``mcp``
  ``~/.mcp.json``, ``cursor`` ``~/.cursor/mcp.json``; as there, a plan unless ``apply``.

Writing changes one key, ``mcpServers[<name>]``: every other key and server stays as it was
(same JSON values, same order). Keys of an existing entry this command does not manage stay too,
and its ``env`` is only added to. The file is backed up next to itself before it changes,
replaced atomically (a symlink is followed, its mode kept), and not touched at all when the
entry is already what was asked (so running it twice changes nothing the second time).

``hook`` (Claude Code only) adds a ``SessionStart`` command hook to ``~/.claude/settings.json``
(scope ``user``) or ``.claude/settings.json`` (scope ``project``): Claude Code runs it when a
session starts and adds what it prints to the agent's context, so the agent begins with the
project's key memory (`recall --quiet` prints nothing for an empty memory). Same rules: other
hooks and keys stay, a backup first, idempotent; an older cuba-memorys recall hook is updated in
place rather than added twice.

Environment: only variables named explicitly go into the entry (a DATABASE_URL carries a
password): ``NAME`` copies the current value, ``NAME=VALUE`` sets one; names must be CUBA_* or
DATABASE_URL. A folder setting named but not set (CUBA_DATA_DIR on a fresh machine) is written
as the folder the server would use without it, and the answer says so (:data:`FOLDER_DEFAULTS`):
the client then uses this memory wherever its own environment would have put the default; any
other unset name is refused. ``check`` reports env names, never their values.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from cuba_memorys.config import default_data_dir, default_models_dir, default_undo_dir
from cuba_memorys.errors import ConfigError, InvalidInput

CLIENTS = ("claude", "generic")
# The original's named targets, files under the home folder: `setup claude|mcp|cursor` shows the
# plan, and writes it with --apply. ~/.mcp.json is Claude Code's format; Cursor's has no "type".
TARGETS = {"claude": (".claude.json",), "mcp": (".mcp.json",), "cursor": (".cursor", "mcp.json")}
TARGET_CLIENTS = {"claude": "claude", "mcp": "claude", "cursor": "generic"}
SCOPES = ("user", "project")
DEFAULT_NAME = "cuba-memorys"
ENV_NAME = re.compile(r"^((?:CUBA|MEMORY_INDUSTRY)_[A-Z0-9_]+|DATABASE_URL)$")  # config.py reads both namespaces
# `--env NAME` with NAME unset: the folder the server would use without it, absolute as it is now
FOLDER_DEFAULTS = {"CUBA_DATA_DIR": default_data_dir, "CUBA_MODELS_DIR": default_models_dir,
                   "CUBA_UNDO_DIR": default_undo_dir}


def executable() -> Path:
    """This installation's `cuba-memorys` program, as an absolute path."""
    argv0 = Path(sys.argv[0])
    if argv0.name in ("cuba-memorys", "memory-industry") and argv0.is_file():
        sibling = argv0.with_name("cuba-memorys")
        return (sibling if sibling.is_file() else argv0).absolute()
    beside = Path(sys.executable).with_name("cuba-memorys")
    if beside.is_file():
        return beside.absolute()
    found = shutil.which("cuba-memorys")
    if found:
        return Path(found).absolute()
    raise ConfigError("cannot find the cuba-memorys program of this installation.",
                      hint="Run setup through it (e.g. .venv/bin/cuba-memorys setup).")


def config_path(client: str, scope: str, config: str | None, home: Path, cwd: Path) -> Path:
    if client not in CLIENTS:
        raise InvalidInput("client", f"unknown client {client!r}", ", ".join(CLIENTS))
    if scope not in SCOPES:
        raise InvalidInput("scope", f"unknown scope {scope!r}", ", ".join(SCOPES))
    if config:
        return Path(config).expanduser().absolute()
    if client == "generic":
        raise InvalidInput("config", "is required with --client generic", "the path of the client's JSON file")
    return home / ".claude.json" if scope == "user" else cwd / ".mcp.json"


def env_values(specs: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not ENV_NAME.match(name):
            raise InvalidInput("env", f"{name!r} is not a cuba-memorys setting", "CUBA_* or DATABASE_URL (or the"
                               " original's MEMORY_INDUSTRY_*), as NAME (its current value) or NAME=VALUE")
        if not sep:
            value = environ.get(name) or _folder_default(name)
        values[name] = value
    return values


def env_defaults(specs: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The names of ``specs`` given bare and unset, with the default folder :func:`env_values`
    writes for each (what setup tells the user it did)."""
    bare = [spec for spec in specs if "=" not in spec and not environ.get(spec)]
    return {name: _folder_default(name) for name in bare if name in FOLDER_DEFAULTS}


def _folder_default(name: str) -> str:
    if name not in FOLDER_DEFAULTS:
        raise InvalidInput("env", f"{name} is not set in this environment", "set it, or pass NAME=VALUE")
    return str(FOLDER_DEFAULTS[name]().absolute())


def _load(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not readable JSON ({exc}); it was left untouched.",
                          hint="Fix or move it, then run setup again.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not an object; it was left untouched.")
    if not isinstance(data.get("mcpServers", {}), dict):
        raise ConfigError(f"{path}: mcpServers is not an object; it was left untouched.")
    return data


def _backup(path: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while backup.exists():
        backup, n = path.with_name(f"{path.name}.bak-{stamp}-{n}"), n + 1
    shutil.copy2(path, backup)
    return backup


def _write_atomically(path: Path, data: dict) -> None:
    target = path.resolve()  # a symlinked config (dotfiles) keeps its link
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o600  # env may hold a password
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def target_path(target: str, home: Path) -> tuple[Path, str]:
    """(file, client) of one of the original's named targets (`setup claude|mcp|cursor`)."""
    if target not in TARGETS:
        raise InvalidInput("target", f"unknown target {target!r}", ", ".join(TARGETS))
    return home.joinpath(*TARGETS[target]), TARGET_CLIENTS[target]


def entry_for(existing: dict, client: str, command: Path, env: dict[str, str]) -> dict:
    """``mcpServers[name]`` as setup writes it over ``existing`` (keys it does not manage kept)."""
    entry = {**existing, **({"type": "stdio"} if client == "claude" else {}), "command": str(command),
             "args": existing.get("args", []) if existing.get("command") == str(command) else []}
    merged_env = {**(existing.get("env") or {}), **env}
    if merged_env:
        entry["env"] = merged_env
    return entry


def block(name: str, client: str, command: Path, env: dict[str, str]) -> dict:
    """The ``{"mcpServers": {name: entry}}`` block `setup print` shows, to paste into any client."""
    return {"mcpServers": {name: entry_for({}, client, command, env)}}


def install(path: Path, client: str, name: str, command: Path, env: dict[str, str], *, apply: bool = True) -> dict:
    """Add or update ``mcpServers[name]`` in ``path``; the answer says what changed. With
    ``apply=False`` nothing is written: the answer is the plan (``entry``, ``would_change``)."""
    if not name or not name.strip():
        raise InvalidInput("name", "is empty", "a server name, e.g. cuba-memorys")
    data = _load(path)
    servers = data.get("mcpServers", {})
    existing = servers.get(name) if isinstance(servers.get(name), dict) else {}
    entry = entry_for(existing, client, command, env)
    result = {"action": "setup", "path": str(path), "server": name, "client": client, "command": str(command),
              "env": sorted(entry.get("env") or {}), "changed": False, "backup": None, "created": not path.exists(),
              "applied": apply}
    if not apply:
        return {**result, "entry": entry, "would_change": servers.get(name) != entry}
    if servers.get(name) == entry:
        return result
    if path.exists():
        result["backup"] = str(_backup(path.resolve()))
    data["mcpServers"] = {**servers, name: entry}
    _write_atomically(path, data)
    result["changed"] = True
    return result


def _executable(found: Path | str | None) -> Path | None:
    """The command's file when it exists and may be executed, else None."""
    if not found or not Path(found).is_file() or not os.access(found, os.X_OK):
        return None
    return Path(found)


def _entry_report(where: str, path: Path, entry: object, this: Path) -> dict:
    report: dict[str, Any] = {"where": where, "path": str(path), "problems": []}
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        report["problems"].append("the entry has no command")
        return report
    command = Path(entry["command"]).expanduser()
    found = _executable(command if command.is_absolute() else shutil.which(entry["command"]))
    report.update(command=entry["command"], args=entry.get("args", []), env=sorted(entry.get("env") or {}),
                  command_exists=found is not None,
                  this_installation=found is not None and found.resolve() == this.resolve())
    if found is None:
        report["problems"].append(f"{entry['command']} does not exist or is not executable")
    if not command.is_absolute():
        report["problems"].append("the command is not an absolute path (it depends on the client's PATH)")
    return report


def check(client: str, scope: str, config: str | None, name: str, home: Path, cwd: Path, this: Path) -> dict:
    """Where ``name`` is configured for ``client``, and whether each entry can start."""
    places: list[tuple[str, Path, tuple[str, ...]]]  # (where, file, keys down to its mcpServers)
    if config or client == "generic":
        places = [("file", config_path(client, scope, config, home, cwd), ("mcpServers",))]
    else:
        user = home / ".claude.json"
        places = [("user", user, ("mcpServers",)), ("local", user, ("projects", str(cwd), "mcpServers")),
                  ("project", cwd / ".mcp.json", ("mcpServers",))]
    entries, looked, problems = [], [], []
    for where, path, keys in places:
        looked.append({"where": where, "path": str(path), "exists": path.exists()})
        try:
            node: object = _load(path)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        for key in keys:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict) and name in node:
            entries.append(_entry_report(where, path, node[name], this))
    ok = bool(entries) and all(not e["problems"] for e in entries)
    if not entries:
        problems.append(f"no MCP server named {name!r} is configured"
                        f" (run `cuba-memorys setup --client {client}` to add it)")
    return {"action": "check", "client": client, "server": name, "ok": ok, "configured": bool(entries),
            "entries": entries, "looked_in": looked, "executable": str(this), "problems": problems}


# -- the session-start hook (Claude Code) -------------------------------------------------------
HOOK_EVENT = "SessionStart"


def hook_path(scope: str, config: str | None, home: Path, cwd: Path) -> Path:
    if scope not in SCOPES:
        raise InvalidInput("scope", f"unknown scope {scope!r}", ", ".join(SCOPES))
    if config:
        return Path(config).expanduser().absolute()
    return (home if scope == "user" else cwd) / ".claude" / "settings.json"


def hook_command(command: Path, env: dict[str, str]) -> str:
    """The shell command Claude Code runs: `[NAME=VALUE …] /abs/cuba-memorys recall --quiet`."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    return " ".join([*assignments, shlex.quote(str(command)), "recall", "--quiet"])


def _is_ours(hook: object) -> bool:
    return isinstance(hook, dict) and isinstance(hook.get("command"), str) and \
        re.search(r"cuba-memorys['\"]? recall\b", hook["command"]) is not None


def _session_groups(data: dict, path: Path) -> list:
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not isinstance(hooks.get(HOOK_EVENT, []), list):
        raise ConfigError(f"{path}: hooks.{HOOK_EVENT} is not a list of hook groups; it was left untouched.")
    return hooks.get(HOOK_EVENT, [])


def install_hook(path: Path, command: Path, env: dict[str, str]) -> dict:
    """Add (or update) the SessionStart hook that runs recall; the answer says what changed."""
    data = _load(path)
    groups = [dict(g) if isinstance(g, dict) else g for g in _session_groups(data, path)]
    wanted = {"type": "command", "command": hook_command(command, env)}
    result = {"action": "setup_hook", "path": str(path), "event": HOOK_EVENT, "command": wanted["command"],
              "env": sorted(env), "changed": False, "backup": None, "created": not path.exists()}
    ours = [(group, i) for group in groups if isinstance(group, dict) and isinstance(group.get("hooks"), list)
            for i, hook in enumerate(group["hooks"]) if _is_ours(hook)]
    if not ours:
        groups.append({"hooks": [wanted]})
        result["changed"] = True
    else:  # the first recall hook found is ours to keep current; any later one is left alone
        group, i = ours[0]
        merged = {**group["hooks"][i], **wanted}
        if merged != group["hooks"][i]:
            group["hooks"] = [*group["hooks"][:i], merged, *group["hooks"][i + 1:]]
            result["changed"] = True
    if not result["changed"]:
        return result
    if path.exists():
        result["backup"] = str(_backup(path.resolve()))
    data["hooks"] = {**data.get("hooks", {}), HOOK_EVENT: groups}
    _write_atomically(path, data)
    return result
