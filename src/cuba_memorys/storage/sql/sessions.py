"""Work sessions (cuba_jornada) and their compaction snapshots (cuba_pre_compact), shared by
both backends. Observations, episodes and errors point at the session they were written in."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import cast

from cuba_memorys.models import Scope, iso, new_id, utc_now
from cuba_memorys.storage.rows import (
    DecisionBriefRow,
    PendingRow,
    SessionListRow,
    SessionObservationRow,
    SessionRow,
    SnapshotParts,
    SnapshotRow,
    UnresolvedErrorRow,
)
from cuba_memorys.storage.sql.common import (
    SNAPSHOT_LISTS,
    SqlBase,
    marks,
    scope_sql,
    session_from,
    snapshot_from,
)


class SqlSessions(SqlBase):
    """Mixed into SqlStore."""

    def start_session(self, name: str, goals: list[str], client_id: str, project_id: str | None) -> SessionRow:
        row = self._one("INSERT INTO sessions(id, name, goals, client_id, project_id, started_at)"
                        " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                        (new_id(), name, json.dumps(goals), client_id, project_id, iso(utc_now())))
        return session_from(row)

    def get_session(self, session_id: str) -> SessionRow | None:
        row = self._one("SELECT * FROM sessions WHERE id = ?", (session_id,))
        return session_from(row) if row else None

    def end_session(self, session_id: str, outcome: str, summary: str | None) -> bool:
        return self._exec("UPDATE sessions SET outcome = ?, summary = ?, ended_at = ? WHERE id = ?"
                          " AND ended_at IS NULL", (outcome, summary, iso(utc_now()), session_id)).rowcount > 0

    def last_ended_session(self, client_id: str, scope: Scope) -> SessionRow | None:
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM sessions WHERE client_id = ? AND ended_at IS NOT NULL AND {cond}"
                        " ORDER BY ended_at DESC LIMIT 1", (client_id, *params))
        return session_from(row) if row else None

    def list_sessions(self, scope: Scope, limit: int) -> list[SessionListRow]:
        cond, params = scope_sql(scope, "s.project_id")
        rows = self._q(f"SELECT s.*, p.name AS project_name FROM sessions s LEFT JOIN projects p"
                       f" ON p.id = s.project_id WHERE {cond} ORDER BY s.started_at DESC LIMIT ?",
                       (*params, limit))
        return [cast(SessionListRow, session_from(r)) for r in rows]  # session_from keeps project_name

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
        rows = self._q(f"SELECT id FROM {kind_table} WHERE id IN ({marks(ids)}) AND created_at > ?"
                       " AND (session_id IS NULL OR session_id != ?)", (*ids, since, session_id))
        return {r[0] for r in rows}

    # -- compaction snapshots and what they gather --------------------------------------
    def save_snapshot(self, session_id: str, project_id: str | None, summary_md: str, parts: SnapshotParts,
                      obs_count: int) -> SnapshotRow:
        row = self._one(
            "INSERT INTO compaction_snapshots(id, session_id, project_id, summary_md, key_observations,"
            " decisions, unresolved_errors, pending_embeddings, active_goals, obs_count, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (new_id(), session_id, project_id, summary_md, *(json.dumps(parts[k]) for k in SNAPSHOT_LISTS),
             obs_count, iso(utc_now())))
        return snapshot_from(row)

    def latest_snapshot(self, session_id: str) -> SnapshotRow | None:
        row = self._one("SELECT * FROM compaction_snapshots WHERE session_id = ?"
                        " ORDER BY created_at DESC LIMIT 1", (session_id,))
        return snapshot_from(row) if row else None

    def get_snapshot(self, snapshot_id: str, scope: Scope) -> SnapshotRow | None:
        """One snapshot by id, when its project is visible in ``scope`` (cuba://snapshot/{id})."""
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM compaction_snapshots WHERE id = ? AND {cond}", (snapshot_id, *params))
        return snapshot_from(row) if row else None

    def session_observations(self, session_id: str, limit: int) -> list[SessionObservationRow]:
        """The session's observations, most important first."""
        rows = self._q("SELECT o.id, e.name AS entity, o.observation_type AS type, o.content FROM observations o"
                       " JOIN entities e ON e.id = o.entity_id WHERE o.session_id = ?"
                       " AND o.observation_type != 'superseded' ORDER BY o.importance DESC, o.seq DESC LIMIT ?",
                       (session_id, limit))
        return [cast(SessionObservationRow, dict(r)) for r in rows]

    def recent_decisions(self, scope: Scope, limit: int) -> list[DecisionBriefRow]:
        cond, params = scope_sql(scope, "o.project_id")
        rows = self._q(f"SELECT o.id, e.name AS entity, o.content FROM observations o JOIN entities e"
                       f" ON e.id = o.entity_id WHERE o.observation_type = 'decision' AND o.trust = 'trusted'"
                       f" AND {cond} ORDER BY o.created_at DESC, o.seq DESC LIMIT ?", (*params, limit))
        return [cast(DecisionBriefRow, dict(r)) for r in rows]

    def unresolved_errors(self, scope: Scope, limit: int) -> list[UnresolvedErrorRow]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, error_type, error_message AS message FROM errors WHERE resolved = 0"
                       f" AND {cond} ORDER BY created_at DESC, seq DESC LIMIT ?", (*params, limit))
        return [cast(UnresolvedErrorRow, dict(r)) for r in rows]

    def unembedded_observations(self, scope: Scope, limit: int) -> list[PendingRow]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, content FROM observations WHERE embedding IS NULL AND {cond}"
                       " ORDER BY seq LIMIT ?", (*params, limit))
        return [cast(PendingRow, dict(r)) for r in rows]
