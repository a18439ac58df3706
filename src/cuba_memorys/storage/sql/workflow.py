"""Workflow rows both backends share: working memory, procedures, and the decision
observations cuba_decreto reads. Same ``?`` SQL on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import cast

from cuba_memorys.models import Scope, iso, new_id, utc_now
from cuba_memorys.storage.rows import (
    ProcedureFields,
    ProcedureRow,
    TypedObservationRow,
    WorkingMemoryRow,
)
from cuba_memorys.storage.sql.common import SqlBase, procedure_from, scope_sql

PROCEDURE_FIELDS = ("trigger_context", "steps", "preconditions", "verification")


class SqlWorkflow(SqlBase):
    """Mixed into SqlStore."""

    # -- decisions (observations of type 'decision') -------------------------------------
    def observations_of_type(self, observation_type: str, scope: Scope, limit: int) -> list[TypedObservationRow]:
        """Visible, trusted, current observations of one type, newest first:
        {id, content, entity_name, importance, created_at}."""
        cond, params = scope_sql(scope, "o.project_id")
        rows = self._q(
            "SELECT o.id, o.content, e.name AS entity_name, o.importance, o.created_at"
            " FROM observations o JOIN entities e ON e.id = o.entity_id"
            f" WHERE o.observation_type = ? AND o.trust = 'trusted' AND {cond}"
            " ORDER BY o.created_at DESC, o.seq DESC LIMIT ?", (observation_type, *params, limit))
        return [cast(TypedObservationRow, dict(r)) for r in rows]

    # -- working memory ------------------------------------------------------------------
    def add_working_memory(self, client_id: str, session_id: str | None, project_id: str | None,
                           content: str, tag: str | None, ttl_seconds: int, created_at: str,
                           expires_at: str) -> WorkingMemoryRow:
        row = self._one(
            "INSERT INTO working_memory(id, client_id, session_id, project_id, content, tag, ttl_seconds,"
            " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (new_id(), client_id, session_id, project_id, content, tag, ttl_seconds, created_at, expires_at))
        return cast(WorkingMemoryRow, dict(row))

    def working_memory_entries(self, client_id: str, session_id: str | None, scope: Scope,
                               tag: str | None, now: str, limit: int) -> list[WorkingMemoryRow]:
        """The owner's unexpired entries (of ``tag`` when given), newest first."""
        where, params = self._working_memory_owner(client_id, session_id, scope, tag)
        rows = self._q(f"SELECT * FROM working_memory WHERE {where} AND expires_at > ?"
                       " ORDER BY created_at DESC, id LIMIT ?", (*params, now, limit))
        return [cast(WorkingMemoryRow, dict(r)) for r in rows]

    def clear_working_memory(self, client_id: str, session_id: str | None, scope: Scope,
                             tag: str | None) -> int:
        where, params = self._working_memory_owner(client_id, session_id, scope, tag)
        return self._exec(f"DELETE FROM working_memory WHERE {where}", params).rowcount

    def purge_expired_working_memory(self, now: str) -> int:
        """Delete every expired entry, whoever wrote it (they can never be read again)."""
        return self._exec("DELETE FROM working_memory WHERE expires_at <= ?", (now,)).rowcount

    def _working_memory_owner(self, client_id: str, session_id: str | None, scope: Scope,
                              tag: str | None) -> tuple[str, list]:
        cond, params = scope_sql(scope, "project_id")
        where = f"client_id = ? AND {cond}"
        params = [client_id, *params]
        if session_id is not None:
            where += " AND session_id = ?"
            params.append(session_id)
        if tag is not None:
            where += " AND tag = ?"
            params.append(tag)
        return where, params

    # -- procedures ----------------------------------------------------------------------
    def get_procedure(self, name: str, scope: Scope) -> ProcedureRow | None:
        """The visible procedure of that name: the active project's own first, then an unscoped one."""
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM procedures WHERE name = ? AND {cond}"
                        " ORDER BY CASE WHEN project_id = ? THEN 0 WHEN project_id IS NULL THEN 1 ELSE 2 END,"
                        " created_at LIMIT 1", (name, *params, scope.project_id))
        return procedure_from(row) if row else None

    def save_procedure(self, name: str, project_id: str | None, fields: ProcedureFields) -> tuple[ProcedureRow, bool]:
        """Insert the procedure, or update the one of that name in that project keeping its
        counts. ``fields`` holds PROCEDURE_FIELDS (steps as a list). Returns (row, existed)."""
        now = iso(utc_now())
        values = [json.dumps(fields["steps"]) if key == "steps" else fields.get(key) for key in PROCEDURE_FIELDS]
        with self.transaction():
            existing = self._one("SELECT id FROM procedures WHERE name = ? AND coalesce(project_id, '') = ?",
                                 (name, project_id or ""))
            if existing is not None:
                assignments = ", ".join(f"{key} = ?" for key in PROCEDURE_FIELDS)
                self._exec(f"UPDATE procedures SET {assignments}, updated_at = ? WHERE id = ?",
                           (*values, now, existing["id"]))
                proc_id = existing["id"]
            else:
                proc_id = new_id()
                self._exec(
                    f"INSERT INTO procedures(id, name, {', '.join(PROCEDURE_FIELDS)}, project_id, origin_node,"
                    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (proc_id, name, *values, project_id, self.origin_node, now, now))
            row = self._one("SELECT * FROM procedures WHERE id = ?", (proc_id,))
        return procedure_from(row), existing is not None

    def list_procedures(self, scope: Scope) -> list[ProcedureRow]:
        """Every visible procedure (ranking by reliability is the service's: it needs a sqrt)."""
        cond, params = scope_sql(scope, "project_id")
        return [procedure_from(r) for r in self._q(f"SELECT * FROM procedures WHERE {cond}"
                                                   " ORDER BY name, created_at", params)]

    def record_procedure_outcome(self, proc_id: str, success: bool) -> ProcedureRow:
        now = iso(utc_now())
        counter = "success_count" if success else "failure_count"
        row = self._one(f"UPDATE procedures SET {counter} = {counter} + 1, last_outcome = ?,"
                        " last_used_at = ?, updated_at = ? WHERE id = ? RETURNING *",
                        ("success" if success else "failure", now, now, proc_id))
        return procedure_from(row)

    def delete_procedure(self, proc_id: str) -> bool:
        return self._exec("DELETE FROM procedures WHERE id = ?", (proc_id,)).rowcount > 0
