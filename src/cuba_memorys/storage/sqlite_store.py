"""The embedded SQLite store: projects, entities, observations, episodes and relations.

Search primitives live in :mod:`sqlite_search` (a mixin) to keep each file readable.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import StorageError
from ..models import Entity, NewObservation, Observation, Scope, iso, new_id, utc_now
from ..text import ANALYZER_VERSION, STOPWORDS, analyze, words
from .sqlite_db import SqliteDatabase
from .sqlite_search import SqliteSearchMixin
from .ann import DEFAULT_MIN_ROWS as DEFAULT_ANN_MIN_ROWS
from .ann import AnnAccelerator
from .vector_index import VectorIndex

_OBS_COLUMNS = (
    "o.seq, o.id, o.entity_id, e.name AS entity_name, o.content, o.observation_type, o.importance,"
    " o.access_count, o.source, o.version, o.previous_versions, o.tags, o.trust, o.evidence,"
    " o.session_id, o.project_id, o.created_at, o.updated_at"
)


_EMBEDDED_TABLES = {"observation": "observations", "episode": "episodes"}


def scope_sql(scope: Scope, column: str) -> tuple[str, list]:
    """SQL condition and parameters for 'visible in this scope' on ``column``."""
    if scope.unrestricted:
        return "1", []
    if scope.include_unscoped:
        return f"({column} IS NULL OR {column} = ?)", [scope.project_id]
    return f"{column} = ?", [scope.project_id]


def _entity(row: sqlite3.Row) -> Entity:
    return Entity(row["id"], row["name"], row["entity_type"], row["importance"],
                  row["access_count"], row["project_id"], row["created_at"])


def _observation(row: sqlite3.Row) -> Observation:
    return Observation(
        id=row["id"], entity_id=row["entity_id"], entity_name=row["entity_name"],
        content=row["content"], observation_type=row["observation_type"],
        importance=row["importance"], access_count=row["access_count"], source=row["source"],
        version=row["version"], previous_versions=json.loads(row["previous_versions"]),
        tags=json.loads(row["tags"]), trust=row["trust"], evidence=row["evidence"],
        session_id=row["session_id"], project_id=row["project_id"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )


def fts_texts(text: str) -> tuple[str, str]:
    """The two lexical columns: folded words, and analyzed (stemmed, stopword-free) terms."""
    return " ".join(words(text)), " ".join(analyze(text))


class SqliteStore(SqliteSearchMixin):
    backend = "sqlite"

    def __init__(self, path: Path | str, embedding_dim: int | None = None,
                 ann_min_rows: int = DEFAULT_ANN_MIN_ROWS) -> None:
        self.db = SqliteDatabase(path)
        self.location = str(path)
        self.db.migrate()
        self._reindex_lexical_if_stale()
        self.vectors: dict[str, VectorIndex] = {}
        self._seen_version = -1
        if embedding_dim:
            self.vectors = {"observation": VectorIndex(embedding_dim), "episode": VectorIndex(embedding_dim)}
            self.refresh_vectors(force=True)
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
                index.accelerator.save()  # only when it changed since its last save
        self.db.close()

    def _q(self, sql: str, params: Sequence = ()) -> list[sqlite3.Row]:
        with self.db.lock:
            return self.db.conn.execute(sql, params).fetchall()

    def _one(self, sql: str, params: Sequence = ()) -> sqlite3.Row | None:
        with self.db.lock:
            return self.db.conn.execute(sql, params).fetchone()

    def _exec(self, sql: str, params: Sequence = ()) -> sqlite3.Cursor:
        with self.db.lock:
            try:
                return self.db.conn.execute(sql, params)
            except sqlite3.IntegrityError as exc:
                raise StorageError(f"the store refused the write: {exc}") from exc

    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self._exec("INSERT INTO meta(key, value) VALUES (?, ?) "
                   "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def migration_status(self) -> tuple[list[str], list[str]]:
        return self.db.migration_status()

    def counts(self) -> dict[str, int]:
        tables = ("entities", "observations", "relations", "episodes", "errors", "sessions", "projects")
        return {t: self._one(f"SELECT count(*) FROM {t}")[0] for t in tables}

    def _reindex_lexical_if_stale(self) -> None:
        """Rebuild the lexical columns when the analyzer changed since they were written."""
        if self.get_meta("analyzer_version") == str(ANALYZER_VERSION):
            return
        with self.transaction() as c:
            for table, text_sql in (
                ("observations", "SELECT seq, content FROM observations"),
                ("entities", "SELECT seq, name || ' ' || entity_type FROM entities"),
                ("episodes", "SELECT seq, content FROM episodes"),
                ("errors", "SELECT seq, error_type || ' ' || error_message FROM errors"),
            ):
                c.execute(f"DELETE FROM {table}_fts")
                for seq, text in c.execute(text_sql).fetchall():
                    c.execute(f"INSERT INTO {table}_fts(rowid, raw, stem) VALUES (?, ?, ?)",
                              (seq, *fts_texts(text)))
            self.set_meta("analyzer_version", str(ANALYZER_VERSION))

    def _index_text(self, table: str, seq: int, text: str) -> None:
        self._exec(f"DELETE FROM {table}_fts WHERE rowid = ?", (seq,))
        self._exec(f"INSERT INTO {table}_fts(rowid, raw, stem) VALUES (?, ?, ?)", (seq, *fts_texts(text)))

    # -- projects -----------------------------------------------------------------------
    def get_project(self, name: str) -> dict | None:
        row = self._one("SELECT * FROM projects WHERE name = ?", (name,))
        return dict(row) if row else None

    def get_or_create_project(self, name: str) -> dict:
        now = iso(utc_now())
        with self.transaction():
            self._exec("INSERT INTO projects(id, name, created_at, last_active_at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT(name) DO UPDATE SET last_active_at = excluded.last_active_at",
                       (new_id(), name, now, now))
            return self.get_project(name)

    def touch_project(self, project_id: str) -> None:
        self._exec("UPDATE projects SET last_active_at = ? WHERE id = ?", (iso(utc_now()), project_id))

    def list_projects(self) -> list[dict]:
        rows = self._q(
            "SELECT p.*, (SELECT count(*) FROM entities e WHERE e.project_id = p.id) AS entity_count,"
            " (SELECT count(*) FROM observations o WHERE o.project_id = p.id) AS observation_count"
            " FROM projects p ORDER BY p.last_active_at DESC")
        return [dict(r) for r in rows]

    # -- entities -----------------------------------------------------------------------
    def get_entity(self, name: str, scope: Scope) -> Entity | None:
        """The visible entity of that name, preferring the active project's own."""
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM entities WHERE name = ? AND {cond}"
                        " ORDER BY project_id IS NULL, created_at LIMIT 1", (name, *params))
        return _entity(row) if row else None

    def get_entity_by_id(self, entity_id: str) -> Entity | None:
        row = self._one("SELECT * FROM entities WHERE id = ?", (entity_id,))
        return _entity(row) if row else None

    def create_entity(self, name: str, entity_type: str, project_id: str | None) -> Entity:
        now = iso(utc_now())
        with self.transaction():
            cur = self._exec(
                "INSERT INTO entities(id, name, entity_type, project_id, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)", (new_id(), name, entity_type, project_id, now, now))
            self._index_text("entities", cur.lastrowid, f"{name} {entity_type}")
            row = self._one("SELECT * FROM entities WHERE seq = ?", (cur.lastrowid,))
        return _entity(row)

    def boost_entity(self, entity_id: str) -> Entity:
        """Hebbian access reinforcement: importance moves 5% of the way to 1."""
        self._exec("UPDATE entities SET access_count = access_count + 1,"
                   " importance = min(1.0, importance + 0.05 * (1 - importance)), updated_at = ?"
                   " WHERE id = ?", (iso(utc_now()), entity_id))
        return _entity(self._one("SELECT * FROM entities WHERE id = ?", (entity_id,)))

    def rename_entity(self, entity_id: str, new_name: str) -> None:
        with self.transaction():
            self._exec("UPDATE entities SET name = ?, updated_at = ? WHERE id = ?",
                       (new_name, iso(utc_now()), entity_id))
            row = self._one("SELECT seq, entity_type FROM entities WHERE id = ?", (entity_id,))
            self._index_text("entities", row["seq"], f"{new_name} {row['entity_type']}")

    def delete_entity(self, entity_id: str) -> dict[str, int]:
        with self.transaction():
            counts = {
                "observations": self._one("SELECT count(*) FROM observations WHERE entity_id = ?", (entity_id,))[0],
                "episodes": self._one("SELECT count(*) FROM episodes WHERE entity_id = ?", (entity_id,))[0],
                "relations": self._one("SELECT count(*) FROM relations WHERE from_entity_id = ?"
                                       " OR to_entity_id = ?", (entity_id, entity_id))[0],
            }
            gone = self._vector_keys_of("observations", "entity_id = ?", [entity_id])
            gone_eps = self._vector_keys_of("episodes", "entity_id = ?", [entity_id])
            self._exec("DELETE FROM entities WHERE id = ?", (entity_id,))
            self.db.after_commit(lambda: self._drop_vectors("observation", gone))
            self.db.after_commit(lambda: self._drop_vectors("episode", gone_eps))
        return counts

    def entities_by_ids(self, ids: Sequence[str]) -> dict[str, Entity]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {r["id"]: _entity(r) for r in self._q(f"SELECT * FROM entities WHERE id IN ({marks})", list(ids))}

    # -- observations -------------------------------------------------------------------
    def add_observation(self, obs: NewObservation) -> str:
        now = iso(utc_now())
        created = obs.created_at or now
        with self.transaction():
            cur = self._exec(
                "INSERT INTO observations(id, entity_id, content, observation_type, importance, source,"
                " tags, trust, evidence, session_id, project_id, embedding, embedding_model,"
                " embedding_rev, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (obs.id, obs.entity_id, obs.content, obs.observation_type, obs.importance, obs.source,
                 json.dumps(obs.tags), obs.trust, obs.evidence, obs.session_id, obs.project_id,
                 obs.embedding, obs.embedding_model, 1 if obs.embedding else 0, created, now))
            seq = cur.lastrowid
            self._index_text("observations", seq, obs.content)
            if obs.embedding is not None and "observation" in self.vectors:
                vec = np.frombuffer(obs.embedding, dtype=np.float32)
                self.db.after_commit(lambda: self.vectors["observation"].upsert(seq, vec, 1))
        return obs.id

    def get_observation(self, obs_id: str, scope: Scope) -> Observation | None:
        cond, params = scope_sql(scope, "o.project_id")
        row = self._one(f"SELECT {_OBS_COLUMNS} FROM observations o JOIN entities e ON e.id = o.entity_id"
                        f" WHERE o.id = ? AND {cond}", (obs_id, *params))
        return _observation(row) if row else None

    def observations_of(self, entity_id: str, scope: Scope, include_superseded: bool = False,
                        limit: int = 500) -> list[Observation]:
        cond, params = scope_sql(scope, "o.project_id")
        extra = "" if include_superseded else " AND o.observation_type != 'superseded'"
        rows = self._q(f"SELECT {_OBS_COLUMNS} FROM observations o JOIN entities e ON e.id = o.entity_id"
                       f" WHERE o.entity_id = ? AND {cond}{extra}"
                       " ORDER BY o.importance DESC, o.created_at DESC LIMIT ?",
                       (entity_id, *params, limit))
        return [_observation(r) for r in rows]

    def similar_content(self, entity_id: str, content: str, scope: Scope) -> list[Observation]:
        """Candidates for write-time dedup: same entity, sharing rare words with ``content``."""
        terms = sorted(set(words(content)) - STOPWORDS, key=len, reverse=True)[:12]
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        cond, params = scope_sql(scope, "o.project_id")
        # The entity's rows lie between its first and last seq: a rowid range FTS5 seeks to
        # instead of ranking every row that shares a common word (12 ms -> <1 ms per written
        # row at 100k rows; same rows, since it only adds a condition they all meet).
        low, high = self._one("SELECT min(seq), max(seq) FROM observations WHERE entity_id = ?", (entity_id,))
        if low is None:
            return []
        rows = self._q(
            f"SELECT {_OBS_COLUMNS} FROM observations_fts f JOIN observations o ON o.seq = f.rowid"
            f" JOIN entities e ON e.id = o.entity_id WHERE observations_fts MATCH ? AND f.rowid BETWEEN ? AND ?"
            f" AND o.entity_id = ? AND o.observation_type != 'superseded' AND {cond}"
            " ORDER BY bm25(observations_fts) LIMIT 20",
            (f"raw : ({match})", low, high, entity_id, *params))
        return [_observation(r) for r in rows]

    def reinforce_observation(self, obs_id: str, delta: float) -> None:
        self._exec("UPDATE observations SET importance = min(1.0, importance + ?),"
                   " access_count = access_count + 1, last_accessed = ? WHERE id = ?",
                   (delta, iso(utc_now()), obs_id))

    def delete_observation(self, obs_id: str) -> bool:
        with self.transaction():
            row = self._one("SELECT seq FROM observations WHERE id = ?", (obs_id,))
            if row is None:
                return False
            self._exec("DELETE FROM observations WHERE id = ?", (obs_id,))
            seq = row["seq"]
            self.db.after_commit(lambda: self._drop_vectors("observation", [seq]))
        return True

    def record_access(self, kind: str, ids: Sequence[str]) -> None:
        table = {"observation": "observations", "entity": "entities"}.get(kind)
        if not table or not ids:
            return
        marks = ",".join("?" * len(ids))
        extra = ", last_accessed = ?" if table == "observations" else ""
        params = [iso(utc_now())] if extra else []
        self._exec(f"UPDATE {table} SET access_count = access_count + 1{extra} WHERE id IN ({marks})",
                   [*params, *ids])

    def rows_missing_embedding(self, kind: str, limit: int, after_seq: int = 0) -> list[tuple[int, str, str]]:
        """(seq, content, "entity name|entity type") of rows without an embedding."""
        table = _EMBEDDED_TABLES[kind]
        rows = self._q(f"SELECT x.seq, x.content, e.name || '|' || e.entity_type FROM {table} x"
                       " JOIN entities e ON e.id = x.entity_id WHERE x.embedding IS NULL AND x.seq > ?"
                       " ORDER BY x.seq LIMIT ?", (after_seq, limit))
        return [(r[0], r[1], r[2]) for r in rows]

    def set_embeddings(self, kind: str, rows: Sequence[tuple[int, np.ndarray]], model: str) -> None:
        table = _EMBEDDED_TABLES[kind]
        with self.transaction():
            for seq, vec in rows:
                self._exec(f"UPDATE {table} SET embedding = ?, embedding_model = ?,"
                           " embedding_rev = embedding_rev + 1 WHERE seq = ?",
                           (np.asarray(vec, dtype=np.float32).tobytes(), model, seq))
            self.db.after_commit(lambda: self.refresh_vectors(force=True))

    def clear_embeddings(self) -> None:
        with self.transaction():
            for table in _EMBEDDED_TABLES.values():
                self._exec(f"UPDATE {table} SET embedding = NULL, embedding_model = NULL")
            self.db.after_commit(lambda: [v.clear() for v in self.vectors.values()])

    def embedding_coverage(self, kind: str = "observation") -> dict[str, int]:
        row = self._one(f"SELECT count(*), count(embedding) FROM {_EMBEDDED_TABLES[kind]}")
        return {_EMBEDDED_TABLES[kind]: row[0], "embedded": row[1], "missing": row[0] - row[1]}

    def trusted_embedding_count(self) -> int:
        return self._one("SELECT count(*) FROM observations WHERE trust = 'trusted'"
                         " AND observation_type != 'superseded' AND embedding IS NOT NULL")[0]

    def sample_embeddings(self, limit: int) -> np.ndarray:
        """The newest ``limit`` trusted observation embeddings (deterministic, unlike a random sample)."""
        rows = self._q("SELECT embedding FROM observations WHERE trust = 'trusted'"
                       " AND observation_type != 'superseded' AND embedding IS NOT NULL"
                       " ORDER BY seq DESC LIMIT ?", (limit,))
        return np.vstack([np.frombuffer(r[0], dtype=np.float32) for r in rows]) if rows else np.zeros((0, 0))

    def observation_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        if not ids:
            return {}
        rows = self._q(f"SELECT id, embedding FROM observations WHERE embedding IS NOT NULL"
                       f" AND id IN ({','.join('?' * len(ids))})", list(ids))
        return {r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows}

    def iter_observation_texts(self) -> Iterator[tuple[int, str]]:
        for row in self._q("SELECT seq, content FROM observations ORDER BY seq"):
            yield row[0], row[1]

    # -- episodes -----------------------------------------------------------------------
    def add_episode(self, entity_id: str, content: str, actors: list[str], artifacts: list[str],
                    importance: float, project_id: str | None, embedding: bytes | None,
                    model: str | None) -> str:
        now = iso(utc_now())
        episode_id = new_id()
        with self.transaction():
            cur = self._exec(
                "INSERT INTO episodes(id, entity_id, content, started_at, actors, artifacts, importance,"
                " embedding, embedding_model, embedding_rev, project_id, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (episode_id, entity_id, content, now, json.dumps(actors), json.dumps(artifacts),
                 importance, embedding, model, 1 if embedding else 0, project_id, now))
            seq = cur.lastrowid
            self._index_text("episodes", seq, content)
            if embedding is not None and "episode" in self.vectors:
                vec = np.frombuffer(embedding, dtype=np.float32)
                self.db.after_commit(lambda: self.vectors["episode"].upsert(seq, vec, 1))
        return episode_id

    def episodes_of(self, entity_id: str, scope: Scope, limit: int) -> list[dict]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM episodes WHERE entity_id = ? AND {cond}"
                       " ORDER BY started_at DESC LIMIT ?", (entity_id, *params, limit))
        return [{**dict(r), "actors": json.loads(r["actors"]), "artifacts": json.loads(r["artifacts"])}
                for r in rows]

    # -- relations ----------------------------------------------------------------------
    def upsert_relation(self, from_id: str, to_id: str, relation_type: str, bidirectional: bool,
                        project_id: str | None) -> dict:
        """Create the edge, or strengthen it by 0.1 (capped at 1) when it already exists."""
        with self.transaction():
            self._exec(
                "INSERT INTO relations(id, from_entity_id, to_entity_id, relation_type, strength,"
                " bidirectional, project_id, created_at) VALUES (?, ?, ?, ?, 0.5, ?, ?, ?)"
                " ON CONFLICT(from_entity_id, to_entity_id, relation_type) DO UPDATE SET"
                " strength = min(1.0, strength + 0.1),"
                " bidirectional = max(bidirectional, excluded.bidirectional)",
                (new_id(), from_id, to_id, relation_type, int(bidirectional), project_id, iso(utc_now())))
            row = self._one("SELECT * FROM relations WHERE from_entity_id = ? AND to_entity_id = ?"
                            " AND relation_type = ?", (from_id, to_id, relation_type))
        return dict(row)

    def delete_relation(self, from_id: str, to_id: str, relation_type: str | None) -> bool:
        sql = "DELETE FROM relations WHERE from_entity_id = ? AND to_entity_id = ?"
        params: list = [from_id, to_id]
        if relation_type:
            sql += " AND relation_type = ?"
            params.append(relation_type)
        return self._exec(sql, params).rowcount > 0

    def relations_of(self, entity_ids: Sequence[str]) -> list[dict]:
        if not entity_ids:
            return []
        marks = ",".join("?" * len(entity_ids))
        rows = self._q(
            "SELECT r.*, ef.name AS from_name, et.name AS to_name, ef.importance AS from_importance,"
            " et.importance AS to_importance, ef.entity_type AS from_type, et.entity_type AS to_type"
            " FROM relations r JOIN entities ef ON ef.id = r.from_entity_id"
            " JOIN entities et ON et.id = r.to_entity_id"
            f" WHERE r.from_entity_id IN ({marks}) OR r.to_entity_id IN ({marks})",
            [*entity_ids, *entity_ids])
        return [dict(r) for r in rows]

    def mark_traversed(self, relation_ids: Sequence[str]) -> None:
        if not relation_ids:
            return
        marks = ",".join("?" * len(relation_ids))
        self._exec(f"UPDATE relations SET strength = min(1.0, strength + 0.02), last_traversed = ?"
                   f" WHERE id IN ({marks})", [iso(utc_now()), *relation_ids])
