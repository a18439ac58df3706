"""Graph reasoning's SQL, shared by both backends: the per-entity profile cuba_reflexion reads,
the backward causal walk of cuba_hipotesis, the adjacency Adamic-Adar link prediction reads,
the session co-occurrence NPMI autolink counts, and the writing of predicted edges.

Every read is one aggregate statement (or one per chunk of ids), never one per entity, so
the cost grows with the rows read and not with round trips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from cuba_memorys.models import Scope, iso, new_id, utc_now
from cuba_memorys.storage.reasoning_rows import CauseRow, CooccurrenceRow, EntityProfileRow
from cuba_memorys.storage.sql.common import SqlBase, marks, scope_sql

CHUNK = 500  # ids per IN list (well under either backend's parameter limit)
CAUSAL_TYPES = ("causes", "related_to", "depends_on")


class SqlReasoning(SqlBase):
    """Mixed into SqlStore."""

    def entity_profiles(self, scope: Scope) -> list[EntityProfileRow]:
        """Every visible entity with its degree (relations touching it, either end) and its live
        observations counted by type: two grouped scans, joined once."""
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q(
            "SELECT e.id, e.name, e.entity_type, e.importance, coalesce(d.degree, 0) AS degree,"
            " coalesce(o.obs_count, 0) AS obs_count, coalesce(o.facts, 0) AS facts,"
            " coalesce(o.decisions, 0) AS decisions, coalesce(o.lessons, 0) AS lessons"
            " FROM entities e"
            " LEFT JOIN (SELECT eid, count(*) AS degree FROM (SELECT from_entity_id AS eid FROM relations"
            "  UNION ALL SELECT to_entity_id FROM relations) ends GROUP BY eid) d ON d.eid = e.id"
            " LEFT JOIN (SELECT entity_id, count(*) AS obs_count,"
            "  sum(CASE WHEN observation_type = 'fact' THEN 1 ELSE 0 END) AS facts,"
            "  sum(CASE WHEN observation_type = 'decision' THEN 1 ELSE 0 END) AS decisions,"
            "  sum(CASE WHEN observation_type = 'lesson' THEN 1 ELSE 0 END) AS lessons"
            "  FROM observations WHERE observation_type != 'superseded' GROUP BY entity_id) o"
            " ON o.entity_id = e.id"
            f" WHERE {cond} ORDER BY e.importance DESC, e.seq", params)
        return [cast(EntityProfileRow, {k: (int(v) if k in _COUNTS else v) for k, v in dict(r).items()})
                for r in rows]

    def linked_type_pairs(self, scope: Scope) -> list[tuple[str, str]]:
        """The (from type, to type) pairs that at least one relation joins."""
        cond_f, params_f = scope_sql(scope, "ef.project_id")
        cond_t, params_t = scope_sql(scope, "et.project_id")
        rows = self._q("SELECT DISTINCT ef.entity_type, et.entity_type FROM relations r"
                       " JOIN entities ef ON ef.id = r.from_entity_id JOIN entities et ON et.id = r.to_entity_id"
                       f" WHERE {cond_f} AND {cond_t}", [*params_f, *params_t])
        return [(r[0], r[1]) for r in rows]

    def causal_paths(self, effect_id: str, max_depth: int, max_rows: int) -> list[CauseRow]:
        """Causes of ``effect_id``: a recursive walk backwards over causes / related_to /
        depends_on edges (a bidirectional edge is walked either way) that never revisits an
        entity on its own path. One row per path: (entity, hops, product of strengths). Both
        engines expand breadth first, so ``max_rows`` drops the longest paths first."""
        kinds = marks(CAUSAL_TYPES)
        rows = self._q(
            "WITH RECURSIVE walk(node, hops, path_strength, path) AS ("
            " SELECT CAST(? AS TEXT), 0, CAST(1.0 AS DOUBLE PRECISION), '|' || CAST(? AS TEXT) || '|'"
            " UNION ALL"
            " SELECT CASE WHEN r.to_entity_id = w.node THEN r.from_entity_id ELSE r.to_entity_id END,"
            "  w.hops + 1, w.path_strength * r.strength,"
            "  w.path || (CASE WHEN r.to_entity_id = w.node THEN r.from_entity_id ELSE r.to_entity_id END) || '|'"
            " FROM walk w JOIN relations r ON (r.to_entity_id = w.node"
            "  OR (r.bidirectional = 1 AND r.from_entity_id = w.node))"
            f" WHERE w.hops < ? AND r.relation_type IN ({kinds}) AND r.from_entity_id != r.to_entity_id"
            "  AND w.path NOT LIKE '%|' || (CASE WHEN r.to_entity_id = w.node THEN r.from_entity_id"
            "   ELSE r.to_entity_id END) || '|%')"
            " SELECT node, hops, path_strength FROM walk WHERE hops > 0 LIMIT ?",
            (effect_id, effect_id, max_depth, *CAUSAL_TYPES, max_rows))
        return [cast(CauseRow, {"entity_id": r[0], "hops": int(r[1]), "path_strength": float(r[2])}) for r in rows]

    def adjacency(self, entity_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(entity, neighbour) for every relation touching these entities, each edge seen from
        the given end (both ends when both are given); self-loops left out."""
        out: list[tuple[str, str]] = []
        ids = list(dict.fromkeys(entity_ids))
        for start in range(0, len(ids), CHUNK):
            part = ids[start:start + CHUNK]
            m = marks(part)
            rows = self._q(f"SELECT from_entity_id, to_entity_id FROM relations WHERE from_entity_id IN ({m})"
                           " AND from_entity_id != to_entity_id"
                           f" UNION ALL SELECT to_entity_id, from_entity_id FROM relations WHERE to_entity_id IN ({m})"
                           " AND from_entity_id != to_entity_id", [*part, *part])
            out.extend((r[0], r[1]) for r in rows)
        return out

    def session_cooccurrence(self, scope: Scope, min_shared: int) -> CooccurrenceRow:
        """Sessions × entities from live, trusted observations written in a session: the number
        of sessions, each entity's session count, and every pair of entities of one project
        sharing at least ``min_shared`` sessions (ids in a stable order, a < b)."""
        cond, params = scope_sql(scope, "e.project_id")
        pairs_of = ("SELECT DISTINCT o.entity_id, o.session_id, coalesce(e.project_id, '') AS project"
                    " FROM observations o JOIN entities e ON e.id = o.entity_id WHERE o.session_id IS NOT NULL"
                    f" AND o.observation_type != 'superseded' AND o.trust = 'trusted' AND {cond}")
        sessions = self._one(f"SELECT count(DISTINCT session_id) FROM ({pairs_of}) es", params)[0]
        counts = {r[0]: int(r[1]) for r in self._q(
            f"SELECT entity_id, count(*) FROM ({pairs_of}) es GROUP BY entity_id", params)}
        pairs = self._q(f"WITH es AS ({pairs_of}) SELECT a.entity_id, b.entity_id, count(*) FROM es a JOIN es b"
                        " ON a.session_id = b.session_id AND a.project = b.project AND a.entity_id < b.entity_id"
                        " GROUP BY a.entity_id, b.entity_id HAVING count(*) >= ?", [*params, min_shared])
        return {"sessions": int(sessions), "entity_sessions": counts,
                "pairs": [(r[0], r[1], int(r[2])) for r in pairs]}

    def add_predicted_relations(self, edges: Sequence[tuple[str, str, float]], project_id: str | None) -> int:
        """Write ``related_to`` edges with provenance 'predicted', bidirectional, strength given.
        A pair that already has a related_to edge (either direction) is left exactly as it was:
        nothing is updated, ever. Returns the rows written."""
        written = 0
        now = iso(utc_now())
        with self.transaction():
            for a, b, strength in edges:
                written += self._exec(
                    "INSERT INTO relations(id, from_entity_id, to_entity_id, relation_type, strength, bidirectional,"
                    " provenance, project_id, created_at) SELECT ?, ?, ?, 'related_to', ?, 1, 'predicted',"
                    " coalesce(?, e.project_id), ? FROM entities e WHERE e.id = ? AND NOT EXISTS (SELECT 1"
                    " FROM relations x WHERE x.relation_type = 'related_to' AND ((x.from_entity_id = ?"
                    " AND x.to_entity_id = ?) OR (x.from_entity_id = ? AND x.to_entity_id = ?)))"
                    " ON CONFLICT DO NOTHING",
                    (new_id(), a, b, min(1.0, max(0.0, strength)), project_id, now, a, a, b, b, a)).rowcount
        return written


_COUNTS = ("degree", "obs_count", "facts", "decisions", "lessons")
