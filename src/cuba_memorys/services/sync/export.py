"""cuba_sync export and status: the memory written out as a bundle (services/sync/bundle.py)
that travels with the code through git.

**Export.** Every file of the scope is encoded; a file is written only when its bytes differ
from the file on disk (temporary file + rename, inside the sync directory only), and a row file
whose row is gone is removed, in project scope only when the file's ``project_id`` is the
exported project (another project's files sharing the folder stay). The manifest hash covers
every bundle file left in the folder. When that hash and every other manifest field but
``exported_at`` equal the manifest already there, the manifest is kept as it is: an export after
no writes changes no byte, manifest.json included (so a post-commit hook makes no diff).

Scope ``project`` (the default) is the caller's active project's rows only, as the newest
original (rows of no project are not included; with no active project it is the rows of no
project); ``all`` is every row the caller may read. Source trust is global and in both.

The directory is ``dir`` if given, else CUBA_SYNC_DIR, else ``./.cuba-memorys/`` (or the
original 0.27's ``./.memory-industry/`` when only that one exists: :func:`default_dir`); a
relative one is resolved against the git repository's top when the current directory is inside
one (``git rev-parse --show-toplevel``), else against the current directory.

(No ``from __future__ import annotations``: the answer TypedDicts' ``NotRequired`` must be
evaluated, see services/answers.py.)
"""

import json
import subprocess
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from cuba_memorys.errors import Conflict, CubaError, InvalidInput
from cuba_memorys.models import CODE_ENTITY_TYPES, iso, utc_now
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync import bundle, reader
from cuba_memorys.services.sync.reader import UPGRADE

SCOPES = ("project", "all")
DEFAULT_DIR = ".cuba-memorys"
NEWER_DIR = ".memory-industry"  # the original 0.27's default folder (default_dir)
MANY_ENTITY_FILES = 5000  # the original's warning threshold
RECENT_IMPORTS = 10
NOTICES = 20
GIT_TIMEOUT = 5.0
REFUSED_KEY = "sync_refused_import"  # meta key: the last import refused (remember_refused_import)
REASON_CHARS = 2000

Row = dict[str, Any]


class SyncExported(TypedDict):
    action: str
    dir: str
    tombstones: int
    manifest_hash: str
    counts: dict[str, int]
    with_embeddings: bool
    node_id: str
    scope: str  # beyond the original: which scope was written
    project_id: str | None
    files_written: list[str]  # beyond the original: what changed on disk
    files_removed: list[str]
    unchanged: bool  # nothing on disk changed, manifest.json included
    warning: NotRequired[str]
    note: NotRequired[str]


class RefusedImport(TypedDict):
    manifest_hash: str | None  # of the files refused (None: the folder held no bundle)
    dir: str
    refused_at: str
    reason: str  # the error the import gave, e.g. the wipe guard's
    kind: str  # wipe_guard, broken_file, embedding_model, newer_schema or other
    way_out: str  # what to do about it (WAY_OUT)
    still_pending: bool  # the folder still holds those files and they are not imported here


class SyncStatus(TypedDict):
    action: str
    dir: str
    node_id: str
    current_manifest: Row | None
    pending_import: bool
    recent_imports: list[Row]
    peer_notices: list[Row]
    # beyond the original: the last `sync import` (CLI, so a git hook's) that was refused, else None
    last_refused_import: RefusedImport | None


# -- the directory ---------------------------------------------------------------------------
def git_top(start: Path) -> Path | None:
    """The top of the git work tree holding ``start``, or None outside one (or without git)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    top = done.stdout.strip()
    return Path(top) if done.returncode == 0 and top else None


def sync_dir(mem: Memory, given: str | None) -> Path:
    """The bundle's folder (see the module docstring), absolute."""
    if given is not None:
        validate.text("dir", given, high=4096)
    raw = Path(given).expanduser() if given else mem.settings.sync_dir
    if raw is not None and raw.is_absolute():
        return raw
    here = Path.cwd()
    top = git_top(here) or here
    return top / raw if raw is not None else default_dir(top)


