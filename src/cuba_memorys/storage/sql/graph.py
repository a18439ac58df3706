"""The knowledge graph's SQL, shared by both backends: projects (with the whole-project
operations of cuba_proyecto: stats, rename, merge), entities, relations and episodes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from cuba_memorys.errors import StorageError
from cuba_memorys.models import Entity, Scope, iso, new_id, utc_now
from cuba_memorys.storage.rows import (
    EpisodeRow,
    ProjectListRow,
    ProjectMerge,
    ProjectRow,
    RelationEndsRow,
    RelationRow,
)
from cuba_memorys.storage.sql.common import (
    ACTIVE_PROJECT_KEYS,
    SqlBase,
    entity_from,
    episode_from,
    marks,
    scope_sql,
)

APPEND_ONLY = ("audit_log",)
# A grant without a project is a grant on every project, not a row waiting for one: a backfill
# leaves it alone (turning it into a grant on one project would take rights away).
NOT_BACKFILLED = ("grants",)
# Tables whose names are unique within a project: a row of no project may share its name with
# one of the project it is backfilled into.
UNIQUE_NAMES = ("entities", "procedures")


class SqlGraph(SqlBase):
    """Mixed into SqlStore."""

    # -- projects -----------------------------------------------------------------------
    def get_project(self, name: str) -> ProjectRow | None:
        row = self._one("SELECT * FROM projects WHERE name = ?", (name,))
        return cast(ProjectRow, dict(row)) if row else None

    def get_or_create_project(self, name: str) -> ProjectRow:
        now = iso(utc_now())
        with self.transaction():
            self._exec("INSERT INTO projects(id, name, created_at, last_active_at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT(name) DO UPDATE SET last_active_at = excluded.last_active_at",
                       (new_id(), name, now, now))
            return cast(ProjectRow, self.get_project(name))

    def touch_project(self, project_id: str) -> None:
        self._exec("UPDATE projects SET last_active_at = ? WHERE id = ?", (iso(utc_now()), project_id))

    def list_projects(self) -> list[ProjectListRow]:
        rows = self._q(
            "SELECT p.*, (SELECT count(*) FROM entities e WHERE e.project_id = p.id) AS entity_count,"
            " (SELECT count(*) FROM observations o WHERE o.project_id = p.id) AS observation_count"
            " FROM projects p ORDER BY p.last_active_at DESC")
        return [cast(ProjectListRow, dict(r)) for r in rows]

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
        # The audit log records events about a project; it is not part of its contents, and it is
        # append-only (a merge must not rewrite its rows).
        return [r[0] for r in rows if r[0] not in APPEND_ONLY]

    def project_counts(self, project_id: str) -> dict[str, int]:
        """Rows of the project in each table, plus its unresolved errors. ``observations``
        counts the live ones, as cuba_vigia summary does (the spec's "non-superseded"), so the
        two tools give one number for one project; the superseded ones are counted apart."""
        counts = {t: self._one(f"SELECT count(*) FROM {t} WHERE project_id = ?", (project_id,))[0]
                  for t in self.project_tables()}
        counts["superseded_observations"] = self._one(
            "SELECT count(*) FROM observations WHERE project_id = ? AND observation_type = 'superseded'",
            (project_id,))[0]
        counts["observations"] -= counts["superseded_observations"]
        counts["unresolved_errors"] = self._one(
            "SELECT count(*) FROM errors WHERE project_id = ? AND resolved = 0", (project_id,))[0]
        return counts

    def rename_project(self, project_id: str, old: str, new: str) -> None:
        """The name, the errors labelled with it, and the clients whose active project it is."""
        with self.transaction():
            self._exec("UPDATE projects SET name = ? WHERE id = ?", (new, project_id))
            self._exec("UPDATE errors SET project = ? WHERE project_id = ? AND project = ?", (new, project_id, old))
            self._exec("UPDATE meta SET value = ? WHERE key LIKE ? AND value = ?", (new, ACTIVE_PROJECT_KEYS, old))

    def merge_projects(self, source: ProjectRow, target: ProjectRow) -> ProjectMerge:
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

    # -- backfill: the rows of no project into one ----------------------------------------
    def backfill_tables(self) -> list[str]:
        """The tables a backfill moves rows of: every table with a project, grants aside."""
        return [t for t in self.project_tables() if t not in NOT_BACKFILLED]

    def unscoped_counts(self) -> dict[str, int]:
        """Rows without a project, per table a backfill moves."""
        return {t: self._one(f"SELECT count(*) FROM {t} WHERE project_id IS NULL")[0] for t in self.backfill_tables()}

    def unscoped_name_collisions(self, project_id: str) -> dict[str, list[tuple[str, str, str]]]:
        """(id of no project, the project's id, name) of the rows of no project whose name the
        project already uses, per table with names unique within a project."""
        return {t: [(r[0], r[1], r[2]) for r in self._q(
            f"SELECT s.id, t.id, s.name FROM {t} s JOIN {t} t ON t.name = s.name AND t.project_id = ?"
            " WHERE s.project_id IS NULL ORDER BY s.name", (project_id,))] for t in UNIQUE_NAMES}

    def unscoped_entities_shared(self, project_id: str) -> list[str]:
        """Names of the entities of no project that rows of another project than ``project_id``
        hang on (observations, episodes, facts, relations): moving them into ``project_id``
        would hide those rows from their own project."""
        rows = self._q(
            "SELECT DISTINCT e.name FROM entities e WHERE e.project_id IS NULL AND ("
            " EXISTS (SELECT 1 FROM observations o WHERE o.entity_id = e.id AND o.project_id IS NOT NULL"
            "         AND o.project_id <> ?)"
            " OR EXISTS (SELECT 1 FROM episodes p WHERE p.entity_id = e.id AND p.project_id IS NOT NULL"
            "         AND p.project_id <> ?)"
            " OR EXISTS (SELECT 1 FROM facts f WHERE f.subject_entity_id = e.id AND f.project_id IS NOT NULL"
            "         AND f.project_id <> ?)"
            " OR EXISTS (SELECT 1 FROM relations r JOIN entities o ON o.id ="
            "         CASE WHEN r.from_entity_id = e.id THEN r.to_entity_id ELSE r.from_entity_id END"
            "         WHERE (r.from_entity_id = e.id OR r.to_entity_id = e.id) AND o.project_id IS NOT NULL"
            "         AND o.project_id <> ?)) ORDER BY e.name", (project_id,) * 4)
        return [r[0] for r in rows]

    def backfill_project(self, project_id: str) -> dict[str, list[Any]]:
        """Give every row without a project ``project_id``, in one transaction; returns the key
        (``row_key``; a list of values for a key of several columns) of each row moved, by
        table, read from the UPDATE itself, so a row another writer adds meanwhile is either
        moved and listed or left alone."""
        moved: dict[str, list[Any]] = {}
        with self.transaction():
            for table in self.backfill_tables():
                key = self.row_key(table)
                rows = self._q(f"UPDATE {table} SET project_id = ? WHERE project_id IS NULL RETURNING {key}",
                               (project_id,))
                moved[table] = [r[0] if "," not in key else list(r) for r in rows]
        return moved

    def move_rows_project(self, table: str, key: str, values: Sequence[Any], from_project: str | None,
                          to_project: str | None) -> int:
        """Rows of ``table`` whose ``key`` is one of ``values`` and whose project is still
        ``from_project`` get ``to_project`` (None: no project): a backfill undone, or redone."""
        if table not in self.backfill_tables() or key != self.row_key(table):
            raise StorageError(f"move: {table}.{key} is not a table and key a backfill moves")
        width = key.count(",") + 1
        if width > 1 and not all(isinstance(v, (list, tuple)) and len(v) == width for v in values):
            raise StorageError(f"move: a key of {table} is {width} values ({key})")
        now = "project_id IS NULL" if from_project is None else "project_id = ?"
        one = "?" if width == 1 else f"({marks(range(width))})"
        moved = 0
        with self.transaction():
            for start in range(0, len(values), 500):
                chunk = list(values[start:start + 500])
                flat = chunk if width == 1 else [part for value in chunk for part in value]
                moved += self._exec(
                    f"UPDATE {table} SET project_id = ? WHERE {now} AND ({key}) IN ({', '.join([one] * len(chunk))})",
                    (to_project, *([] if from_project is None else [from_project]), *flat)).rowcount
        return moved

    def row_key(self, table: str) -> str:
        """The columns that name one row of ``table``: ``id`` when it has one, else its primary
        key (several columns joined by commas)."""
        if self.backend == "postgresql":
            rows = self._q("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                           " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = ?::regclass AND i.indisprimary"
                           " ORDER BY array_position(i.indkey::int2[], a.attnum)", (table,))
            columns = [r[0] for r in self._q("SELECT column_name FROM information_schema.columns WHERE"
                                             " table_schema = current_schema() AND table_name = ?", (table,))]
        else:
            info = self._q(f"SELECT name, pk FROM pragma_table_info('{table}') ORDER BY pk")
            rows, columns = [(r[0],) for r in info if r[1]], [r[0] for r in info]
        if "id" in columns:
            return "id"
        if not rows:
            raise StorageError(f"{table} has no id and no primary key: its rows cannot be listed by key")
        return ",".join(str(r[0]) for r in rows)

    # -- entities -----------------------------------------------------------------------
    def get_entity(self, name: str, scope: Scope) -> Entity | None:
        """The visible entity of that name, preferring the active project's own."""
        cond, params = scope_sql(scope, "project_id")
        row = self._one(f"SELECT * FROM entities WHERE name = ? AND {cond}"
                        " ORDER BY project_id IS NULL, created_at LIMIT 1", (name, *params))
        return entity_from(row) if row else None

    def get_entity_by_id(self, entity_id: str) -> Entity | None:
        row = self._one("SELECT * FROM entities WHERE id = ?", (entity_id,))
        return entity_from(row) if row else None

    def create_entity(self, name: str, entity_type: str, project_id: str | None) -> Entity:
        now = iso(utc_now())
        with self.transaction():
            row = self._insert_indexed("entities", {
                "id": new_id(), "name": name, "entity_type": entity_type, "project_id": project_id,
                "created_at": now, "updated_at": now}, f"{name} {entity_type}", returning="*")
        return entity_from(row)

    def boost_entity(self, entity_id: str) -> Entity:
        """Hebbian access reinforcement: importance moves 5% of the way to 1, and each
        neighbour (up to 50, strongest edges first) a share of that: 10% × the edge's strength.
        An access is not a change of meaning: updated_at stays (the sync issue compares it)."""
        with self.transaction():
            self._exec("UPDATE entities SET access_count = access_count + 1,"
                       " importance = least(1.0, importance + 0.05 * (1 - importance)) WHERE id = ?", (entity_id,))
            # one statement for every neighbour (a get must not cost a statement per edge)
            edge = ("(SELECT max(r.strength) FROM relations r WHERE (r.from_entity_id = ? AND r.to_entity_id = n.id)"
                    " OR (r.to_entity_id = ? AND r.from_entity_id = n.id))")
            self._exec(f"UPDATE entities AS n SET importance = least(1.0, n.importance + 0.005 * {edge}"
                       " * (1 - n.importance)) WHERE n.id IN (SELECT CASE WHEN from_entity_id = ? THEN to_entity_id"
                       " ELSE from_entity_id END FROM relations WHERE (from_entity_id = ? OR to_entity_id = ?)"
                       " AND from_entity_id != to_entity_id ORDER BY strength DESC LIMIT 50)",
                       (entity_id, entity_id, entity_id, entity_id, entity_id))
        return entity_from(self._one("SELECT * FROM entities WHERE id = ?", (entity_id,)))

    def rename_entity(self, entity_id: str, new_name: str) -> None:
        with self.transaction():
            self._exec("UPDATE entities SET name = ?, updated_at = ? WHERE id = ?",
                       (new_name, iso(utc_now()), entity_id))
            row = self._one("SELECT seq, entity_type FROM entities WHERE id = ?", (entity_id,))
            self._index_text("entities", row["seq"], f"{new_name} {row['entity_type']}")

    def delete_entity(self, entity_id: str) -> dict[str, int]:
        with self.transaction():
            counts = {
                "observations": self._one("SELECT count(*) FROM observations WHERE entity_id = ?", (entity_id,))[0],
                "episodes": self._one("SELECT count(*) FROM episodes WHERE entity_id = ?", (entity_id,))[0],
                "relations": self._one("SELECT count(*) FROM relations WHERE from_entity_id = ?"
                                       " OR to_entity_id = ?", (entity_id, entity_id))[0],
            }
            gone = self._seqs_of("observations", "entity_id = ?", [entity_id])
            gone_eps = self._seqs_of("episodes", "entity_id = ?", [entity_id])
            self._exec("DELETE FROM entities WHERE id = ?", (entity_id,))
            self._after_commit(lambda: self._vectors_dropped("observation", gone))
            self._after_commit(lambda: self._vectors_dropped("episode", gone_eps))
        return counts

    def entities_by_ids(self, ids: Sequence[str]) -> dict[str, Entity]:
        if not ids:
            return {}
        rows = self._q(f"SELECT * FROM entities WHERE id IN ({marks(ids)})", list(ids))
        return {r["id"]: entity_from(r) for r in rows}

    def top_entities(self, scope: Scope, limit: int) -> list[Entity]:
        """The most important visible entities that have at least two observations."""
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q(f"SELECT e.* FROM entities e WHERE {cond} AND (SELECT count(*) FROM observations o"
                       " WHERE o.entity_id = e.id AND o.observation_type != 'superseded') >= 2"
                       " ORDER BY e.importance DESC, e.seq LIMIT ?", (*params, limit))
        return [entity_from(r) for r in rows]

    # -- relations ----------------------------------------------------------------------
    def upsert_relation(self, from_id: str, to_id: str, relation_type: str, bidirectional: bool,
                        project_id: str | None) -> RelationRow:
        """Create the edge, or strengthen it by 0.1 (capped at 1) when it already exists."""
        row = self._one(
            "INSERT INTO relations(id, from_entity_id, to_entity_id, relation_type, strength,"
            " bidirectional, project_id, created_at) VALUES (?, ?, ?, ?, 0.5, ?, ?, ?)"
            " ON CONFLICT(from_entity_id, to_entity_id, relation_type) DO UPDATE SET"
            " strength = least(1.0, relations.strength + 0.1),"
            " bidirectional = greatest(relations.bidirectional, excluded.bidirectional) RETURNING *",
            (new_id(), from_id, to_id, relation_type, int(bidirectional), project_id, iso(utc_now())))
        return cast(RelationRow, dict(row))

    def delete_relation(self, from_id: str, to_id: str, relation_type: str | None) -> bool:
        sql = "DELETE FROM relations WHERE from_entity_id = ? AND to_entity_id = ?"
        params: list[Any] = [from_id, to_id]
        if relation_type:
            sql += " AND relation_type = ?"
            params.append(relation_type)
        return self._exec(sql, params).rowcount > 0

    def relations_of(self, entity_ids: Sequence[str]) -> list[RelationEndsRow]:
        if not entity_ids:
            return []
        ids = marks(entity_ids)
        rows = self._q(
            "SELECT r.*, ef.name AS from_name, et.name AS to_name, ef.importance AS from_importance,"
            " et.importance AS to_importance, ef.entity_type AS from_type, et.entity_type AS to_type"
            " FROM relations r JOIN entities ef ON ef.id = r.from_entity_id"
            " JOIN entities et ON et.id = r.to_entity_id"
            f" WHERE r.from_entity_id IN ({ids}) OR r.to_entity_id IN ({ids})",
            [*entity_ids, *entity_ids])
        return [cast(RelationEndsRow, dict(r)) for r in rows]

    def mark_traversed(self, relation_ids: Sequence[str]) -> None:
        if not relation_ids:
            return
        self._exec(f"UPDATE relations SET strength = least(1.0, strength + 0.02), last_traversed = ?"
                   f" WHERE id IN ({marks(relation_ids)})", [iso(utc_now()), *relation_ids])

    # -- episodes -----------------------------------------------------------------------
    def add_episode(self, entity_id: str, content: str, actors: list[str], artifacts: list[str],
                    importance: float, project_id: str | None, embedding: bytes | None,
                    model: str | None, session_id: str | None = None, created_at: str | None = None) -> str:
        """``created_at`` (an ISO 8601 UTC instant) dates an imported episode; default now."""
        now = created_at or iso(utc_now())
        episode_id = new_id()
        with self.transaction():
            seq = self._insert_indexed("episodes", {
                "id": episode_id, "entity_id": entity_id, "content": content, "started_at": now,
                "actors": json.dumps(actors), "artifacts": json.dumps(artifacts), "importance": importance,
                "embedding": self._vector_param(embedding), "embedding_model": model,
                "embedding_rev": 1 if embedding else 0, "project_id": project_id,
                "origin_node": self.origin_node, "session_id": session_id, "created_at": now}, content)["seq"]
            if embedding is not None:
                self._after_commit(lambda: self._vector_added("episode", seq, embedding))
        return episode_id

    def episodes_of(self, entity_id: str, scope: Scope, limit: int) -> list[EpisodeRow]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT * FROM episodes WHERE entity_id = ? AND {cond}"
                       " ORDER BY started_at DESC LIMIT ?", (entity_id, *params, limit))
        return [episode_from(r) for r in rows]
