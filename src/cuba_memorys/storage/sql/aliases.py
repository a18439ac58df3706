"""Shared SQL of entity aliases and of merging one entity into another (dedupe, spec §4h)."""

from __future__ import annotations

import uuid
from typing import cast

from cuba_memorys.errors import StorageError
from cuba_memorys.models import Entity, Scope, iso, utc_now
from cuba_memorys.storage.rows import EntityMerge, EntityNameRow
from cuba_memorys.storage.sql.common import SqlBase, entity_from, scope_sql

_ALIAS_NAMESPACE = uuid.UUID("6c1b9e0a-3f51-4f7e-9a57-0cba0a11a5e5")


def alias_id(entity_id: str, alias_text: str) -> str:
    """The id of an entity's alias, derived from the pair (unique per entity and text): an undo
    file written before a merge can name the alias row the merge is about to create."""
    return str(uuid.uuid5(_ALIAS_NAMESPACE, f"{entity_id}\x1f{alias_text}"))


class SqlAliases(SqlBase):
    """Mixed into SqlStore."""

    def add_alias(self, entity_id: str, alias_text: str, project_id: str | None) -> bool:
        row = self._one("INSERT INTO entity_aliases(alias_id, entity_id, alias_text, language_code, project_id,"
                        " created_at) VALUES (?, ?, ?, 'es', ?, ?) ON CONFLICT DO NOTHING RETURNING alias_id",
                        (alias_id(entity_id, alias_text), entity_id, alias_text, project_id, iso(utc_now())))
        return row is not None

    def entity_by_alias(self, alias_text: str, scope: Scope) -> Entity | None:
        """The visible entity known by that exact alias, preferring the active project's own."""
        cond, params = scope_sql(scope, "e.project_id")
        row = self._one(f"SELECT e.* FROM entity_aliases a JOIN entities e ON e.id = a.entity_id"
                        f" WHERE a.alias_text = ? AND {cond} ORDER BY e.project_id IS NULL, a.created_at, e.seq"
                        " LIMIT 1", (alias_text, *params))
        return entity_from(row) if row else None

    def aliases_of(self, entity_id: str) -> list[str]:
        return [r[0] for r in self._q("SELECT alias_text FROM entity_aliases WHERE entity_id = ?"
                                      " ORDER BY created_at, alias_text", (entity_id,))]

    def entity_names(self, scope: Scope) -> list[EntityNameRow]:
        """Every visible entity with its live observation count, oldest first (dedupe breaks
        ties by that order)."""
        cond, params = scope_sql(scope, "e.project_id")
        rows = self._q("SELECT e.id, e.name, e.entity_type, e.project_id, (SELECT count(*) FROM observations o"
                       " WHERE o.entity_id = e.id AND o.observation_type != 'superseded') AS observation_count"
                       f" FROM entities e WHERE {cond} ORDER BY e.created_at, e.seq", params)
        return [cast(EntityNameRow, dict(r)) for r in rows]

    def entities_named_holding(self, name: str, observation_type: str) -> list[EntityNameRow]:
        """Every entity of that exact name (any project) holding an observation of that type,
        with its live observation count, oldest first: the name's unique index finds them, so
        asking on every open costs one lookup (services/workflow/legacy_decisions.py)."""
        rows = self._q("SELECT e.id, e.name, e.entity_type, e.project_id, (SELECT count(*) FROM observations o"
                       " WHERE o.entity_id = e.id AND o.observation_type != 'superseded') AS observation_count"
                       " FROM entities e WHERE e.name = ? AND EXISTS (SELECT 1 FROM observations o"
                       " WHERE o.entity_id = e.id AND o.observation_type = ?) ORDER BY e.created_at, e.seq",
                       (name, observation_type))
        return [cast(EntityNameRow, dict(r)) for r in rows]

    def merge_entity(self, loser_id: str, winner_id: str) -> EntityMerge:
        """Move everything of ``loser`` onto ``winner`` and delete ``loser``, in one transaction:
        observations, episodes and facts' subjects move; edges are redirected unless that
        would duplicate one the winner has or join it to itself (then the loser's goes);
        the loser's name becomes an alias of the winner and its own aliases follow."""
        with self.transaction():
            if loser_id == winner_id:
                raise StorageError("merge: an entity cannot be merged into itself")
            loser, winner = self._merge_end(loser_id), self._merge_end(winner_id)
            moved = {t: self._exec(f"UPDATE {t} SET {c} = ? WHERE {c} = ?", (winner_id, loser_id)).rowcount
                     for t, c in (("observations", "entity_id"), ("episodes", "entity_id"),
                                  ("facts", "subject_entity_id"))}
            relations_moved, relations_dropped = self._redirect_edges(loser_id, winner_id)
            aliases = int(self.add_alias(winner_id, loser["name"], winner["project_id"]))
            aliases += self._repoint_aliases(loser_id, winner_id)
            self._exec("DELETE FROM entities WHERE id = ?", (loser_id,))
        return {"observations": moved["observations"], "episodes": moved["episodes"], "facts": moved["facts"],
                "relations_moved": relations_moved, "relations_dropped": relations_dropped, "aliases": aliases}

    def _merge_end(self, entity_id: str) -> dict:
        row = self._one("SELECT id, name, project_id FROM entities WHERE id = ?", (entity_id,))
        if row is None:
            raise StorageError(f"merge: no entity has id {entity_id}")
        return dict(row)

    def _redirect_edges(self, loser: str, winner: str) -> tuple[int, int]:
        moved = dropped = 0
        rows = self._q("SELECT id, from_entity_id, to_entity_id, relation_type FROM relations"
                       " WHERE from_entity_id = ? OR to_entity_id = ? ORDER BY created_at, id", (loser, loser))
        for rel_id, a, b, kind in rows:
            a, b = (winner if a == loser else a), (winner if b == loser else b)
            twin = self._one("SELECT id FROM relations WHERE from_entity_id = ? AND to_entity_id = ?"
                             " AND relation_type = ? AND id != ?", (a, b, kind, rel_id))
            if a == b or twin is not None:
                self._exec("DELETE FROM relations WHERE id = ?", (rel_id,))
                dropped += 1
            else:
                self._exec("UPDATE relations SET from_entity_id = ?, to_entity_id = ? WHERE id = ?", (a, b, rel_id))
                moved += 1
        return moved, dropped

    def _repoint_aliases(self, loser: str, winner: str) -> int:
        """The loser's aliases become the winner's; one the winner already has goes."""
        kept = set(self.aliases_of(winner))
        moved = 0
        for alias, text in self._q("SELECT alias_id, alias_text FROM entity_aliases WHERE entity_id = ?", (loser,)):
            if text in kept:
                self._exec("DELETE FROM entity_aliases WHERE alias_id = ?", (alias,))
            else:
                self._exec("UPDATE entity_aliases SET entity_id = ? WHERE alias_id = ?", (winner, alias))
                kept.add(text)
                moved += 1
        return moved
