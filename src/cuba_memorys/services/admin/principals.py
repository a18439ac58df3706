"""`cuba-memorys principal …`: the principals a shared daemon knows, their grants, their tokens.

Grants are rows of the store (``grants``); tokens are not: the token file (``CUBA_TOKENS_FILE``)
holds, per principal, the SHA-256 of its bearer token, never the token itself, which is printed
once when it is made. ``serve`` reads the file (again whenever it changes) and maps each request's
bearer token to its principal (``TokenRegistry``). The file is written atomically, mode 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from cuba_memorys import locks
from cuba_memorys.errors import ConfigError, InvalidInput, NotFound
from cuba_memorys.services import access, validate
from cuba_memorys.services.memory import Memory

TOKEN_BYTES = 32  # 43 url-safe characters: above the 32 a network bind needs


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _tokens_path(path: Path | None) -> Path:
    if path is None:
        raise ConfigError("no token file: principals need one.",
                          hint="Set CUBA_TOKENS_FILE to a path (e.g. ~/.config/cuba-memorys/tokens.json); it is"
                               " created on the first `cuba-memorys principal add`.")
    return path


def read_tokens(path: Path) -> dict[str, str]:
    """principal -> token hash, from the token file ({} when it does not exist yet)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the token file {path} cannot be read: {exc}") from exc
    entries = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"the token file {path} is not {{\"tokens\": [{{\"principal\", \"sha256\"}}]}}")
    return {str(e["principal"]): str(e["sha256"]) for e in entries if isinstance(e, dict)}


def write_tokens(path: Path, tokens: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"tokens": [{"principal": p, "sha256": h} for p, h in sorted(tokens.items())]}, indent=2)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(body + "\n")
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _name(value: object) -> str:
    name = validate.name("name", value, high=100).strip()
    if not all(ch.isalnum() or ch in "-_.@" for ch in name):
        raise InvalidInput("name", f"{name!r} has characters other than letters, digits and - _ . @")
    return name


def _grant(mem: Memory, principal: str, text: str) -> dict[str, str]:
    project, role = access.parse_grant(text)
    project_id = None if project == access.EVERY_PROJECT else mem.store.get_or_create_project(project)["id"]
    mem.store.set_grant(principal, project_id, role)
    return {"project": project, "role": role}


def add(mem: Memory, tokens_file: Path | None, name: object, grants: list[str]) -> dict[str, Any]:
    """A new principal with its grants and a fresh token (shown once, stored only as a hash)."""
    path, name = _tokens_path(tokens_file), _name(name)
    tokens = read_tokens(path)
    if name in tokens or name in mem.store.list_principals():
        raise InvalidInput("name", f"a principal named {name!r} exists", "a new name (or `principal token` to"
                                                                           " give it a new token)")
    with mem.store.transaction():
        mem.store.add_principal(name)
        granted = [_grant(mem, name, g) for g in grants]
    token = secrets.token_urlsafe(TOKEN_BYTES)
    write_tokens(path, {**tokens, name: token_hash(token)})
    return {"principal": name, "token": token, "grants": granted, "tokens_file": str(path),
            "note": "The token is shown only now; the file keeps its SHA-256."}


def new_token(mem: Memory, tokens_file: Path | None, name: object) -> dict[str, Any]:
    path, name = _tokens_path(tokens_file), _name(name)
    _existing(mem, name)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    write_tokens(path, {**read_tokens(path), name: token_hash(token)})
    return {"principal": name, "token": token, "tokens_file": str(path),
            "note": "The previous token no longer works; this one is shown only now."}


def grant(mem: Memory, name: object, grant_text: str) -> dict[str, Any]:
    name = _existing(mem, _name(name))
    return {"principal": name, "granted": _grant(mem, name, grant_text)}


def revoke(mem: Memory, name: object, project: object) -> dict[str, Any]:
    name = _existing(mem, _name(name))
    project = validate.text("project", project).strip()
    found = mem.store.get_project(project) if project != access.EVERY_PROJECT else None
    if project != access.EVERY_PROJECT and found is None:
        raise NotFound(f"Project '{project}' not found.")
    revoked = mem.store.revoke_grant(name, found["id"] if found else None)
    return {"principal": name, "project": project, "revoked": revoked}


def remove(mem: Memory, tokens_file: Path | None, name: object) -> dict[str, Any]:
    """The principal, its grants and its token are gone (its writes stay: they are the project's)."""
    path, name = _tokens_path(tokens_file), _existing(mem, _name(name))
    mem.store.remove_principal(name)
    tokens = read_tokens(path)
    tokens.pop(name, None)
    write_tokens(path, tokens)
    return {"principal": name, "removed": True}


def listing(mem: Memory, tokens_file: Path | None) -> dict[str, Any]:
    tokens = read_tokens(tokens_file) if tokens_file else {}
    principals = [{"principal": name, "has_token": name in tokens,
                   "grants": [{"project": g["project"] or access.EVERY_PROJECT, "role": g["role"]}
                              for g in mem.store.grants_of(name)]}
                  for name in mem.store.list_principals()]
    return {"principals": principals, "count": len(principals), "tokens_file": str(tokens_file or "")}


def _existing(mem: Memory, name: str) -> str:
    if name not in mem.store.list_principals():
        raise NotFound(f"No principal named {name!r}.", hint="cuba-memorys principal list shows them.")
    return name


class TokenRegistry:
    """The token file as ``serve`` reads it: token hash -> principal, re-read when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = locks.lock("token file", "cache")
        self._seen: tuple[float, int] | None = None
        self._by_hash: dict[str, str] = {}

    def principal(self, token: str) -> str | None:
        if not token:
            return None
        self._refresh()
        found = self._by_hash.get(token_hash(token))
        return found

    def count(self) -> int:
        self._refresh()
        return len(self._by_hash)

    def _refresh(self) -> None:
        try:
            stat = self.path.stat()
            seen = (stat.st_mtime, stat.st_size)
        except FileNotFoundError:
            seen = (0.0, -1)
        with self._lock:
            if seen != self._seen:
                tokens = read_tokens(self.path) if seen[1] >= 0 else {}
                self._by_hash = {digest: name for name, digest in tokens.items()}
                self._seen = seen
