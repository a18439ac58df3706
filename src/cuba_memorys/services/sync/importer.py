"""cuba_sync import: a bundle (services/sync/reader.py) merged into this memory.

**Once per bundle.** A bundle is identified by the manifest hash computed from its files; one
already imported is skipped (``skipped: true`` and why), so hooks may import on every checkout.

**Ids and names.** Rows keep the ids they were written with. A project or entity that exists
here under the same name but another id (both machines made "alpha" before they first synced)
becomes one row: both nodes keep the smaller id (this node's row is re-keyed, everything it
holds moving along), so the two bundles name the same files and stop swapping them.

**Conflict modes** (observations; the rule per other table is in import_rows.py):
- ``merge`` (default): a new row is inserted; a row whose incoming text is an older version of
  ours (in our previous_versions) changes nothing; a row whose incoming text is a later edit of
  ours (ours is in its previous_versions) takes it — one side changed, so there is nothing to
  choose; otherwise both sides changed it: ours stays, the row is reported as ``diverged`` and a
  conflict is opened with theirs (cuba_sync conflicts / resolve). Nothing is lost.
- ``skip``: only new rows; every differing row is reported and opened as a conflict.
- ``overwrite``: incoming wins; our text goes to previous_versions (newest 20) and the
  embedding is recomputed.
Counters (importance, access counts, strengths, success/failure counts) merge by max, so
importing the same rows again never inflates them. A row deleted here after it was last
written elsewhere is not brought back; one edited elsewhere after our delete is (an edit beats
a delete). Credential-looking content arrives quarantined (never searched until promoted).

**Deletes** (tombstones) are applied only to the ids they name, last, after the wipe guard (a
project bundle's only to rows of its project: ``tombstones_out_of_scope`` counts the others):
an import that would delete ≥ 25 rows and > 10 % of the local observations is refused without
``confirm``; ``deletes="withhold"`` applies none. An entity tombstone is withheld while the
entity has children here the sender did not name (written here after it deleted the entity).

**Embeddings.** A row takes the bundle's vector when it carries one of this memory's model
(embeddings.bin.zst); the others are committed without one and handed, once committed, to the
background embedding queue (services/embedding_queue.py), episodes too: ``embeddings_queued``,
and ``embedding`` says "pending" until their vectors are stored (keyword search finds them at
once). With CUBA_EMBED_QUEUE=off they are embedded before the transaction (``embeddings_computed``).

Everything is written in one transaction, with an undo file of the rows deleted or rewritten
and the rows created (``cuba-memorys undo FILE``) and one audit event (``sync.import``).

**Decisions.** The original keeps them on each project's ``architecture_decisions`` entity, and
so does this version: its entity file lands there as any other. A bundle of a machine still on
the version that used an entity named ``decisions`` is moved there after the import, as a
memory opening does (services/workflow/legacy_decisions.py).

(No ``from __future__ import annotations``: the answer TypedDict is evaluated, see export.py.)
"""

from typing import Any, NotRequired, TypedDict

from cuba_memorys.errors import Conflict, InvalidInput
from cuba_memorys.services import audit, validate
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync import bundle, export, reader
from cuba_memorys.services.sync.import_rows import Job
from cuba_memorys.services.workflow import legacy_decisions

MODES = ("merge", "skip", "overwrite")
DELETES = ("apply", "withhold")
Row = dict[str, Any]
WIPE_ROWS, WIPE_SHARE = bundle.WIPE_ROWS, bundle.WIPE_SHARE  # the original's mass-tombstone guard


class SyncImported(TypedDict):
    action: str
    dir: str
    manifest_hash: str
    skipped: bool
    conflict: str
    from_node: str | None
    rows_inserted: int
    rows_updated: int  # rows that took the incoming side (later edits, overwrite, merged counters excluded)
    diverged: int
    edited_since_export: int  # diverged rows changed here after the bundle was exported
    conflicts_opened: int
    conflicts_settled: int  # open conflicts closed because the other side settled them (same text now)
    facts_superseded: int
    tombstones_applied: int
    tombstones_withheld: int
    tombstones_out_of_scope: int  # a project bundle's tombstones naming a row here of another project: not applied
    deleted_here_kept_deleted: int  # incoming rows this node deleted after they were last written
    embeddings_restored: int  # vectors taken from embeddings.bin.zst
    embeddings_computed: int  # vectors made before the write (CUBA_EMBED_QUEUE=off)
    embeddings_queued: int  # rows (observations, episodes) committed without a vector, left to the background queue
    embeddings_pending: int  # rows stored without a vector (no model): `cuba-memorys reembed`
    # ready: every observation this import wrote has its vector stored; pending: some wait for the
    # background embedding queue (the lexical branches find them already), or there is no model
    embedding: str
    quarantined: int
    quarantine_reasons: list[str]
    peer_notices_closed: int
    scope_enforced: bool  # a project bundle: rows of other projects were not imported
    rows_out_of_scope: int
    rows_skipped: int  # rows whose parent exists neither here nor in the bundle
    code_rows_skipped: int  # codegraph rows an older export carried: rebuilt here by `codegraph build`
    # files that look like bundle files but are not read ({path, reason}, the first 100): an older
    # original's decisions/ folder (decisions are observations here), an unknown file
    files_not_read: list[dict[str, str]]
    entities_rekeyed: int
    projects_rekeyed: int
    reason: NotRequired[str]
    undo_file: NotRequired[str]
    note: NotRequired[str]