def default_dir(top: Path) -> Path:
    """The bundle's folder when neither ``dir`` nor CUBA_SYNC_DIR names one: ``.cuba-memorys/``
    at ``top``, unless only the original 0.27's ``.memory-industry/`` is there, which is then
    read and written. The original looks for the two the other way round, and when neither
    exists makes ``.memory-industry/``; a new bundle here keeps ``.cuba-memorys/``, the folder
    this project always wrote and git hooks installed earlier pin (docs/conformance.md)."""
    ours, newer = top / DEFAULT_DIR, top / NEWER_DIR
    return newer if not ours.exists() and newer.is_dir() else ours


def _scope(mem: Memory, client: str | None, scope: object) -> tuple[str, str | None, bool]:
    """(scope, project_id, everything) of an export."""
    scope = validate.choice("scope", scope, SCOPES, default="project")
    if scope == "all":  # the manifest (and its hash) names no project
        return scope, None, True
    return scope, mem.scope(client).project_id, False


# -- building the files ----------------------------------------------------------------------
def _files(mem: Memory, project_id: str | None, everything: bool) -> tuple[dict[str, bytes], dict[str, int], Row]:
    """Every file of the scope (embeddings aside) by relative path, the manifest's counts, and
    what the rest of the export needs (the observation ids, the tombstones)."""
    store = mem.store
    node = store.node_id()
    entities = store.sync_entities(project_id, everything)
    # the codegraph's rows stay out: each machine rebuilds them from its own checkout, and the
    # original's bundle format has no code entity types (its reader would refuse the bundle)
    code = {e["id"] for e in entities if e["entity_type"] in CODE_ENTITY_TYPES}
    entities = [e for e in entities if e["id"] not in code]
    observations = [o for o in store.sync_observations(project_id, everything) if o["entity_id"] not in code]
    by_entity: dict[str, list[Row]] = {}
    for obs in observations:
        # no CRDT columns here: an observation's counter is its version, its actor the node
        # that wrote it (else this one), which orders edits the way the original's do
        obs["origin_node"] = obs["origin_node"] or node  # a row written here: this node (the same bytes
        obs["crdt_actor"] = obs["origin_node"]  # whichever machine exports it after an import)
        obs["crdt_counter"] = obs["version"]
        by_entity.setdefault(obs.pop("entity_id"), []).append(obs)
    files: dict[str, bytes] = {}
    for entity in entities:
        entity["observations"] = by_entity.get(entity["id"], [])
        files[bundle.entity_path(entity["id"], entity["name"])] = bundle.encode(entity)
    episodes = store.sync_episodes(project_id, everything)
    for episode in episodes:
        files[bundle.episode_path(episode["id"], episode["started_at"])] = bundle.encode(episode)
    errors = store.sync_errors(project_id, everything)
    for error in errors:
        files[bundle.error_path(error["id"])] = bundle.encode(error)
    lists = {
        "relations.json": [r for r in store.sync_relations(project_id, everything)
                           if r["from_entity"] not in code and r["to_entity"] not in code],
        "facts.json": [f for f in store.sync_facts(project_id, everything) if f["subject_entity_id"] not in code],
        "procedures.json": store.sync_procedures(project_id, everything),
        "source_trust.json": store.sync_source_trust(),
        "projects.json": store.sync_projects(project_id, everything),
        "tombstones.json": store.sync_tombstones(project_id, everything),
        "artifacts.json": store.sync_artifacts(project_id, everything),
    }
    for name, rows in lists.items():
        files[name] = bundle.encode(rows)
    counts = {"entities": len(entities), "observations": len(observations), "episodes": len(episodes),
              "decisions": sum(o["observation_type"] == "decision" for o in observations),
              "errors": len(errors), "relations": len(lists["relations.json"]),
              "artifacts": len(lists["artifacts.json"])}
    extra = {"observation_ids": sorted(o["id"] for o in observations),
             "tombstones": len(lists["tombstones.json"])}
    return files, counts, extra


