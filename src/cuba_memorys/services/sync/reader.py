"""Reading a sync bundle for import (services/sync/importer.py): every file parsed and checked
before anything is written, so a truncated or hand-broken file is a clear error naming the file
and nothing is half-imported.

The bundle's identity is the manifest hash computed here FROM THE FILES PRESENT (the same
formula as export: bundle.manifest_hash), not the one manifest.json claims: a hand-edited entity
file, or a file git's merge driver rewrote, is a new bundle and is imported.

Schema version 1 bundles (the original's older format) read with the defaults of the fields
version 2 added (evidence ``asserted``, trust ``trusted``, version 1 ...). Files the layout does
not define (an older original's decisions/ folder) are not read: they are listed in
``files_not_read`` so the import can say so, and count in no hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import CODE_ENTITY_TYPES
from cuba_memorys.services.sync import bundle

Row = dict[str, Any]
SCHEMAS = (1, 2)
UPGRADE = "Upgrade cuba-memorys on this machine."  # (export.py tells a newer schema's refusal by it)
FIX = ("Restore the file from git (git checkout -- <file>) or export the bundle again on the machine that wrote"
       " it, then import again; nothing was imported.")

STR, NUM, INT, BOOL, LIST, OPT_STR = "text", "number", "integer", "true/false", "list", "text or null"
# per row kind: field -> (type, default when absent; REQUIRED: no default)
REQUIRED = object()
OBSERVATION = {"id": (STR, REQUIRED), "content": (STR, REQUIRED), "observation_type": (STR, "fact"),
               "source": (STR, "agent"), "importance": (NUM, 0.5), "tags": (LIST, []),
               "project_id": (OPT_STR, None), "session_id": (OPT_STR, None), "created_at": (STR, REQUIRED),
               "embedding_model": (OPT_STR, None), "updated_at": (OPT_STR, None), "version": (INT, 1),
               "previous_versions": (LIST, []), "origin_node": (OPT_STR, None), "evidence": (STR, "asserted"),
               "verification": (OPT_STR, None), "verified_at": (OPT_STR, None), "trust": (STR, "trusted"),
               "crdt_actor": (OPT_STR, None), "crdt_counter": (INT, None)}
ENTITY = {"id": (STR, REQUIRED), "name": (STR, REQUIRED), "entity_type": (STR, "concept"),
          "importance": (NUM, 0.5), "access_count": (INT, 0), "project_id": (OPT_STR, None),
          "created_at": (STR, REQUIRED), "observations": (LIST, [])}
EPISODE = {"id": (STR, REQUIRED), "entity_id": (STR, REQUIRED), "content": (STR, REQUIRED), "actors": (LIST, []),
           "artifacts": (LIST, []), "importance": (NUM, 0.5), "project_id": (OPT_STR, None),
           "started_at": (STR, REQUIRED), "ended_at": (OPT_STR, None)}
ERROR = {"id": (STR, REQUIRED), "error_type": (STR, REQUIRED), "error_message": (STR, REQUIRED),
         "solution": (OPT_STR, None), "resolved": (BOOL, False), "project": (STR, "default"),
         "project_id": (OPT_STR, None), "created_at": (STR, REQUIRED)}
RELATION = {"id": (STR, REQUIRED), "from_entity": (STR, REQUIRED), "to_entity": (STR, REQUIRED),
            "relation_type": (STR, "related_to"), "strength": (NUM, 0.5), "bidirectional": (BOOL, False),
            "project_id": (OPT_STR, None), "created_at": (STR, REQUIRED), "provenance": (STR, "extracted")}
FACT = {"fact_id": (STR, REQUIRED), "subject": (STR, REQUIRED), "predicate": (STR, REQUIRED),
        "object": (STR, REQUIRED), "valid_from": (STR, REQUIRED), "observed_at": (STR, REQUIRED),
        "valid_to": (OPT_STR, None), "subject_entity_id": (OPT_STR, None), "project_id": (OPT_STR, None),
        "confidence": (NUM, 1.0), "is_current": (BOOL, True), "created_at": (STR, REQUIRED),
        "layer_name": (OPT_STR, None)}
PROCEDURE = {"id": (STR, REQUIRED), "name": (STR, REQUIRED), "steps": (LIST, []), "created_at": (STR, REQUIRED),
             "updated_at": (STR, REQUIRED), "trigger_context": (OPT_STR, None), "preconditions": (OPT_STR, None),
             "verification": (OPT_STR, None), "success_count": (INT, 0), "failure_count": (INT, 0),
             "last_outcome": (OPT_STR, None), "last_used_at": (OPT_STR, None), "project_id": (OPT_STR, None),
             "embedding_model": (OPT_STR, None)}
TRUST = {"source": (STR, REQUIRED), "alpha": (NUM, 1.0), "beta": (NUM, 1.0), "updated_at": (STR, REQUIRED)}
PROJECT = {"id": (STR, REQUIRED), "name": (STR, REQUIRED), "created_at": (STR, REQUIRED)}
TOMBSTONE = {"table_name": (STR, REQUIRED), "row_id": (STR, REQUIRED), "deleted_at": (STR, REQUIRED),
             "origin_node": (OPT_STR, None)}
ARTIFACT = {"id": (STR, REQUIRED), "path": (STR, REQUIRED), "content": (STR, REQUIRED),
            "content_hash": (STR, REQUIRED), "version": (INT, 1), "project_id": (OPT_STR, None),
            "origin_node": (OPT_STR, None), "crdt_actor": (OPT_STR, None), "crdt_counter": (INT, 1),
            "updated_at": (STR, REQUIRED)}
CONFLICT = {"observation_id": (STR, REQUIRED), "theirs": ("object", REQUIRED), "their_node": (OPT_STR, None)}
LISTS = {"relations.json": ("relations", RELATION), "facts.json": ("facts", FACT),
         "procedures.json": ("procedures", PROCEDURE), "source_trust.json": ("source_trust", TRUST),
         "projects.json": ("projects", PROJECT), "tombstones.json": ("tombstones", TOMBSTONE),
         "artifacts.json": ("artifacts", ARTIFACT)}
# enumerated fields (the tables' CHECKs): a value outside is the file's error, said before writing
CHOICES = {
    "observation_type": ("fact", "decision", "lesson", "preference", "error", "solution", "context", "tool_usage",
                         "superseded"),
    "source": ("agent", "error_detection", "user", "consolidation", "inference"),
    "evidence": ("asserted", "observed", "verified"), "trust": ("trusted", "quarantined"),
    "entity_type": ("concept", "project", "technology", "person", "pattern", "config"),
    "relation_type": ("uses", "causes", "implements", "depends_on", "related_to"),
    "provenance": ("extracted", "inferred", "predicted"), "last_outcome": (None, "success", "failure"),
}
CHOSEN = {id(OBSERVATION), id(ENTITY), id(RELATION), id(PROCEDURE)}
MAX_TEXT = 10000  # observations' and episodes' content (the tables' CHECK)
TOMBSTONE_TABLES = ("entities", "observations", "episodes", "errors", "relations", "projects", "procedures", "facts")


@dataclass
class Bundle:
    root: Path
    manifest: Row
    manifest_hash: str  # computed from the files present
    project_id: str | None
    entities: list[Row] = field(default_factory=list)  # each with observations[] and conflicts[]
    episodes: list[Row] = field(default_factory=list)
    errors: list[Row] = field(default_factory=list)
    relations: list[Row] = field(default_factory=list)
    facts: list[Row] = field(default_factory=list)
    procedures: list[Row] = field(default_factory=list)
    source_trust: list[Row] = field(default_factory=list)
    projects: list[Row] = field(default_factory=list)
    tombstones: list[Row] = field(default_factory=list)
    artifacts: list[Row] = field(default_factory=list)
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    # codegraph rows an older export carried (code entities, their observations, edges, facts):
    # left out, each machine rebuilds them from its checkout (`codegraph build`)
    code_rows_skipped: int = 0
    code_entity_ids: set[str] = field(default_factory=set)
    # files that look like bundle files but are not read (a decisions/ folder of an older
    # original, an unknown file): [{path, reason}], the first bundle.UNREAD_LISTED, and how many
    files_not_read: list[Row] = field(default_factory=list)
    files_not_read_count: int = 0

    @property
    def observations(self) -> list[Row]:
        return [o for e in self.entities for o in e["observations"]]

    def counts(self) -> dict[str, int]:
        return {"entities": len(self.entities), "observations": len(self.observations),
                "episodes": len(self.episodes), "errors": len(self.errors), "relations": len(self.relations),
                "facts": len(self.facts), "procedures": len(self.procedures), "tombstones": len(self.tombstones),
                "artifacts": len(self.artifacts)}


def _bad(path: str, what: str) -> InvalidInput:
    return InvalidInput("dir", f"bundle file {path}: {what}", FIX)


def _typed(kind: str, value: Any) -> bool:
    if kind == STR:
        return isinstance(value, str)
    if kind == OPT_STR:
        return value is None or isinstance(value, str)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == INT:
        return value is None or (isinstance(value, int) and not isinstance(value, bool))
    if kind == BOOL:
        return isinstance(value, bool) or value in (0, 1)
    if kind == LIST:
        return isinstance(value, list)
    return isinstance(value, dict)


def checked(path: str, where: str, value: Any, spec: dict[str, tuple[str, Any]]) -> Row:
    """One row against its field spec: an object, every required field present, every field of
    its type; absent optional fields take their defaults. Unknown fields are kept aside (a newer
    writer's, harmless: the import reads only what it knows)."""
    if not isinstance(value, dict):
        raise _bad(path, f"{where} is not a JSON object")
    row: Row = {}
    for name, (kind, default) in spec.items():
        if name not in value or (value[name] is None and kind not in (OPT_STR, INT)):
            if default is REQUIRED:
                raise _bad(path, f"{where} has no {name!r}")
            row[name] = list(default) if isinstance(default, list) else default
            continue
        if not _typed(kind, value[name]):
            raise _bad(path, f"{where}: {name!r} should be {kind}, not {json.dumps(value[name])[:60]}")
        row[name] = value[name]
        if id(spec) in CHOSEN and name in CHOICES and row[name] not in CHOICES[name]:
            raise _bad(path, f"{where}: {name!r} is {row[name]!r}, not one of"
                       f" {', '.join(str(c) for c in CHOICES[name] if c)}")
    if "content" in row and spec is not ARTIFACT and not 1 <= len(row["content"]) <= MAX_TEXT:
        raise _bad(path, f"{where}: 'content' has {len(row['content'])} characters (1-{MAX_TEXT} allowed)")
    return row


def _json(path: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _bad(path, f"is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise _bad(path, f"is not valid JSON ({exc}); it may be truncated or hand-broken") from None


def _entity(path: str, data: bytes, out: Bundle) -> Row | None:
    raw_entity = _json(path, data)
    if isinstance(raw_entity, dict) and raw_entity.get("entity_type") in CODE_ENTITY_TYPES:
        out.code_rows_skipped += 1 + len(raw_entity.get("observations") or [])
        out.code_entity_ids.add(str(raw_entity.get("id")))
        return None
    entity = checked(path, "the entity", raw_entity, ENTITY)
    entity["observations"] = [checked(path, f"observation {i + 1}", o, OBSERVATION)
                              for i, o in enumerate(entity["observations"])]
    raw = json.loads(data.decode("utf-8")).get("conflicts") or []
    if not isinstance(raw, list):
        raise _bad(path, "'conflicts' is not a list")
    entity["conflicts"] = []
    for i, c in enumerate(raw):
        conflict = checked(path, f"conflict {i + 1}", c, CONFLICT)
        conflict["theirs"] = checked(path, f"conflict {i + 1}'s theirs", conflict["theirs"], OBSERVATION)
        entity["conflicts"].append(conflict)
    return entity


def _drop_code_rows(out: Bundle) -> None:
    """The edges and facts of the code entities left out go too (their ends are not imported)."""
    code = out.code_entity_ids
    if not code:
        return
    relations = [r for r in out.relations if r["from_entity"] not in code and r["to_entity"] not in code]
    facts = [f for f in out.facts if f.get("subject_entity_id") not in code]
    out.code_rows_skipped += len(out.relations) - len(relations) + len(out.facts) - len(facts)
    out.relations, out.facts = relations, facts


def _manifest(root: Path) -> Row:
    path = root / bundle.MANIFEST
    if not path.is_file():
        raise InvalidInput("dir", f"{root} holds no manifest.json, so it is not a sync bundle",
                           "Name the folder `cuba-memorys sync export` wrote (default .cuba-memorys/ at the"
                           " repository's top).")
    manifest = _json(bundle.MANIFEST, bundle.inside(root, bundle.MANIFEST).read_bytes())
    if not isinstance(manifest, dict):
        raise _bad(bundle.MANIFEST, "is not a JSON object")
    version = manifest.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _bad(bundle.MANIFEST, f"'schema_version' is {version!r}, not a version number")
    if version not in SCHEMAS:
        raise InvalidInput("dir", f"the bundle has schema_version {version!r}; this version reads"
                           f" {' and '.join(map(str, SCHEMAS))}", UPGRADE)
    project = manifest.get("project_id")
    if project is not None and not isinstance(project, str):
        raise _bad(bundle.MANIFEST, "'project_id' is not text or null")
    return manifest


def identity(root: Path) -> Bundle:
    """The bundle's manifest and its hash computed from the files, without parsing the rows: what
    deciding to skip it needs (a hook imports after every checkout; most are skipped)."""
    return _identity(root)[0]


def is_own(read: Bundle, node_id: str) -> bool:
    """Whether the bundle is this node's export, untouched since (its manifest names this node
    and the hash it claims is the one of the files present)."""
    return read.manifest.get("node_id") == node_id and read.manifest.get("manifest_hash") == read.manifest_hash


@dataclass(frozen=True)
class Folder:
    """A sync folder's identity, as status, the hooks' export and the import's skip need it."""
    digest: str | None  # the bundle's hash from its files; None: the folder holds no manifest.json
    own: bool  # this node's export, untouched since
    error: str | None = None  # why the bundle cannot be read (then `digest` hashes every byte of it)


def folder(root: Path, node_id: str) -> Folder:
    """The identity of the bundle in ``root`` (the one place it is computed: export's status
    and pending check, the import's skip). A bundle that does not validate (a manifest that is
    not JSON, a schema_version of "two" or 3, a path leading out) is not a traceback: it gets a
    hash of all its bytes and the reason, so a refused import of it can be recognised later."""
    if not root.is_dir() or not (root / bundle.MANIFEST).is_file():
        return Folder(None, False)
    try:
        ident = identity(root)
    except (InvalidInput, OSError) as exc:
        return Folder(_raw_digest(root), False, str(exc))
    return Folder(ident.manifest_hash, is_own(ident, node_id))


def _raw_digest(root: Path) -> str:
    """A hash of an unreadable bundle: manifest.json's bytes and every bundle file's."""
    hashes: dict[str, str] = {}
    try:
        hashes[bundle.MANIFEST] = bundle.sha256((root / bundle.MANIFEST).read_bytes())
        hashes.update((p, bundle.sha256(d)) for p, d in bundle.bundle_files(root).items())
    except (InvalidInput, OSError):
        pass  # a file leading out of the folder: what could be read identifies it
    return bundle.manifest_hash(0, "unreadable", hashes)


def _identity(root: Path) -> tuple[Bundle, dict[str, bytes]]:
    if not root.is_dir():
        raise InvalidInput("dir", f"{root} is not a directory", "Name the folder the bundle was exported to.")
    manifest = _manifest(root)
    files = bundle.bundle_files(root)
    project = manifest.get("project_id")
    digest = bundle.manifest_hash(int(manifest.get("schema_version", 1)), project,  # (checked by _manifest)
                                  {p: bundle.sha256(d) for p, d in files.items()})
    unread, total = bundle.unread_files(root)
    return Bundle(root=root, manifest=manifest, manifest_hash=digest, project_id=project,
                  files_not_read=[{"path": p, "reason": why} for p, why in unread], files_not_read_count=total), files


def read(root: Path, *, with_embeddings: bool = True) -> Bundle:
    """Every file of the bundle in ``root``, parsed and checked (see the module docstring)."""
    out, files = _identity(root)
    manifest = out.manifest
    for path, data in sorted(files.items()):
        if path.startswith("entities/"):
            entity = _entity(path, data, out)
            if entity is not None:
                out.entities.append(entity)
        elif path.startswith("episodes/"):
            out.episodes.append(checked(path, "the episode", _json(path, data), EPISODE))
        elif path.startswith("errors/"):
            out.errors.append(checked(path, "the error", _json(path, data), ERROR))
        elif path in LISTS:
            name, spec = LISTS[path]
            rows = _json(path, data)
            if not isinstance(rows, list):
                raise _bad(path, "is not a JSON list")
            getattr(out, name).extend(checked(path, f"row {i + 1}", r, spec) for i, r in enumerate(rows))
    _drop_code_rows(out)
    for t in out.tombstones:
        if t["table_name"] not in TOMBSTONE_TABLES:
            raise _bad("tombstones.json", f"names table {t['table_name']!r}, not one of {', '.join(TOMBSTONE_TABLES)}")
    if with_embeddings and bundle.EMBEDDINGS in files:
        out.embeddings = _vectors(manifest, files[bundle.EMBEDDINGS])
    return out


def _vectors(manifest: Row, data: bytes) -> dict[str, np.ndarray]:
    claimed = manifest.get("embedding_dim")
    if not isinstance(claimed, int) or not 0 < claimed <= bundle.MAX_DIM:
        raise _bad(bundle.MANIFEST, f"embedding_dim {claimed!r} is not a dimension, yet the bundle has"
                   f" {bundle.EMBEDDINGS}")
    if not bundle.zstd_available():
        raise InvalidInput("dir", f"the bundle has {bundle.EMBEDDINGS} but the zstandard package is not"
                           " installed", "pip install zstandard, or delete the file (the importer then"
                           " recomputes the embeddings).")
    try:
        records = bundle.decode_embeddings(data, claimed)
    except InvalidInput:
        raise
    except Exception as exc:  # zstd's own errors: a truncated or foreign file
        raise _bad(bundle.EMBEDDINGS, f"cannot be decompressed ({exc})") from None
    return dict(records)
