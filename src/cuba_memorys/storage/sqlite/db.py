"""The SQLite connection: pragmas, versioned migrations and nested transactions.

One connection per process, shared by the MCP worker threads under a lock: SQLite
serialises writers anyway, and one connection keeps `PRAGMA data_version` meaningful
(it changes only when *another* connection commits, which is how we notice other processes).

Every use of the connection happens under that lock — executing, fetching rows and closing the
cursor (:meth:`SqliteDatabase.rows`, :meth:`~SqliteDatabase.row`, :meth:`~SqliteDatabase.run`).
A cursor read or finalised outside it takes SQLite's own connection mutex while holding the GIL,
and a thread inside a statement that calls back into Python (least/greatest below) holds that
mutex while it waits for the GIL: the whole process then stops (issue 28). Taking the lock is
bounded by the call's time limit (deadline.py), so a call that cannot get the connection in time
is answered with a timeout instead of waiting for ever.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from cuba_memorys import deadline, locks
from cuba_memorys.errors import HandlerTimeout, StorageError
from cuba_memorys.models import iso, utc_now
from cuba_memorys.storage.sqlite.files import damage_said, is_damage, unreadable_from


def _migration_files() -> list[tuple[int, str, str]]:
    folder = resources.files("cuba_memorys.storage.sqlite").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


CODEGRAPH_MIGRATION = 16  # edits the entities table's stored CHECK (see 0016_codegraph.sql)
MIGRATION_HINT = ("Back up the database file, then start again with a SQLite that allows writable_schema (Python's"
                  " sqlite3 does unless SQLITE_DBCONFIG_DEFENSIVE is on). If 0016 is recorded but did not take:"
                  " `DROP TABLE codegraph_files; DELETE FROM schema_migrations WHERE version = 16;` in the sqlite3"
                  " shell, and the next start applies it again.")


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
        self.lock = locks.rlock("sqlite connection", "store")
        self._depth = 0
        self._pending: list[list[Callable[[], None]]] = []  # after-commit callbacks, one list per level
        try:
            self._configure()  # the first statements: where a file that is not a database shows
        except sqlite3.DatabaseError as exc:
            error = (unreadable_from(self.path, exc) if is_damage(exc) else
                     StorageError(f"cannot open the memory database at {self.path}: {exc}"))
            self.conn.close()
            raise error from exc

    def _configure(self) -> None:
        c = self.conn
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; WAL keeps it consistent
        c.execute("PRAGMA foreign_keys = ON")
        c.execute("PRAGMA busy_timeout = 30000")
        # Deleted and overwritten content is zeroed, in cells and in freed pages, so a deleted row
        # (cuba_forget, every delete) leaves no readable copy in the file's free space.
        c.execute("PRAGMA secure_delete = ON")
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
                    # Re-read under the write lock: another process opening the same new store
                    # may have applied it since `done` was read.
                    if self.conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                        continue
                    try:
                        for statement in _split_sql(sql):
                            self.conn.execute(statement)
                    except sqlite3.Error as exc:
                        raise StorageError(f"migration {name} failed: {exc}{self._defensive_note()}",
                                           hint=MIGRATION_HINT) from exc
                    self.conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                        (version, name, iso(utc_now())),
                    )
                applied.append(name)
            if CODEGRAPH_MIGRATION in done or any(n.startswith(f"{CODEGRAPH_MIGRATION:04d}_") for n in applied):
                self._check_entity_types()
            return applied

    def _check_entity_types(self) -> None:
        """Migration 0016 widens the entities' CHECK by editing the table's stored definition
        (writable_schema): make sure it took, or say so now rather than at the first codegraph
        build (a CHECK failure there would name no cause)."""
        row = self.conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'entities'").fetchone()
        if row is None or "code_symbol" not in (row[0] or ""):
            raise StorageError(
                f"the memory database at {self.path} recorded migration 0016 but its entities table does not"
                f" accept the code entity types (code_symbol, module, external_dependency){self._defensive_note()}",
                hint=MIGRATION_HINT)

    def _defensive_note(self) -> str:
        """SQLITE_DBCONFIG_DEFENSIVE forbids writable_schema; Python's sqlite3 leaves it off, but a
        build of SQLite (or a caller) may turn it on. Python ≥ 3.12 can tell."""
        getconfig = getattr(self.conn, "getconfig", None)
        flag = getattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE", None)
        if getconfig is None or flag is None:
            return ""
        try:
            on = bool(getconfig(flag))
        except sqlite3.Error:
            return ""
        return " (this connection has SQLITE_DBCONFIG_DEFENSIVE on, which forbids the schema edit)" if on else ""

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
        processes wait instead of failing mid-way); inner levels are SAVEPOINTs.

        Callbacks queued with :meth:`after_commit` belong to the level that queued them: a
        savepoint rolled back drops its own, a released one hands them to the level around it,
        and they run once the outermost level commits. A COMMIT that fails (a deferred
        constraint, a full disk, the call's time limit) rolls back, drops every callback, and
        leaves the connection ready for the next transaction."""
        with self.held(), damage_said(self.path):
            depth = self._depth
            if depth == 0:
                self._begin()
            else:
                self.conn.execute(f"SAVEPOINT sp{depth}")
            self._depth += 1
            self._pending.append([])
            try:
                yield self.conn
            except BaseException:
                self._depth -= 1
                self._pending.pop()
                if depth == 0:
                    self.conn.execute("ROLLBACK")
                else:
                    self.conn.execute(f"ROLLBACK TO sp{depth}")
                    self.conn.execute(f"RELEASE sp{depth}")
                raise
            self._depth -= 1
            callbacks = self._pending.pop()
            if depth > 0:
                self.conn.execute(f"RELEASE sp{depth}")
                self._pending[-1].extend(callbacks)
                return
            self._commit()
            for callback in callbacks:  # under the lock, as the vector index expects
                callback()

    @contextmanager
    def held(self) -> Iterator[None]:
        """The connection's lock, waited for no longer than the call's time limit allows."""
        left = deadline.remaining()
        if not self.lock.acquire(timeout=-1 if left is None else left):
            raise HandlerTimeout("the call waited for the database past its time limit (CUBA_HANDLER_TIMEOUT_SECS:"
                                 " other calls were writing) and was stopped; nothing of it was written")
        try:
            yield
        finally:
            self.lock.release()

    def _begin(self) -> None:
        """BEGIN IMMEDIATE, retried while another process holds the write lock past busy_timeout,
        within the call's time limit: contention is waited for, never reported as a failure."""
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not contended(exc):
                    raise
                left = deadline.remaining()
                if left is not None and left <= 0.05:
                    raise HandlerTimeout("the call waited for another process's write to the database past its"
                                         " time limit and was stopped; nothing of it was written") from exc
                time.sleep(0.05)

    # -- statements: executed, read and closed under the lock ------------------------
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self.held(), damage_said(self.path):
            cursor = self._execute(sql, params)
            try:
                return cursor.fetchall()
            finally:
                cursor.close()

    def row(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        with self.held(), damage_said(self.path):
            cursor = self._execute(sql, params)
            try:
                return cursor.fetchone()
            finally:
                cursor.close()  # resets the statement: an open one would hold its table (SQLITE_LOCKED)

    def run(self, sql: str, params: Sequence[Any] = ()) -> Done:
        with self.held(), damage_said(self.path):
            cursor = self._execute(sql, params)
            try:
                return Done(cursor.rowcount, cursor.lastrowid)
            finally:
                cursor.close()

    def _execute(self, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
        """Execute under the held lock. Outside a transaction, a statement that meets another
        process's lock past busy_timeout is retried within the call's time limit."""
        while True:
            try:
                return self.conn.execute(sql, params)
            except sqlite3.OperationalError as exc:
                left = deadline.remaining()
                if self._depth > 0 or not contended(exc) or (left is not None and left <= 0.05):
                    raise
                time.sleep(0.05)

    def _commit(self) -> None:
        try:
            deadline.check()
            self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"the store could not commit the write, so nothing of it was kept: {exc}") from exc
            raise

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outermost transaction commits (dropped on rollback)."""
        if self._depth == 0:
            callback()
        else:
            self._pending[-1].append(callback)

    def data_version(self) -> int:
        found = self.row("PRAGMA data_version")
        assert found is not None  # a pragma always answers one row
        return int(found[0])

    def close(self) -> None:
        with self.lock:
            self.conn.close()


class Done:
    """What a write statement tells: the rows it changed, the last rowid it inserted."""

    __slots__ = ("lastrowid", "rowcount")

    def __init__(self, rowcount: int, lastrowid: int | None) -> None:
        self.rowcount, self.lastrowid = rowcount, lastrowid


def contended(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED: another connection holds what the statement needs."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


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
