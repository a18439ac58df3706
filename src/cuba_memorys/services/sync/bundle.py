"""The sync bundle on disk (schema version 2, original-0.27.md §4e): file names, the JSON
encoding, the manifest hash, and writes that stay inside the bundle's root.

Layout under the root::

    entities/<slug(name)>-<id8>.json   one entity with its observations
    episodes/<YYYY-MM>/<id>.json       one episode, by the month it started
    errors/<id>.json                   one error
    relations.json facts.json procedures.json source_trust.json projects.json
    tombstones.json artifacts.json     lists of rows
    embeddings.bin.zst                 optional: zstd over (16-byte uuid, dim × f32 LE) records
    manifest.json                      what the bundle is, and the hash over every other file

Nothing else is read, and nothing else counts in the hash: a decisions/ folder an older
original wrote (decisions are observations here) is named by :func:`unread_files`.

JSON is written deterministically: fields in the order of the original's structs (the order
the storage module selects them in), two-space indent, UTF-8 unescaped, one trailing newline.
Unchanged rows therefore give byte-identical files, which is what lets an export rewrite only
what changed and keeps git diffs to the rows that did.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cuba_memorys.errors import InvalidInput

SCHEMA_VERSION = 2
MANIFEST = "manifest.json"
EMBEDDINGS = "embeddings.bin.zst"
LIST_FILES = ("relations.json", "facts.json", "procedures.json", "source_trust.json", "projects.json",
              "tombstones.json", "artifacts.json")
WIPE_ROWS, WIPE_SHARE = 25, 0.10  # the original's mass-tombstone guard (import), and the export's
ROW_DIRS = ("entities", "episodes", "errors")  # one file per row; pruned when their row is gone
SLUG_MAX = 120
MAX_DIM = 16000
ZSTD_LEVEL = 3  # fixed, so the same vectors always compress to the same bytes


def encode(value: Any) -> bytes:
    """The bundle's JSON encoding of ``value`` (see the module docstring)."""
    return (json.dumps(value, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def slug(name: str) -> str:
    """A file-name-safe form of an entity's name: lowercase letters and digits joined by "-",
    at most 120 characters ("entity" when nothing is left)."""
    text = re.sub(r"[^0-9a-z]+", "-", name.lower()).strip("-")[:SLUG_MAX].strip("-")
    return text or "entity"


def entity_path(entity_id: str, name: str) -> str:
    return f"entities/{slug(name)}-{entity_id[:8]}.json"


def episode_path(episode_id: str, started_at: str) -> str:
    month = started_at[:7] if re.fullmatch(r"\d{4}-\d{2}", started_at[:7]) else "undated"
    return f"episodes/{month}/{episode_id}.json"


def error_path(error_id: str) -> str:
    return f"errors/{error_id}.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_hash(schema_version: int, project_id: str | None, file_hashes: Mapping[str, str]) -> str:
    """sha256 of "schema_version\\nproject_id\\n" then one "relpath sha256" line per file,
    sorted by relative path (manifest.json itself excluded)."""
    lines = [f"{schema_version}\n{project_id or ''}\n"]
    lines += [f"{path} {file_hashes[path]}\n" for path in sorted(file_hashes)]
    return sha256("".join(lines).encode("utf-8"))


# -- the root and writes inside it ---------------------------------------------------------
def inside(root: Path, relpath: str) -> Path:
    """``root/relpath`` after checking it stays inside ``root`` (symbolic links followed):
    a bundle never writes, reads or deletes anywhere else."""
    if not relpath or Path(relpath).is_absolute() or "\\" in relpath or "\0" in relpath:
        raise InvalidInput("path", f"{relpath!r} is not a relative path inside the sync directory",
                           "Bundle files are named entities/…, episodes/…, errors/… or <name>.json.")
    base = root.resolve()
    target = (base / relpath).resolve()
    if target != base and base not in target.parents:
        raise InvalidInput("path", f"{relpath!r} resolves to {target}, outside the sync directory {base};"
                           " nothing was written there",
                           "Remove the symbolic link or the '..' that leads out of the sync directory.")
    return target


def write_atomic(root: Path, relpath: str, data: bytes) -> None:
    """Write ``data`` to ``root/relpath`` through a temporary file in the same folder and a
    rename, so a reader (git, an import, a crash) sees the old file or the new one, never half."""
    target = inside(root, relpath)
    target.parent.mkdir(parents=True, exist_ok=True)
    inside(root, relpath)  # again: a folder just made could not be a link, but one that existed could
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def remove(root: Path, relpath: str) -> None:
    inside(root, relpath).unlink(missing_ok=True)


def bundle_files(root: Path) -> dict[str, bytes]:
    """Every bundle file under ``root`` (manifest.json aside) by relative path: the row folders'
    *.json, the list files and the embeddings. Other files (a README, .peer-inbox, temporary
    files) are not the bundle's and are left alone."""
    found: dict[str, bytes] = {}
    if not root.is_dir():
        return found
    for name in (*LIST_FILES, EMBEDDINGS):
        path = root / name
        if path.is_file():
            found[name] = inside(root, name).read_bytes()
    for folder in ROW_DIRS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.json")):
            if path.name.startswith("."):
                continue
            rel = path.relative_to(root).as_posix()
            found[rel] = inside(root, rel).read_bytes()
    return found


UNREAD_LISTED = 100
DECISIONS = "decisions"
NOT_READ = {
    DECISIONS: "decisions are observations of type decision here (in their entity's file); the schema-2"
               " layout defines no decisions/ file, so this version reads none (an older original wrote them)",
    "other": "not a file of the schema-2 layout: this version does not know what it holds",
}


def unread_files(root: Path) -> tuple[list[tuple[str, str]], int]:
    """The files under ``root`` that look like bundle files (*.json, *.zst) yet are not read:
    a decisions/ folder as older originals wrote, a newer writer's file, a stray copy. Returns
    the first UNREAD_LISTED as (relative path, why) and how many there are. Like the other
    non-bundle files they count in no hash (see docs/sync.md), but an import names them
    rather than dropping them silently. Hidden names (.peer-inbox, temporary files) and the
    row folders' own files are not looked at."""
    found: list[tuple[str, str]] = []
    total = 0
    if not root.is_dir():
        return found, total
    known = {*LIST_FILES, EMBEDDINGS, MANIFEST}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in ROW_DIRS or entry.name in known:
            continue
        if entry.is_dir() and not entry.is_symlink():
            paths = sorted(p for p in entry.rglob("*") if p.suffix in (".json", ".zst") and p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(root).parts))
        else:
            paths = [entry] if entry.suffix in (".json", ".zst") else []
        for path in paths:
            total += 1
            if len(found) < UNREAD_LISTED:
                why = NOT_READ[DECISIONS] if entry.name == DECISIONS else NOT_READ["other"]
                found.append((path.relative_to(root).as_posix(), why))
    return found, total


def read_manifest(root: Path) -> dict[str, Any] | None:
    """The bundle's manifest, or None when there is none or it is not a JSON object."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        value = json.loads(inside(root, MANIFEST).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def row_project(data: bytes) -> tuple[bool, str | None]:
    """(readable, project_id) of a row file: whether it parsed as an object, and its project."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False, None
    if not isinstance(value, dict):
        return False, None
    project = value.get("project_id")
    return True, project if isinstance(project, str) else None


# -- embeddings ----------------------------------------------------------------------------
def encode_embeddings(vectors: Iterable[tuple[str, np.ndarray]], dim: int) -> bytes:
    """embeddings.bin.zst: zstd over records of the 16-byte uuid then ``dim`` little-endian
    float32s, in the order given (the caller sorts by id, for identical bytes)."""
    import zstandard  # optional at import time of the package: only --with-embeddings needs it

    if not 0 < dim <= MAX_DIM:
        raise InvalidInput("with_embeddings", f"embedding dimension {dim} is outside 1-{MAX_DIM}",
                           "Export without embeddings; the importer recomputes them.")
    raw = bytearray()
    for row_id, vector in vectors:
        raw += uuid.UUID(row_id).bytes
        raw += np.asarray(vector, dtype="<f4").reshape(dim).tobytes()
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress(bytes(raw))


def decode_embeddings(data: bytes, dim: int) -> list[tuple[str, np.ndarray]]:
    """The records of an embeddings.bin.zst (the reverse of :func:`encode_embeddings`)."""
    import zstandard

    raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 34)
    size = 16 + 4 * dim
    if dim <= 0 or len(raw) % size:
        raise InvalidInput("embeddings", f"{EMBEDDINGS} is not a whole number of {dim}-d records",
                           "Export the bundle again.")
    out = []
    for start in range(0, len(raw), size):
        row_id = str(uuid.UUID(bytes=raw[start:start + 16]))
        out.append((row_id, np.frombuffer(raw[start + 16:start + size], dtype="<f4").copy()))
    return out


def zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True

