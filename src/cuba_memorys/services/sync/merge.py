"""The three-way git merge driver for the sync bundle (`cuba-memorys hook merge-driver %O %A %B %P`).

git hands the driver the common ancestor (%O), ours (%A, where the result goes), theirs (%B) and
the file's path in the work tree (%P). The driver decides the file's kind from the tail of %P,
merges, and writes the result into %A through a temporary file in the same folder and a rename;
only then does it succeed. A path it has no rule for, or a side it cannot read in full, raises
:class:`InvalidInput` before anything is written, so %A stays ours and git keeps its conflict.
It needs no store and opens none: it is pure JSON, fast enough to run once per file of a merge.

**The kind** is decided as the original's ``sync_file_kind``: the file's name first
(relations.json, projects.json, tombstones.json, facts.json, procedures.json, artifacts.json,
source_trust.json, manifest.json, embeddings.bin.zst), then its folder (entities/, errors/,
decisions/, episodes/), then the folder above (episodes/<YYYY-MM>/), wherever the bundle's folder
sits in the repository. embeddings.bin.zst has no rule (binary, recomputable): it stays a conflict.

**Entity files** merge per observation id (beyond the original, which kept ours and dropped theirs):

- An observation's *content* is every field but the bookkeeping ones (:data:`BOOKKEEPING`:
  importance, updated_at, version, crdt_counter, previous_versions, origin_node, crdt_actor,
  embedding_model). Its tags are content: they are extracted from the text. Changed on one side
  only -> that side; on both to the same -> that; on both differently -> ours stays in
  "observations" and theirs goes, whole, into the file's top-level "conflicts" list
  ({observation_id, theirs, their_node}), which the importer opens as a conflict.
- Bookkeeping never conflicts: importance, updated_at, version and crdt_counter are the max of
  both sides, previous_versions a three-way set of versions (one record per content and
  version: each machine that replaced a version recorded it with its own time and node, and the
  later record is kept, as the import keeps it), and origin_node, crdt_actor and embedding_model
  follow the side whose content was taken (three-way when the content is the same).
- In the ancestor and missing on one side: deleted when the other side left the content as it
  was, kept when the other side edited it (an edit beats a delete). New on one side, or on both:
  added (new on both with different content: ours, and theirs as a conflict).
- "conflicts" already in either side are kept, once per (observation_id, theirs' content).
- The entity's own fields: importance and access_count the max, the others three-way (both
  changed: ours). Observations sorted by created_at then id, as export sorts them.
- Without an ancestor (%O empty or missing: the file was added on both sides) everything is
  "new on both sides": the original's union by id, ours first, with conflicts instead of losses.

The other files follow services/sync/merge_rules.py. The output is the exporter's encoding
(bundle.encode), so a merged file equal to an export is byte-identical to it; "conflicts", which
export never writes, comes last in the entity object and only when there is one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import PurePosixPath
from typing import Any, TypedDict

from cuba_memorys.errors import InvalidInput
from cuba_memorys.services.sync import bundle
from cuba_memorys.services.sync.merge_rules import (
    BASE,
    BOTH,
    MISSING,
    OURS,
    ROW_RULES,
    THEIRS,
    MergeRefused,
    Row,
    largest,
    max_rule,
    merge_decision,
    merge_episode,
    merge_error,
    merge_object,
    merge_rows,
    merge_versions,
    pick,
)

BOOKKEEPING = ("importance", "updated_at", "version", "crdt_counter", "previous_versions", "origin_node",
               "crdt_actor", "embedding_model")
FOLLOW_CONTENT = ("origin_node", "crdt_actor", "embedding_model")
LATEST = ("importance", "updated_at", "version", "crdt_counter")
ENTITY_COUNTERS = ("importance", "access_count")
ROW_FOLDERS = {"entities": "entity", "errors": "error", "decisions": "decision", "episodes": "episode"}
MANIFEST_AGREES = ("project_id", "with_embeddings", "embedding_dim", "embedding_model", "schema_version")


class MergeDone(TypedDict):
    path: str  # %P
    kind: str  # what file_kind decided
    conflicts: int  # observations changed on both sides, recorded in the file (entity files)


# -- the kind of a file ------------------------------------------------------------------------
def file_kind(path: str) -> str | None:
    """What the bundle file at ``path`` is (a list file's name, "manifest", "embeddings", or
    entity / episode / error / decision), from its name, then its folder, then the one above;
    None when the bundle has no such file."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not parts:
        return None
    name = parts[-1]
    if name in ROW_RULES:
        return name
    if name == bundle.MANIFEST:
        return "manifest"
    if name == bundle.EMBEDDINGS:
        return "embeddings"
    if not name.endswith(".json") or name.startswith("."):
        return None
    if len(parts) >= 2 and parts[-2] in ROW_FOLDERS:
        return ROW_FOLDERS[parts[-2]]
    if len(parts) >= 3 and parts[-3] == "episodes":
        return "episode"
    return None


