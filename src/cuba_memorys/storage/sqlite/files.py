"""The embedded store's folder and file as the operating system sees them.

Before SQLite touches anything: can the data folder be created and written (a file in its
place or on its way, a read-only folder), and is ``memory.db`` a SQLite file at all? And when
SQLite finds the file is not a database or is damaged, what to tell the user: what is wrong
and the ways out, in order. Each problem is one :class:`StorageError` sentence, never a
traceback; nothing here deletes or rewrites a file.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuba_memorys.errors import StorageError, StoreUnreadable

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26  # SQLite's primary result codes for a damaged / foreign file


def prepare_folder(folder: Path, setting: str, default: Path | None = None) -> None:
    """Create the data folder (and its parents) if missing, and check the store can write there.
    ``setting`` names where the folder came from (CUBA_DATA_DIR or DATABASE_URL), ``default``
    the folder the server would use without it (suggested when it differs)."""
    hint = _hint(folder, setting, default)
    if folder.exists() and not folder.is_dir():
        raise StorageError(f"{setting} points at {folder}, which is a file, not a folder.", hint=hint)
    blocker = _file_on_the_way(folder)
    if blocker is not None:
        raise StorageError(f"{setting} points at {folder}, but {blocker} on its way is a file, not a folder,"
                           " so the folder cannot be created.", hint=hint)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the data folder {folder} ({setting}): {_why(exc, folder)}.",
                           hint=hint) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StorageError(f"the data folder {folder} ({setting}) is read-only{_read_only_reason(folder)}: the"
                           " store writes memory.db and its -wal and -shm files there.", hint=hint)


def check_header(path: Path) -> None:
    """Refuse a non-empty file that does not start as every SQLite database does (an empty one
    is a new store), before the embedding model is loaded for nothing."""
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
    except (FileNotFoundError, IsADirectoryError):
        return  # a new store; a folder in its place is SQLite's "unable to open" below
    except OSError:
        return  # unreadable for another reason: SQLite's own open says which
    if head and head != SQLITE_MAGIC:
        raise unreadable(path, "not_sqlite", "its first bytes are not SQLite's header")


def is_damage(exc: BaseException | None) -> bool:
    """Whether SQLite said the file is not a database or is malformed (not: busy, locked, full)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in (SQLITE_CORRUPT,
                                                                                          SQLITE_NOTADB)


def unreadable_from(path: Path | str, exc: sqlite3.Error) -> StoreUnreadable:
    """The error for SQLite's SQLITE_NOTADB / SQLITE_CORRUPT on ``path``."""
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == SQLITE_NOTADB:
        return unreadable(Path(path), "not_sqlite", f"SQLite says: {exc}")
    return unreadable(Path(path), "damaged", f"SQLite says: {exc}")


def unreadable(path: Path, kind: str, detail: str) -> StoreUnreadable:
    """``kind``: not_sqlite (a foreign file) or damaged (a SQLite file SQLite cannot read)."""
    if kind == "not_sqlite":
        what = f"is not a SQLite database ({detail}): it was overwritten, or another file was put in its place"
    else:
        what = (f"is damaged ({detail}): part of it cannot be read, as after a truncated copy, a full disk or"
                " a crash that lost pages")
    return StoreUnreadable(f"the memory database {path} {what}.", path=str(path), kind=kind,
                           ways_out=ways_out(path))


def ways_out(path: Path) -> list[str]:
    """What to try, in order, to get a readable store back; the damaged file is left in place."""
    steps = []
    wal = path.with_name(path.name + "-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        steps.append(f"{wal.name} is beside it ({wal.stat().st_size} bytes) and may hold the latest commits: copy"
                     f" {path.name}, {wal.name} and {path.name}-shm together to a safe place before anything else,"
                     " and keep them together (SQLite reads them as one; the steps below use it too)")
    steps.append("restore a backup into a fresh store: point CUBA_DATA_DIR at a new, empty folder and run"
                 " `cuba-memorys sync import --dir BUNDLE` with a sync bundle (a .cuba-memorys/ folder that"
                 " `cuba-memorys sync export` or the git hooks wrote, also in a clone of your repository); the"
                 " undo files in CUBA_UNDO_DIR put back what they hold with `cuba-memorys undo FILE`")
    steps.append(f"salvage what is still readable: sqlite3 {shlex.quote(str(path))} \".recover\" | sqlite3"
                 " NEW_FOLDER/memory.db, then point CUBA_DATA_DIR at NEW_FOLDER and run `cuba-memorys doctor`")
    steps.append(f"once the memory is back, move {path.name} away yourself: cuba-memorys never deletes it")
    return steps


@contextmanager
def damage_said(path: Path | str) -> Iterator[None]:
    """SQLite's "not a database" / "malformed" inside the block, raised as :class:`StoreUnreadable`
    (also when an earlier layer wrapped it in a StorageError, as a failed migration or commit does)."""
    try:
        yield
    except StoreUnreadable:
        raise
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise unreadable_from(path, exc) from exc
        raise
    except StorageError as exc:
        if is_damage(exc.__cause__):
            raise unreadable_from(path, exc.__cause__) from exc  # type: ignore[arg-type]
        raise


def _file_on_the_way(folder: Path) -> Path | None:
    """The first existing ancestor of ``folder`` that is not a folder, if any."""
    for parent in reversed(folder.absolute().parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def _why(exc: OSError, folder: Path) -> str:
    """What stopped mkdir, in words (the ancestor that exists is where it failed)."""
    existing = next((p for p in folder.absolute().parents if p.exists()), None)
    where = f" in {existing}" if existing is not None else ""
    reason = _read_only_reason(existing) if existing is not None else ""
    if reason:
        return f"nothing can be created{where}{reason}"
    return f"{exc.strerror or exc}{where}"


def _read_only_reason(folder: Path) -> str:
    """", on a read-only file system" or ", no write permission for this user" ("" when writable)."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return ", on a read-only file system"
    except OSError:
        return ""
    return "" if os.access(folder, os.W_OK | os.X_OK) else ", no write permission for this user"


def _hint(folder: Path, setting: str, default: Path | None) -> str:
    if setting == "DATABASE_URL":
        return "Point DATABASE_URL at sqlite:///path/to/memory.db in a folder you can write, or unset it."
    text = f"Point {setting} at a folder you can write (it is created if missing)"
    if default is not None and default.absolute() != folder.absolute():
        text += f", or unset it for the default, {default}"
    return text + "."
