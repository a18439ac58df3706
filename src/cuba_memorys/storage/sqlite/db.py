"""The SQLite connection: pragmas, versioned migrations and nested transactions.

One connection per process, shared by the MCP worker threads under a lock: SQLite
serialises writers anyway, and one connection keeps `PRAGMA data_version` meaningful
(it changes only when *another* connection commits, which is how we notice other processes).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from cuba_memorys.errors import StorageError
from cuba_memorys.models import iso, utc_now


def _migration_files() -> list[tuple[int, str, str]]:
    folder = resources.files("cuba_memorys.storage.sqlite").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


class SqliteDatabase:
    """A connection with a re-entrant lock and SAVEPOINT-based nested transactions."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.Error as exc:
            raise StorageError(
                f"cannot open the memory database at {self.path}: {exc}",
                hint="Check that CUBA_DATA_DIR points to a writable folder.",
            ) from exc
        self.conn.row_factory = sqlite3.Row
        self.lock = threading.RLock()
        self._depth = 0
        self._after_commit: list[Callable[[], None]] = []
        self._on_rollback: list[Callable[[], None]] = []
        self._configure()

    def _configure(self) -> None:
        c = self.conn
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; WAL keeps it consistent
        c.execute("PRAGMA foreign_keys = ON")
        c.execute("PRAGMA busy_timeout = 30000")
        # PostgreSQL's scalar least()/greatest(), so the shared SQL reads the same on both.
        c.create_function("least", -1, _least, deterministic=True)
        c.create_function("greatest", -1, _greatest, deterministic=True)

    # -- migrations -------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply every migration not yet recorded; returns the names applied now."""
        with self.lock:
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            done = {r[0] for r in self.conn.execute("SELECT version FROM schema_migrations")}
            applied = []
            for version, name, sql in _migration_files():
                if version in done:
                    continue
                with self.transaction():
                    for statement in _split_sql(sql):
                        self.conn.execute(statement)
                    self.conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                        (version, name, iso(utc_now())),
                    )
                applied.append(name)
            return applied

    def migration_status(self) -> tuple[list[str], list[str]]:
        """(applied, pending) migration names."""
        with self.lock:
            done = {r[0] for r in self.conn.execute("SELECT version FROM schema_migrations")}
        files = _migration_files()
        return ([n for v, n, _ in files if v in done], [n for v, n, _ in files if v not in done])

    # -- transactions -----------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Outermost level is BEGIN IMMEDIATE (takes the write lock up front, so concurrent
        processes wait instead of failing mid-way); inner levels are SAVEPOINTs."""
        with self.lock:
            name = f"sp{self._depth}"
            if self._depth == 0:
                self.conn.execute("BEGIN IMMEDIATE")
            else:
                self.conn.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield self.conn
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self.conn.execute("ROLLBACK")
                    self._finish(self._on_rollback)
                else:
                    self.conn.execute(f"ROLLBACK TO {name}")
                    self.conn.execute(f"RELEASE {name}")
                raise
            self._depth -= 1
            if self._depth == 0:
                self.conn.execute("COMMIT")
                self._finish(self._after_commit)
            else:
                self.conn.execute(f"RELEASE {name}")

    def _finish(self, callbacks: list[Callable[[], None]]) -> None:
        todo = list(callbacks)
        self._after_commit.clear()
        self._on_rollback.clear()
        for callback in todo:
            callback()

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outermost transaction commits (dropped on rollback)."""
        if self._depth == 0:
            callback()
        else:
            self._after_commit.append(callback)

    def data_version(self) -> int:
        with self.lock:
            return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def _least(*values):
    present = [v for v in values if v is not None]  # as PostgreSQL: NULLs are ignored
    return min(present) if present else None


def _greatest(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _split_sql(sql: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN … END;) whole."""
    statements, buffer = [], []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("--"):
            continue
        buffer.append(line)
        candidate = "\n".join(buffer)
        if stripped.endswith(";") and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            buffer = []
    if buffer:
        statements.append("\n".join(buffer))
    return statements
