"""Rows of the graph-reasoning family (storage/sql/reasoning.py); kept beside rows.py so the
family's rows live with it."""

from __future__ import annotations

from typing import TypedDict


class EntityProfileRow(TypedDict):
    """``entity_profiles``: an entity, its degree and its live observations by type."""

    id: str
    name: str
    entity_type: str
    importance: float
    degree: int
    obs_count: int
    facts: int
    decisions: int
    lessons: int


class CauseRow(TypedDict):
    """``causal_paths``: one backward path from the effect to a candidate cause."""

    entity_id: str
    hops: int
    path_strength: float


class CooccurrenceRow(TypedDict):
    """``session_cooccurrence``: sessions counted, each entity's sessions, pairs sharing sessions."""

    sessions: int
    entity_sessions: dict[str, int]
    pairs: list[tuple[str, str, int]]
