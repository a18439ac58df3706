"""cuba_sync diff, conflicts and resolve.

**diff** compares the bundle in the sync folder with this memory, row by row (by id): what only
the files have, what only the memory has, and how many rows both hold (and of those, how many
observations say something different). It writes nothing.

**conflicts** lists the open conflicts an import (or the merge driver) opened: a row both sides
changed to different text. **resolve** settles one: ``ours`` (the local text stays), ``theirs``
(the incoming text replaces it through cuba_eco correct's own path: ours kept in
previous_versions, re-embedded, its fact closed and a new one opened, audited) or ``both``
(default: the local text stays and theirs is appended to previous_versions; nothing is lost).
The conflict row itself is kept, marked resolved, with both texts.

(No ``from __future__ import annotations``: the answer TypedDicts are evaluated, see export.py.)
"""

from typing import Any, NotRequired, TypedDict

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import CODE_ENTITY_TYPES, MAX_PREVIOUS_VERSIONS, iso, utc_now
from cuba_memorys.secrets_scan import find_secret, redact
from cuba_memorys.services import audit, validate
from cuba_memorys.services.lifecycle import feedback, undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync import export, reader

KEEP = ("ours", "theirs", "both")
LISTED = 100
TABLES = ("entities", "observations", "episodes", "errors", "relations", "facts", "procedures")

Row = dict[str, Any]


class SyncDiff(TypedDict):
    action: str
    dir: str
    manifest_hash: str
    project_id: str | None
    only_in_disk: list[Row]  # [{table, id}], the first 100
    only_in_db: list[Row]
    common_count: int
    only_in_disk_count: int
    only_in_db_count: int
    observations_differing: int  # held by both, different text
    already_imported: bool
    files_not_read: list[Row]  # [{path, reason}]: in the folder, not part of the bundle (reader.py)


class SyncConflicts(TypedDict):
    action: str
    open: int  # listed here
    total_open: int
    conflicts: list[Row]
    note: str


class SyncResolved(TypedDict):
    action: str
    id: str
    observation_id: str | None
    kept: str
    note: str
    audit_id: NotRequired[int]


def _bundle_ids(read: reader.Bundle) -> dict[str, dict[str, Row]]:
    out: dict[str, dict[str, Row]] = {t: {} for t in TABLES}
    out["entities"] = {e["id"]: e for e in read.entities}
    out["observations"] = {o["id"]: o for o in read.observations}
    for table in ("episodes", "errors", "relations", "procedures"):
        out[table] = {r["id"]: r for r in getattr(read, table)}
    out["facts"] = {f["fact_id"]: f for f in read.facts}
    return out


def _memory_ids(mem: Memory, project_id: str | None) -> dict[str, dict[str, Row]]:
    store, everything = mem.store, project_id is None
    readers = {"entities": store.sync_entities, "observations": store.sync_observations,
               "episodes": store.sync_episodes, "errors": store.sync_errors, "relations": store.sync_relations,
               "facts": store.sync_facts, "procedures": store.sync_procedures}
    key = {"facts": "fact_id"}
    rows = {t: read(project_id, everything) for t, read in readers.items()}
    # the codegraph is never exported (services/sync/export.py): not "only in db" either
    code = {e["id"] for e in rows["entities"] if e["entity_type"] in CODE_ENTITY_TYPES}
    if code:
        rows["entities"] = [e for e in rows["entities"] if e["id"] not in code]
        rows["observations"] = [o for o in rows["observations"] if o["entity_id"] not in code]
        rows["relations"] = [r for r in rows["relations"]
                             if r["from_entity"] not in code and r["to_entity"] not in code]
        rows["facts"] = [f for f in rows["facts"] if f["subject_entity_id"] not in code]
    return {t: {r[key.get(t, "id")]: r for r in table_rows} for t, table_rows in rows.items()}


def diff(mem: Memory, client: str | None, dir: str | None = None) -> SyncDiff:
    """The bundle in the sync folder against this memory, by id (see the module docstring)."""
    root = export.sync_dir(mem, dir)
    read = reader.read(root, with_embeddings=False)
    disk, db = _bundle_ids(read), _memory_ids(mem, read.project_id)
    only_disk = [{"table": t, "id": i} for t in TABLES for i in sorted(disk[t].keys() - db[t].keys())]
    only_db = [{"table": t, "id": i} for t in TABLES for i in sorted(db[t].keys() - disk[t].keys())]
    common = sum(len(disk[t].keys() & db[t].keys()) for t in TABLES)
    differing = sum(disk["observations"][i]["content"] != db["observations"][i]["content"]
                    for i in disk["observations"].keys() & db["observations"].keys())
    return {"action": "diff", "dir": str(root), "manifest_hash": read.manifest_hash, "project_id": read.project_id,
            "only_in_disk": only_disk[:LISTED], "only_in_db": only_db[:LISTED], "common_count": common,
            "only_in_disk_count": len(only_disk), "only_in_db_count": len(only_db),
            "observations_differing": differing, "already_imported": mem.store.sync_imported(read.manifest_hash),
            "files_not_read": list(read.files_not_read)}


