"""Shared SQL of sync import (cuba_sync import, services/sync/importer.py): the local rows a
bundle's ids name, inserts that keep the bundle's ids and times, the counters raised by max,
observation rewrites, deletes by id, the bundles imported, conflicts and peer notices. Same
``?`` SQL on SQLite and PostgreSQL (both keep flags as 0/1 and JSON as text).

A row is written through the same lexical-index and vector-index hooks a tool's write uses, so
an imported row is found by every search branch at once (by meaning once it has a vector).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cuba_memorys.models import iso, new_id, utc_now
from cuba_memorys.storage.sql.common import LEXICAL_SOURCES, SqlBase, marks
from cuba_memorys.storage.sql.sync import (
    ARTIFACT_SQL,
    ENTITY_FIELDS,
    EPISODE_FIELDS,
    ERROR_FIELDS,
    FACT_SQL,
    OBSERVATION_FIELDS,
    PROCEDURE_SQL,
    RELATION_SQL,
    bundle_row,
)

Row = dict[str, Any]
_CHUNK = 500  # ids per IN list

# table -> (key column, the columns read back in the bundle's field names)
_LOCAL = {
    "entities": ("id", ", ".join(ENTITY_FIELDS)),
    "observations": ("id", ", ".join(OBSERVATION_FIELDS)),
    "episodes": ("id", ", ".join(EPISODE_FIELDS)),
    "errors": ("id", ", ".join(ERROR_FIELDS)),
    "relations": ("id", RELATION_SQL),
    "facts": ("fact_id", FACT_SQL.replace(", NULL AS layer_name", ", observation_id")),
    "procedures": ("id", PROCEDURE_SQL.replace(", NULL AS embedding_model", "")),
    "projects": ("id", "id, name, created_at"),
    "artifacts": ("id", ARTIFACT_SQL),
    "sessions": ("id", "id, name, project_id, started_at"),
}
_LEXICAL_TEXT = {
    "observations": lambda v: v["content"],
    "entities": lambda v: f"{v['name']} {v['entity_type']}",
    "episodes": lambda v: v["content"],
    "errors": lambda v: f"{v['error_type']} {v['error_message']}",
}
assert set(_LEXICAL_TEXT) == set(LEXICAL_SOURCES)  # a new indexed table must say its text here
_JSON = frozenset({"tags", "previous_versions", "actors", "artifacts", "steps"})
_FLAGS = frozenset({"resolved", "bidirectional", "is_current"})
_COUNTERS = {  # the columns an import raises by max, never adds to
    "entities": ("importance", "access_count"), "observations": ("importance",),
    "episodes": ("importance",), "relations": ("strength",),
    "procedures": ("success_count", "failure_count"),
}


def _stored(values: Row) -> Row:
    """Bundle values as columns hold them: JSON lists as text, flags as 0/1."""
    out: Row = {}
    for key, value in values.items():
        if key in _JSON:
            out[key] = json.dumps(value if value is not None else [], ensure_ascii=False)
        elif key in _FLAGS and value is not None:
            out[key] = int(bool(value))
        else:
            out[key] = value
    return out


class SqlSyncImport(SqlBase):
    """Mixed into SqlStore."""

    if TYPE_CHECKING:  # SqlStore's, through its other mixins (storage/sql/graph.py, observations.py)
        def delete_entity(self, entity_id: str) -> dict[str, int]: ...
        def delete_observation(self, obs_id: str) -> bool: ...

    # -- reading what is here -------------------------------------------------------------
    def sync_local_rows(self, table: str, ids: Sequence[str]) -> dict[str, Row]:
        """The local rows of ``table`` with these ids, in the bundle's field names, by id."""
        key, columns = _LOCAL[table]
        found: dict[str, Row] = {}
        ids = list(dict.fromkeys(ids))
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            for row in self._q(f"SELECT {columns} FROM {table} WHERE {key} IN ({marks(chunk)})", chunk):
                found[row[key]] = bundle_row(row)
        return found

    def sync_entity_named(self, name: str, project_id: str | None) -> Row | None:
        row = self._one("SELECT id, name, entity_type, project_id FROM entities WHERE name = ?"
                        " AND coalesce(project_id, '') = ?", (name, project_id or ""))
        return dict(row) if row else None

    def sync_project_named(self, name: str) -> Row | None:
        row = self._one("SELECT id, name, created_at FROM projects WHERE name = ?", (name,))
        return dict(row) if row else None

    def sync_procedure_named(self, name: str, project_id: str | None) -> str | None:
        row = self._one("SELECT id FROM procedures WHERE name = ? AND coalesce(project_id, '') = ?",
                        (name, project_id or ""))
        return None if row is None else str(row[0])

    def sync_relation_between(self, from_id: str, to_id: str, kind: str) -> str | None:
        row = self._one("SELECT id FROM relations WHERE from_entity_id = ? AND to_entity_id = ?"
                        " AND relation_type = ?", (from_id, to_id, kind))
        return None if row is None else str(row[0])

    def sync_artifact_at(self, path: str, project_id: str | None) -> Row | None:
        row = self._one(f"SELECT {ARTIFACT_SQL} FROM artifacts WHERE path = ? AND coalesce(project_id, '') = ?",
                        (path, project_id or ""))
        return dict(row) if row else None

    def sync_children(self, entity_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Each entity's children here, as (table, id): its observations, episodes and relations
        (what deleting the entity would cascade away)."""
        out: dict[str, list[tuple[str, str]]] = {e: [] for e in entity_ids}
        ids = list(entity_ids)
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            for table in ("observations", "episodes"):
                for row in self._q(f"SELECT entity_id, id FROM {table} WHERE entity_id IN ({marks(chunk)})", chunk):
                    out[row[0]].append((table, row[1]))
            for end in ("from_entity_id", "to_entity_id"):
                for row in self._q(f"SELECT {end}, id FROM relations WHERE {end} IN ({marks(chunk)})", chunk):
                    if ("relations", row[1]) not in out[row[0]]:
                        out[row[0]].append(("relations", row[1]))
        return out

    def sync_observation_count(self) -> int:
        return int(self._one("SELECT count(*) FROM observations")[0])

    def sync_current_facts(self, pairs: Sequence[tuple[str, str]]) -> list[Row]:
        """Current facts of these (subject, predicate) pairs, with their observation link."""
        out: list[Row] = []
        for subject, predicate in dict.fromkeys(pairs):
            out.extend(dict(r) for r in self._q(
                "SELECT fact_id, subject, predicate, observed_at, valid_from, observation_id FROM facts"
                " WHERE subject = ? AND predicate = ? AND is_current = 1", (subject, predicate)))
        return out

    # -- writing ----------------------------------------------------------------------------
    def sync_insert(self, table: str, values: Row, embedding: bytes | None = None) -> None:
        """Insert one row with the bundle's id and times; indexed tables through the lexical
        index hooks, an observation's vector (if given) told to the vector index after commit."""
        values = _stored(values)
        if table not in _LEXICAL_TEXT:
            columns = list(values)
            # a version already kept in an artifact's history stays as it is
            tail = " ON CONFLICT DO NOTHING" if table == "artifact_versions" else ""
            self._exec(f"INSERT INTO {table}({', '.join(columns)}) VALUES ({marks(columns)}){tail}",
                       list(values.values()))
            return
        if table == "observations" and embedding is not None:
            values["embedding"] = self._vector_param(embedding)
            values["embedding_rev"] = 1
        seq = self._insert_indexed(table, values, _LEXICAL_TEXT[table](values))["seq"]
        if table == "observations" and embedding is not None:
            blob = embedding
            self._after_commit(lambda: self._vector_added("observation", seq, blob))

    def sync_raise_counters(self, table: str, key: str, row_id: str, values: Row) -> None:
        """Counters merge by max: re-importing a bundle never inflates them."""
        columns = [c for c in _COUNTERS.get(table, ()) if values.get(c) is not None]
        if not columns:
            return
        sets = ", ".join(f"{c} = greatest({c}, ?)" for c in columns)
        self._exec(f"UPDATE {table} SET {sets} WHERE {key} = ?", [*(values[c] for c in columns), row_id])

    def sync_update(self, table: str, key: str, row_id: str, values: Row) -> None:
        """Overwrite some columns of one row (no lexical text among them)."""
        if not values:
            return
        stored = _stored(values)
        sets = ", ".join(f"{c} = ?" for c in stored)
        self._exec(f"UPDATE {table} SET {sets} WHERE {key} = ?", [*stored.values(), row_id])

    def sync_rewrite_observation(self, obs_id: str, values: Row, embedding: bytes | None,
                                 embedding_model: str | None) -> None:
        """An observation takes another text (overwrite, a later edit, resolve keep=theirs):
        the given columns, the lexical index, and the vector (the old one is stale: replaced,
        or cleared for the next reembed when there is no model)."""
        stored = _stored(values)
        stored["embedding"] = self._vector_param(embedding)
        stored["embedding_model"] = embedding_model if embedding is not None else None
        sets = ", ".join(f"{c} = ?" for c in stored)
        row = self._one(f"UPDATE observations SET {sets}, embedding_rev = embedding_rev + 1 WHERE id = ?"
                        " RETURNING seq", [*stored.values(), obs_id])
        if row is None:
            return
        seq = row[0]
        if "content" in values:
            self._index_text("observations", seq, values["content"])
        self._after_commit(self._vectors_reloaded)

    def sync_delete(self, table: str, key: str, row_id: str) -> bool:
        """Delete one row a tombstone names (its own triggers record the tombstone here)."""
        if table == "entities":
            return bool(self.delete_entity(row_id)) if self._one(
                "SELECT 1 FROM entities WHERE id = ?", (row_id,)) else False
        if table == "observations":
            return self.delete_observation(row_id)
        if table == "episodes":
            row = self._one("DELETE FROM episodes WHERE id = ? RETURNING seq", (row_id,))
            if row is not None:
                seq = row[0]
                self._after_commit(lambda: self._vectors_dropped("episode", [seq]))
            return row is not None
        return self._exec(f"DELETE FROM {table} WHERE {key} = ?", (row_id,)).rowcount > 0

    def sync_close_fact(self, fact_id: str, valid_to: str) -> None:
        """Close a fact at ``valid_to`` (never before it began: the table's check)."""
        self._exec("UPDATE facts SET is_current = 0, valid_to = CASE WHEN valid_from > ? THEN valid_from ELSE ? END"
                   " WHERE fact_id = ? AND is_current = 1", (valid_to, valid_to, fact_id))

    def sync_upsert_trust(self, row: Row) -> bool:
        """Source trust merges by max of alpha, beta and updated_at; True when it changed."""
        current = self._one("SELECT alpha, beta, updated_at FROM source_trust WHERE source = ?", (row["source"],))
        if current is None:
            self._exec("INSERT INTO source_trust(source, alpha, beta, updated_at) VALUES (?, ?, ?, ?)",
                       (row["source"], row["alpha"], row["beta"], row["updated_at"]))
            return True
        merged = (max(current[0], row["alpha"]), max(current[1], row["beta"]), max(current[2], row["updated_at"]))
        if merged == tuple(current):
            return False
        self._exec("UPDATE source_trust SET alpha = ?, beta = ?, updated_at = ? WHERE source = ?",
                   (*merged, row["source"]))
        return True

    # -- bundles, conflicts, notices -------------------------------------------------------
    def sync_record_import(self, manifest_hash: str, rows_inserted: int, source_path: str) -> None:
        self._exec("INSERT INTO sync_state(manifest_hash, imported_at, rows_inserted, source_path)"
                   " VALUES (?, ?, ?, ?) ON CONFLICT (manifest_hash) DO NOTHING",
                   (manifest_hash, iso(utc_now()), rows_inserted, source_path))

    def sync_open_conflict(self, observation_id: str, local: str, incoming: str, their_node: str | None,
                           manifest_hash: str, project_id: str | None) -> bool:
        """Open a conflict unless the same one (this row, this incoming text) is open already, or
        was decided already (resolve keep=ours: the other machine's text was turned down here)."""
        if self._one("SELECT 1 FROM sync_conflicts WHERE observation_id = ? AND incoming_content = ?",
                     (observation_id, incoming)) is not None:
            return False
        self._exec("INSERT INTO sync_conflicts(id, observation_id, local_content, incoming_content, their_node,"
                   " manifest_hash, project_id, detected_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (new_id(), observation_id, local, incoming, their_node, manifest_hash, project_id,
                    iso(utc_now())))
        return True

    def sync_conflicts(self, limit: int, project_id: str | None, everything: bool) -> tuple[list[Row], int]:
        """The newest open conflicts (of one project, or all) and how many are open."""
        cond, params = ("1 = 1", []) if everything else ("coalesce(project_id, '') = ?", [project_id or ""])
        rows = [dict(r) for r in self._q(
            "SELECT id, observation_id, local_content AS ours, incoming_content AS theirs, their_node, detected_at,"
            f" project_id FROM sync_conflicts WHERE resolved_at IS NULL AND {cond}"
            " ORDER BY detected_at DESC, id LIMIT ?", [*params, limit])]
        total = self._one(f"SELECT count(*) FROM sync_conflicts WHERE resolved_at IS NULL AND {cond}", params)[0]
        return rows, int(total)

    def sync_open_conflict_ids(self) -> set[str]:
        """The observations with an open conflict (few: every one waits for a person)."""
        return {r[0] for r in self._q("SELECT DISTINCT observation_id FROM sync_conflicts WHERE resolved_at IS NULL"
                                      " AND observation_id IS NOT NULL")}

    def sync_settle_conflicts(self, observation_id: str, resolution: str) -> int:
        """Close the open conflicts of a row both sides now agree on."""
        return self._exec("UPDATE sync_conflicts SET resolved_at = ?, resolution = ? WHERE observation_id = ?"
                          " AND resolved_at IS NULL", (iso(utc_now()), resolution, observation_id)).rowcount

    def sync_conflict(self, conflict_id: str) -> Row | None:
        row = self._one("SELECT id, observation_id, local_content, incoming_content, their_node, project_id,"
                        " detected_at, resolved_at, resolution FROM sync_conflicts WHERE id = ?", (conflict_id,))
        return dict(row) if row else None

    def sync_resolve_conflict(self, conflict_id: str, resolution: str) -> bool:
        return self._exec("UPDATE sync_conflicts SET resolved_at = ?, resolution = ? WHERE id = ?"
                          " AND resolved_at IS NULL", (iso(utc_now()), resolution, conflict_id)).rowcount > 0

    def sync_store_tombstone(self, tombstone: Row, project_id: str | None, exact: bool,
                             project_only: bool = False) -> None:
        """Keep another node's tombstone, so the delete travels on in this node's bundles and a
        third machine's stale copy of the row does not bring it back. ``exact``: this import
        applied it (the delete trigger just wrote this node's time and id: the sender's replace
        them); otherwise the later deleted_at wins, ties to the greater node (the merge driver's rule).
        ``project_only``: a project bundle's tombstone of a row this node never had, exported in
        that project's bundles only (migration 0019); a tombstone kept without it stays without it."""
        newer = "TRUE" if exact else ("(excluded.deleted_at > tombstones.deleted_at OR (excluded.deleted_at ="
                                      " tombstones.deleted_at AND coalesce(excluded.origin_node, '') >"
                                      " coalesce(tombstones.origin_node, '')))")
        # project_only is cleared by any tombstone that is not, whatever its time: the same delete
        # arriving in a bundle of every project (or applied here) is no longer unproven
        self._exec("INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id, project_only)"
                   " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (table_name, row_id) DO UPDATE SET"
                   f" deleted_at = CASE WHEN {newer} THEN excluded.deleted_at ELSE tombstones.deleted_at END,"
                   f" origin_node = CASE WHEN {newer} THEN excluded.origin_node ELSE tombstones.origin_node END,"
                   " project_only = tombstones.project_only AND excluded.project_only",
                   (tombstone["table_name"], tombstone["row_id"], tombstone["deleted_at"], tombstone["origin_node"],
                    project_id, project_only))

    def sync_close_notices(self, manifest_hashes: Sequence[str]) -> int:
        hashes = [h for h in dict.fromkeys(manifest_hashes) if h]
        if not hashes:
            return 0
        return self._exec(f"UPDATE peer_notices SET closed_at = ? WHERE closed_at IS NULL"
                          f" AND manifest_hash IN ({marks(hashes)})", [iso(utc_now()), *hashes]).rowcount

    def sync_rekey_entity(self, old_id: str, new_id: str) -> None:
        """Give a local entity the id another node gave the same (name, project): everything of
        ``old_id`` moves to a copy under ``new_id`` and ``old_id`` goes (its tombstone tells the
        other nodes). Both nodes then keep the smaller id, so their bundles name one file."""
        row = self._one("SELECT * FROM entities WHERE id = ?", (old_id,))
        if row is None:
            return
        kept = {c: row[c] for c in ("name", "entity_type", "importance", "access_count", "bcm_theta", "project_id",
                                    "created_at", "updated_at")}
        # names are unique per project: park the old row's while both exist (it goes below)
        self._exec("UPDATE entities SET name = ? WHERE id = ?", (f"{row['name']} [rekey {old_id}]", old_id))
        self.sync_insert("entities", {"id": new_id, **kept})
        for table, column in (("observations", "entity_id"), ("episodes", "entity_id"),
                              ("facts", "subject_entity_id"), ("entity_aliases", "entity_id")):
            self._exec(f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (new_id, old_id))
        self._exec("UPDATE relations SET from_entity_id = ? WHERE from_entity_id = ?", (new_id, old_id))
        self._exec("UPDATE relations SET to_entity_id = ? WHERE to_entity_id = ?", (new_id, old_id))
        self._exec("DELETE FROM entities WHERE id = ?", (old_id,))  # nothing left to cascade
