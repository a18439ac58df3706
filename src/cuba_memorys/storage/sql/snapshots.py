"""Compaction snapshots (cuba_pre_compact), shared by both backends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cuba_memorys.models import Scope, iso, new_id, utc_now

_LISTS = ("key_observations", "decisions", "unresolved_errors", "pending_embeddings", "active_goals")


class SqlSnapshots:
    """Mixed into SqlStore; uses its ``_q``/``_one``."""

    def _q(self, sql: str, params: Sequence = ()) -> list: raise NotImplementedError
    def _one(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError

    def save_snapshot(self, session_id: str, project_id: str | None, summary_md: str, parts: dict,
                      obs_count: int) -> dict:
        row = self._one(
            "INSERT INTO compaction_snapshots(id, session_id, project_id, summary_md, key_observations,"
            " decisions, unresolved_errors, pending_embeddings, active_goals, obs_count, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (new_id(), session_id, project_id, summary_md, *(json.dumps(parts[k]) for k in _LISTS),
             obs_count, iso(utc_now())))
        return _snapshot(row)

    def latest_snapshot(self, session_id: str) -> dict | None:
        row = self._one("SELECT * FROM compaction_snapshots WHERE session_id = ?"
                        " ORDER BY created_at DESC LIMIT 1", (session_id,))
        return _snapshot(row) if row else None

    def get_snapshot(self, snapshot_id: str, scope: Scope) -> dict | None:
        """One snapshot by id, when its project is visible in ``scope`` (cuba://snapshot/{id})."""
        from cuba_memorys.storage.sql.store import (
            scope_sql,  # sql_store imports this module
        )

        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM compaction_snapshots WHERE id = ? AND {cond}", (snapshot_id, *params))
        return _snapshot(row) if row else None

    def session_observations(self, session_id: str, limit: int) -> list[dict]:
        """The session's observations, most important first."""
        rows = self._q("SELECT o.id, e.name AS entity, o.observation_type AS type, o.content FROM observations o"
                       " JOIN entities e ON e.id = o.entity_id WHERE o.session_id = ?"
                       " AND o.observation_type != 'superseded' ORDER BY o.importance DESC, o.seq DESC LIMIT ?",
                       (session_id, limit))
        return [dict(r) for r in rows]

    def recent_decisions(self, scope: Scope, limit: int) -> list[dict]:
        from cuba_memorys.storage.sql.store import (
            scope_sql,  # sql_store imports this module
        )

        cond, params = scope_sql(scope, "o.project_id")
        rows = self._q(f"SELECT o.id, e.name AS entity, o.content FROM observations o JOIN entities e"
                       f" ON e.id = o.entity_id WHERE o.observation_type = 'decision' AND o.trust = 'trusted'"
                       f" AND {cond} ORDER BY o.created_at DESC, o.seq DESC LIMIT ?", (*params, limit))
        return [dict(r) for r in rows]

    def unresolved_errors(self, scope: Scope, limit: int) -> list[dict]:
        from cuba_memorys.storage.sql.store import scope_sql

        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, error_type, error_message AS message FROM errors WHERE resolved = 0"
                       f" AND {cond} ORDER BY created_at DESC, seq DESC LIMIT ?", (*params, limit))
        return [dict(r) for r in rows]

    def unembedded_observations(self, scope: Scope, limit: int) -> list[dict]:
        from cuba_memorys.storage.sql.store import scope_sql

        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, content FROM observations WHERE embedding IS NULL AND {cond}"
                       " ORDER BY seq LIMIT ?", (*params, limit))
        return [dict(r) for r in rows]


def _snapshot(row: Any) -> dict:
    data = dict(row)
    for key in _LISTS:
        data[key] = json.loads(data[key]) if isinstance(data[key], str) else data[key]
    return data
