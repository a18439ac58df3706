"""Shared SQL of calibration (cuba_calibrar): verify-log outcomes by scope, and the Beta trust
of each observation source.

``source_trust`` holds only sources that have had an outcome; a source without a row is at the
prior Beta(1, 1), which the service supplies. Crediting a source is one statement (an insert at
the prior plus this outcome, or an increment), so concurrent resolves never lose a count.
"""

from __future__ import annotations

from typing import Any

from cuba_memorys.models import Scope
from cuba_memorys.storage.sql.common import SqlBase, scope_sql

VERIFY_COLUMNS = "id, claim, entity_name, confidence, grounding_level, outcome, created_at, resolved_at"


def _trust_row(row: Any) -> dict[str, Any]:
    return {"source": row[0], "alpha": float(row[1]), "beta": float(row[2]), "updated_at": row[3]}


class SqlCalibration(SqlBase):
    """Mixed into SqlStore."""

    # -- the verify log ---------------------------------------------------------------------
    def verify_entry(self, verify_id: str, scope: Scope) -> dict[str, Any] | None:
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT {VERIFY_COLUMNS} FROM verify_log WHERE id = ? AND {cond}", (verify_id, *params))
        return dict(row) if row else None

    def verify_entries(self, scope: Scope, limit: int) -> list[dict[str, Any]]:
        """The newest verify calls in ``scope``, newest first."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT {VERIFY_COLUMNS} FROM verify_log WHERE {cond}"
                       " ORDER BY created_at DESC, id DESC LIMIT ?", (*params, limit))
        return [dict(r) for r in rows]

    def outcome_counts(self, scope: Scope) -> dict[str, int]:
        """Every verify call in ``scope`` by outcome: {total, correct, incorrect, pending}."""
        cond, params = scope_sql(scope, "project_id")
        row = self._one("SELECT count(*), count(*) FILTER (WHERE outcome = 'correct'),"
                        " count(*) FILTER (WHERE outcome = 'incorrect'), count(*) FILTER (WHERE outcome = 'pending')"
                        f" FROM verify_log WHERE {cond}", params)
        return {"total": int(row[0]), "correct": int(row[1]), "incorrect": int(row[2]), "pending": int(row[3])}

    def level_outcomes(self, scope: Scope, level: str | None = None) -> list[tuple[str, int, int]]:
        """(grounding level, correct, incorrect) of the resolved calls in ``scope``, by level
        (only ``level`` when given); levels without a resolved call are left out."""
        cond, params = scope_sql(scope, "project_id")
        if level is not None:
            cond, params = f"{cond} AND grounding_level = ?", [*params, level]
        rows = self._q("SELECT grounding_level, count(*) FILTER (WHERE outcome = 'correct'),"
                       " count(*) FILTER (WHERE outcome = 'incorrect') FROM verify_log"
                       f" WHERE {cond} AND outcome IN ('correct', 'incorrect')"
                       " GROUP BY grounding_level ORDER BY grounding_level", params)
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    def resolved_predictions(self, scope: Scope) -> list[tuple[float, bool]]:
        """(confidence, was it correct) of every resolved call in ``scope``."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT confidence, outcome FROM verify_log WHERE {cond}"
                       " AND outcome IN ('correct', 'incorrect') ORDER BY id", params)
        return [(float(r[0]), r[1] == "correct") for r in rows]

    def resolve_verify(self, verify_id: str, outcome: str, at: str) -> bool:
        """Set a pending call's outcome; False when it is no longer pending (a concurrent resolve)."""
        row = self._one("UPDATE verify_log SET outcome = ?, resolved_at = ? WHERE id = ? AND outcome = 'pending'"
                        " RETURNING id", (outcome, at, verify_id))
        return row is not None

    def claim_sources(self, entity_name: str, scope: Scope) -> list[str]:
        """The distinct sources of the live (not superseded) observations of the entities named
        ``entity_name`` in ``scope``."""
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q("SELECT DISTINCT o.source FROM observations o JOIN entities e ON e.id = o.entity_id"
                       f" WHERE e.name = ? AND {cond} AND o.observation_type <> 'superseded' ORDER BY o.source",
                       (entity_name, *params))
        return [r[0] for r in rows]

    # -- source trust -----------------------------------------------------------------------
    def credit_source(self, source: str, correct: bool, at: str) -> dict[str, Any]:
        """alpha + 1 (correct) or beta + 1 (incorrect) on ``source``, from Beta(1, 1) when it has
        no row yet; returns its row after the change."""
        da, db = (1.0, 0.0) if correct else (0.0, 1.0)
        row = self._one("INSERT INTO source_trust(source, alpha, beta, updated_at) VALUES (?, ?, ?, ?)"
                        " ON CONFLICT(source) DO UPDATE SET alpha = source_trust.alpha + ?,"
                        " beta = source_trust.beta + ?, updated_at = excluded.updated_at"
                        " RETURNING source, alpha, beta, updated_at", (source, 1 + da, 1 + db, at, da, db))
        return _trust_row(row)

    def source_trust(self) -> list[dict[str, Any]]:
        """Every source that has had an outcome: {source, alpha, beta, updated_at}."""
        return [_trust_row(r) for r in self._q("SELECT source, alpha, beta, updated_at FROM source_trust"
                                               " ORDER BY source")]
