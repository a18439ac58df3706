"""What the offline exports read (services/exports/): entities with their observation count and
degree, live observations newest first, relations by name, the facts count; and the web panel's
reads (its graph nodes with their types, an entity's facts, recent episodes and errors). Read-only."""

from __future__ import annotations

from typing import Any

from cuba_memorys.models import Scope
from cuba_memorys.storage.rows import FactRow
from cuba_memorys.storage.sql.common import SqlBase, scope_sql
from cuba_memorys.storage.sql.facts import FACT_COLUMNS, fact_from


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
            "SELECT o.id, e.name, o.content, o.observation_type, o.importance, o.created_at, o.entity_id, o.trust"
            " FROM observations o JOIN entities e ON e.id = o.entity_id"
            f" WHERE o.observation_type != 'superseded' AND {cond} ORDER BY o.created_at DESC, o.seq DESC{tail}",
            params)
        return [{"id": r[0], "entity": r[1], "content": r[2], "type": r[3], "importance": float(r[4]),
                 "created_at": str(r[5]), "entity_id": r[6], "trust": r[7]} for r in rows]

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

    # -- the web panel's reads (server/panel/) ---------------------------------------------------
    def panel_graph_nodes(self, scope: Scope) -> list[dict[str, Any]]:
        """The graph page's nodes: id, name, importance, type and project of every entity of ``scope``."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, name, importance, entity_type, project_id FROM entities WHERE {cond} ORDER BY seq",
                       params)
        return [{"id": r[0], "name": r[1], "importance": float(r[2]), "type": r[3], "project_id": r[4]} for r in rows]

    def entity_facts(self, entity_id: str, limit: int) -> list[FactRow]:
        """The facts whose subject is this entity, oldest first (the entity page's fact timeline)."""
        rows = self._q(f"SELECT {FACT_COLUMNS} FROM facts WHERE subject_entity_id = ?"
                       f" ORDER BY valid_from, created_at LIMIT {int(limit)}", (entity_id,))
        return [fact_from(r) for r in rows]

    def panel_recent_episodes(self, scope: Scope, limit: int) -> list[dict[str, Any]]:
        """Trusted episodes of ``scope``, newest first, with their entity's name."""
        cond, params = scope_sql(scope, "p.project_id")
        rows = self._q("SELECT p.id, e.name, p.content, p.started_at, p.ended_at FROM episodes p"
                       f" JOIN entities e ON e.id = p.entity_id WHERE p.trust = 'trusted' AND {cond}"
                       f" ORDER BY p.started_at DESC, p.seq DESC LIMIT {int(limit)}", params)
        return [{"id": r[0], "entity": r[1], "content": r[2], "started_at": str(r[3]),
                 "ended_at": None if r[4] is None else str(r[4])} for r in rows]

    def panel_recent_errors(self, scope: Scope, limit: int) -> list[dict[str, Any]]:
        """Trusted errors of ``scope``, newest first, resolved or not."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q("SELECT id, error_type, error_message, resolved, solution, resolved_at, created_at FROM errors"
                       f" WHERE trust = 'trusted' AND {cond} ORDER BY created_at DESC, seq DESC LIMIT {int(limit)}",
                       params)
        return [{"id": r[0], "error_type": r[1], "error_message": r[2], "resolved": bool(r[3]), "solution": r[4],
                 "resolved_at": None if r[5] is None else str(r[5]), "created_at": str(r[6])} for r in rows]

    def panel_entities_version(self, scope: Scope) -> tuple[int, int, str]:
        """(count, highest seq, latest updated_at) of ``scope``'s entities: changes when one is added,
        renamed, merged or deleted (the review page's cached near-duplicates are keyed by it)."""
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT count(*), max(seq), max(updated_at) FROM entities WHERE {cond}", params)
        return int(row[0]), int(row[1] or 0), str(row[2] or "")

    def panel_relations_version(self) -> tuple[int, str]:
        """(count, latest created_at) of every relation: with panel_entities_version, the key of the
        graph page's cached answer."""
        row = self._one("SELECT count(*), max(created_at) FROM relations", ())
        return int(row[0]), str(row[1] or "")
