"""Shared SQL of sync (cuba_sync): the rows a bundle carries, read per table in the bundle's
own field names (original-0.27.md §4e, schema version 2), and the store's node id. Same ``?``
SQL on SQLite and PostgreSQL.

A scope here is the bundle's, not a reader's: ``project_id`` given means exactly that project's
rows (the newest original no longer adds the rows of no project), ``None`` with ``everything``
false means the rows of no project, and ``everything`` means every row the connection sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuba_memorys.storage.sql.common import SqlBase, json_value

Row = dict[str, Any]

# bundle field -> SQL expression, per table; the order is the order the file writes them in
ENTITY_FIELDS = ("id", "name", "entity_type", "importance", "access_count", "project_id", "created_at")
OBSERVATION_FIELDS = ("id", "entity_id", "content", "observation_type", "source", "importance", "tags",
                      "project_id", "session_id", "created_at", "embedding_model", "updated_at", "version",
                      "previous_versions", "origin_node", "evidence", "verification", "verified_at", "trust")
EPISODE_FIELDS = ("id", "entity_id", "content", "actors", "artifacts", "importance", "project_id",
                  "started_at", "ended_at")
ERROR_FIELDS = ("id", "error_type", "error_message", "solution", "resolved", "project", "project_id",
                "created_at")
RELATION_SQL = ("id, from_entity_id AS from_entity, to_entity_id AS to_entity, relation_type, strength,"
                " bidirectional, project_id, created_at, provenance")
FACT_SQL = ("fact_id, subject, predicate, object, valid_from, observed_at, valid_to, subject_entity_id,"
            " project_id, confidence, is_current, created_at, NULL AS layer_name")
PROCEDURE_SQL = ("id, name, steps, created_at, updated_at, trigger_context, preconditions, verification,"
                 " success_count, failure_count, last_outcome, last_used_at, project_id,"
                 " NULL AS embedding_model")
ARTIFACT_SQL = ("id, path, content, content_hash, version, project_id, origin_node, crdt_actor, crdt_counter,"
                " updated_at")
JSON_FIELDS = frozenset({"tags", "previous_versions", "actors", "artifacts", "steps"})
BOOL_FIELDS = frozenset({"resolved", "bidirectional", "is_current"})


def bundle_row(row: Any) -> Row:
    """A row as the bundle holds it: JSON columns parsed, 0/1 flags as booleans (both backends)."""
    out = dict(row)
    for key, value in out.items():
        if key in JSON_FIELDS:
            out[key] = json_value(value) if value is not None else []
        elif key in BOOL_FIELDS and value is not None:
            out[key] = bool(value)
    return out


class SqlSync(SqlBase):
    """Mixed into SqlStore."""

    def node_id(self) -> str:
        """This store's node id (migration 0014 makes it once)."""
        row = self._one("SELECT value FROM meta WHERE key = 'node_id'")
        return "" if row is None else str(row[0])

    def _bundle_rows(self, columns: str, table: str, project_id: str | None, everything: bool,
                     order: str, column: str = "project_id") -> list[Row]:
        params: list[Any] = []
        if everything:
            cond = "1 = 1"
        elif project_id is None:
            cond = f"{column} IS NULL"
        else:
            cond, params = f"{column} = ?", [project_id]
        rows = self._q(f"SELECT {columns} FROM {table} WHERE {cond} ORDER BY {order}", params)
        return [bundle_row(r) for r in rows]

    def sync_entities(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(", ".join(ENTITY_FIELDS), "entities", project_id, everything, "id")

    def sync_observations(self, project_id: str | None, everything: bool) -> list[Row]:
        """Every observation of the scope's entities (superseded and quarantined ones too: the
        bundle is a copy, not a search), oldest first."""
        picked = ", ".join(f"o.{f}" for f in OBSERVATION_FIELDS)
        params: list[Any] = []
        if everything:
            cond = "1 = 1"
        elif project_id is None:
            cond = "e.project_id IS NULL"
        else:
            cond, params = "e.project_id = ?", [project_id]
        rows = self._q(f"SELECT {picked} FROM observations o JOIN entities e ON e.id = o.entity_id"
                       f" WHERE {cond} ORDER BY o.created_at, o.id", params)
        return [bundle_row(r) for r in rows]

    def sync_episodes(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(", ".join(EPISODE_FIELDS), "episodes", project_id, everything, "id")

    def sync_errors(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(", ".join(ERROR_FIELDS), "errors", project_id, everything, "id")

    def sync_relations(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(RELATION_SQL, "relations", project_id, everything, "created_at, id")

    def sync_facts(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(FACT_SQL, "facts", project_id, everything, "fact_id")

    def sync_procedures(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(PROCEDURE_SQL, "procedures", project_id, everything, "id")

    def sync_artifacts(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows(ARTIFACT_SQL, "artifacts", project_id, everything, "path, id")

    def sync_projects(self, project_id: str | None, everything: bool) -> list[Row]:
        return self._bundle_rows("id, name, created_at", "projects", project_id, everything, "id", "id")

    def sync_tombstones(self, project_id: str | None, everything: bool) -> list[Row]:
        """The scope's tombstones. A project_only one (a project bundle's, of a row this node never
        had: migration 0019) goes into its project's bundles only, never into a bundle of all."""
        if everything:
            return [bundle_row(r) for r in self._q(
                "SELECT table_name, row_id, deleted_at, origin_node FROM tombstones WHERE NOT project_only"
                " ORDER BY deleted_at, table_name, row_id")]
        return self._bundle_rows("table_name, row_id, deleted_at, origin_node", "tombstones", project_id,
                                 everything, "deleted_at, table_name, row_id")

    def sync_source_trust(self) -> list[Row]:
        """Source trust is global (a kind of writer, not a project's row): every bundle has it."""
        return [dict(r) for r in self._q("SELECT source, alpha, beta, updated_at FROM source_trust ORDER BY source")]

    def tombstone_rows(self, table_name: str, row_ids: Sequence[str]) -> list[Row]:
        """The tombstones of some rows of one table (with their project), for tests and diff."""
        if not row_ids:
            return []
        marks = ",".join("?" * len(row_ids))
        return [dict(r) for r in self._q(
            "SELECT table_name, row_id, deleted_at, origin_node, project_id, project_only FROM tombstones"
            f" WHERE table_name = ? AND row_id IN ({marks}) ORDER BY row_id", (table_name, *row_ids))]

    def sync_imports(self, limit: int) -> list[Row]:
        """The newest bundles imported (sync_state), newest first."""
        return [dict(r) for r in self._q(
            "SELECT manifest_hash, imported_at, rows_inserted, source_path FROM sync_state"
            " ORDER BY imported_at DESC LIMIT ?", (limit,))]

    def sync_imported(self, manifest_hash: str) -> bool:
        return self._one("SELECT 1 FROM sync_state WHERE manifest_hash = ?", (manifest_hash,)) is not None

    def open_peer_notices(self, limit: int) -> list[Row]:
        return [dict(r) for r in self._q(
            "SELECT id, node_id, node_name, manifest_hash, summary, created_at FROM peer_notices"
            " WHERE closed_at IS NULL ORDER BY created_at DESC LIMIT ?", (limit,))]
