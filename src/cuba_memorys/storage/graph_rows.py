"""The rows of the graph analysis (storage/sql/analysis.py), beside the other families' rows in
``rows.py`` (kept apart only so this family's changes touch its own files)."""

from __future__ import annotations

from typing import TypedDict


class GraphNodeRow(TypedDict):
    id: str
    name: str
    importance: float
    project_id: str | None


class GraphEdgeRow(TypedDict):
    from_id: str
    to_id: str
    strength: float
    bidirectional: bool


class NodeMetricRow(TypedDict):
    entity_id: str
    name: str
    pagerank: float | None
    pagerank_at: str | None
    community_id: int | None
    community_algorithm: str | None
    modularity: float | None
    communities_at: str | None