def _embeddings(mem: Memory, observation_ids: list[str]) -> tuple[bytes, int, str | None]:
    if not bundle.zstd_available():
        raise InvalidInput("with_embeddings", "the zstandard package is not installed, so"
                           " embeddings.bin.zst cannot be written", "pip install zstandard, or export"
                           " without embeddings (the importer recomputes them)")
    model, dim = mem.stored_model()
    if not model or not dim:
        raise InvalidInput("with_embeddings", "this memory has no embedding model recorded yet, so there"
                           " are no embeddings to export", "Export without embeddings.")
    vectors = mem.store.observation_vectors(observation_ids)
    records = [(row_id, vectors[row_id]) for row_id in observation_ids if row_id in vectors]
    return bundle.encode_embeddings(records, int(dim)), int(dim), model


# -- writing ---------------------------------------------------------------------------------
def _stale(on_disk: dict[str, bytes], wanted: dict[str, bytes], project_id: str | None,
           everything: bool) -> list[str]:
    """The row files on disk this export does not write that it may remove: every one in scope
    all; in project scope those whose JSON names the exported project (unreadable ones stay:
    git or a person may be in the middle of them)."""
    out = []
    for path, data in on_disk.items():
        if path in wanted or not path.startswith(tuple(f"{d}/" for d in bundle.ROW_DIRS)):
            continue
        readable, project = bundle.row_project(data)
        if everything or (readable and project == project_id):
            out.append(path)
    return sorted(out)


def export(mem: Memory, client: str | None, dir: str | None = None, scope: object = None,
           with_embeddings: object = None, force: object = None) -> SyncExported:
    """Write the scope's bundle into the sync directory (see the module docstring)."""
    root = sync_dir(mem, dir)
    picked, project_id, everything = _scope(mem, client, scope)
    with_embeddings = validate.flag("with_embeddings", with_embeddings, False)
    force = validate.flag("force", force, False)
    if root.exists() and not root.is_dir():
        raise InvalidInput("dir", f"{root} exists and is not a directory", "Name a directory for the bundle.")
    with mem.store.transaction():  # one consistent read of every table
        files, counts, extra = _files(mem, project_id, everything)
        embed = _embeddings(mem, extra["observation_ids"]) if with_embeddings else None
    if embed is not None:
        files[bundle.EMBEDDINGS] = embed[0]
    for path in files:  # every name checked before anything is written
        bundle.inside(root, path)
    on_disk = bundle.bundle_files(root)
    written = [p for p in sorted(files) if on_disk.get(p) != files[p]]
    removed = _stale(on_disk, files, project_id, everything)
    if not force:
        _wipe_guard(on_disk, removed, files, extra)
    if not with_embeddings and bundle.EMBEDDINGS in on_disk:
        removed.append(bundle.EMBEDDINGS)  # vectors of an earlier export would be stale
    root.mkdir(parents=True, exist_ok=True)
    for path in written:
        bundle.write_atomic(root, path, files[path])
    for path in removed:
        bundle.remove(root, path)
    final = {p: bundle.sha256(d) for p, d in on_disk.items() if p not in removed}
    final.update({p: bundle.sha256(d) for p, d in files.items()})
    digest = bundle.manifest_hash(bundle.SCHEMA_VERSION, project_id, final)
    node = mem.store.node_id()
    manifest = _manifest(mem, digest, project_id, counts, embed, node)
    previous = bundle.read_manifest(root)
    kept = previous is not None and _same(previous, manifest)
    if not kept:
        bundle.write_atomic(root, bundle.MANIFEST, bundle.encode(manifest))
    answer: SyncExported = {
        "action": "export", "dir": str(root), "tombstones": extra["tombstones"], "manifest_hash": digest,
        "counts": counts, "with_embeddings": embed is not None, "node_id": node, "scope": picked,
        "project_id": project_id, "files_written": written + ([] if kept else [bundle.MANIFEST]),
        "files_removed": removed, "unchanged": kept and not written and not removed}
    if counts["entities"] > MANY_ENTITY_FILES:
        answer["warning"] = (f"{counts['entities']} entity files: git handles this, but consider"
                             " --scope project per project to keep bundles small")
    return answer


