"""Undo files: the way back from anything that deletes or rewrites memory.

An action that changes rows calls :func:`save` first, inside its transaction: the whole rows
it is about to change or delete (every column, embeddings included) and the keys of the rows
it will create go into a JSON file under CUBA_UNDO_DIR, written atomically with mode 0600 (it
holds the memory's text). :func:`apply` puts those rows back exactly and removes the created
ones, in one transaction, audited as ``memory.undo``; it first saves the rows it is about to
overwrite into a new undo file, so an undo can itself be undone.

An action that only moves rows from one project to another (cuba_proyecto backfill) records
their keys instead of whole rows (``moved``): applying the file moves the ones still where the
action put them back where they were.

``delete_observation`` is `cuba-memorys delete`: a plan by default, with ``apply`` an undo
file first, then the delete and its audit event in one transaction.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cuba_memorys.errors import CubaError, InvalidInput, NotFound
from cuba_memorys.models import MAX_NAME_CHARS, Scope, iso, utc_now
from cuba_memorys.services import audit, validate
from cuba_memorys.services.memory import Memory

FORMAT, VERSION = "cuba-memorys-undo", 1
Part = tuple[str, str, Sequence[Any]]  # (table, key column, key values)
# (table, key column, key values, project before, project after): rows an action moved
Move = tuple[str, str, Sequence[Any], str | None, str | None]
# Tables in the order rows are restored (parents first), with their primary key; the store
# refuses any other (storage/sql/undo.py keeps the same list).
PRIMARY_KEYS: dict[str, str | None] = {
    "projects": "id", "entities": "id", "observations": "id", "episodes": "id", "errors": "id", "relations": "id",
    "facts": "fact_id", "fact_supersedes": None, "entity_aliases": "alias_id", "procedures": "id",
    "observation_anchors": "id",
}
KEYLESS_KEY = {"fact_supersedes": "old_fact_id"}  # how a keyless table's rows are found again
PREVIEW_CHARS = 120


def save(mem: Memory, action: str, parts: Sequence[Part], created: Sequence[Part] = (), *,
         name: str | None = None, moved: Sequence[Move] = ()) -> Path:
    """Snapshot ``parts`` (the rows the action will change or delete) and record ``created``
    (the rows it will add, which undo removes) and ``moved`` (rows it moved between projects,
    which undo moves back) in a new undo file; returns its path. ``name`` is the file's stem
    (default ``<action>-<UTC time>-<short id>``)."""
    return write(mem, action, snapshot(mem, parts), created, name=name, moved=moved)


def snapshot(mem: Memory, parts: Sequence[Part]) -> list[dict[str, Any]]:
    """The rows ``parts`` name as they are now (for :func:`write`, when an action learns what
    else to record only once it has changed them)."""
    for table, _, _ in parts:
        _known(table)
    snapshots = []
    for table, key, values in sorted(parts, key=lambda p: _order(p[0])):
        rows = mem.store.snapshot_rows(table, key, list(values))
        snapshots.append({"table": table, "key": key, "values": list(values), "rows": _unique(table, rows)})
    return snapshots


def write(mem: Memory, action: str, snapshots: list[dict[str, Any]], created: Sequence[Part] = (), *,
          name: str | None = None, moved: Sequence[Move] = ()) -> Path:
    """A new undo file of ``snapshots`` (from :func:`snapshot`), ``created`` and ``moved``."""
    for table, _, _ in created:
        _known(table)
    document = {
        "format": FORMAT, "version": VERSION, "action": action, "created_at": iso(utc_now()),
        "store": {"backend": mem.store.backend, "location": mem.store.location},
        "snapshots": snapshots,
        "created": [{"table": t, "key": k, "values": list(v)} for t, k, v in created],
        "moved": [{"table": t, "key": k, "values": list(v), "from": a, "to": b} for t, k, v, a, b in moved if v],
    }
    stem = name or f"{action}-{utc_now().strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    return _write(mem.settings.undo_dir, stem, document)


def apply(mem: Memory, path: Path | str, client: str | None = None) -> dict:
    """Restore what an undo file holds and remove the rows its action created, in one
    transaction, after saving the rows this overwrites (the answer's ``undo_file``)."""
    path = Path(path)
    document = read(path)
    snapshots, created, moves = document["snapshots"], document["created"], document.get("moved", [])
    with mem.store.transaction():
        back = save(mem, "undo", _overwritten(snapshots, created), _inserted(mem, snapshots),
                    moved=[(m["table"], m["key"], m["values"], m["to"], m["from"]) for m in moves])
        try:
            moved_back: dict[str, int] = {}
            for move in moves:  # first: the snapshots below then hold the last word on their rows
                n = mem.store.move_rows_project(move["table"], move["key"], move["values"], move["to"], move["from"])
                moved_back[move["table"]] = moved_back.get(move["table"], 0) + n
            removed: dict[str, int] = {}
            for entry in sorted(created, key=lambda e: _order(e["table"]), reverse=True):  # children first
                n = mem.store.remove_rows(entry["table"], entry["key"], entry["values"])
                removed[entry["table"]] = removed.get(entry["table"], 0) + n
            restored: dict[str, int] = {}
            for snap in snapshots:  # saved parents first
                n = mem.store.restore_rows(snap["table"], snap["rows"])
                restored[snap["table"]] = restored.get(snap["table"], 0) + n
            audit_id = audit.record(mem, client, "memory.undo", {
                "file": path.name, "action": document["action"], "restored": restored, "removed": removed,
                **({"moved_back": moved_back} if moves else {}), "undo_file": back.name})
        except BaseException:
            back.unlink(missing_ok=True)  # nothing was changed, so there is nothing to come back from
            raise
    return {"action": "undo", "file": str(path), "undone": document["action"], "restored": restored,
            "removed": removed, **({"moved_back": moved_back} if moves else {}), "undo_file": str(back),
            "audit_id": audit_id}


def read(path: Path) -> dict[str, Any]:
    """The undo file's content, after checking it is one of ours (nothing is changed otherwise)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFound(f"undo file {path} does not exist.",
                       hint="Undo files are written to CUBA_UNDO_DIR; `cuba-memorys delete --apply` prints the path.")\
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput("FILE", f"cannot read {path}: {exc}") from None
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidInput("FILE", f"{path} is not a cuba-memorys undo file (no \"format\": \"{FORMAT}\")",
                           "a file written by delete --apply, dedupe --apply or cuba_zafra")
    if document.get("version") != VERSION:
        raise InvalidInput("FILE", f"{path} is an undo file of version {document.get('version')!r}, which this"
                                   f" build cannot read", f"version {VERSION}")
    _check_shape(path, document)
    return document


def observation_history(mem: Memory, ids: Sequence[str]) -> tuple[list[Part], list[Part]]:
    """What an undo file must hold to put observations back — the rows, their facts (which go
    with a deleted row, ON DELETE CASCADE) and the links between those facts — and the links that
    retiring them would add (their current facts become old), which undo removes. Facts are read
    once for both."""
    ids = list(ids)
    facts = [f for obs_id in ids for f in mem.store.facts_of(obs_id)]
    fact_ids = [f["fact_id"] for f in facts]
    current = [f["fact_id"] for f in facts if f["is_current"]]
    parts: list[Part] = [("observations", "id", ids), ("facts", "observation_id", ids),
                         ("observation_anchors", "observation_id", ids),  # they go with it (cascade)
                         ("fact_supersedes", "old_fact_id", fact_ids), ("fact_supersedes", "new_fact_id", fact_ids)]
    return parts, ([("fact_supersedes", "old_fact_id", current)] if current else [])


# -- cuba-memorys delete ---------------------------------------------------------------------
def delete_observation(mem: Memory, client: str | None, *, observation_id: object, apply: bool = False) -> dict:
    """Plan (default) or do the deletion of one observation; with ``apply`` an undo file is
    written first and the delete and its audit event commit together. The CLI acts for the
    local operator, so the id is looked up in every project."""
    obs_id = validate.text("observation_id", observation_id, high=MAX_NAME_CHARS)
    obs = mem.store.get_observation(obs_id, Scope())
    if obs is None:
        raise NotFound(f"No observation has id '{obs_id}'.", hint="Search for it with `cuba-memorys search`.")
    plan = {"id": obs.id, "entity": obs.entity_name, "type": obs.observation_type,
            "content": obs.content[:PREVIEW_CHARS] + ("…" if len(obs.content) > PREVIEW_CHARS else ""),
            "created_at": obs.created_at}
    if not apply:
        return {"action": "delete", "dry_run": True, "would_delete": plan,
                "hint": "Run again with --apply to delete it; an undo file is written first."}
    with mem.store.transaction():
        path = save(mem, "delete", observation_history(mem, [obs.id])[0], name=f"obs-{obs.id}")
        try:
            mem.store.delete_observation(obs.id)
            audit_id = audit.record(mem, client, "memory.delete", {
                "observation_id": obs.id, "entity_id": obs.entity_id, "undo_file": path.name})
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    return {"action": "delete", "dry_run": False, "deleted": plan, "undo_file": str(path), "audit_id": audit_id}


# -- helpers ---------------------------------------------------------------------------------
def _known(table: str) -> None:
    if table not in PRIMARY_KEYS:
        raise CubaError(f"undo: '{table}' is not a table undo files hold ({', '.join(PRIMARY_KEYS)})")


def _order(table: str) -> int:
    return list(PRIMARY_KEYS).index(table)


def _unique(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows found by two parts (an edge both of whose ends were asked for) once."""
    pk = PRIMARY_KEYS[table]
    seen, kept = set(), []
    for row in rows:
        mark = row[pk] if pk else json.dumps(row, sort_keys=True, default=str)
        if mark not in seen:
            seen.add(mark)
            kept.append(row)
    return kept


def _overwritten(snapshots: list[dict], created: list[dict]) -> list[Part]:
    """What applying a file changes, as parts: its snapshot rows by their own key (wherever a
    change since moved them, e.g. observations merged onto another entity) and its created rows."""
    parts: list[Part] = []
    for snap in snapshots:
        table = snap["table"]
        key = PRIMARY_KEYS[table] or KEYLESS_KEY[table]
        values = sorted({row[key] for row in snap["rows"] if row.get(key) is not None})
        if values:
            parts.append((table, key, values))
    parts.extend((e["table"], e["key"], e["values"]) for e in created)
    return parts


def _inserted(mem: Memory, snapshots: list[dict]) -> list[Part]:
    """Rows of the file that are absent now: applying inserts them, so undoing that removes them."""
    found: list[Part] = []
    for snap in snapshots:
        table, pk = snap["table"], PRIMARY_KEYS[snap["table"]]
        if pk is None:
            continue
        wanted = [row[pk] for row in snap["rows"]]
        present = {row[pk] for row in mem.store.snapshot_rows(table, pk, wanted)}
        missing = [v for v in wanted if v not in present]
        if missing:
            found.append((table, pk, missing))
    return found


def _check_shape(path: Path, document: dict[str, Any]) -> None:
    def bad(problem: str) -> InvalidInput:
        return InvalidInput("FILE", f"{path} is damaged: {problem}")

    snapshots, created = document.get("snapshots"), document.get("created")
    if not isinstance(snapshots, list) or not isinstance(created, list):
        raise bad("it lacks its snapshots or created lists")
    for entry in (*snapshots, *created):
        if not isinstance(entry, dict) or entry.get("table") not in PRIMARY_KEYS:
            raise bad(f"an entry names no known table: {str(entry)[:80]}")
        if not isinstance(entry.get("key"), str) or not isinstance(entry.get("values"), list):
            raise bad(f"an entry of {entry['table']} lacks its key or values")
    for snap in snapshots:
        rows, pk = snap.get("rows"), PRIMARY_KEYS[snap["table"]] or KEYLESS_KEY[snap["table"]]
        if not isinstance(rows, list) or not all(isinstance(r, dict) and pk in r for r in rows):
            raise bad(f"a row of {snap['table']} is not an object with its {pk}")
    moves = document.get("moved", [])  # absent from files written before backfill existed
    if not isinstance(moves, list) or not all(_is_move(m) for m in moves):
        raise bad("its moved list is not of {table, key, values, from, to} entries")
    if not isinstance(document.get("action"), str):
        raise bad("it names no action")


def _is_move(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("table"), str) and isinstance(entry.get("key"), str)
            and isinstance(entry.get("values"), list)
            and all(entry.get(end) is None or isinstance(entry.get(end), str) for end in ("from", "to")))


def _write(folder: Path, stem: str, document: dict[str, Any]) -> Path:
    """Write atomically (a temporary file renamed into place), readable by the user only; a
    name in use gets a time suffix rather than replacing the older file."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{stem}.json"
    if path.exists():
        path = folder / f"{stem}-{utc_now().strftime('%Y%m%dT%H%M%S%fZ')}.json"
    fd, temporary = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(document, out, ensure_ascii=False, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