def conflicts(mem: Memory, client: str | None) -> SyncConflicts:
    """The newest open conflicts of the caller's project (all of them with no project active)."""
    scope = mem.scope(client)
    rows, total = mem.store.sync_conflicts(LISTED, scope.project_id, scope.project_id is None)
    note = ("No open conflicts." if not total else
            "Each row was changed on both sides: resolve with cuba_sync action=resolve id=<id>"
            " keep=ours|theirs|both (both, the default, keeps the local text and theirs in previous_versions).")
    # a reader sees them: credential-looking spans are redacted here (the stored texts stay whole)
    listed = [{k: (redact(v) if k in ("ours", "theirs") else v) for k, v in r.items() if k != "project_id"}
              for r in rows]
    return {"action": "conflicts", "open": len(listed), "total_open": total, "conflicts": listed, "note": note}


def resolve(mem: Memory, client: str | None, id: object = None, keep: object = None) -> SyncResolved:
    """Settle one open conflict (see the module docstring)."""
    conflict_id = validate.text("id", id, high=64)
    kept = validate.choice("keep", keep, KEEP, default="both")
    row = mem.store.sync_conflict(conflict_id)
    scope = mem.scope(client)
    # as conflicts lists them: the caller's project only (one of no project is not in a project's scope)
    if row is None or not (scope.project_id is None or row["project_id"] == scope.project_id):
        raise NotFound(f"No sync conflict has id '{conflict_id}' in this project.",
                       hint="cuba_sync action=conflicts lists the open ones with their ids.")
    if row["resolved_at"] is not None:
        raise InvalidInput("id", f"conflict '{conflict_id}' was resolved already ({row['resolution']})",
                           "cuba_sync action=conflicts lists the open ones.")
    obs_id = row["observation_id"]
    answer: SyncResolved = {"action": "resolve", "id": conflict_id, "observation_id": obs_id, "kept": kept,
                            "note": ""}
    if kept == "theirs":
        done = feedback.correct(mem, client, observation_id=obs_id, correction=row["incoming_content"])
        with mem.store.transaction():
            mem.store.sync_resolve_conflict(conflict_id, kept)
        answer["audit_id"] = done["audit_id"]
        answer["note"] = "Their text is the observation's now; ours is kept in previous_versions."
        return answer
    with mem.store.transaction():
        if kept == "both" and obs_id is not None:
            _keep_theirs_aside(mem, obs_id, row)
        mem.store.sync_resolve_conflict(conflict_id, kept)
        answer["audit_id"] = audit.record(mem, client, "sync.resolve", {"id": conflict_id, "observation_id": obs_id,
                                                                        "kept": kept})
    answer["note"] = ("The local text stays; theirs is kept in previous_versions." if kept == "both"
                      else "The local text stays; theirs stays only in this resolved conflict.")
    return answer


def _keep_theirs_aside(mem: Memory, obs_id: str, row: Row) -> None:
    here = mem.store.sync_local_rows("observations", [obs_id]).get(obs_id)
    if here is None:
        raise NotFound(f"observation '{obs_id}' of this conflict no longer exists here",
                       hint="Resolve it with keep=ours (nothing is left to keep theirs beside).")
    if find_secret(row["incoming_content"]) is not None:
        raise InvalidInput("keep", "their text looks like it holds a credential, and previous_versions are shown to"
                           " every reader", "Resolve with keep=ours, or keep=theirs to let the credential gate of"
                           " cuba_eco correct decide.")
    history = [v for v in here["previous_versions"] if isinstance(v, dict)]
    if any(v.get("content") == row["incoming_content"] for v in history):
        return
    undo.save(mem, "sync-resolve", [("observations", "id", [obs_id])])
    history.append({"content": row["incoming_content"], "version": here["version"],
                    "origin_node": row["their_node"], "kept_from_conflict_at": iso(utc_now())})
    mem.store.sync_update("observations", "id", obs_id, {"previous_versions": history[-MAX_PREVIOUS_VERSIONS:]})