def import_bundle(mem: Memory, client: str | None, dir: str | None = None, conflict: object = None,
                  confirm: object = None, deletes: object = None) -> SyncImported:
    """Import the bundle in the sync directory (see the module docstring)."""
    root = export.sync_dir(mem, dir)
    mode = validate.choice("conflict", conflict, MODES, default="merge")
    confirm = validate.flag("confirm", confirm, False)
    withhold = validate.choice("deletes", deletes, DELETES, default="apply") == "withhold"
    ident = reader.identity(root)
    answer = _empty(root, ident, mode)
    reason = _skipped(mem, ident)
    if reason is not None:
        answer["skipped"] = True
        answer["reason"] = reason
        answer["embedding"] = _embedding(mem, None)
        return _noted(answer, ident)
    read = reader.read(root)
    answer["manifest_hash"] = read.manifest_hash  # (the files could have changed since: this is what is read)
    answer["files_not_read"] = list(read.files_not_read)
    _check_model(mem, read)
    first = Job(mem, read, mode)  # planned and embedded outside the write lock (the model is slow) ...
    first.plan()
    first.embed()
    with mem.store.transaction():
        job = Job(mem, read, mode, first.scans)  # ... and planned again inside it: a write since is planned against
        job.plan()
        job.reuse(first)
        job.embed()  # only what changed in between (usually nothing)
        job.plan_deletes(withhold)
        _wipe_guard(mem, job, confirm)
        snapshots = undo.snapshot(mem, job.undo_parts())
        job.apply()
        job.apply_deletes()
        undo_file = undo.write(mem, "sync-import", snapshots, job.created_parts()) \
            if snapshots or job.created_parts() else None
        rows = job.counts["rows_inserted"]
        mem.store.sync_record_import(read.manifest_hash, rows, str(root))
        closed = mem.store.sync_close_notices([read.manifest_hash, str(read.manifest.get("manifest_hash") or "")])
        answer.update({k: v for k, v in job.counts.items() if k in answer})  # type: ignore[typeddict-item]
        answer["peer_notices_closed"] = closed
        answer["code_rows_skipped"] = read.code_rows_skipped
        answer["quarantine_reasons"] = sorted(job.quarantine_reasons)
        if undo_file is not None:
            answer["undo_file"] = str(undo_file)
        audit.record(mem, client, "sync.import", {
            "dir": str(root), "manifest_hash": read.manifest_hash, "from_node": answer["from_node"],
            "conflict": mode, **{k: v for k, v in answer.items() if isinstance(v, int) and not isinstance(v, bool)}})
    job.hand_to_queue()  # committed: now the queue may embed them
    _follow_rekeys(mem, job.project_rekeys)
    legacy_decisions.migrate(mem)  # committed apart: the import stands whether or not this is needed
    answer["embedding"] = _embedding(mem, job)
    return _noted(answer, read)


def _follow_rekeys(mem: Memory, rekeys: list[tuple[Row, Row]]) -> None:
    """The open memory's clients whose active project was re-keyed name its new id (a
    long-running serve's next project export would otherwise find no project)."""
    moved = {local["id"]: incoming["id"] for local, incoming in rekeys}
    if moved:
        mem.move_projects(moved)


def _embedding(mem: Memory, job: Job | None) -> str:
    """As batch_add's: "ready" when a model is loaded and every observation the import wrote
    has its vector now (restored from the bundle, computed, or embedded by the queue already),
    else "pending"."""
    if mem.embedder is None:
        return "pending"
    waiting = [i for i in job.needs_vector if i not in job.vectors] if job is not None else []
    return "pending" if mem.store.rows_missing_embedding_of("observation", waiting) else "ready"


def _skipped(mem: Memory, read: reader.Bundle) -> str | None:
    if mem.store.sync_imported(read.manifest_hash):
        return "this bundle (these exact files) was imported here already"
    if reader.is_own(read, mem.store.node_id()):  # (a hook importing after our own commit)
        return "this node wrote this bundle and nothing in it changed since"
    return None


