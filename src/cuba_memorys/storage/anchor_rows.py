"""Rows of the anchors family (storage/sql/anchors.py: observations anchored to code), kept
beside ``rows.py`` so this family's changes touch its own files."""

from __future__ import annotations

from typing import TypedDict


class AnchorRow(TypedDict):
    """One anchor: an observation tied to lines of a file in a git repository, as they read
    when it was written (or last re-anchored), and what the last check found."""

    id: str
    observation_id: str
    project_id: str | None
    repo_root: str
    commit_sha: str | None
    path: str
    symbol: str | None
    line_start: int
    line_end: int
    span_hash: str
    created_at: str
    updated_at: str
    status: str | None
    status_checked_at: str | None
    changed_since: str | None


class AnchorStatus(TypedDict):
    """What one check found, to record on the anchor (``anchors check --record``)."""

    id: str
    status: str
    changed_since: str | None
    checked_at: str
