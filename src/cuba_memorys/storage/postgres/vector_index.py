"""The HNSW index of each embedded table, built where it costs least.

A missing index on a small table is built at once (milliseconds). On a large one, an inline build
would hold the server's start for as long as the build takes (23 minutes at 1M rows, measured in
docs/benchmarks.md) and block writes meanwhile. So it is built with CREATE INDEX CONCURRENTLY on a
background thread: searches keep working with exact scans (slower) and writes go on.

Several server processes may open the same database: one builds (a session advisory lock per
index), the others wait for it. A concurrent build that fails leaves an INVALID index, which
`IF NOT EXISTS` would keep forever; it is dropped and built again.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import psycopg

from cuba_memorys.storage.postgres.db import one_value

log = logging.getLogger(__name__)

HNSW_M, HNSW_EF_CONSTRUCTION = 16, 128
TABLES = ("observations", "episodes")
INLINE_BUILD_ROWS = 20_000  # embedded rows up to which a missing index is built inline
LOCK_POLL_SECONDS = 1.0  # how often a process waiting for another's build looks again


def index_name(table: str, dim: int) -> str:
    return f"{table}_hnsw_{dim}"


def create_index_sql(table: str, dim: int, concurrently: bool) -> str:
    """Partial on the model's dimension, so rows of another one (waiting for a re-embed) never
    break the cast."""
    how = "CONCURRENTLY " if concurrently else ""
    return (f"CREATE INDEX {how}IF NOT EXISTS {index_name(table, dim)} ON {table} USING hnsw"
            f" ((embedding::vector({dim})) vector_cosine_ops)"
            f" WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
            f" WHERE vector_dims(embedding) = {dim}")


def _state(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                       (name,)).fetchone()
    return "missing" if row is None else ("valid" if row[0] else "invalid")


def _embedded_rows(conn: psycopg.Connection[Any], table: str, limit: int) -> int:
    """Embedded rows, counted up to ``limit`` only (a bounded scan, not the whole table)."""
    return one_value(conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE embedding IS NOT NULL"
                                  f" LIMIT {int(limit)}) s"))


def _lock_key(name: str) -> int:
    return zlib.crc32(f"cuba-memorys:{name}".encode())


class VectorIndexes:
    """Ensures each embedded table's HNSW index for one dimension; large builds run in the
    background, and ``building()`` / ``wait()`` say how they are going."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], dim: int) -> None:
        self._connect = connect  # autocommit connections as the login role (the tables' owner)
        self.dim = dim
        self._threads: dict[str, threading.Thread] = {}
        self.failures: dict[str, str] = {}
        self.pending: list[str] = []  # large tables whose index is missing or invalid

    def ensure(self) -> None:
        """Build missing indexes of small tables now; note the large ones in ``pending`` (a
        long-running server builds those: :meth:`start_background`)."""
        self.pending = []
        with self._connect() as conn:
            for table in TABLES:
                name = index_name(table, self.dim)
                state = _state(conn, name)
                if state == "valid":
                    continue
                if _embedded_rows(conn, table, INLINE_BUILD_ROWS) < INLINE_BUILD_ROWS:
                    if state == "invalid":
                        conn.execute(f"DROP INDEX IF EXISTS {name}")
                    conn.execute(create_index_sql(table, self.dim, concurrently=False))
                else:
                    self.pending.append(table)

    def start_background(self) -> None:
        """Build the pending large indexes on background threads. Only a long-running server
        calls this: a one-shot command would end (and abort the build) long before it is done."""
        for table in self.pending:
            self._start(table)

    def missing(self) -> list[str]:
        """Large indexes missing that no build of this process has started on."""
        return [index_name(t, self.dim) for t in self.pending if index_name(t, self.dim) not in self._threads]

    def building(self) -> list[str]:
        """Indexes still being built (or waited for) by this process."""
        return sorted(name for name, thread in self._threads.items() if thread.is_alive())

    def wait(self, timeout: float | None = None) -> bool:
        """True once every background build of this process has ended (built or failed)."""
        for thread in list(self._threads.values()):
            thread.join(timeout)
        return not self.building()

    def _start(self, table: str) -> None:
        name = index_name(table, self.dim)
        if name in self._threads and self._threads[name].is_alive():
            return
        thread = threading.Thread(target=self._build, args=(table,), name=f"cuba-index-{name}", daemon=True)
        self._threads[name] = thread
        log.warning("building %s in the background (CREATE INDEX CONCURRENTLY); vector search uses"
                    " exact scans until it is done", name)
        thread.start()

    def _build(self, table: str) -> None:
        name = index_name(table, self.dim)
        try:
            with self._connect() as conn:
                if self._lock_or_built(conn, name):
                    if _state(conn, name) == "invalid":  # a failed concurrent build's leftover
                        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                    conn.execute(create_index_sql(table, self.dim, concurrently=True))
            self.pending = [t for t in self.pending if t != table]
            log.warning("%s is in place", name)
        except psycopg.Error as exc:  # the server keeps answering with exact scans; doctor says so
            self.failures[name] = str(exc).strip()
            log.error("building %s failed: %s", name, exc)

    @staticmethod
    def _lock_or_built(conn: psycopg.Connection[Any], name: str) -> bool:
        """True with the build lock held; False when another process built the index meanwhile."""
        while not one_value(conn.execute("SELECT pg_try_advisory_lock(%s)", (_lock_key(name),))):
            if _state(conn, name) == "valid":
                return False
            time.sleep(LOCK_POLL_SECONDS)
        return True
