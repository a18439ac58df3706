"""Principals and grants (serve with CUBA_TOKENS_FILE), shared by both backends.

A grant is (principal, project, role); a project_id of NULL is the '*' grant: every project, and
the rows of no project. The checks are the service's (services/access.py); on PostgreSQL the
same sets are bound for the restrictive row-level policies (storage/postgres/db.py).
"""

from __future__ import annotations

from typing import cast

from cuba_memorys.models import iso, utc_now
from cuba_memorys.storage.rows import GrantRow
from cuba_memorys.storage.sql.common import SqlBase


class SqlAccess(SqlBase):
    """Mixed into SqlStore."""

    def add_principal(self, name: str) -> bool:
        """Record a principal; False when it already existed."""
        row = self._one("INSERT INTO principals(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING"
                        " RETURNING name", (name, iso(utc_now())))
        return row is not None

    def remove_principal(self, name: str) -> bool:
        """Forget a principal and its grants (their rows cascade)."""
        return self._exec("DELETE FROM principals WHERE name = ?", (name,)).rowcount > 0

    def list_principals(self) -> list[str]:
        return [r[0] for r in self._q("SELECT name FROM principals ORDER BY name")]

    def set_grant(self, principal: str, project_id: str | None, role: str) -> None:
        """Give ``principal`` ``role`` on the project (None: '*'), replacing the grant it had there."""
        with self.transaction():
            self.revoke_grant(principal, project_id)
            self._exec("INSERT INTO grants(principal, project_id, role, created_at) VALUES (?, ?, ?, ?)",
                       (principal, project_id, role, iso(utc_now())))

    def revoke_grant(self, principal: str, project_id: str | None) -> bool:
        return self._exec("DELETE FROM grants WHERE principal = ? AND coalesce(project_id, '') = ?",
                          (principal, project_id or "")).rowcount > 0

    def grants_of(self, principal: str) -> list[GrantRow]:
        """The principal's grants with their projects' names (None for '*')."""
        rows = self._q("SELECT g.principal, g.project_id, p.name AS project, g.role, g.created_at FROM grants g"
                       " LEFT JOIN projects p ON p.id = g.project_id WHERE g.principal = ?"
                       " ORDER BY p.name IS NOT NULL, p.name", (principal,))
        return [cast(GrantRow, dict(r)) for r in rows]
