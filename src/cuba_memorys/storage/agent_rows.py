"""Rows of the agents family (storage/sql/agents.py: what cuba_contexto recalls), kept beside
``rows.py`` so this family's changes touch its own files."""

from __future__ import annotations

from typing import TypedDict


class RecallRow(TypedDict):
    """A live, trusted observation as cuba_contexto shows it: its first 240 characters."""

    id: str
    entity: str
    snippet: str
    importance: float
