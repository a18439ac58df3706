"""Rows of the codegraph family (storage/sql/codegraph.py: the files `codegraph build` parsed),
kept beside ``rows.py`` so this family's changes touch its own files."""

from __future__ import annotations

from typing import Any, TypedDict


class CodegraphFileRow(TypedDict):
    """One parsed file: where it is, what its content hashed to, and the symbols it had as
    [qualified, simple, kind] triples (for call edges of files a build does not re-read)."""

    id: str
    project_id: str | None
    repo_root: str
    path: str
    language: str
    content_hash: str
    symbol_count: int
    symbols: list[list[str]]
    parsed_at: str


class CodegraphObservationRow(TypedDict):
    """An active observation `codegraph build` wrote (found by its verification text)."""

    id: str
    entity_id: str
    entity_name: str
    content: str
    verification: str
    version: int
    previous_versions: list[dict[str, Any]]
