"""Reminders (cuba_centinela), shared by both backends: the ``triggers`` table.

Pattern matching is the service's (services/reminders.py): the store hands it the armed
triggers of one condition and fires the ones it picked. Firing is one UPDATE … RETURNING that
re-checks the limits, so two processes firing the same trigger at once cannot exceed
max_fires.
"""

from __future__ import annotations

from cuba_memorys.models import Scope, iso, new_id, utc_now
from cuba_memorys.storage.rows import TriggerRow
from cuba_memorys.storage.sql.common import SqlBase, scope_sql, trigger_from


class SqlReminders(SqlBase):
    """Mixed into SqlStore."""

    def add_trigger(self, entity_pattern: str, condition_type: str, message: str, max_fires: int,
                    expires_at: str | None, from_agent: str, project_id: str | None) -> TriggerRow:
        row = self._one(
            "INSERT INTO triggers(id, entity_pattern, condition_type, message, max_fires, expires_at,"
            " from_agent, project_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (new_id(), entity_pattern, condition_type, message, max_fires, expires_at, from_agent,
             project_id, iso(utc_now())))
        return trigger_from(row)

    def get_trigger(self, trigger_id: str, scope: Scope) -> TriggerRow | None:
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM triggers WHERE id = ? AND {cond}", (trigger_id, *params))
        return trigger_from(row) if row else None

    def list_triggers(self, scope: Scope, limit: int) -> list[TriggerRow]:
        """Visible triggers, active or not, newest first."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM triggers WHERE {cond} ORDER BY created_at DESC, id LIMIT ?",
                       (*params, limit))
        return [trigger_from(r) for r in rows]

    def armed_triggers(self, condition_type: str, scope: Scope) -> list[TriggerRow]:
        """Visible active triggers of one condition, oldest first (expired ones included: the
        caller switches those off)."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM triggers WHERE condition_type = ? AND active = 1 AND {cond}"
                       " ORDER BY created_at, id", (condition_type, *params))
        return [trigger_from(r) for r in rows]

    def fire_trigger(self, trigger_id: str, now: str) -> TriggerRow | None:
        """Count one firing; the row after it, or None when the trigger may no longer fire.
        It is switched off by the firing that reaches max_fires."""
        row = self._one(
            "UPDATE triggers SET fire_count = fire_count + 1, last_fired_at = ?,"
            " active = CASE WHEN max_fires >= 0 AND fire_count + 1 >= max_fires THEN 0 ELSE 1 END"
            " WHERE id = ? AND active = 1 AND (max_fires < 0 OR fire_count < max_fires)"
            " AND (expires_at IS NULL OR expires_at > ?) RETURNING *", (now, trigger_id, now))
        return trigger_from(row) if row else None

    def expire_triggers(self, scope: Scope, now: str) -> int:
        """Switch off the visible active triggers whose expires_at has passed."""
        cond, params = scope_sql(scope, "project_id")
        return self._exec(f"UPDATE triggers SET active = 0 WHERE active = 1 AND expires_at IS NOT NULL"
                          f" AND expires_at <= ? AND {cond}", (now, *params)).rowcount

    def delete_trigger(self, trigger_id: str) -> bool:
        return self._exec("DELETE FROM triggers WHERE id = ?", (trigger_id,)).rowcount > 0
