"""Shared SQL of the graph analysis (services/graph/analysis.py): the edge list and nodes it
reads, and ``node_metrics``, the last PageRank and community of each entity.

Writes are multi-row statements in chunks (one round trip per CHUNK rows), since a cycle over
100k entities writes 100k rows on both backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuba_memorys.models import Scope
from cuba_memorys.storage.graph_rows import GraphEdgeRow, GraphNodeRow, NodeMetricRow
from cuba_memorys.storage.sql.common import SqlBase, scope_sql

CHUNK = 500


def _chunks(rows: Sequence[Any]) -> list[Sequence[Any]]:
    return [rows[i:i + CHUNK] for i in range(0, len(rows), CHUNK)]


class SqlAnalysis(SqlBase):
    """Mixed into SqlStore."""

    def graph_nodes(self, scope: Scope) -> list[GraphNodeRow]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, name, importance, project_id FROM entities WHERE {cond} ORDER BY seq", params)
        return [GraphNodeRow(id=r[0], name=r[1], importance=float(r[2]), project_id=r[3]) for r in rows]

    def graph_edges(self, scope: Scope) -> list[GraphEdgeRow]:
        """Relations whose two ends are both in ``scope``."""
        a_cond, a_params = scope_sql(scope, "a.project_id")
        b_cond, b_params = scope_sql(scope, "b.project_id")
        rows = self._q("SELECT r.from_entity_id, r.to_entity_id, r.strength, r.bidirectional FROM relations r"
                       " JOIN entities a ON a.id = r.from_entity_id JOIN entities b ON b.id = r.to_entity_id"
                       f" WHERE {a_cond} AND {b_cond}", (*a_params, *b_params))
        return [GraphEdgeRow(from_id=r[0], to_id=r[1], strength=float(r[2]), bidirectional=bool(r[3]))
                for r in rows]

    def save_pagerank(self, values: Sequence[tuple[str, str | None, float]], at: str) -> int:
        """(entity_id, project_id, pagerank) per entity."""
        for chunk in _chunks(values):
            self._exec("INSERT INTO node_metrics(entity_id, project_id, pagerank, pagerank_at, computed_at) VALUES "
                       + ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk))
                       + " ON CONFLICT(entity_id) DO UPDATE SET project_id = excluded.project_id,"
                       " pagerank = excluded.pagerank, pagerank_at = excluded.pagerank_at,"
                       " computed_at = excluded.computed_at",
                       [v for entity, project, rank in chunk for v in (entity, project, rank, at, at)])
        return len(values)

    def save_communities(self, values: Sequence[tuple[str, str | None, int]], algorithm: str,
                         modularity: float, at: str) -> int:
        """(entity_id, project_id, community_id) per entity; the others of ``scope`` keep theirs."""
        for chunk in _chunks(values):
            self._exec("INSERT INTO node_metrics(entity_id, project_id, community_id, community_algorithm,"
                       " modularity, communities_at, computed_at) VALUES "
                       + ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
                       + " ON CONFLICT(entity_id) DO UPDATE SET project_id = excluded.project_id,"
                       " community_id = excluded.community_id, community_algorithm = excluded.community_algorithm,"
                       " modularity = excluded.modularity, communities_at = excluded.communities_at,"
                       " computed_at = excluded.computed_at",
                       [v for entity, project, community in chunk
                        for v in (entity, project, community, algorithm, modularity, at, at)])
        return len(values)

    def blend_importance(self, values: Sequence[tuple[str, float]], keep: float) -> int:
        """importance ← keep·importance + (1 − keep)·score for each (entity_id, score in [0, 1])."""
        changed = 0
        for chunk in _chunks(values):
            rows = self._q("UPDATE entities SET importance = least(1.0, greatest(0.0,"
                           " ? * entities.importance + ? * v.column2))"
                           " FROM (VALUES " + ", ".join(["(?, ?)"] * len(chunk)) + ") AS v"
                           " WHERE entities.id = v.column1 RETURNING entities.id",
                           [keep, 1.0 - keep, *(x for entity, score in chunk for x in (entity, float(score)))])
            changed += len(rows)
        return changed

    def node_metrics(self, scope: Scope) -> list[NodeMetricRow]:
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q("SELECT m.entity_id, e.name, m.pagerank, m.pagerank_at, m.community_id,"
                       " m.community_algorithm, m.modularity, m.communities_at FROM node_metrics m"
                       f" JOIN entities e ON e.id = m.entity_id WHERE {cond} ORDER BY e.seq", params)
        return [NodeMetricRow(entity_id=r[0], name=r[1], pagerank=r[2], pagerank_at=r[3], community_id=r[4],
                              community_algorithm=r[5], modularity=r[6], communities_at=r[7]) for r in rows]
