"""`cuba-memorys cache migrate`: the original's verb, answered honestly for this program.

The original 0.27 renamed its cache folder from ``~/.cache/cuba-memorys`` to
``~/.cache/memory-industry`` and ``cache migrate [--apply]`` moves the old folder's entries into
the new one. Here ``~/.cache/cuba-memorys`` is not the old folder but the one this program reads
(models, the embedding engine's build, undo files, the audit key), so moving it would hide them
from cuba-memorys. The verb therefore moves nothing, with or without ``--apply``, says so and
what each folder holds, and succeeds: a script written for the original keeps running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuba_memorys.config import Settings
from cuba_memorys.services import audit

SUBCOMMANDS = ("migrate",)  # the original's only cache subcommand (spec §3, 21)
ENTRIES_SHOWN = 50


def roots(home: Path) -> tuple[Path, Path]:
    """(the folder this program reads, the original 0.27's newer folder)."""
    return home / ".cache" / "cuba-memorys", home / ".cache" / "memory-industry"


def migrate(settings: Settings, home: Path, *, apply: bool = False) -> dict[str, Any]:
    """The plan the original's ``cache migrate`` would print, for this program: nothing to move."""
    ours, newer = roots(home)
    reads = {"models": str(settings.models_dir), "undo": str(settings.undo_dir), "audit_key": str(audit.key_file())}
    result: dict[str, Any] = {
        "action": "cache_migrate", "apply": apply, "moved": [], "would_move": [],
        "cache_dir": str(ours), "cache_dir_exists": ours.is_dir(), "entries": _entries(ours), "reads": reads,
        "newer_dir": str(newer), "newer_dir_exists": newer.is_dir(), "newer_entries": _entries(newer),
        "note": (f"Nothing to move: cuba-memorys reads its cache in {ours} (the folder the original's cache"
                 f" migrate empties), so moving it into {newer} would hide it from this program. Nothing was"
                 " changed" + (", --apply or not." if apply else ".")),
    }
    if result["newer_dir_exists"]:
        result["newer_note"] = (f"{newer} (the original 0.27's cache) is not read here; to use models kept there,"
                                f" set CUBA_MODELS_DIR (and CUBA_UNDO_DIR for its undo files) to its folders.")
    return result


def _entries(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir())[:ENTRIES_SHOWN]
