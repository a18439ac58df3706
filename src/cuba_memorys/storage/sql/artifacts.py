"""Shared artifacts (cuba_artefacto) both backends share: one text per (project, path), its
current version in ``artifacts`` and the versions puts replaced in ``artifact_versions``.

A path lives in exactly one project namespace: ``project_id = ?``, or ``project_id IS NULL`` when
no project is active (never "the project plus unscoped rows", as other reads are: a path must
name one artifact). The write primitives run inside the caller's transaction, which holds the
row: ``get_artifact(..., for_update=True)`` adds ``FOR UPDATE`` on PostgreSQL, and SQLite's
write transaction (BEGIN IMMEDIATE) already serialises every writer. ``update_artifact`` is also
a compare-and-swap on the version it was given, so no interleaving can make two writes of the
same version both succeed.
"""

from __future__ import annotations

from typing import Any, cast

from cuba_memorys.models import new_id
from cuba_memorys.storage.rows import ArtifactRow, ArtifactSummaryRow, ArtifactVersionRow
from cuba_memorys.storage.sql.common import SqlBase

SUMMARY_COLUMNS = "id, path, content_hash, version, locked_by, lock_until, updated_at, origin_node"


def in_project(project_id: str | None, column: str = "project_id") -> tuple[str, list[Any]]:
    """The one namespace a path is looked up in."""
    if project_id is None:
        return f"{column} IS NULL", []
    return f"{column} = ?", [project_id]


class SqlArtifacts(SqlBase):
    """Mixed into SqlStore."""

    def get_artifact(self, project_id: str | None, path: str, for_update: bool = False) -> ArtifactRow | None:
        cond, params = in_project(project_id)
        lock = " FOR UPDATE" if for_update and self.backend == "postgresql" else ""
        row = self._one(f"SELECT * FROM artifacts WHERE {cond} AND path = ?{lock}", (*params, path))
        return cast(ArtifactRow, dict(row)) if row is not None else None

    def list_artifacts(self, project_id: str | None, prefix: str, limit: int) -> list[ArtifactSummaryRow]:
        """The namespace's artifacts whose path starts with ``prefix`` ("" = all), by path."""
        cond, params = in_project(project_id)
        if prefix:
            # substr rather than LIKE: a path may hold % and _ (characters on both backends).
            cond += " AND substr(path, 1, ?) = ?"
            params += [len(prefix), prefix]
        rows = self._q(f"SELECT {SUMMARY_COLUMNS} FROM artifacts WHERE {cond} ORDER BY path LIMIT ?",
                       (*params, limit))
        return [cast(ArtifactSummaryRow, dict(r)) for r in rows]

    def recent_artifacts(self, project_id: str | None, limit: int) -> list[ArtifactSummaryRow]:
        """The namespace's most recently updated artifacts, newest first."""
        cond, params = in_project(project_id)
        rows = self._q(f"SELECT {SUMMARY_COLUMNS} FROM artifacts WHERE {cond}"
                       " ORDER BY updated_at DESC, path LIMIT ?", (*params, limit))
        return [cast(ArtifactSummaryRow, dict(r)) for r in rows]

    def insert_artifact(self, project_id: str | None, path: str, content: str, content_hash: str,
                        actor: str, now: str) -> ArtifactRow | None:
        """Version 1 of a new path; None when another writer created the path first (PostgreSQL:
        this waits for that writer's commit, then inserts nothing)."""
        row = self._one(
            "INSERT INTO artifacts(id, project_id, path, content, content_hash, version, origin_node, crdt_actor,"
            " crdt_counter, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?, 1, ?, ?)"
            " ON CONFLICT DO NOTHING RETURNING *",
            (new_id(), project_id, path, content, content_hash, self.origin_node, actor, now, now))
        return cast(ArtifactRow, dict(row)) if row is not None else None

    def update_artifact(self, current: ArtifactRow, content: str, content_hash: str, actor: str, now: str,
                        keep: int) -> ArtifactRow | None:
        """Write version ``current.version + 1`` and keep ``current`` in the history (the newest
        ``keep`` replaced versions stay). None, writing nothing, if the row is no longer at
        ``current``'s version. A lease that has run out is cleared by the write."""
        with self.transaction():
            row = self._one(
                "UPDATE artifacts SET content = ?, content_hash = ?, version = version + 1, updated_at = ?,"
                " origin_node = ?, crdt_actor = ?, crdt_counter = crdt_counter + 1,"
                " locked_by = CASE WHEN lock_until <= ? THEN NULL ELSE locked_by END,"
                " lock_until = CASE WHEN lock_until <= ? THEN NULL ELSE lock_until END"
                " WHERE id = ? AND version = ? RETURNING *",
                (content, content_hash, now, self.origin_node, actor, now, now, current["id"], current["version"]))
            if row is None:
                return None
            self._exec(
                "INSERT INTO artifact_versions(artifact_id, project_id, version, content, content_hash, actor,"
                " origin_node, written_at, replaced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (current["id"], current["project_id"], current["version"], current["content"],
                 current["content_hash"], current["crdt_actor"], current["origin_node"], current["updated_at"], now))
            self._exec("DELETE FROM artifact_versions WHERE artifact_id = ? AND version <= ?",
                       (current["id"], current["version"] - keep))
        return cast(ArtifactRow, dict(row))

    def set_artifact_lock(self, artifact_id: str, locked_by: str | None, lock_until: str | None) -> ArtifactRow:
        row = self._one("UPDATE artifacts SET locked_by = ?, lock_until = ? WHERE id = ? RETURNING *",
                        (locked_by, lock_until, artifact_id))
        return cast(ArtifactRow, dict(row))

    def artifact_version(self, artifact_id: str, version: int) -> ArtifactVersionRow | None:
        row = self._one("SELECT * FROM artifact_versions WHERE artifact_id = ? AND version = ?",
                        (artifact_id, version))
        return cast(ArtifactVersionRow, dict(row)) if row is not None else None

    def oldest_artifact_version(self, artifact_id: str) -> int | None:
        """The oldest replaced version still kept (None: no put has replaced one yet)."""
        row = self._one("SELECT min(version) FROM artifact_versions WHERE artifact_id = ?", (artifact_id,))
        return None if row is None or row[0] is None else int(row[0])

    def artifact_path_collisions(self, source_project_id: str | None, target_project_id: str) -> list[str]:
        """Paths both namespaces hold: moving the source's rows into the target would give one
        path two artifacts (a project merge or backfill refuses rather than pick one)."""
        cond, params = in_project(source_project_id, "s.project_id")
        rows = self._q(f"SELECT s.path FROM artifacts s JOIN artifacts t ON t.path = s.path AND t.project_id = ?"
                       f" WHERE {cond} ORDER BY s.path", (target_project_id, *params))
        return [r[0] for r in rows]