def _wipe_guard(on_disk: dict[str, bytes], removed: list[str], files: dict[str, bytes], extra: Row) -> None:
    """Refuse an export that would make the bundle's observations vanish with no tombstone: what an
    empty or fresh store exporting over a shared bundle does (pushed, every other machine would
    keep rows that are gone here, and deleted rows could come back from a stale copy). Counted in
    the files this export removes or rewrites only (another project's files stay as they are), and
    never a codegraph row (each machine rebuilds those: they are not exported). A delete made here
    leaves a tombstone, so it never counts. The same thresholds as the import's guard."""
    kept = set(extra["observation_ids"])
    tombstoned = {t["row_id"] for t in json.loads(files["tombstones.json"]) if t.get("table_name") == "observations"}
    touched = {p: on_disk[p] for p in set(removed) | (set(files) & set(on_disk)) if p in on_disk}
    before = _bundle_observations(touched)
    vanishing = before - kept - tombstoned
    if len(vanishing) >= bundle.WIPE_ROWS and len(vanishing) > bundle.WIPE_SHARE * len(before):
        raise Conflict(f"this export would remove {len(vanishing)} of the {len(before)} observations in the bundle at"
                       " its folder without a tombstone (this memory does not have them: it is empty, new, or"
                       " another project's); nothing was written. Import the bundle first (cuba-memorys sync"
                       " import) to take them, or export with force=true (CLI: cuba-memorys sync export --force)"
                       " to replace the bundle with this memory as it is.")


def _bundle_observations(on_disk: dict[str, bytes]) -> set[str]:
    """The observation ids the entity files hold (an unreadable file, a codegraph entity: none)."""
    found: set[str] = set()
    for path, data in on_disk.items():
        if not path.startswith("entities/"):
            continue
        try:
            entity = json.loads(data)
        except ValueError:
            continue
        if not isinstance(entity, dict) or entity.get("entity_type") in CODE_ENTITY_TYPES:
            continue
        found.update(o["id"] for o in entity.get("observations", []) if isinstance(o, dict) and "id" in o)
    return found


def _manifest(mem: Memory, digest: str, project_id: str | None, counts: dict[str, int],
              embed: tuple[bytes, int, str | None] | None, node: str) -> Row:
    model, dim = mem.stored_model()
    project = None
    if project_id:
        found = mem.store.sync_projects(project_id, False)
        if not found:
            raise InvalidInput("scope", f"the active project ({project_id}) no longer exists, so there is no"
                               " project bundle to write", "Choose the project again (cuba_project), or export"
                               " with scope all.")
        project = found[0]["name"]
    return {"schema_version": bundle.SCHEMA_VERSION, "manifest_hash": digest, "project_id": project_id,
            "project_name": project, "exported_at": iso(utc_now()), "counts": counts,
            "with_embeddings": embed is not None, "embedding_dim": embed[1] if embed else (int(dim) if dim else None),
            "node_id": node, "embedding_model": embed[2] if embed else model}


def _same(previous: Row, manifest: Row) -> bool:
    """Whether the manifest on disk says what this one says, when it was written aside: the same
    files (hash), counts and model. Another node that exported these same files keeps its name
    there, so two machines exporting one state do not swap manifest.json in every commit."""
    aside = ("exported_at", "node_id")
    return {k: v for k, v in previous.items() if k not in aside} == \
        {k: v for k, v in manifest.items() if k not in aside}


# -- status ----------------------------------------------------------------------------------
# What to do about each kind of refused import (status, the hooks' export message, docs/sync.md).
WAY_OUT = {
    "wipe_guard": "if the other machine really deleted those rows, `cuba-memorys sync import --confirm`; to take"
                  " the rest without the deletions, `cuba-memorys sync import --withhold-deletes`",
    "broken_file": "fix the file the reason names, or take one side in git (`git checkout --ours|--theirs --"
                   " <file>`, or the last good bundle: `git checkout <commit> -- <folder>`), then `sync import`",
    "embedding_model": "delete embeddings.bin.zst from the folder (the import then embeds the rows with this"
                       " memory's model), or export again on the other machine without --with-embeddings or"
                       " with this memory's model (or move this memory to that model: CUBA_EMBED_MODEL, then"
                       " `cuba-memorys reembed --all`), then `sync import`",
    "newer_schema": "upgrade cuba-memorys on this machine, then `sync import`",
    "other": "see the reason, then `sync import`",
}
OVERWRITE = ("or overwrite the waiting bundle on purpose with a plain `cuba-memorys sync export --scope all` (the"
             " other machine's rows then leave the work tree; git still has them)")


