"""Lifecycle SQL shared by both backends: what decay reads and writes, feedback, corrections,
trust changes, supersession and prune candidates (services/lifecycle/).

Decay and access bookkeeping change neither ``version`` nor ``updated_at``: those say when a
row's meaning changed (content, type, trust, evidence, tags), which the sync issue compares
across machines; a row that merely aged has not changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cuba_memorys.models import Entity, Observation, Scope, iso, utc_now
from cuba_memorys.storage.rows import (
    DecayRow,
    EpisodeAgeRow,
    LowImportanceRow,
    QuarantinedRows,
)
from cuba_memorys.storage.sql.common import OBS_COLUMNS, SqlBase, entity_from, marks, observation_from, scope_sql

TRUST_TABLES = {"observation": "observations", "episode": "episodes", "error": "errors"}


class SqlLifecycle(SqlBase):
    """Mixed into SqlStore."""

    # -- decay ----------------------------------------------------------------------------
    def decay_rows(self, scope: Scope, idle_before: str, exclude_entity_ids: Sequence[str]) -> list[DecayRow]:
        """Observations decay may lower: not permanent, not superseded, not accessed since
        ``idle_before``, and not of an excluded (protected) entity."""
        cond, params = scope_sql(scope, "project_id")
        skip = f" AND entity_id NOT IN ({marks(exclude_entity_ids)})" if exclude_entity_ids else ""
        rows = self._q("SELECT id, entity_id, observation_type, importance, access_count, last_accessed,"
                       " last_decayed_at, created_at FROM observations"
                       " WHERE observation_type NOT IN ('decision', 'lesson', 'superseded')"
                       f" AND (last_accessed IS NULL OR last_accessed < ?) AND {cond}{skip} ORDER BY seq",
                       (idle_before, *params, *exclude_entity_ids))
        return [DecayRow(**dict(r)) for r in rows]  # type: ignore[typeddict-item]

    def set_decayed(self, kind: str, values: Sequence[tuple[str, float, float]], at: str) -> int:
        """New importances from a decay pass, each written only if the row still has the
        importance the pass read (a feedback or reinforcement in between wins; the next pass
        decays it). Observations also record when they decayed. Returns the rows written."""
        sql = {"observation": "UPDATE observations SET importance = ?, last_decayed_at = ?"
                              " WHERE id = ? AND importance = ? RETURNING id",
               "episode": "UPDATE episodes SET importance = ? WHERE id = ? AND importance = ? RETURNING id"}[kind]
        written = 0
        with self.transaction():
            for row_id, was, importance in values:
                params = (importance, at, row_id, was) if kind == "observation" else (importance, row_id, was)
                written += self._one(sql, params) is not None
        return written

    def episode_ages(self, scope: Scope, created_before: str) -> list[EpisodeAgeRow]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, importance, created_at FROM episodes WHERE created_at < ? AND {cond}"
                       " ORDER BY seq", (created_before, *params))
        return [EpisodeAgeRow(id=r[0], importance=r[1], created_at=r[2]) for r in rows]

    def entities_written_since(self, since: str) -> list[str]:
        rows = self._q("SELECT DISTINCT entity_id FROM observations WHERE created_at >= ?", (since,))
        return [r[0] for r in rows]

    def open_session_count(self) -> int:
        return int(self._one("SELECT count(*) FROM sessions WHERE ended_at IS NULL")[0])

    # -- feedback ---------------------------------------------------------------------------
    def set_importance(self, kind: str, row_id: str, importance: float, accessed_at: str | None,
                       was: float) -> bool:
        """A feedback update, written only if the row still has importance ``was`` (False: it
        changed since it was read; read it again). ``accessed_at`` also counts an access."""
        table = {"observation": "observations", "entity": "entities"}[kind]
        touch = ""
        params: list[Any] = [importance]
        if accessed_at is not None:
            touch = ", access_count = access_count + 1" + (", last_accessed = ?" if kind == "observation" else "")
            params += [accessed_at] if kind == "observation" else []
        return self._one(f"UPDATE {table} SET importance = ?{touch} WHERE id = ? AND importance = ? RETURNING id",
                         (*params, row_id, was)) is not None

    def correct_observation(self, obs_id: str, content: str, previous_versions: list[dict[str, Any]],
                            at: str, expected_version: int) -> bool:
        """New text for an observation at ``expected_version`` (False, nothing written, when
        another correction got there first): a new version, re-indexed, its embedding cleared."""
        with self.transaction():
            row = self._one("UPDATE observations SET content = ?, version = version + 1, previous_versions = ?,"
                            " embedding = NULL, embedding_model = NULL, updated_at = ?"
                            " WHERE id = ? AND version = ? RETURNING seq",
                            (content, json.dumps(previous_versions, ensure_ascii=False), at, obs_id,
                             expected_version))
            if row is None:
                return False
            seq = row[0]
            self._index_text("observations", seq, content)
            self._after_commit(lambda: self._vectors_dropped("observation", [seq]))
        return True

    def set_trust(self, kind: str, row_id: str, trust: str) -> bool:
        table = TRUST_TABLES[kind]
        stamp = ", updated_at = ?" if table == "observations" else ""
        params: list[Any] = [trust] + ([_now()] if stamp else []) + [row_id]
        return self._one(f"UPDATE {table} SET trust = ?{stamp} WHERE id = ? RETURNING id", params) is not None

    def quarantined_rows(self, scope: Scope, limit: int) -> QuarantinedRows:
        cond, params = scope_sql(scope, "x.project_id")
        observations = self._q(
            "SELECT x.id, e.name, x.content, x.source, x.created_at FROM observations x"
            f" JOIN entities e ON e.id = x.entity_id WHERE x.trust = 'quarantined' AND {cond}"
            " ORDER BY x.created_at DESC LIMIT ?", (*params, limit))
        episodes = self._q(
            "SELECT x.id, e.name, x.content, x.created_at FROM episodes x JOIN entities e ON e.id = x.entity_id"
            f" WHERE x.trust = 'quarantined' AND {cond} ORDER BY x.created_at DESC LIMIT ?", (*params, limit))
        errors = self._q(
            "SELECT x.id, x.error_type, x.error_message, x.project, x.created_at FROM errors x"
            f" WHERE x.trust = 'quarantined' AND {cond} ORDER BY x.created_at DESC LIMIT ?", (*params, limit))
        return {
            "observations": [{"kind": "observation", "observation_id": r[0], "entity": r[1], "content": r[2],
                              "source": r[3], "created_at": r[4]} for r in observations],
            "episodes": [{"kind": "episode", "id": r[0], "entity": r[1], "content": r[2], "created_at": r[3]}
                         for r in episodes],
            "errors": [{"kind": "error", "id": r[0], "error_type": r[1], "error_message": r[2], "project": r[3],
                        "created_at": r[4]} for r in errors],
        }

    # -- supersession and prune ---------------------------------------------------------------
    def supersede_observations(self, ids: Sequence[str], by_id: str | None, at: str) -> int:
        """Move rows out of search and listings, remembering their type and what replaced
        them (so it can be undone); rows already superseded are left as they are."""
        if not ids:
            return 0
        rows = self._q("UPDATE observations SET superseded_from = observation_type, superseded_by = ?,"
                       " observation_type = 'superseded', updated_at = ?"
                       f" WHERE id IN ({marks(ids)}) AND observation_type != 'superseded' RETURNING id",
                       (by_id, at, *ids))
        return len(rows)

    def low_importance(self, scope: Scope, threshold: float) -> list[LowImportanceRow]:
        cond, params = scope_sql(scope, "o.project_id")
        rows = self._q("SELECT o.id, e.name, o.observation_type, o.content, o.importance, p.name FROM observations o"
                       " JOIN entities e ON e.id = o.entity_id LEFT JOIN projects p ON p.id = o.project_id"
                       " WHERE o.importance < ? AND o.observation_type NOT IN ('decision', 'lesson')"
                       f" AND {cond} ORDER BY o.importance, o.seq", (threshold, *params))
        return [LowImportanceRow(id=r[0], entity_name=r[1], observation_type=r[2], content=r[3], importance=r[4],
                                 project=r[5]) for r in rows]

    def content_rows(self, scope: Scope, entity_id: str | None, limit: int) -> list[Observation]:
        """Active observations grouped by entity, oldest first (merge, find_duplicates, summarize)."""
        cond, params = scope_sql(scope, "o.project_id")
        one = " AND o.entity_id = ?" if entity_id else ""
        rows = self._q(f"SELECT {OBS_COLUMNS} FROM observations o JOIN entities e ON e.id = o.entity_id"
                       f" WHERE o.observation_type != 'superseded' AND {cond}{one}"
                       " ORDER BY o.entity_id, o.created_at, o.seq LIMIT ?",
                       (*params, *([entity_id] if entity_id else []), limit))
        return [observation_from(r) for r in rows]

    def memory_stats(self, scope: Scope) -> dict[str, int]:
        cond, params = scope_sql(scope, "project_id")
        entities = self._one(f"SELECT count(*) FROM entities WHERE {cond}", params)[0]
        row = self._one("SELECT count(*), coalesce(sum(CASE WHEN observation_type = 'superseded' THEN 1 ELSE 0 END), 0)"
                        f" FROM observations WHERE {cond}", params)
        return {"entities": int(entities), "observations": int(row[0]), "superseded": int(row[1]),
                "active": int(row[0]) - int(row[1])}

    def export_entities(self, scope: Scope, limit: int) -> list[Entity]:
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q(f"SELECT e.* FROM entities e WHERE {cond} ORDER BY e.importance DESC, e.seq LIMIT ?",
                       (*params, limit))
        return [entity_from(r) for r in rows]


def _now() -> str:
    return iso(utc_now())
