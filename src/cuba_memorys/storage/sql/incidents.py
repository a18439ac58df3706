"""Errors' SQL (cuba_alarma, cuba_remedio, cuba_expediente), shared by both backends.

Finding similar errors by text is not here: the services use the search primitives
(``text_candidates``/``bm25_candidates`` of kind "error"), which both backends already index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from cuba_memorys.models import Scope, iso, new_id, utc_now
from cuba_memorys.storage.rows import ErrorRow
from cuba_memorys.storage.sql.common import SqlBase, error_from, marks, scope_sql


class SqlIncidents(SqlBase):
    """Mixed into SqlStore."""

    # -- errors --------------------------------------------------------------------------
    def add_error(self, error_type: str, message: str, context: dict, project: str,
                  project_id: str | None, session_id: str | None) -> ErrorRow:
        with self.transaction():
            # The same text as LEXICAL_SOURCES["errors"], so a re-index writes what this wrote.
            row = self._insert_indexed("errors", {
                "id": new_id(), "error_type": error_type, "error_message": message,
                "context": json.dumps(context, ensure_ascii=False), "project": project,
                "project_id": project_id, "session_id": session_id, "created_at": iso(utc_now())},
                f"{error_type} {message}", returning="*")
        return error_from(row)

    def get_error(self, error_id: str, scope: Scope) -> ErrorRow | None:
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM errors WHERE id = ? AND {cond}", (error_id, *params))
        return error_from(row) if row else None

    def recent_errors(self, scope: Scope, limit: int) -> list[ErrorRow]:
        """The newest trusted errors in scope (quarantined ones are never served)."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM errors WHERE trust = 'trusted' AND {cond}"
                       " ORDER BY created_at DESC, seq DESC LIMIT ?", (*params, limit))
        return [error_from(r) for r in rows]

    def strengthen_errors(self, ids: Sequence[str], delta: float, cap: float) -> None:
        """A recurring error weighs more (the original's synapse_weight, capped)."""
        if ids:
            self._exec(f"UPDATE errors SET synapse_weight = least(?, synapse_weight + ?)"
                       f" WHERE id IN ({marks(ids)})", (cap, delta, *ids))

    def resolve_error(self, error_id: str, solution: str) -> ErrorRow:
        row = self._one("UPDATE errors SET solution = ?, resolved = 1, resolved_at = ? WHERE id = ? RETURNING *",
                        (solution, iso(utc_now()), error_id))
        return error_from(row)