# -- reading the sides -------------------------------------------------------------------------
def _parse(side: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MergeRefused(side, f"not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise MergeRefused(side, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise MergeRefused(side, "not JSON this driver can read (nested too deeply)") from None


def _read(side: str, path: str, optional: bool = False) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        if optional:
            return None
        raise MergeRefused(side, f"the file git named ({path}) does not exist") from None
    except OSError as exc:
        raise MergeRefused(side, f"the file git named ({path}) cannot be read ({exc.strerror})") from None


def _object(side: str, value: Any, what: str) -> Row:
    if not isinstance(value, dict):
        raise MergeRefused(side, f"{what} must be a JSON object, not a {type(value).__name__}")
    return value


# -- entity files ------------------------------------------------------------------------------
def _observations(side: str, entity: Row) -> dict[str, Row]:
    value = entity.get("observations", MISSING)
    if not isinstance(value, list):
        raise MergeRefused(side, "the entity's \"observations\" must be a JSON list")
    out: dict[str, Row] = {}
    for number, obs in enumerate(value, 1):
        if not isinstance(obs, dict) or not isinstance(obs.get("id"), str):
            raise MergeRefused(side, f"observation {number} is not a JSON object with a string \"id\"")
        if obs["id"] in out:
            raise MergeRefused(side, f"observation {obs['id']} appears twice")
        out[obs["id"]] = obs
    return out


def _conflicts(side: str, entity: Row) -> list[Row]:
    value = entity.get("conflicts", [])
    if not isinstance(value, list) or not all(
            isinstance(c, dict) and isinstance(c.get("observation_id"), str) and isinstance(c.get("theirs"), dict)
            for c in value):
        raise MergeRefused(side, "\"conflicts\" must be a list of {observation_id, theirs, their_node}")
    return value


def _content(obs: Row) -> Row:
    """What an observation says, for "changed?": every field but the bookkeeping ones."""
    return {k: v for k, v in obs.items() if k not in BOOKKEEPING}


def conflict_entry(theirs: Row) -> Row:
    return {"observation_id": theirs["id"], "theirs": theirs,
            "their_node": theirs.get("crdt_actor") or theirs.get("origin_node") or None}


def _merge_observation(base: Row | None, ours: Row, theirs: Row) -> tuple[Row, Row | None]:
    """One observation present on both sides: (the merged row, theirs as a conflict or None)."""
    same = _content(ours) == _content(theirs)
    ours_edited = base is None or _content(ours) != _content(base)
    theirs_edited = base is None or _content(theirs) != _content(base)
    take_theirs = not same and theirs_edited and not ours_edited
    conflict = None if same or not theirs_edited or not ours_edited else conflict_entry(theirs)
    out = dict(theirs if take_theirs else ours)
    has_base = base is not None
    before = base or {}
    for name in LATEST:
        value = largest(ours.get(name, MISSING), theirs.get(name, MISSING), f"observation {ours['id']} {name}")
        if value is not MISSING:
            out[name] = value
    if "previous_versions" in ours or "previous_versions" in theirs:
        versions = merge_versions(before.get("previous_versions", MISSING), ours.get("previous_versions", MISSING),
                                  theirs.get("previous_versions", MISSING), has_base)
        if versions is not MISSING:
            out["previous_versions"] = versions
    if same:  # nobody's content won: each of these fields on its own
        for name in FOLLOW_CONTENT:
            value = pick(before.get(name, MISSING), ours.get(name, MISSING), theirs.get(name, MISSING), has_base)
            if value is MISSING:
                out.pop(name, None)
            else:
                out[name] = value
    return out, conflict


def _merge_one_sided(base: Row | None, present: Row) -> Row | None:
    """An observation on one side only: new (kept), or deleted on the other side — kept only
    when this side edited it since the ancestor."""
    if base is None or _content(present) != _content(base):
        return present
    return None


def _sort_key(obs: Row) -> tuple[str, str]:
    created = obs.get("created_at")
    return (created if isinstance(created, str) else "", obs["id"])


def merge_entity(base: Row | None, ours: Row, theirs: Row) -> tuple[Row, int]:
    """An entity file merged (see the module docstring): (the merged object, new conflicts)."""
    if "id" in ours and "id" in theirs and ours["id"] != theirs["id"]:
        raise MergeRefused(BOTH, f"the file holds entity {ours['id']} on one side and {theirs['id']} on the"
                                 " other: two different entities")
    before = _observations(BASE, base) if base is not None else {}
    mine, other = _observations(OURS, ours), _observations(THEIRS, theirs)
    known = (_conflicts(OURS, ours), _conflicts(THEIRS, theirs))
    if base is not None:
        _conflicts(BASE, base)
    merged: list[Row] = []
    found: list[Row] = []
    for obs_id in dict.fromkeys([*mine, *other]):
        b, o, t = before.get(obs_id), mine.get(obs_id), other.get(obs_id)
        if o is not None and t is not None:
            row, conflict = _merge_observation(b, o, t)
            merged.append(row)
            if conflict is not None:
                found.append(conflict)
            continue
        present = o if o is not None else t
        assert present is not None
        kept = _merge_one_sided(b, present)
        if kept is not None:
            merged.append(kept)
    merged.sort(key=_sort_key)
    fields = merge_object(base, ours, theirs, {name: max_rule(name) for name in ENTITY_COUNTERS},
                          skip=("observations", "conflicts"))
    out: Row = {}
    for key in [*ours, *(k for k in theirs if k not in ours)]:
        if key == "observations":
            out[key] = merged
        elif key in fields:
            out[key] = fields[key]
    out.setdefault("observations", merged)
    conflicts = _union_conflicts([*known[0], *known[1], *found])
    new = len(conflicts) - len(_union_conflicts([*known[0], *known[1]]))
    if conflicts:
        out["conflicts"] = conflicts
    return out, new


def _union_conflicts(entries: list[Row]) -> list[Row]:
    """Each conflict once per (observation_id, theirs' content), first seen kept, sorted."""
    seen: dict[tuple[str, str], Row] = {}
    for entry in entries:
        key = (entry["observation_id"], json.dumps(entry["theirs"].get("content"), ensure_ascii=False))
        seen.setdefault(key, entry)
    return [seen[k] for k in sorted(seen)]


# -- every kind ------------------------------------------------------------------------------
def _manifest(ours: bytes, theirs: bytes) -> bytes:
    mine = _object(OURS, _parse(OURS, ours), "manifest.json")
    other = _object(THEIRS, _parse(THEIRS, theirs), "manifest.json")
    differ = [k for k in MANIFEST_AGREES if mine.get(k) != other.get(k)]
    if differ:
        raise MergeRefused(BOTH, "the two bundles differ in " + ", ".join(
            f"{k} ({json.dumps(mine.get(k))} vs {json.dumps(other.get(k))})" for k in differ)
            + "; export again on one side after choosing")
    return ours  # the rest is derived: the next export rewrites it


def merge_bytes(kind: str, base: bytes | None, ours: bytes, theirs: bytes) -> tuple[bytes, int]:
    """The merged file of ``kind`` (see :func:`file_kind`) and the conflicts it records. ``base``
    None or blank means there is no ancestor. Raises MergeRefused."""
    if kind == "embeddings":
        raise MergeRefused(BOTH, "embeddings.bin.zst has no merge rule (binary; the importer recomputes"
                                 " vectors): keep one side, or export again")
    if kind == "manifest":
        return _manifest(ours, theirs), 0
    before = _parse(BASE, base) if base is not None and base.strip() else None
    mine, other = _parse(OURS, ours), _parse(THEIRS, theirs)
    if kind in ROW_RULES:
        return bundle.encode(merge_rows(kind, before, mine, other)), 0
    what = f"the {kind} file"
    b = _object(BASE, before, what) if before is not None else None
    o, t = _object(OURS, mine, what), _object(THEIRS, other, what)
    if kind == "entity":
        merged, conflicts = merge_entity(b, o, t)
        return bundle.encode(merged), conflicts
    rule = {"episode": merge_episode, "error": merge_error, "decision": merge_decision}[kind]
    return bundle.encode(rule(b, o, t)), 0


def _write_in_place(path: str, data: bytes) -> None:
    """Replace the file at ``path`` through a temporary file in its folder and a rename (its mode
    kept), so git reads the old bytes or the new ones, never half."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(OSError):  # ours vanished meanwhile: the rename still puts it where git looks
            os.chmod(temp, os.stat(path).st_mode & 0o7777)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def merge_driver(base_path: str, ours_path: str, theirs_path: str, work_path: str) -> MergeDone:
    """git's three-way merge of one bundle file: read %O %A %B, merge by the kind of %P, write the
    result into %A. Anything it cannot merge raises InvalidInput naming the side, %A untouched."""
    kind = file_kind(work_path)
    try:
        if kind is None:
            raise MergeRefused("path (%P)", "not a file of the sync bundle (entities/*, episodes/**,"
                                            " errors/*, decisions/*, " + ", ".join(ROW_RULES)
                                + ", manifest.json)")
        ours = _read(OURS, ours_path)
        theirs = _read(THEIRS, theirs_path)
        base = _read(BASE, base_path, optional=True)
        assert ours is not None and theirs is not None
        merged, conflicts = merge_bytes(kind, base, ours, theirs)
    except MergeRefused as exc:
        raise InvalidInput(exc.side, f"{work_path}: {exc.problem}; %A was left as it was, so git keeps"
                                     " the conflict") from None
    if merged != ours:
        _write_in_place(ours_path, merged)
    return {"path": work_path, "kind": kind, "conflicts": conflicts}
