"""Decisions move from the entity ``decisions`` (where versions before issue 32 put them) to
``architecture_decisions``, the original's name: one per project, type concept (original-0.27.md:
"each project gets its own `architecture_decisions` entity"), so a bundle from the original and
``cuba_alma get architecture_decisions`` meet the decisions cuba_decreto records here.

:func:`migrate` runs when a memory opens (registered in services/memory.py's ROW_UPGRADES) and
after each sync import (a bundle of a machine still
on the old version can bring a ``decisions`` entity back). For each entity named ``decisions``
that holds a decision observation:

- no ``architecture_decisions`` in its project: renamed in place. Its id, rows and edges stay,
  so another machine's bundle naming that id still meets it;
- else merged into that one (services/graph/aliases.merge_entities: rows, edges and aliases move).

Either way ``decisions`` stays an alias of the entity, so old calls (``cuba_cronica list
entity_name=decisions``) still find them; an undo file is written first (`cuba-memorys undo FILE`
goes back) and the change is audited as ``memory.decisions_migrated``. An entity named
``decisions`` holding no decision is someone's own, and is left alone.
"""

from __future__ import annotations

from typing import Any

from cuba_memorys.services import audit
from cuba_memorys.services.graph import aliases
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import ROW_UPGRADES, Memory
from cuba_memorys.storage.rows import EntityNameRow
from cuba_memorys.storage.sql.aliases import alias_id

DECISIONS_ENTITY = "architecture_decisions"  # cuba_decreto's entity (decisions.py takes the name from here)
LEGACY_DECISIONS_ENTITY = "decisions"  # where versions before issue 32 kept them (now an alias)
ACTION = "decisions_migrated"  # the undo file's action; audited as memory.<ACTION>
CLIENT = "cuba-memorys/upgrade"  # the client the events are recorded for (see _client)


def migrate(mem: Memory) -> list[dict[str, Any]]:
    """Move every legacy ``decisions`` entity (see the module docstring); what was done, one
    entry per entity (none on a store that has no such entity: one indexed lookup)."""
    if mem.store.read_only:
        return []  # a standby: the primary migrates, and its rows arrive here
    done = []
    # Every project's entity is looked at: bound to none, so row-level security (PostgreSQL)
    # hides none of them.
    with mem.store.bind_project(None), mem.store.bind_access(None, None):
        for legacy in mem.store.entities_named_holding(LEGACY_DECISIONS_ENTITY, "decision"):
            moved = _migrate_one(mem, legacy)
            if moved is not None:
                done.append(moved)
    return done


def _client(mem: Memory, project_id: str | None) -> str:
    """A client of the server's own whose active project is the entity's, so each event is filed
    under the project whose rows it changed (where that project's audit tail shows it), not under
    whichever project a real client chose last. Held in memory only: nothing is stored for it."""
    key = f"{CLIENT}:{project_id or '*'}"
    mem.client(key).project_id = project_id
    return key


def _migrate_one(mem: Memory, legacy: EntityNameRow) -> dict[str, Any] | None:
    client = _client(mem, legacy["project_id"])
    with mem.store.transaction():
        now = mem.store.get_entity_by_id(legacy["id"])
        if now is None or now.name != LEGACY_DECISIONS_ENTITY:
            return None  # another process migrated it meanwhile
        target = mem.store.sync_entity_named(DECISIONS_ENTITY, legacy["project_id"])
        if target is None:
            return _rename(mem, client, legacy)
        winner: EntityNameRow = {"id": target["id"], "name": target["name"], "entity_type": target["entity_type"],
                                 "project_id": target["project_id"], "observation_count": 0}
        merged = aliases.merge_entities(mem, client, legacy, winner, action=ACTION)
        return {"entity_id": winner["id"], "project_id": legacy["project_id"], "how": "merged",
                "merged_id": legacy["id"], "undo_file": merged["undo_file"]}


def _rename(mem: Memory, client: str, legacy: EntityNameRow) -> dict[str, Any]:
    """Inside the caller's transaction: the undo file (the entity as it is, the alias to remove),
    the rename, the alias and the audit event."""
    entity_id, project_id = legacy["id"], legacy["project_id"]
    had_alias = LEGACY_DECISIONS_ENTITY in mem.store.aliases_of(entity_id)
    created = [] if had_alias else [("entity_aliases", "alias_id", [alias_id(entity_id, LEGACY_DECISIONS_ENTITY)])]
    path = undo.save(mem, ACTION, [("entities", "id", [entity_id])], created)
    try:
        mem.store.rename_entity(entity_id, DECISIONS_ENTITY)
        mem.store.add_alias(entity_id, LEGACY_DECISIONS_ENTITY, project_id)
        audit.record(mem, client, f"memory.{ACTION}", {
            "entity_id": entity_id, "project_id": project_id, "from": LEGACY_DECISIONS_ENTITY,
            "to": DECISIONS_ENTITY, "how": "renamed", "undo_file": path.name})
    except BaseException:
        path.unlink(missing_ok=True)  # rolled back: an undo file would undo nothing
        raise
    return {"entity_id": entity_id, "project_id": project_id, "how": "renamed", "undo_file": str(path)}


ROW_UPGRADES.append(migrate)  # every memory that opens (services/memory.py)
