"""The PostgreSQL connection: a psycopg 3 pool, versioned migrations, nested transactions,
and the project binding row-level security reads.

Statements are written once for both backends with ``?`` placeholders; :func:`to_pg` turns
them into psycopg's ``%s`` form. A transaction pins one pooled connection to the calling
thread until it ends (nested levels are savepoints); a statement outside a transaction borrows
a connection in autocommit mode and gives it back at once.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.cursor import BaseCursor
from psycopg_pool import ConnectionPool, PoolTimeout

from cuba_memorys import deadline, locks
from cuba_memorys.errors import HandlerTimeout, StorageError
from cuba_memorys.models import iso, utc_now

# The project whose rows this context may see (None: no project bound, everything visible).
_BOUND_PROJECT: contextvars.ContextVar[str | None] = contextvars.ContextVar("cuba_project", default=None)
# What the bound principal may read and write, as the restrictive policies read it ("" = no principal).
_BOUND_ACCESS: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("cuba.access", default=("", ""))
APP_ROLE = "cuba_app"  # the non-superuser, no-BYPASSRLS role `cuba-memorys secure` creates
_MIGRATION_LOCK = 0x63756261  # pg_advisory_xact_lock key: one process migrates at a time


@lru_cache(maxsize=4096)
def to_pg(sql: str) -> str:
    """``?`` placeholders → ``%s``; literal ``%`` doubled (the shared SQL has no ``?`` elsewhere)."""
    return sql.replace("%", "%%").replace("?", "%s")


def redact(url: str) -> str:
    """The URL without its password, for messages and doctor."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class Row:
    """A result row readable by position and by column name, as sqlite3.Row."""

    __slots__ = ("_values", "_index")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        return self._values[key if isinstance(key, int) else self._index[key]]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._index)


def row_factory(cursor: BaseCursor[Any, Any]) -> Callable[[Sequence[Any]], Row]:
    index = {col.name: i for i, col in enumerate(cursor.description or ())}
    return lambda values: Row(values, index)


# A connection whose rows come from row_factory (every connection PgDatabase makes).
PgConnection = psycopg.Connection[Row]


def one_value(cursor: psycopg.Cursor[Any]) -> Any:
    """The first column of a statement that always answers one row (count(*), current_user, ...)."""
    row = cursor.fetchone()
    assert row is not None  # such a statement always answers one row
    return row[0]


def _migration_files() -> list[tuple[int, str, str]]:
    folder = resources.files("cuba_memorys.storage.postgres").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


READ_ONLY_HINT = ("This DATABASE_URL is a read-only standby (a streaming replica): it serves searches."
                  " Point a server that writes at the primary.")


def storage_error(exc: Exception, url: str) -> StorageError:
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StorageError(f"PostgreSQL at {redact(url)} accepts no writes: {str(exc).strip()}",
                            hint=READ_ONLY_HINT)
    if isinstance(exc, pg_errors.IntegrityError):
        return StorageError(f"the store refused the write: {exc}")
    if isinstance(exc, (psycopg.OperationalError, pg_errors.InsufficientPrivilege)):
        return StorageError(f"PostgreSQL at {redact(url)}: {str(exc).strip()}",
                            hint="Check DATABASE_URL, that the server is up, and the role's privileges"
                                 " (`cuba-memorys doctor` shows the connection).")
    return StorageError(f"PostgreSQL error: {str(exc).strip()}")


