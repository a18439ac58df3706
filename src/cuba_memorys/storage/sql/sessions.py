"""Work sessions (cuba_jornada), shared by both backends. The `sessions` table is in the core
schema; observations, episodes and errors point at the session they were written in."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cuba_memorys.models import Scope, iso, new_id, utc_now


class SqlSessions:
    """Mixed into SqlStore; uses its ``_q``/``_one``/``_exec``."""

    def _q(self, sql: str, params: Sequence = ()) -> list: raise NotImplementedError
    def _one(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError
    def _exec(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError

    def start_session(self, name: str, goals: list[str], client_id: str, project_id: str | None) -> dict:
        row = self._one("INSERT INTO sessions(id, name, goals, client_id, project_id, started_at)"
                        " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                        (new_id(), name, json.dumps(goals), client_id, project_id, iso(utc_now())))
        return _session(row)

    def get_session(self, session_id: str) -> dict | None:
        row = self._one("SELECT * FROM sessions WHERE id = ?", (session_id,))
        return _session(row) if row else None

    def end_session(self, session_id: str, outcome: str, summary: str | None) -> bool:
        return self._exec("UPDATE sessions SET outcome = ?, summary = ?, ended_at = ? WHERE id = ?"
                          " AND ended_at IS NULL", (outcome, summary, iso(utc_now()), session_id)).rowcount > 0

    def last_ended_session(self, client_id: str, scope: Scope) -> dict | None:
        from cuba_memorys.storage.sql.store import (
            scope_sql,  # sql_store imports this module
        )

        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM sessions WHERE client_id = ? AND ended_at IS NOT NULL AND {cond}"
                        " ORDER BY ended_at DESC LIMIT 1", (client_id, *params))
        return _session(row) if row else None

    def list_sessions(self, scope: Scope, limit: int) -> list[dict]:
        from cuba_memorys.storage.sql.store import scope_sql

        cond, params = scope_sql(scope, "s.project_id")
        rows = self._q(f"SELECT s.*, p.name AS project_name FROM sessions s LEFT JOIN projects p"
                       f" ON p.id = s.project_id WHERE {cond} ORDER BY s.started_at DESC LIMIT ?",
                       (*params, limit))
        return [_session(r) for r in rows]

    def session_diff(self, session_id: str) -> dict[str, int]:
        """Rows written in the session: observations by type, plus episodes."""
        diff = {r[0]: int(r[1]) for r in self._q(
            "SELECT observation_type, count(*) FROM observations WHERE session_id = ?"
            " GROUP BY observation_type ORDER BY observation_type", (session_id,))}
        diff["episodes"] = int(self._one("SELECT count(*) FROM episodes WHERE session_id = ?", (session_id,))[0])
        return diff

    def rows_since(self, kind_table: str, ids: Sequence[str], since: str, session_id: str) -> set[str]:
        """Which of ``ids`` were created after ``since`` outside the session (by someone else)."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        rows = self._q(f"SELECT id FROM {kind_table} WHERE id IN ({marks}) AND created_at > ?"
                       " AND (session_id IS NULL OR session_id != ?)", (*ids, since, session_id))
        return {r[0] for r in rows}


def _session(row: Any) -> dict:
    data = dict(row)
    data["goals"] = json.loads(data["goals"]) if isinstance(data["goals"], str) else data["goals"]
    return data
