"""What the SQLite and PostgreSQL stores share: the knowledge-graph SQL, written once.

Both backends run the same statements (``?`` placeholders; the PostgreSQL connection turns
them into its own), so every behaviour is the same by construction. What genuinely differs
lives in small hooks each backend defines: how the lexical index is written, how an
embedding is passed and read back, what happens to an in-memory vector index after a commit,
and the few SQL fragments the dialects spell differently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from cuba_memorys.models import (
    Entity,
    NewObservation,
    Observation,
    Scope,
    iso,
    new_id,
    utc_now,
)
from cuba_memorys.storage.sql.grounding import SqlGrounding
from cuba_memorys.storage.sql.incidents import SqlErrors
from cuba_memorys.storage.sql.reminders import SqlTriggers
from cuba_memorys.storage.sql.sessions import SqlSessions
from cuba_memorys.storage.sql.snapshots import SqlSnapshots
from cuba_memorys.storage.sql.workflow import SqlWorkflow
from cuba_memorys.text import analyze, words

OBS_COLUMNS = (
    "o.seq, o.id, o.entity_id, e.name AS entity_name, o.content, o.observation_type, o.importance,"
    " o.access_count, o.source, o.version, o.previous_versions, o.tags, o.trust, o.evidence,"
    " o.session_id, o.project_id, o.origin_node, o.created_at, o.updated_at"
)

EMBEDDED_TABLES = {"observation": "observations", "episode": "episodes"}
COUNTED_TABLES = ("entities", "observations", "relations", "episodes", "errors", "sessions", "projects")

# Each lexically indexed table and the SQL of the text its index holds.
LEXICAL_SOURCES = {
    "observations": "content",
    "entities": "name || ' ' || entity_type",
    "episodes": "content",
    "errors": "error_type || ' ' || error_message",
}


def scope_sql(scope: Scope, column: str) -> tuple[str, list]:
    """SQL condition and parameters for 'visible in this scope' on ``column``."""
    if scope.unrestricted:
        return "1 = 1", []
    if scope.include_unscoped:
        return f"({column} IS NULL OR {column} = ?)", [scope.project_id]
    return f"{column} = ?", [scope.project_id]


def json_value(value: Any) -> Any:
    """A JSON column's value as Python (both backends store JSON text)."""
    return json.loads(value) if isinstance(value, str) else value


def lexical_texts(text: str) -> tuple[str, str]:
    """The two lexical forms: folded words (text branch), analyzed terms (BM25 branch)."""
    return " ".join(words(text)), " ".join(analyze(text))


def entity_from(row: Any) -> Entity:
    return Entity(row["id"], row["name"], row["entity_type"], row["importance"],
                  row["access_count"], row["project_id"], row["created_at"])


