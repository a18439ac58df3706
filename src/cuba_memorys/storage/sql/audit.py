"""Shared SQL of the hash-chained audit log (cuba_archivo).

The hash itself is computed by the service (services/audit.py) and handed in as ``chain``:
storage only guarantees that links are appended one at a time, in id order, each on the
current last link. Rows are never updated or deleted (triggers on SQLite; on PostgreSQL a
trigger and the app role's missing UPDATE/DELETE/TRUNCATE privileges).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from cuba_memorys.models import Scope
from cuba_memorys.storage.rows import AuditRow
from cuba_memorys.storage.sql.common import SqlBase, scope_sql

# The prev_hash of the first link: 64 zeros, so every prev_hash has the shape of a SHA-256 hex
# digest and "no row before" is one fixed, documented value.
GENESIS_HASH = "0" * 64


def audit_from(row: Any) -> AuditRow:
    data = dict(row)
    data["id"] = int(data["id"])
    return cast(AuditRow, data)


class SqlAudit(SqlBase):
    """Mixed into SqlStore."""

    def _serialise_audit_appends(self) -> None:
        """Hold the append lock until the transaction ends, across every process on this store.
        SQLite needs nothing more: the outermost level is BEGIN IMMEDIATE, which already holds
        the database's one write lock when the last link is read. PostgreSQL overrides this
        with an advisory transaction lock."""

    @contextmanager
    def audit_transaction(self) -> Iterator[None]:
        """A transaction (or a savepoint of the caller's) holding the append lock to its end:
        what reads the last link and writes after it (an append, the head kept in meta) sees no
        other append in between."""
        with self.transaction():
            self._serialise_audit_appends()
            yield

    def append_audit(self, action: str, payload: str, project_id: str | None, created_at: str,
                     chain: Callable[[str], str]) -> AuditRow:
        # Nested in the caller's transaction (a savepoint), so the event commits with the change
        # it records, or not at all. The lock is held to the caller's commit: record last.
        with self.audit_transaction():
            last = self._one("SELECT current_hash FROM audit_log ORDER BY id DESC LIMIT 1")
            prev_hash = last[0] if last is not None else GENESIS_HASH
            row = self._one(
                "INSERT INTO audit_log(prev_hash, action, payload, current_hash, project_id, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                (prev_hash, action, payload, chain(prev_hash), project_id, created_at))
        return audit_from(row)

    def audit_rows(self, after_id: int, limit: int) -> list[AuditRow]:
        """The chain in order: up to ``limit`` links with id > ``after_id``."""
        rows = self._q("SELECT * FROM audit_log WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))
        return [audit_from(r) for r in rows]

    def audit_count(self, up_to_id: int) -> int:
        """How many links have an id up to ``up_to_id``."""
        return int(self._one("SELECT count(*) FROM audit_log WHERE id <= ?", (up_to_id,))[0])

    def audit_tail(self, scope: Scope, limit: int) -> list[AuditRow]:
        """The newest links visible in ``scope``, newest first."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM audit_log WHERE {cond} ORDER BY id DESC LIMIT ?", (*params, limit))
        return [audit_from(r) for r in rows]
