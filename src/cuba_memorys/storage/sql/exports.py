"""What the offline exports read (services/exports/): entities with their observation count and
degree, live observations newest first, relations by name, the facts count. Read-only."""

from __future__ import annotations

from typing import Any

from cuba_memorys.models import Scope
from cuba_memorys.storage.sql.common import SqlBase, scope_sql


class SqlExports(SqlBase):
    """Mixed into SqlStore."""

    def offline_entities(self, scope: Scope) -> list[dict[str, Any]]:
        """Every entity of ``scope``: id, name, type, importance, accesses, live observations, degree."""
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q(
            "SELECT e.id, e.name, e.entity_type, e.importance, e.access_count, e.created_at,"
            " (SELECT count(*) FROM observations o WHERE o.entity_id = e.id"
            "  AND o.observation_type != 'superseded'),"
            " (SELECT count(*) FROM relations r WHERE r.from_entity_id = e.id OR r.to_entity_id = e.id)"
            f" FROM entities e WHERE {cond} ORDER BY e.importance DESC, e.name", params)
        return [{"id": r[0], "name": r[1], "type": r[2], "importance": float(r[3]), "accesses": int(r[4]),
                 "created_at": str(r[5]), "observations": int(r[6]), "degree": int(r[7])} for r in rows]

    def offline_observations(self, scope: Scope, limit: int | None = None) -> list[dict[str, Any]]:
        """Live (not superseded) observations of ``scope``, newest first; all when ``limit`` is None."""
        cond, params = scope_sql(scope, "o.project_id")
        tail = "" if limit is None else f" LIMIT {int(limit)}"
        rows = self._q(
            "SELECT o.id, e.name, o.content, o.observation_type, o.importance, o.created_at, o.entity_id"
            " FROM observations o JOIN entities e ON e.id = o.entity_id"
            f" WHERE o.observation_type != 'superseded' AND {cond} ORDER BY o.created_at DESC, o.seq DESC{tail}",
            params)
        return [{"id": r[0], "entity": r[1], "content": r[2], "type": r[3], "importance": float(r[4]),
                 "created_at": str(r[5]), "entity_id": r[6]} for r in rows]

    def offline_relations(self, scope: Scope) -> list[dict[str, Any]]:
        """Relations whose two ends are in ``scope``, by entity name."""
        a_cond, a_params = scope_sql(scope, "a.project_id")
        b_cond, b_params = scope_sql(scope, "b.project_id")
        rows = self._q("SELECT a.name, b.name, r.relation_type, r.strength, r.bidirectional, a.id, b.id"
                       " FROM relations r JOIN entities a ON a.id = r.from_entity_id"
                       f" JOIN entities b ON b.id = r.to_entity_id WHERE {a_cond} AND {b_cond}"
                       " ORDER BY a.name, b.name, r.relation_type", (*a_params, *b_params))
        return [{"from": r[0], "to": r[1], "type": r[2], "strength": float(r[3]), "bidirectional": bool(r[4]),
                 "from_id": r[5], "to_id": r[6]} for r in rows]

    def offline_facts_count(self, scope: Scope) -> int:
        cond, params = scope_sql(scope, "project_id")
        return int(self._one(f"SELECT count(*) FROM facts WHERE {cond}", params)[0])
