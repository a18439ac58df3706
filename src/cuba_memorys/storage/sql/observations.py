"""Observations' SQL, shared by both backends: the rows of cuba_cronica, write-time
reinforcement, access counts, and the embeddings bookkeeping (reembed,
the OOD fit, dedup by vector)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import numpy as np

from cuba_memorys.models import NewObservation, Observation, Scope, iso, utc_now
from cuba_memorys.storage.sql.common import (
    EMBEDDED_TABLES,
    OBS_COLUMNS,
    SqlBase,
    observation_from,
    scope_sql,
)


class SqlObservations(SqlBase):
    """Mixed into SqlStore. ``similar_content`` (write-time dedup candidates) is each backend's."""

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
            blob = obs.embedding  # a local, so the callback sees it is not None
            if blob is not None:
                self._after_commit(lambda: self._vector_added("observation", seq, blob))
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

    def has_unembedded(self, scope: Scope) -> bool:
        """Whether ``scope`` holds an observation or episode still without a vector (read through
        the partial ``*_unembedded`` indexes: as many rows as are pending, not the table)."""
        cond, params = scope_sql(scope, "project_id")
        return any(self._q(f"SELECT 1 FROM {table} WHERE embedding IS NULL AND {cond} LIMIT 1", params)
                   for table in ("observations", "episodes"))

    def set_token_vectors(self, rows: Sequence[tuple[int, bytes]], texts: Sequence[str]) -> int:
        """Store observations' late-interaction token vectors by seq, each only while the row
        still says the text they were computed from; returns how many were written."""
        written = 0
        with self.transaction():
            for (seq, blob), text in zip(rows, texts):
                done = self._exec("UPDATE observations SET token_vectors = ? WHERE seq = ? AND content = ?",
                                  (blob, seq, text))
                written += max(done.rowcount, 0)
        return written

    def token_vectors_of(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The stored token vectors of these observations (those that have them)."""
        found: dict[str, bytes] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            for r in self._q(f"SELECT id, token_vectors FROM observations WHERE token_vectors IS NOT NULL"
                             f" AND id IN ({','.join('?' * len(chunk))})", chunk):
                found[r[0]] = bytes(r[1])
        return found

    def rows_without_tokens_of(self, ids: Sequence[str]) -> list[tuple[int, str]]:
        """(seq, content) of these observations that have no token vectors yet, in seq order."""
        found: list[tuple[int, str]] = []
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            found.extend((r[0], r[1]) for r in self._q(
                f"SELECT seq, content FROM observations WHERE token_vectors IS NULL"
                f" AND id IN ({','.join('?' * len(chunk))})", chunk))
        return sorted(found)

    def observation_ids_of(self, seqs: Sequence[int]) -> list[str]:
        """The ids of these observations (by seq), for a writer that embedded rows by seq."""
        found: list[str] = []
        for start in range(0, len(seqs), 500):
            chunk = list(seqs[start:start + 500])
            found.extend(r[0] for r in self._q(
                f"SELECT id FROM observations WHERE seq IN ({','.join('?' * len(chunk))})", chunk))
        return found

    def rows_missing_tokens(self, limit: int, after_seq: int = 0) -> list[tuple[int, str]]:
        """(seq, content) of observations with no token vectors yet, in seq order: what `reembed`
        fills on a store written before issue 31."""
        return [(r[0], r[1]) for r in self._q(
            "SELECT seq, content FROM observations WHERE token_vectors IS NULL AND seq > ?"
            " ORDER BY seq LIMIT ?", (after_seq, limit))]

    def token_coverage(self) -> dict[str, int]:
        row = self._one("SELECT count(*), count(token_vectors) FROM observations")
        return {"observations": row[0], "with_tokens": row[1], "missing": row[0] - row[1]}

    def clear_token_vectors(self) -> None:
        self._exec("UPDATE observations SET token_vectors = NULL WHERE token_vectors IS NOT NULL")

    def unembedded_ids(self, kind: str, ids: Sequence[str]) -> set[str]:
        """Which of these rows (observation or episode ids) have no vector stored yet."""
        table = EMBEDDED_TABLES[kind]
        found: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            found.update(r[0] for r in self._q(f"SELECT id FROM {table} WHERE embedding IS NULL"
                                               f" AND id IN ({','.join('?' * len(chunk))})", chunk))
        return found

    def unembedded_rows(self, kind: str, ids: Sequence[str]) -> list[tuple[int, str, str, str]]:
        """(seq, id, content, "entity name|entity type") of these rows that have no vector yet, in
        the order of ``ids`` (what an on-demand embedding needs)."""
        table = EMBEDDED_TABLES[kind]
        found: dict[str, tuple[int, str, str, str]] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            for r in self._q(f"SELECT x.seq, x.id, x.content, e.name || '|' || e.entity_type FROM {table} x"
                             " JOIN entities e ON e.id = x.entity_id WHERE x.embedding IS NULL"
                             f" AND x.id IN ({','.join('?' * len(chunk))})", chunk):
                found[r[1]] = (r[0], r[1], r[2], r[3])
        return [found[i] for i in dict.fromkeys(ids) if i in found]

    def rows_missing_embedding_of(self, kind: str, ids: Sequence[str]) -> list[tuple[int, str, str]]:
        """:meth:`rows_missing_embedding`'s rows for these ids: those still without an embedding
        (a row deleted, or embedded meanwhile, is left out), in seq order."""
        table = EMBEDDED_TABLES[kind]
        found: list[tuple[int, str, str]] = []
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            rows = self._q(f"SELECT x.seq, x.content, e.name || '|' || e.entity_type FROM {table} x"
                           " JOIN entities e ON e.id = x.entity_id WHERE x.embedding IS NULL"
                           f" AND x.id IN ({','.join('?' * len(chunk))})", chunk)
            found.extend((r[0], r[1], r[2]) for r in rows)
        return sorted(found)

    def set_embeddings(self, kind: str, rows: Sequence[tuple[int, np.ndarray]], model: str,
                       texts: Sequence[str] | None = None) -> None:
        """Store vectors by seq. With ``texts`` (what each vector was computed from), a row is
        written only while it still has no vector and still says that text: a backfill that ran
        while the row was corrected must not pin the old text's vector on it."""
        table = EMBEDDED_TABLES[kind]
        guard = " AND embedding IS NULL AND content = ?" if texts is not None else ""
        learned: list[tuple[int, bytes, int]] = []
        with self.transaction():
            for n, (seq, vec) in enumerate(rows):
                blob = np.asarray(vec, dtype=np.float32).tobytes()
                written = self._one(f"UPDATE {table} SET embedding = ?, embedding_model = ?,"
                                    f" embedding_rev = embedding_rev + 1 WHERE seq = ?{guard} RETURNING embedding_rev",
                                    (self._vector_param(blob), model, seq, *([texts[n]] if texts is not None else [])))
                if written is not None:
                    learned.append((seq, blob, written[0]))
            # only the rows written: reloading the whole index read every stored vector's
            # revision (~0.25 s at 100k rows on SQLite) for each batch the embedding queue stores
            self._after_commit(lambda: self._vectors_learned(kind, learned))

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
