"""What the file-writing exports share: a target directory that is empty or ours, safe names."""

from __future__ import annotations

import re
from pathlib import Path

from cuba_memorys.errors import Conflict, InvalidInput

MARKER = ".cuba-memorys-export"  # a directory holding this file was written by us
_UNSAFE = re.compile(r'[\\/:*?"<>|#^\[\]\x00-\x1f]+')
MAX_NAME = 120


def safe_name(name: str, taken: set[str]) -> str:
    """A file name (without extension) from an entity or recipe name: no path separators, no
    characters Obsidian or Windows reject, no leading dot, unique case-insensitively in ``taken``."""
    base = _UNSAFE.sub("_", name).strip().strip(".").strip() or "unnamed"
    base = base[:MAX_NAME]
    candidate, n = base, 2
    while candidate.lower() in taken:
        candidate = f"{base} ({n})"
        n += 1
    taken.add(candidate.lower())
    return candidate


def target_dir(param: str, directory: object, kind: str, apply: bool) -> Path:
    """The directory to write ``kind`` into: created when missing; an empty one is used; a
    non-empty one only with ``apply`` and only when an earlier export of ``kind`` made it."""
    if not isinstance(directory, (str, Path)) or not str(directory).strip():
        raise InvalidInput(param, "no directory given", "pass the directory to write into")
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise InvalidInput(param, f"{path} is a file, not a directory", "pass a directory")
    if path.is_dir() and any(path.iterdir()):
        marker = path / MARKER
        ours = marker.is_file() and marker.read_text(encoding="utf-8").strip() == kind
        if not apply:
            raise Conflict(f"{path} is not empty: pass --apply to write into it"
                           + ("" if ours else " (only a directory an earlier export of this kind wrote)"))
        if not ours:
            raise Conflict(f"{path} is not empty and was not written by `cuba-memorys` ({kind} export):"
                           " choose an empty or new directory")
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text(kind + "\n", encoding="utf-8")
    return path