class PgDatabase:
    def __init__(self, url: str, max_connections: int = 4, configure: Callable | None = None) -> None:
        self.url = url
        self._local = threading.local()
        self._extra_configure = configure
        self.read_only = self._is_standby()
        if self.read_only:
            self._check_schema_on_standby()
        else:
            self.migrate()
        self.pool: ConnectionPool[PgConnection] = ConnectionPool(
            url, min_size=1, max_size=max(1, max_connections), open=False,
            kwargs={"autocommit": True, "row_factory": row_factory}, configure=self._configure, name="cuba-memorys")
        try:
            self.pool.open(wait=True, timeout=30)
        except Exception as exc:
            raise storage_error(exc, url) from exc

    def _configure(self, conn: PgConnection) -> None:
        if self._extra_configure is not None:
            self._extra_configure(conn)
        conn.info  # noqa: B018 (touch: fails early on a broken connection)

    # -- migrations -------------------------------------------------------------------
    def connect(self) -> PgConnection:
        """A connection outside the pool (migrations, admin commands)."""
        try:
            return psycopg.connect(self.url, autocommit=True, row_factory=row_factory)
        except Exception as exc:
            raise storage_error(exc, self.url) from exc

    def _is_standby(self) -> bool:
        with self.connect() as conn:
            return bool(one_value(conn.execute("SELECT pg_is_in_recovery()")))

    def _check_schema_on_standby(self) -> None:
        """A standby cannot migrate: it must already hold every migration this version knows."""
        with self.connect() as conn:
            if one_value(conn.execute("SELECT to_regclass('schema_migrations')")) is None:
                done: set[int] = set()
            else:
                done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations").fetchall()}
        missing = [name for version, name, _ in _migration_files() if version not in done]
        if missing:
            raise StorageError(f"PostgreSQL at {redact(self.url)} is a read-only standby whose schema lacks"
                               f" {', '.join(missing)}.",
                               hint="Start this version of cuba-memorys against the primary once (it migrates"
                                    " the schema); the standby receives it through replication.")

    def migrate(self) -> list[str]:
        """Apply pending migrations in one transaction, one process at a time (an advisory lock)."""
        with self.connect() as conn, conn.transaction():
            applied = apply_migrations(conn)
        return applied

    def migration_status(self) -> tuple[list[str], list[str]]:
        done = {r[0] for r in self.query("SELECT version FROM schema_migrations", ())}
        files = _migration_files()
        return ([n for v, n, _ in files if v in done], [n for v, n, _ in files if v not in done])

    # -- connections and transactions ---------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[PgConnection]:
        pinned = getattr(self._local, "conn", None)
        if pinned is not None:
            yield pinned
            return
        with self._pooled() as conn:
            self._bind(conn)
            yield conn

    @contextmanager
    def _pooled(self) -> Iterator[PgConnection]:
        """A pooled connection, waited for no longer than the call's time limit allows (30 s
        without one): contention for the pool is waited for, and past the limit it is a timeout."""
        locks.before_waiting("the database")  # no Python lock is held while waiting for the pool
        left = deadline.remaining()
        try:
            with self.pool.connection(timeout=30.0 if left is None else max(left, 0.01)) as conn:
                yield conn
        except PoolTimeout as exc:
            raise HandlerTimeout("the call waited for a database connection past its time limit (every pooled"
                                 " connection was busy: raise CUBA_DB_MAX_CONNECTIONS) and was stopped;"
                                 " nothing of it was written") from exc

    def _bind(self, conn: PgConnection) -> None:
        """Make the connection's `cuba.project` setting the context's bound project, and its
        `cuba.readable` / `cuba.writable` the bound principal's projects (0009_grants.sql)."""
        wanted = _BOUND_PROJECT.get() or ""
        if getattr(conn, "_cuba_project", None) != wanted:
            conn.execute("SELECT set_config('cuba.project', %s, false)", (wanted,))
            conn._cuba_project = wanted  # type: ignore[attr-defined]
        access = _BOUND_ACCESS.get()
        if getattr(conn, "_cuba_access", ("", "")) != access:
            conn.execute("SELECT set_config('cuba.readable', %s, false), set_config('cuba.writable', %s, false)",
                         access)
            conn._cuba_access = access  # type: ignore[attr-defined]

    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        """The outermost level pins a pooled connection to this thread; inner levels are
        savepoints. Callbacks queued with :meth:`after_commit` belong to their level: a
        savepoint rolled back drops its own, a released one hands them outwards, and they run
        once the outermost level commits. A failed COMMIT (PostgreSQL then rolls back) drops
        them and raises StorageError; the connection goes back to the pool usable."""
        local = self._local
        if getattr(local, "conn", None) is not None:
            local.after.append([])
            try:
                with local.conn.transaction():  # a savepoint inside the outer transaction
                    yield local.conn
            except BaseException:
                local.after.pop()
                raise
            done = local.after.pop()
            local.after[-1].extend(done)
            return
        with self._pooled() as conn:
            self._bind(conn)
            local.conn, local.after = conn, [[]]
            try:
                with conn.transaction():
                    yield conn
                    deadline.check()  # past the call's time limit: roll back instead of committing
            except psycopg.Error as exc:
                raise storage_error(exc, self.url) from exc
            finally:
                local.conn = None
            callbacks, local.after = local.after[0], []
        for callback in callbacks:
            callback()

    def rebind_project(self, project_id: str | None) -> str | None:
        """The bound project from now on, on the transaction's connection too (the enclosing
        bind_project restores the one before it when it exits). Returns the one bound before."""
        before = _BOUND_PROJECT.get()
        _BOUND_PROJECT.set(project_id)
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._bind(conn)
        return before

    def after_commit(self, callback: Callable[[], None]) -> None:
        if getattr(self._local, "conn", None) is None:
            callback()
        else:
            self._local.after[-1].append(callback)

    def in_transaction(self) -> bool:
        return getattr(self._local, "conn", None) is not None

    def execute(self, sql: str, params: Sequence) -> psycopg.Cursor[Row]:
        deadline.check()  # a call past its time limit stops here (its transaction rolls back)
        locks.before_waiting("the database", store_allowed=True)
        with self.connection() as conn:
            try:
                return conn.execute(to_pg(sql), params)
            except psycopg.Error as exc:
                raise storage_error(exc, self.url) from exc

    def query(self, sql: str, params: Sequence) -> list[Row]:
        deadline.check()
        locks.before_waiting("the database", store_allowed=True)
        with self.connection() as conn:
            try:
                return conn.execute(to_pg(sql), params).fetchall()
            except psycopg.Error as exc:
                raise storage_error(exc, self.url) from exc

    def close(self) -> None:
        self.pool.close()


def apply_migrations(conn: psycopg.Connection[Any]) -> list[str]:
    """Apply pending migrations on ``conn`` inside the caller's transaction, one process at a
    time (an advisory lock); returns the names applied."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                 " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
    done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, sql in _migration_files():
        if version not in done:
            conn.execute(sql)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, %s)", (version, name, iso(utc_now())))
            applied.append(name)
    return applied


def access_setting(projects: frozenset[str] | None) -> str:
    """A project set as the policies read it: '' unrestricted, '*' all, ids, or '-' for none."""
    if projects is None:
        return ""
    return ",".join(sorted(projects)) or "-"


@contextmanager
def bound_access(readable: frozenset[str] | None, writable: frozenset[str] | None) -> Iterator[None]:
    token = _BOUND_ACCESS.set((access_setting(readable), access_setting(writable)))
    try:
        yield
    finally:
        _BOUND_ACCESS.reset(token)


@contextmanager
def bound_project(project_id: str | None) -> Iterator[None]:
    token = _BOUND_PROJECT.set(project_id)
    try:
        yield
    finally:
        _BOUND_PROJECT.reset(token)
