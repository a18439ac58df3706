"""The embedded SQLite store: one file, WAL, FTS5 and an in-memory vector index.

The knowledge-graph SQL is shared with PostgreSQL (:mod:`sql_store`, :mod:`sql_search`);
this class adds the connection, the FTS5 lexical index and the vector index kept in step
with the stored embeddings.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from cuba_memorys import deadline
from cuba_memorys.errors import StorageError
from cuba_memorys.storage.sql.common import (
    LEXICAL_SOURCES,
    OBS_COLUMNS,
    lexical_texts,
    observation_from,
    scope_sql,
)
from cuba_memorys.storage.sql.rem import ANALYZED_TABLES, analyze_due
from cuba_memorys.storage.sql.store import SqlStore
from cuba_memorys.storage.sqlite.ann import DEFAULT_MIN_ROWS as DEFAULT_ANN_MIN_ROWS
from cuba_memorys.storage.sqlite.ann import AnnAccelerator
from cuba_memorys.storage.sqlite.db import Done, SqliteDatabase
from cuba_memorys.storage.sqlite.files import damage_said
from cuba_memorys.storage.sqlite.locks import file_lock
from cuba_memorys.storage.sqlite.search import SqliteSearchMixin
from cuba_memorys.storage.sqlite.vector_index import VectorIndex
from cuba_memorys.text import ANALYZER_VERSION, STOPWORDS, words


class SqliteStore(SqlStore, SqliteSearchMixin):
    backend = "sqlite"

    def __init__(self, path: Path | str, embedding_dim: int | None = None,
                 ann_min_rows: int = DEFAULT_ANN_MIN_ROWS) -> None:
        self.db = SqliteDatabase(path)
        self.location = str(path)
        self.vectors: dict[str, VectorIndex] = {}
        self._seen_version = -1
        try:
            with damage_said(path):  # a damaged file can pass the first statements and fail here
                self.db.migrate()
                self._reindex_lexical_if_stale()
                if embedding_dim:
                    self.vectors = {"observation": VectorIndex(embedding_dim), "episode": VectorIndex(embedding_dim)}
                    self.refresh_vectors(force=True)
        except BaseException:
            self.db.close()  # nothing half-open is left behind (Ctrl-C included)
            raise
        if embedding_dim:
            # Attached after the initial load, so the load does not queue every row for it;
            # it builds (or loads its saved graph) in the background from here.
            with self.db.lock:
                for kind, index in self.vectors.items():
                    index.accelerator = self._accelerator(kind, embedding_dim, ann_min_rows)
                    if index.accelerator is not None:
                        index.accelerator.maybe_start(index)

    def _accelerator(self, kind: str, dim: int, min_rows: int) -> AnnAccelerator | None:
        """The HNSW cache of a vector index (storage/ann.py), saved beside the database."""
        if min_rows <= 0:
            return None
        saved = None if self.location == ":memory:" else Path(self.location).with_name(
            f"{Path(self.location).stem}.ann-{kind}.usearch")
        return AnnAccelerator(dim, min_rows, saved, guard=lambda: self.db.lock)

    # -- lifecycle ----------------------------------------------------------------------
    def transaction(self):
        return self.db.transaction()

    def close(self) -> None:
        for index in self.vectors.values():
            if index.accelerator is not None:
                index.accelerator.stop()  # a build still running ends here, not at the process's exit
                index.accelerator.save()  # only when it changed since its last save
        self.db.close()

    def _q(self, sql: str, params: Sequence = ()) -> list[sqlite3.Row]:
        return self._run(self.db.rows, sql, params)

    def _one(self, sql: str, params: Sequence = ()) -> sqlite3.Row | None:
        return self._run(self.db.row, sql, params)

    def _exec(self, sql: str, params: Sequence = ()) -> Done:
        return self._run(self.db.run, sql, params)

    def _run(self, how, sql: str, params: Sequence):
        deadline.check()  # a call past its time limit stops here (its transaction rolls back)
        try:
            return how(sql, params)
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"the store refused the write: {exc}") from exc

    def _after_commit(self, callback) -> None:
        self.db.after_commit(callback)

    def runtime_role(self) -> None:
        return None  # an embedded file has no database roles

    def exclusive(self, name: str):
        """One holder at a time across processes: a file lock beside the database (locks.py)."""
        return file_lock(self.location, name)

    def bind_project(self, project_id: str | None):
        """Nothing to bind: SQLite has no row-level security, the scope conditions decide."""
        return nullcontext()

    def rebind_project(self, project_id: str | None) -> str | None:
        return None

    def bind_access(self, readable: frozenset[str] | None, writable: frozenset[str] | None):
        """Nothing to bind: the services' checks (services/access.py) are the one wall here."""
        return nullcontext()

    def migration_status(self) -> tuple[list[str], list[str]]:
        return self.db.migration_status()

    def integrity_problems(self, limit: int = 5) -> list[str]:
        """What SQLite's quick_check finds wrong with the file (none: []). It reads every page,
        so only `cuba-memorys doctor` asks; a file too damaged to check raises StoreUnreadable."""
        found = [line.strip() for row in self.db.rows(f"PRAGMA quick_check({int(limit)})")
                 for line in str(row[0]).splitlines()]
        return [] if found == ["ok"] else [line for line in found if line and not line.startswith("***")]

    def _reindex_lexical_if_stale(self) -> None:
        """Rebuild the lexical columns when the analyzer changed since they were written."""
        if self.get_meta("analyzer_version") == str(ANALYZER_VERSION):
            return
        with self.transaction() as c:
            for table, source in LEXICAL_SOURCES.items():
                c.execute(f"DELETE FROM {table}_fts")
                for seq, text in c.execute(f"SELECT seq, {source} FROM {table}").fetchall():
                    c.execute(f"INSERT INTO {table}_fts(rowid, raw, stem) VALUES (?, ?, ?)",
                              (seq, *lexical_texts(text)))
            self.set_meta("analyzer_version", str(ANALYZER_VERSION))

    # -- backend hooks (see SqlStore) ---------------------------------------------------
    def _index_text(self, table: str, seq: int, text: str) -> None:
        self._exec(f"DELETE FROM {table}_fts WHERE rowid = ?", (seq,))
        self._exec(f"INSERT INTO {table}_fts(rowid, raw, stem) VALUES (?, ?, ?)", (seq, *lexical_texts(text)))

    def _vector_param(self, blob: bytes | None) -> bytes | None:
        return blob

    def _vector_value(self, value: bytes) -> np.ndarray:
        return np.frombuffer(value, dtype=np.float32)

    def _vector_added(self, kind: str, seq: int, blob: bytes) -> None:
        if kind in self.vectors:
            self.vectors[kind].upsert(seq, np.frombuffer(blob, dtype=np.float32), 1)

    def _vectors_dropped(self, kind: str, seqs: list[int]) -> None:
        self._drop_vectors(kind, seqs)

    def _vectors_reloaded(self) -> None:
        self.refresh_vectors(force=True)

    def _vectors_learned(self, kind: str, rows: list[tuple[int, bytes, int]]) -> None:
        if kind in self.vectors:
            for seq, blob, rev in rows:
                self.vectors[kind].upsert(seq, np.frombuffer(blob, dtype=np.float32), rev)

    def _vectors_cleared(self) -> None:
        for index in self.vectors.values():
            index.clear()

    def scrub_freed_space(self) -> None:
        """After a forget, leave no readable copy of the deleted rows in the files. The freed
        cells and pages are already zeroed (secure_delete, db.py). FTS5 keeps a deleted row's
        terms in its older segments until they are merged: 'optimize' rewrites each index as one
        segment of live rows. The HNSW accelerator's graph keeps a removed vector's slot: it is
        dropped (its saved file too) and rebuilt in the background, search staying exact until
        then. Last, the WAL is checkpointed and truncated, so no frame of an old page remains."""
        with self.transaction():
            for table in LEXICAL_SOURCES:
                self._exec(f"INSERT INTO {table}_fts({table}_fts) VALUES ('optimize')")
        with self.db.held():
            for index in self.vectors.values():
                accelerator = index.accelerator
                if accelerator is not None and (accelerator.ready or accelerator.building):
                    accelerator.clear()
                    accelerator.maybe_start(index)
            busy = self._checkpoint()
        if busy:
            raise StorageError("the write-ahead log could not be truncated: another process is reading the"
                               " database, so old pages may remain in memory.db-wal until its next checkpoint.",
                               hint="Stop the other cuba-memorys processes on this data folder and run"
                                    " `sqlite3 memory.db 'PRAGMA wal_checkpoint(TRUNCATE)'`.")

    def refresh_statistics(self) -> list[str]:
        """ANALYZE the tables the rule of sql/rem.py says are due; the tables analyzed. SQLite
        counts no modifications: the change is how far the row count moved from the one the last
        ANALYZE stored in sqlite_stat1 (updates in place are not seen). Exact, not sampled
        (analysis_limit's estimates were off by 40% on 200k rows), which stays well under a
        second at 100k rows."""
        stored: dict[str, int] = {}
        if self._one("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'") is not None:
            for table, stat in self._q("SELECT tbl, stat FROM sqlite_stat1"):
                stored[table] = max(stored.get(table, 0), int(str(stat).split()[0]))
        due = []
        for table in ANALYZED_TABLES:
            rows = int(self._q(f"SELECT count(*) FROM {table}")[0][0])
            last = stored.get(table)
            if analyze_due(rows, None if last is None else abs(rows - last)):
                due.append(table)
        if due:
            with self.transaction():
                for table in due:
                    self._exec(f"ANALYZE {table}")
        return due

    def _checkpoint(self) -> int:
        """PRAGMA wal_checkpoint(TRUNCATE); 1 while another process reads. Retried a few times:
        a reader in another process is usually gone within milliseconds."""
        for _ in range(20):
            found = self.db.row("PRAGMA wal_checkpoint(TRUNCATE)")
            if found is not None and not found[0]:
                return 0
            time.sleep(0.05)
        return 1

    def similar_content(self, entity_id: str, content: str, scope) -> list:
        """Candidates for write-time dedup: same entity, sharing rare words with ``content``."""
        terms = sorted(set(words(content)) - STOPWORDS, key=len, reverse=True)[:12]
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        cond, params = scope_sql(scope, "o.project_id")
        # The entity's rows lie between its first and last seq: a rowid range FTS5 seeks to
        # instead of ranking every row that shares a common word (12 ms -> <1 ms per written
        # row at 100k rows; same rows, since it only adds a condition they all meet).
        bounds = self._one("SELECT min(seq), max(seq) FROM observations WHERE entity_id = ?", (entity_id,))
        assert bounds is not None  # an aggregate always answers one row
        low, high = bounds
        if low is None:
            return []
        rows = self._q(
            f"SELECT {OBS_COLUMNS} FROM observations_fts f JOIN observations o ON o.seq = f.rowid"
            f" JOIN entities e ON e.id = o.entity_id WHERE observations_fts MATCH ? AND f.rowid BETWEEN ? AND ?"
            f" AND o.entity_id = ? AND o.observation_type != 'superseded' AND {cond}"
            " ORDER BY bm25(observations_fts) LIMIT 20",
            (f"raw : ({match})", low, high, entity_id, *params))
        return [observation_from(r) for r in rows]
