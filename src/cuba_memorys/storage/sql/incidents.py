"""Errors (cuba_alarma, cuba_remedio, cuba_expediente) and the project operations that touch
every table (cuba_proyecto stats, rename, merge). Same ``?`` SQL on SQLite and PostgreSQL.

Finding similar errors by text is not here: the services use the search primitives
(``text_candidates``/``bm25_candidates`` of kind "error"), which both backends already index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cuba_memorys.models import Scope, iso, new_id, utc_now
from cuba_memorys.storage.sql.workflow import scope_sql

# Index material in a stored row, never part of an answer (PostgreSQL keeps it on the row).
_INTERNAL = ("lex_raw", "lex_stem", "tsv_raw", "tsv_stem")
ACTIVE_PROJECT_KEYS = "active_project:%"  # meta keys naming each client's active project


def error_from(row: Any) -> dict:
    data = {k: v for k, v in dict(row).items() if k not in _INTERNAL}
    if isinstance(data.get("context"), str):
        data["context"] = json.loads(data["context"])
    data["resolved"] = bool(data["resolved"])
    return data


class SqlErrors:
    """Mixed into SqlStore; uses its ``_q``/``_one``/``_exec``/``transaction``/``_insert_indexed``."""

    backend: str
    def _q(self, sql: str, params: Sequence = ()) -> list: raise NotImplementedError
    def _one(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError
    def _exec(self, sql: str, params: Sequence = ()) -> Any: raise NotImplementedError
    def _insert_indexed(self, table: str, values: dict, text: str, returning: str = "seq") -> Any:
        raise NotImplementedError
    transaction: Any  # the backend's

    # -- errors --------------------------------------------------------------------------
    def add_error(self, error_type: str, message: str, context: dict, project: str,
                  project_id: str | None, session_id: str | None) -> dict:
        with self.transaction():
            # The same text as LEXICAL_SOURCES["errors"], so a re-index writes what this wrote.
            row = self._insert_indexed("errors", {
                "id": new_id(), "error_type": error_type, "error_message": message,
                "context": json.dumps(context, ensure_ascii=False), "project": project,
                "project_id": project_id, "session_id": session_id, "created_at": iso(utc_now())},
                f"{error_type} {message}", returning="*")
        return error_from(row)

    def get_error(self, error_id: str, scope: Scope) -> dict | None:
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM errors WHERE id = ? AND {cond}", (error_id, *params))
        return error_from(row) if row else None

    def recent_errors(self, scope: Scope, limit: int) -> list[dict]:
        """The newest trusted errors in scope (quarantined ones are never served)."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM errors WHERE trust = 'trusted' AND {cond}"
                       " ORDER BY created_at DESC, seq DESC LIMIT ?", (*params, limit))
        return [error_from(r) for r in rows]

    def strengthen_errors(self, ids: Sequence[str], delta: float, cap: float) -> None:
        """A recurring error weighs more (the original's synapse_weight, capped)."""
        if ids:
            self._exec(f"UPDATE errors SET synapse_weight = least(?, synapse_weight + ?)"
                       f" WHERE id IN ({','.join('?' * len(ids))})", (cap, delta, *ids))

    def resolve_error(self, error_id: str, solution: str) -> dict:
        row = self._one("UPDATE errors SET solution = ?, resolved = 1, resolved_at = ? WHERE id = ? RETURNING *",
                        (solution, iso(utc_now()), error_id))
        return error_from(row)

    # -- projects across every table -----------------------------------------------------
    def project_tables(self) -> list[str]:
        """Every table with a project_id column, read from the schema rather than listed, so a
        table added later is counted and merged too (a forgotten one would lose its project
        when the merged project is deleted, and become visible to every project). The one
        statement the two dialects spell differently."""
        if self.backend == "postgresql":
            rows = self._q("SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t"
                           " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
                           " WHERE c.column_name = 'project_id' AND c.table_schema = current_schema()"
                           " AND t.table_type = 'BASE TABLE' ORDER BY c.table_name")
        else:
            rows = self._q("SELECT m.name FROM sqlite_master m JOIN pragma_table_info(m.name) p"
                           " WHERE m.type = 'table' AND p.name = 'project_id' ORDER BY m.name")
        return [r[0] for r in rows]

    def project_counts(self, project_id: str) -> dict[str, int]:
        """Rows of the project in each table, plus its unresolved errors."""
        counts = {t: self._one(f"SELECT count(*) FROM {t} WHERE project_id = ?", (project_id,))[0]
                  for t in self.project_tables()}
        counts["unresolved_errors"] = self._one(
            "SELECT count(*) FROM errors WHERE project_id = ? AND resolved = 0", (project_id,))[0]
        return counts

    def rename_project(self, project_id: str, old: str, new: str) -> None:
        """The name, the errors labelled with it, and the clients whose active project it is."""
        with self.transaction():
            self._exec("UPDATE projects SET name = ? WHERE id = ?", (new, project_id))
            self._exec("UPDATE errors SET project = ? WHERE project_id = ? AND project = ?", (new, project_id, old))
            self._exec("UPDATE meta SET value = ? WHERE key LIKE ? AND value = ?", (new, ACTIVE_PROJECT_KEYS, old))

    def merge_projects(self, source: dict, target: dict) -> dict:
        """Move every row of ``source`` into ``target`` and delete ``source``, in one transaction.
        Same-name entities and procedures are merged into the target's (see the helpers).
        Returns {"moved": {table: rows}, "entities_merged", "relations_merged", "procedures_merged"}."""
        src, dst = source["id"], target["id"]
        with self.transaction():
            entities_merged, relations_merged = self._merge_colliding_entities(src, dst)
            procedures_merged = self._merge_colliding_procedures(src, dst)
            self._exec("UPDATE errors SET project = ? WHERE project_id = ? AND project = ?",
                       (target["name"], src, source["name"]))
            moved = {t: self._exec(f"UPDATE {t} SET project_id = ? WHERE project_id = ?", (dst, src)).rowcount
                     for t in self.project_tables()}
            self._exec("UPDATE meta SET value = ? WHERE key LIKE ? AND value = ?",
                       (target["name"], ACTIVE_PROJECT_KEYS, source["name"]))
            self._exec("DELETE FROM projects WHERE id = ?", (src,))
            self._exec("UPDATE projects SET last_active_at = ? WHERE id = ?", (iso(utc_now()), dst))
        return {"moved": moved, "entities_merged": entities_merged, "relations_merged": relations_merged,
                "procedures_merged": procedures_merged}

    def _merge_colliding_entities(self, src: str, dst: str) -> tuple[int, int]:
        """An entity of the source whose name the target also has becomes the target's: its
        observations, episodes and relations move to the target's entity (nothing is dropped
        but duplicate edges), importance is the higher, access counts add up, the target's
        type is kept. Returns (entities merged, duplicate relations folded)."""
        pairs = self._q("SELECT s.id, t.id, s.importance, s.access_count FROM entities s JOIN entities t"
                        " ON t.name = s.name AND t.project_id = ? WHERE s.project_id = ?", (dst, src))
        folded = 0
        for loser, keeper, importance, access in pairs:
            for table in ("observations", "episodes"):
                self._exec(f"UPDATE {table} SET entity_id = ? WHERE entity_id = ?", (keeper, loser))
            folded += self._repoint_relations(loser, keeper)
            self._exec("UPDATE entities SET importance = greatest(importance, ?), access_count = access_count + ?,"
                       " updated_at = ? WHERE id = ?", (importance, access, iso(utc_now()), keeper))
            self._exec("DELETE FROM entities WHERE id = ?", (loser,))
        return len(pairs), folded

    def _repoint_relations(self, loser: str, keeper: str) -> int:
        """Edges of ``loser`` now end at ``keeper``. An edge the keeper already has is folded
        into it (the stronger strength wins); one that would join the keeper to itself goes."""
        folded = 0
        rows = self._q("SELECT id, from_entity_id, to_entity_id, relation_type, strength, bidirectional"
                       " FROM relations WHERE from_entity_id = ? OR to_entity_id = ?", (loser, loser))
        for rel_id, a, b, kind, strength, bidirectional in rows:
            a, b = (keeper if a == loser else a), (keeper if b == loser else b)
            twin = self._one("SELECT id FROM relations WHERE from_entity_id = ? AND to_entity_id = ?"
                             " AND relation_type = ? AND id != ?", (a, b, kind, rel_id))
            if a == b or twin is not None:
                if twin is not None:
                    self._exec("UPDATE relations SET strength = greatest(strength, ?),"
                               " bidirectional = greatest(bidirectional, ?) WHERE id = ?",
                               (strength, bidirectional, twin[0]))
                self._exec("DELETE FROM relations WHERE id = ?", (rel_id,))
                folded += 1
            else:
                self._exec("UPDATE relations SET from_entity_id = ?, to_entity_id = ? WHERE id = ?", (a, b, rel_id))
        return folded

    def _merge_colliding_procedures(self, src: str, dst: str) -> int:
        """A recipe both projects have keeps the target's text and adds up both track records
        (its reliability then reflects every recorded use); the latest outcome wins."""
        pairs = self._q("SELECT s.id, t.id, s.success_count, s.failure_count, s.last_outcome, s.last_used_at,"
                        " t.last_used_at FROM procedures s JOIN procedures t ON t.name = s.name"
                        " AND t.project_id = ? WHERE s.project_id = ?", (dst, src))
        for loser, keeper, successes, failures, outcome, used, keeper_used in pairs:
            newer = used is not None and (keeper_used is None or used > keeper_used)
            self._exec("UPDATE procedures SET success_count = success_count + ?, failure_count = failure_count + ?,"
                       " last_outcome = CASE WHEN ? = 1 THEN ? ELSE last_outcome END,"
                       " last_used_at = CASE WHEN ? = 1 THEN ? ELSE last_used_at END, updated_at = ? WHERE id = ?",
                       (successes, failures, int(newer), outcome, int(newer), used, iso(utc_now()), keeper))
            self._exec("DELETE FROM procedures WHERE id = ?", (loser,))
        return len(pairs)