def _kind(error: CubaError) -> str:
    """Which refusal an import's error is (see WAY_OUT)."""
    if isinstance(error, Conflict):
        return "wipe_guard"
    if UPGRADE in str(error):  # (reader.py's hint for a schema_version it does not read yet)
        return "newer_schema"
    if "the bundle's embeddings" in error.message:
        return "embedding_model"
    return "broken_file" if isinstance(error, InvalidInput) else "other"


def _folder(mem: Memory, root: Path) -> reader.Folder:
    return reader.folder(root, mem.store.node_id())


def _waiting(mem: Memory, folder: reader.Folder) -> str | None:
    """The hash of the folder's bundle when it waits to be imported (written by another node, or
    edited since, or unreadable, and not imported here), else None."""
    if folder.digest is None or folder.own or mem.store.sync_imported(folder.digest):
        return None
    return folder.digest


def status(mem: Memory, client: str | None, dir: str | None = None) -> SyncStatus:
    """The bundle in the sync directory (its manifest), whether it waits to be imported (written
    by another node and not imported here yet), the latest imports, the open peer notices and
    the last import refused (a git hook's refusal is otherwise only in the hooks' log)."""
    root = sync_dir(mem, dir)
    manifest = bundle.read_manifest(root) if root.is_dir() else None
    digest = _waiting(mem, _folder(mem, root))
    return {"action": "status", "dir": str(root), "node_id": mem.store.node_id(), "current_manifest": manifest,
            "pending_import": digest is not None, "recent_imports": mem.store.sync_imports(RECENT_IMPORTS),
            "peer_notices": mem.store.open_peer_notices(NOTICES), "last_refused_import": _refused(mem, root, digest)}


def pending_import(mem: Memory, dir: str | None = None) -> bool:
    """Whether the folder's bundle waits to be imported (another node's, or edited, or unreadable,
    and not imported here): the post-commit hook then imports it first (`sync import --if-pending`)."""
    root = sync_dir(mem, dir)
    return _waiting(mem, _folder(mem, root)) is not None


def refused_pending(mem: Memory, dir: str | None = None) -> RefusedImport | None:
    """The refusal recorded for the bundle waiting in the folder (the same files), else None:
    while there is one the hooks' export writes nothing (`sync export --unless-pending`), so a
    commit never overwrites another machine's bundle an import refused (e.g. the wipe guard)."""
    root = sync_dir(mem, dir)
    refused = _refused(mem, root, _waiting(mem, _folder(mem, root)))
    return refused if refused is not None and refused["still_pending"] else None


def _refused(mem: Memory, root: Path, pending_digest: str | None) -> RefusedImport | None:
    raw = mem.store.get_meta(REFUSED_KEY)
    try:
        kept = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(kept, dict):
        return None
    digest = kept.get("manifest_hash")
    kind = str(kept.get("kind") or "other")
    kind = kind if kind in WAY_OUT else "other"
    return {"manifest_hash": digest, "dir": str(kept.get("dir")), "refused_at": str(kept.get("refused_at")),
            "reason": str(kept.get("reason")), "kind": kind, "way_out": f"{WAY_OUT[kind]}; {OVERWRITE}",
            "still_pending": digest is not None and digest == pending_digest and kept.get("dir") == str(root)}


def remember_refused_import(mem: Memory, dir: str | None, error: CubaError) -> None:
    """Keep why an import of the folder's bundle was refused, for status: a git hook's import
    fails with nobody watching (its output goes to the hooks' log), and a wipe-guard refusal
    waits for someone to run `sync import --confirm`. Only the last one is kept."""
    root = sync_dir(mem, dir)
    kept = {"manifest_hash": _folder(mem, root).digest, "dir": str(root), "refused_at": iso(utc_now()),
            "reason": str(error)[:REASON_CHARS], "kind": _kind(error)}
    with mem.store.transaction():
        mem.store.set_meta(REFUSED_KEY, json.dumps(kept, ensure_ascii=False))