def skip_reason(mem: Memory, dir: str | None = None) -> str | None:
    """Why the bundle in the folder would be skipped (None: it would be imported), without
    importing: the CLI asks before loading the embedding model."""
    return _skipped(mem, reader.identity(export.sync_dir(mem, dir)))


def _empty(root: Any, read: reader.Bundle, mode: str) -> SyncImported:
    node = read.manifest.get("node_id")
    return {"action": "import", "dir": str(root), "manifest_hash": read.manifest_hash, "skipped": False,
            "conflict": mode, "from_node": node if isinstance(node, str) else None, "rows_inserted": 0,
            "rows_updated": 0, "diverged": 0, "edited_since_export": 0, "conflicts_opened": 0, "conflicts_settled": 0,
            "facts_superseded": 0, "tombstones_applied": 0, "tombstones_withheld": 0, "tombstones_out_of_scope": 0,
            "deleted_here_kept_deleted": 0, "embeddings_restored": 0, "embeddings_computed": 0,
            "embeddings_queued": 0, "embeddings_pending": 0, "embedding": "pending", "quarantined": 0,
            "quarantine_reasons": [], "peer_notices_closed": 0,
            "scope_enforced": read.project_id is not None, "rows_out_of_scope": 0, "rows_skipped": 0,
            "code_rows_skipped": 0, "files_not_read": list(read.files_not_read),
            "entities_rekeyed": 0, "projects_rekeyed": 0}


def _check_model(mem: Memory, read: reader.Bundle) -> None:
    """Vectors of another model (or dimension) would be meaningless next to ours: refused."""
    if not read.embeddings:
        return
    model, dim = mem.stored_model()
    theirs, their_dim = read.manifest.get("embedding_model"), read.manifest.get("embedding_dim")
    if model and theirs and theirs != model:
        raise InvalidInput("dir", f"the bundle's embeddings are of model {theirs!r}, this memory's of {model!r};"
                           " nothing was imported", "Delete embeddings.bin.zst from the bundle (the import"
                           " then embeds the rows with this memory's model), or export it without"
                           " --with-embeddings.")
    if dim and their_dim != dim:
        raise InvalidInput("dir", f"the bundle's embeddings have {their_dim} dimensions, this memory's {dim};"
                           " nothing was imported", "Delete embeddings.bin.zst from the bundle, or export it"
                           " without --with-embeddings.")


def _wipe_guard(mem: Memory, job: Job, confirm: bool) -> None:
    rows, observations = job.deleting()
    local = mem.store.sync_observation_count()
    if rows >= WIPE_ROWS and observations > WIPE_SHARE * local and not confirm:
        raise Conflict(f"the bundle would delete {rows} rows here, {observations} of the {local} observations"
                       f" ({observations / max(local, 1):.0%}); nothing was imported. If that is what you want"
                       " (the other machine really deleted them), import again with confirm=true (CLI:"
                       " --confirm); to take the rest but no deletion, use deletes=withhold.")


QUEUED_NOTE = ("rows are being embedded in the background: keyword search finds them now, search by meaning once"
               " their vectors are stored")


def without_queue_note(note: str) -> str:
    """The import's note without the part about rows being embedded (a CLI that waited for them)."""
    return "; ".join(part for part in note.rstrip(".").split("; ") if QUEUED_NOTE not in part) + "."


def _noted(answer: SyncImported, read: reader.Bundle) -> SyncImported:
    notes = []
    if answer["conflicts_opened"]:
        notes.append(f"{answer['conflicts_opened']} rows were changed on both sides: ours kept, theirs waits in"
                     " cuba_sync conflicts (resolve keep=ours|theirs|both)")
    if answer["tombstones_withheld"]:
        notes.append(f"{answer['tombstones_withheld']} deletions were withheld")
    if answer["tombstones_out_of_scope"]:
        notes.append(f"{answer['tombstones_out_of_scope']} deletions name rows of another project than the"
                     " bundle's and were not applied")
    if read.files_not_read_count:
        listed = "" if read.files_not_read_count <= len(read.files_not_read) else \
            f", the first {len(read.files_not_read)} listed"
        notes.append(f"{read.files_not_read_count} files in the folder were not read (files_not_read{listed}:"
                     " decisions/ files of an older original, or files this version does not know)")
    if answer["embeddings_pending"]:
        notes.append(f"{answer['embeddings_pending']} rows have no embedding yet (no model loaded): run"
                     " `cuba-memorys reembed`")
    if answer["embeddings_queued"] and answer["embedding"] == "pending":
        notes.append(f"{answer['embeddings_queued']} {QUEUED_NOTE}")
    if answer["code_rows_skipped"]:
        notes.append(f"{answer['code_rows_skipped']} codegraph rows in the bundle were left out (run"
                     " `cuba-memorys codegraph build` here to rebuild them from this checkout)")
    if notes:
        answer["note"] = "; ".join(notes) + "."
    return answer