def observation_from(row: Any) -> Observation:
    return Observation(
        id=row["id"], entity_id=row["entity_id"], entity_name=row["entity_name"],
        content=row["content"], observation_type=row["observation_type"],
        importance=row["importance"], access_count=row["access_count"], source=row["source"],
        version=row["version"], previous_versions=json_value(row["previous_versions"]),
        tags=json_value(row["tags"]), trust=row["trust"], evidence=row["evidence"],
        session_id=row["session_id"], project_id=row["project_id"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )


class SqlStore(SqlGrounding, SqlWorkflow, SqlSessions, SqlSnapshots, SqlErrors, SqlTriggers):
    """The shared half of a store. A backend provides the connection (``_q``, ``_one``,
    ``_exec``, ``transaction``, ``_after_commit``) and the hooks below."""

    backend = "sql"
    origin_node: str | None = None
    read_only = False  # a PostgreSQL standby: searches only, every write refused

    # -- backend hooks ------------------------------------------------------------------
    def _q(self, sql: str, params: Sequence = ()) -> list: raise NotImplementedError
    def _one(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError
    def _exec(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError
    def _after_commit(self, callback) -> None: raise NotImplementedError
    def _index_text(self, table: str, seq: int, text: str) -> None: raise NotImplementedError
    def _lexical_columns(self, table: str, text: str) -> dict[str, tuple[str, Any]]:
        """Lexical index columns a backend keeps in the row itself: {column: (SQL, parameter)}."""
        return {}
    def _index_inserted(self, table: str, seq: int, text: str) -> None:
        """After an INSERT through :meth:`_insert_indexed`: index what the row did not carry."""
        self._index_text(table, seq, text)
    def _vector_param(self, blob: bytes | None) -> Any: raise NotImplementedError
    def _vector_value(self, value: Any) -> np.ndarray: raise NotImplementedError
    def _vector_added(self, kind: str, seq: int, blob: bytes) -> None: """After commit: a row got its first embedding."""
    def _vectors_dropped(self, kind: str, seqs: list[int]) -> None: """After commit: rows left."""
    def _vectors_reloaded(self) -> None: """After commit: embeddings were changed in bulk."""
    def _vectors_cleared(self) -> None: """After commit: every embedding was removed."""

    def build_indexes_in_background(self) -> None:
        """A long-running server's cue to build large missing indexes (PostgreSQL); no-op here."""

    def index_builds(self) -> dict:
        """Indexes not in place: {"missing": [...], "building": [...], "failed": {name: why}}."""
        return {"missing": [], "building": [], "failed": {}}

    def _insert_indexed(self, table: str, values: dict[str, Any], text: str, returning: str = "seq") -> Any:
        """INSERT one row of a lexically indexed table and index ``text`` for it, in one write
        where the backend keeps the index in the row (PostgreSQL), else just after (FTS5)."""
        extra = self._lexical_columns(table, text)
        columns = [*values, *extra]
        marks = ["?"] * len(values) + [sql for sql, _ in extra.values()]
        row = self._one(f"INSERT INTO {table}({', '.join(columns)}) VALUES ({', '.join(marks)})"
                        f" RETURNING {returning}", (*values.values(), *(p for _, p in extra.values())))
        self._index_inserted(table, row["seq"], text)
        return row

    # -- metadata -----------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self._exec("INSERT INTO meta(key, value) VALUES (?, ?) "
                   "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def counts(self) -> dict[str, int]:
        return {t: self._one(f"SELECT count(*) FROM {t}")[0] for t in COUNTED_TABLES}

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
        return entity_from(row) if row else None

    def get_entity_by_id(self, entity_id: str) -> Entity | None:
        row = self._one("SELECT * FROM entities WHERE id = ?", (entity_id,))
        return entity_from(row) if row else None

    def create_entity(self, name: str, entity_type: str, project_id: str | None) -> Entity:
        now = iso(utc_now())
        with self.transaction():
            row = self._insert_indexed("entities", {
                "id": new_id(), "name": name, "entity_type": entity_type, "project_id": project_id,
                "created_at": now, "updated_at": now}, f"{name} {entity_type}", returning="*")
        return entity_from(row)

    def boost_entity(self, entity_id: str) -> Entity:
        """Hebbian access reinforcement: importance moves 5% of the way to 1."""
        self._exec("UPDATE entities SET access_count = access_count + 1,"
                   " importance = least(1.0, importance + 0.05 * (1 - importance)), updated_at = ?"
                   " WHERE id = ?", (iso(utc_now()), entity_id))
        return entity_from(self._one("SELECT * FROM entities WHERE id = ?", (entity_id,)))

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
            gone = self._seqs_of("observations", "entity_id = ?", [entity_id])
            gone_eps = self._seqs_of("episodes", "entity_id = ?", [entity_id])
            self._exec("DELETE FROM entities WHERE id = ?", (entity_id,))
            self._after_commit(lambda: self._vectors_dropped("observation", gone))
            self._after_commit(lambda: self._vectors_dropped("episode", gone_eps))
        return counts

    def entities_by_ids(self, ids: Sequence[str]) -> dict[str, Entity]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {r["id"]: entity_from(r) for r in self._q(f"SELECT * FROM entities WHERE id IN ({marks})", list(ids))}

    def top_entities(self, scope: Scope, limit: int) -> list[Entity]:
        """The most important visible entities that have at least two observations."""
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q(f"SELECT e.* FROM entities e WHERE {cond} AND (SELECT count(*) FROM observations o"
                       " WHERE o.entity_id = e.id AND o.observation_type != 'superseded') >= 2"
                       " ORDER BY e.importance DESC, e.seq LIMIT ?", (*params, limit))
        return [entity_from(r) for r in rows]

    def _seqs_of(self, table: str, where: str, params: list) -> list[int]:
        return [r[0] for r in self._q(f"SELECT seq FROM {table} WHERE {where}", params)]

    # -- observations -------------------------------------------------------------------
    def add_observation(self, obs: NewObservation) -> str:
        now = iso(utc_now())
        with self.transaction():
            seq = self._insert_indexed("observations", {
                "id": obs.id, "entity_id": obs.entity_id, "content": obs.content,
                "observation_type": obs.observation_type, "importance": obs.importance, "source": obs.source,
                "tags": json.dumps(obs.tags), "trust": obs.trust, "evidence": obs.evidence,
                "session_id": obs.session_id, "project_id": obs.project_id, "origin_node": self.origin_node,
                "embedding": self._vector_param(obs.embedding), "embedding_model": obs.embedding_model,
                "embedding_rev": 1 if obs.embedding else 0, "created_at": obs.created_at or now,
                "updated_at": now}, obs.content)["seq"]
            if obs.embedding is not None:
                self._after_commit(lambda: self._vector_added("observation", seq, obs.embedding))
        return obs.id

    def get_observation(self, obs_id: str, scope: Scope) -> Observation | None:
        cond, params = scope_sql(scope, "o.project_id")
        row = self._one(f"SELECT {OBS_COLUMNS} FROM observations o JOIN entities e ON e.id = o.entity_id"
                        f" WHERE o.id = ? AND {cond}", (obs_id, *params))
        return observation_from(row) if row else None

    def observations_of(self, entity_id: str, scope: Scope, include_superseded: bool = False,
                        limit: int = 500) -> list[Observation]:
        cond, params = scope_sql(scope, "o.project_id")
        extra = "" if include_superseded else " AND o.observation_type != 'superseded'"
        rows = self._q(f"SELECT {OBS_COLUMNS} FROM observations o JOIN entities e ON e.id = o.entity_id"
                       f" WHERE o.entity_id = ? AND {cond}{extra}"
                       " ORDER BY o.importance DESC, o.created_at DESC LIMIT ?",
                       (entity_id, *params, limit))
        return [observation_from(r) for r in rows]

    def reinforce_observation(self, obs_id: str, delta: float) -> None:
        self._exec("UPDATE observations SET importance = least(1.0, importance + ?),"
                   " access_count = access_count + 1, last_accessed = ? WHERE id = ?",
                   (delta, iso(utc_now()), obs_id))

    def mark_superseded(self, obs_id: str) -> None:
        """Keep the row (history) but out of search and listings: another replaced it."""
        self._exec("UPDATE observations SET observation_type = 'superseded', updated_at = ? WHERE id = ?",
                   (iso(utc_now()), obs_id))

    def delete_observation(self, obs_id: str) -> bool:
        with self.transaction():
            row = self._one("DELETE FROM observations WHERE id = ? RETURNING seq", (obs_id,))
            if row is None:
                return False
            seq = row[0]
            self._after_commit(lambda: self._vectors_dropped("observation", [seq]))
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

    # -- embeddings ---------------------------------------------------------------------
    def rows_missing_embedding(self, kind: str, limit: int, after_seq: int = 0) -> list[tuple[int, str, str]]:
        """(seq, content, "entity name|entity type") of rows without an embedding."""
        table = EMBEDDED_TABLES[kind]
        rows = self._q(f"SELECT x.seq, x.content, e.name || '|' || e.entity_type FROM {table} x"
                       " JOIN entities e ON e.id = x.entity_id WHERE x.embedding IS NULL AND x.seq > ?"
                       " ORDER BY x.seq LIMIT ?", (after_seq, limit))
        return [(r[0], r[1], r[2]) for r in rows]

    def set_embeddings(self, kind: str, rows: Sequence[tuple[int, np.ndarray]], model: str) -> None:
        table = EMBEDDED_TABLES[kind]
        with self.transaction():
            for seq, vec in rows:
                blob = np.asarray(vec, dtype=np.float32).tobytes()
                self._exec(f"UPDATE {table} SET embedding = ?, embedding_model = ?,"
                           " embedding_rev = embedding_rev + 1 WHERE seq = ?",
                           (self._vector_param(blob), model, seq))
            self._after_commit(self._vectors_reloaded)

    def clear_embeddings(self) -> None:
        with self.transaction():
            for table in EMBEDDED_TABLES.values():
                self._exec(f"UPDATE {table} SET embedding = NULL, embedding_model = NULL")
            self._after_commit(self._vectors_cleared)

    def embedding_coverage(self, kind: str = "observation") -> dict[str, int]:
        table = EMBEDDED_TABLES[kind]
        row = self._one(f"SELECT count(*), count(embedding) FROM {table}")
        return {table: row[0], "embedded": row[1], "missing": row[0] - row[1]}

    def trusted_embedding_count(self) -> int:
        return self._one("SELECT count(*) FROM observations WHERE trust = 'trusted'"
                         " AND observation_type != 'superseded' AND embedding IS NOT NULL")[0]

    def sample_embeddings(self, limit: int) -> np.ndarray:
        """The newest ``limit`` trusted observation embeddings (deterministic, unlike a random sample)."""
        rows = self._q("SELECT embedding FROM observations WHERE trust = 'trusted'"
                       " AND observation_type != 'superseded' AND embedding IS NOT NULL"
                       " ORDER BY seq DESC LIMIT ?", (limit,))
        return np.vstack([self._vector_value(r[0]) for r in rows]) if rows else np.zeros((0, 0))

    def observation_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        if not ids:
            return {}
        rows = self._q(f"SELECT id, embedding FROM observations WHERE embedding IS NOT NULL"
                       f" AND id IN ({','.join('?' * len(ids))})", list(ids))
        return {r[0]: self._vector_value(r[1]) for r in rows}

    def iter_observation_texts(self) -> Iterator[tuple[int, str]]:
        for row in self._q("SELECT seq, content FROM observations ORDER BY seq"):
            yield row[0], row[1]

    # -- episodes -----------------------------------------------------------------------
    def add_episode(self, entity_id: str, content: str, actors: list[str], artifacts: list[str],
                    importance: float, project_id: str | None, embedding: bytes | None,
                    model: str | None, session_id: str | None = None) -> str:
        now = iso(utc_now())
        episode_id = new_id()
        with self.transaction():
            seq = self._insert_indexed("episodes", {
                "id": episode_id, "entity_id": entity_id, "content": content, "started_at": now,
                "actors": json.dumps(actors), "artifacts": json.dumps(artifacts), "importance": importance,
                "embedding": self._vector_param(embedding), "embedding_model": model,
                "embedding_rev": 1 if embedding else 0, "project_id": project_id,
                "origin_node": self.origin_node, "session_id": session_id, "created_at": now}, content)["seq"]
            if embedding is not None:
                self._after_commit(lambda: self._vector_added("episode", seq, embedding))
        return episode_id

    def episodes_of(self, entity_id: str, scope: Scope, limit: int) -> list[dict]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM episodes WHERE entity_id = ? AND {cond}"
                       " ORDER BY started_at DESC LIMIT ?", (entity_id, *params, limit))
        out = []
        for r in rows:
            data = dict(r)
            data.pop("embedding", None)
            data.pop("lex_raw", None)
            data.pop("lex_stem", None)
            out.append({**data, "actors": json_value(r["actors"]), "artifacts": json_value(r["artifacts"])})
        return out

    # -- relations ----------------------------------------------------------------------
    def upsert_relation(self, from_id: str, to_id: str, relation_type: str, bidirectional: bool,
                        project_id: str | None) -> dict:
        """Create the edge, or strengthen it by 0.1 (capped at 1) when it already exists."""
        row = self._one(
            "INSERT INTO relations(id, from_entity_id, to_entity_id, relation_type, strength,"
            " bidirectional, project_id, created_at) VALUES (?, ?, ?, ?, 0.5, ?, ?, ?)"
            " ON CONFLICT(from_entity_id, to_entity_id, relation_type) DO UPDATE SET"
            " strength = least(1.0, relations.strength + 0.1),"
            " bidirectional = greatest(relations.bidirectional, excluded.bidirectional) RETURNING *",
            (new_id(), from_id, to_id, relation_type, int(bidirectional), project_id, iso(utc_now())))
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
        self._exec(f"UPDATE relations SET strength = least(1.0, strength + 0.02), last_traversed = ?"
                   f" WHERE id IN ({marks})", [iso(utc_now()), *relation_ids])
