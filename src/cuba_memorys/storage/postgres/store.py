"""The PostgreSQL + pgvector store, selected by DATABASE_URL=postgresql://….

The knowledge-graph SQL and the filters are shared with SQLite (:mod:`sql_store`,
:mod:`sql_search`). This class adds what PostgreSQL does its own way: tsvector lexical
indexes ranked with FTS5's BM25 formula (:mod:`pg_lexical`), pg_trgm similarity for write-time dedup candidates, an
HNSW cosine index (pgvector) for the vector branch, and row-level security bound to the
caller's project. Nothing is cached in the process, so several server processes (shared
mode) see each other's writes at once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

from cuba_memorys.errors import StorageError
from cuba_memorys.models import Entity, Hit, Observation, Scope, SearchFilter
from cuba_memorys.storage.postgres.db import PgDatabase, bound_access, bound_project, redact, storage_error
from cuba_memorys.storage.postgres.lexical import LexicalStats, bm25_sql
from cuba_memorys.storage.postgres.locks import advisory_lock
from cuba_memorys.storage.postgres.roles import switch_to_app_role
from cuba_memorys.storage.postgres.vector_index import VectorIndexes
from cuba_memorys.storage.rows import IndexBuilds, RuntimeRole
from cuba_memorys.storage.sql.common import (
    LEXICAL_SOURCES,
    OBS_COLUMNS,
    entity_from,
    lexical_texts,
    observation_from,
    scope_sql,
)
from cuba_memorys.storage.sql.forget import FORGET_TABLES
from cuba_memorys.storage.sql.rem import ANALYZED_TABLES, analyze_due
from cuba_memorys.storage.sql.search import KINDS, SqlSearch
from cuba_memorys.storage.sql.store import SqlStore
from cuba_memorys.text import ANALYZER_VERSION, STOPWORDS, words

_MAX_POSITION, _MAX_POSITIONS, _MAX_LEXEME_BYTES = 16383, 256, 2047  # tsvector's limits
AUDIT_LOCK = 0x0CBA_A0D1_7106_0001  # pg_advisory_xact_lock key of audit appends (the original's)


def _quote(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(tokens: Sequence[str]) -> str:
    """A tsvector of exactly these tokens with their positions: the analyzer's terms as they
    are (PostgreSQL's own parser would split and normalise them differently)."""
    positions: dict[str, list[int]] = defaultdict(list)
    for position, token in enumerate(tokens, start=1):
        if len(token.encode()) <= _MAX_LEXEME_BYTES and len(positions[token]) < _MAX_POSITIONS:
            positions[token].append(min(position, _MAX_POSITION))
    return " ".join(f"{_quote(t)}:{','.join(map(str, p))}" for t, p in positions.items() if p)


def tsquery_any(terms: Sequence[str]) -> str | None:
    """A tsquery matching rows that contain any of the terms."""
    unique = [t for t in dict.fromkeys(terms) if t and len(t.encode()) <= _MAX_LEXEME_BYTES]
    return " | ".join(_quote(t) for t in unique) or None


class PgSearch(SqlSearch):
    """PostgreSQL's lexical and vector branches."""

    dim: int | None
    lexical_stats: LexicalStats

    def _json_elements(self, column: str) -> str:
        return f"jsonb_array_elements_text({column}::jsonb) AS json_each(value)"

    def _phrase_condition(self, kind: str) -> str:
        return "strpos(' ' || x.lex_raw || ' ', ?) > 0"

    def _fts_match(self, kind: str, column: str, terms: Sequence[str], limit: int,
                   flt: SearchFilter) -> list[dict]:
        spec = KINDS[kind]
        tsv = "x.tsv_raw" if column == "raw" else "x.tsv_stem"
        idf, avgdl = self.lexical_stats.weights(spec.table, tsv.removeprefix("x."), terms)
        if not idf:
            return []  # no term occurs anywhere
        score, score_params = bm25_sql(tsv, idf, avgdl)
        cond, params = self._filters(kind, flt)
        rows = self._q(
            f"SELECT x.id, {score} AS rank, {spec.text} AS body, {spec.importance} AS importance"
            f" FROM {spec.table} x {spec.join} WHERE {tsv} @@ CAST(? AS tsquery) AND {cond}"
            " ORDER BY rank DESC, x.seq LIMIT ?", (*score_params, tsquery_any(list(idf)), *params, limit))
        return [{"id": r["id"], "rank": float(r["rank"]), "body": r["body"], "importance": r["importance"]}
                for r in rows]

    def vector_candidates(self, kind: str, query_vec: np.ndarray, limit: int,
                          flt: SearchFilter) -> list[Hit]:
        if not self.dim or kind not in ("observation", "episode") or query_vec.shape != (self.dim,):
            return []
        spec = KINDS[kind]
        cond, params = self._filters(kind, flt)
        cast = f"vector({self.dim})"
        vec = Vector(np.asarray(query_vec, dtype=np.float32))
        with self.transaction():
            # ef_search bounds how many neighbours one index scan returns; iterative scans keep
            # going when the filters remove rows, so a filtered search does not come back short.
            self._exec(f"SET LOCAL hnsw.ef_search = {max(40, min(1000, 2 * limit))}")
            self._exec("SET LOCAL hnsw.iterative_scan = relaxed_order")
            rows = self._q(
                f"SELECT x.id, 1 - (x.embedding::{cast} <=> ?::{cast}) AS score FROM {spec.table} x"
                f" WHERE x.embedding IS NOT NULL AND vector_dims(x.embedding) = {self.dim} AND {cond}"
                f" ORDER BY x.embedding::{cast} <=> ?::{cast} LIMIT ?", (vec, *params, vec, limit))
        hits = [Hit(kind, r["id"], float(r["score"])) for r in rows]
        hits.sort(key=lambda h: h.score, reverse=True)  # relaxed_order may return near-sorted rows
        return hits


class PgStore(SqlStore, PgSearch):
    backend = "postgresql"

    def __init__(self, url: str, embedding_dim: int | None = None, max_connections: int = 4,
                 origin_node: str | None = None) -> None:
        self.location = redact(url)
        self.dim = embedding_dim
        self.origin_node = origin_node
        self.db = PgDatabase(url, max_connections, configure=self._configure)
        self.lexical_stats = LexicalStats(self._collection_query)
        # A streaming replica serves searches as it is: the primary migrates, re-indexes and
        # builds the HNSW indexes, and replication brings them here.
        self.read_only = self.db.read_only
        self.vector_indexes: VectorIndexes | None = None  # made by _ensure_vector_indexes
        if not self.read_only:
            self._reindex_lexical_if_stale()
            if embedding_dim:
                self._ensure_vector_indexes(embedding_dim)

    @staticmethod
    def _configure(conn) -> None:
        register_vector(conn)
        switch_to_app_role(conn)  # row-level security binds once `secure` set up the role

    def _ensure_vector_indexes(self, dim: int) -> None:
        """The HNSW index of each embedded table for the model's dimension: built now on small
        tables, in the background (CONCURRENTLY) on large ones (pg_vector_index)."""
        self.vector_indexes = VectorIndexes(self.db.connect, dim)
        self.vector_indexes.ensure()

    def build_indexes_in_background(self) -> None:
        if self.vector_indexes is not None:  # never on a standby: it makes none
            self.vector_indexes.start_background()

    def index_builds(self) -> IndexBuilds:
        indexes = self.vector_indexes
        if indexes is None:
            return super().index_builds()
        return {"missing": indexes.missing(), "building": indexes.building(), "failed": dict(indexes.failures)}

    # -- lifecycle ----------------------------------------------------------------------
    def transaction(self):
        return self.db.transaction()

    def close(self) -> None:
        self.db.close()

    def migration_status(self) -> tuple[list[str], list[str]]:
        return self.db.migration_status()

    def bind_project(self, project_id: str | None):
        return bound_project(project_id)

    def rebind_project(self, project_id: str | None) -> str | None:
        return self.db.rebind_project(project_id)

    def exclusive(self, name: str):
        """One holder at a time across processes: a session advisory lock on its own connection."""
        return advisory_lock(self.db, name)

    def bind_access(self, readable: frozenset[str] | None, writable: frozenset[str] | None):
        return bound_access(readable, writable)

    def _q(self, sql: str, params: Sequence = ()) -> list:
        return self.db.query(sql, params)

    def _one(self, sql: str, params: Sequence = ()) -> Any:
        rows = self.db.query(sql, params)
        return rows[0] if rows else None

    def _exec(self, sql: str, params: Sequence = ()) -> Any:
        return self.db.execute(sql, params)

    def _after_commit(self, callback) -> None:
        self.db.after_commit(callback)

    def _serialise_audit_appends(self) -> None:
        """One audit append at a time across every server process (see SqlAudit): the lock is
        the transaction's, so it is released by the commit or rollback."""
        self._exec("SELECT pg_advisory_xact_lock(?)", (AUDIT_LOCK,))

    def scrub_freed_space(self) -> None:
        """After a forget: VACUUM the tables it deleted from, so the dead tuples and their index
        entries are removed. VACUUM cannot run inside a transaction: it gets a connection of its
        own, in autocommit, as the login (which owns the schema; the app role could not). Plain
        VACUUM marks the space reusable without rewriting it, so the bytes of a dead tuple can
        remain in a page (and in WAL segments not yet recycled) until the space is reused;
        `VACUUM FULL` rewrites the tables, under an exclusive lock, when that matters."""
        try:
            with self.db.connect() as conn:
                conn.execute("VACUUM " + ", ".join(FORGET_TABLES))
        except psycopg.Error as exc:
            raise storage_error(exc, self.db.url) from exc

    def refresh_statistics(self) -> list[str]:
        """ANALYZE the tables the rule of sql/rem.py says are due, by the server's own counters
        (pg_stat_user_tables: n_mod_since_analyze; never analyzed when neither last_analyze nor
        last_autoanalyze is set); the tables analyzed. Autovacuum usually got there first, so
        this is mostly nothing. Run as the login on a connection of its own (ANALYZE needs the
        tables' owner, which the app role is not), as scrub_freed_space's VACUUM is."""
        try:
            with self.db.connect() as conn:
                stats = conn.execute(
                    "SELECT relname, n_live_tup, n_mod_since_analyze, coalesce(last_analyze, last_autoanalyze)"
                    " FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = ANY(%s)",
                    (list(ANALYZED_TABLES),)).fetchall()
                due = sorted((str(r[0]) for r in stats if analyze_due(int(r[1]), None if r[3] is None else int(r[2]))),
                             key=ANALYZED_TABLES.index)
                for table in due:
                    conn.execute(f"ANALYZE {table}")
        except psycopg.Error as exc:
            raise storage_error(exc, self.db.url) from exc
        return due

    def _collection_query(self, sql: str, params: Sequence) -> list:
        """A query over every project's rows: BM25 statistics describe the whole collection,
        as FTS5's do on SQLite (only counts leave this function, never rows)."""
        with bound_project(None):
            return self._q(sql, params)

    def runtime_role(self) -> RuntimeRole:
        """Who the server's statements run as, and whether row-level security binds them."""
        row = self._one("SELECT current_user, r.rolsuper, r.rolbypassrls FROM pg_roles r"
                        " WHERE r.rolname = current_user")
        return {"role": row[0], "superuser": bool(row[1]), "bypass_rls": bool(row[2])}

    # -- lexical index ------------------------------------------------------------------
    def _reindex_lexical_if_stale(self) -> None:
        """Rebuild the lexical columns when the analyzer changed since they were written."""
        if self.get_meta("analyzer_version") == str(ANALYZER_VERSION):
            return
        with self.transaction():
            for table, source in LEXICAL_SOURCES.items():
                for seq, text in self._q(f"SELECT seq, {source} FROM {table}"):
                    self._index_text(table, seq, text)
            self.set_meta("analyzer_version", str(ANALYZER_VERSION))

    def _lexical_columns(self, table: str, text: str) -> dict[str, tuple[str, Any]]:
        # The lexical columns go into the INSERT itself: a separate UPDATE wrote every row twice.
        raw, stem = lexical_texts(text)
        return {"lex_raw": ("?", raw), "lex_stem": ("?", stem),
                "tsv_raw": ("CAST(? AS tsvector)", tsvector_literal(raw.split())),
                "tsv_stem": ("CAST(? AS tsvector)", tsvector_literal(stem.split()))}

    def _index_inserted(self, table: str, seq: int, text: str) -> None:
        self.lexical_stats.written(table)

    def _index_text(self, table: str, seq: int, text: str) -> None:
        self.lexical_stats.written(table)
        raw, stem = lexical_texts(text)
        self._exec(f"UPDATE {table} SET lex_raw = ?, lex_stem = ?, tsv_raw = CAST(? AS tsvector),"
                   " tsv_stem = CAST(? AS tsvector) WHERE seq = ?",
                   (raw, stem, tsvector_literal(raw.split()), tsvector_literal(stem.split()), seq))

    # -- embeddings ---------------------------------------------------------------------
    def _vector_param(self, blob: bytes | None) -> Vector | None:
        return None if blob is None else Vector(np.frombuffer(blob, dtype=np.float32))

    def _vector_value(self, value: Any) -> np.ndarray:
        return np.asarray(value.to_numpy() if isinstance(value, Vector) else value, dtype=np.float32)

    def set_embeddings(self, kind: str, rows, model: str, texts=None) -> None:
        super().set_embeddings(kind, rows, model, texts)
        if self.dim is None and rows:  # a model appeared (reembed): index its dimension
            self.dim = len(rows[0][1])
            self._ensure_vector_indexes(self.dim)

    # -- entities and dedup -------------------------------------------------------------
    def create_entity(self, name: str, entity_type: str, project_id: str | None) -> Entity:
        """As SqlStore's, but another server process may create the same name between our
        check and insert (shared mode): then the row it created is the answer."""
        try:
            return super().create_entity(name, entity_type, project_id)
        except StorageError:
            row = self._one("SELECT * FROM entities WHERE name = ? AND coalesce(project_id, '') = ?",
                            (name, project_id or ""))
            if row is None:
                raise
            return entity_from(row)

    def similar_content(self, entity_id: str, content: str, scope: Scope) -> list[Observation]:
        """Candidates for write-time dedup: same entity, sharing rare words with ``content``,
        most trigram-similar first (pg_trgm)."""
        query = tsquery_any(sorted(set(words(content)) - STOPWORDS, key=len, reverse=True)[:12])
        if query is None:
            return []
        cond, params = scope_sql(scope, "o.project_id")
        rows = self._q(
            f"SELECT {OBS_COLUMNS} FROM observations o JOIN entities e ON e.id = o.entity_id"
            " WHERE o.entity_id = ? AND o.tsv_raw @@ CAST(? AS tsquery)"
            f" AND o.observation_type != 'superseded' AND {cond}"
            " ORDER BY similarity(o.content, ?) DESC, o.seq LIMIT 20",
            (entity_id, query, *params, content))
        return [observation_from(r) for r in rows]
