"""cuba_proyecto: the active project scopes what a client reads and tags what it writes.

Besides list/current/switch: stats (rows per table), rename, and merge (every row of one
project moves into another, same-name entities and recipes are merged; see
storage/sql_errors.py), both of which keep clients whose active project it was on it; and
backfill (0.25): the rows of no project into one, with an undo file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cuba_memorys.errors import Conflict, InvalidInput, NotFound
from cuba_memorys.services import audit, validate
from cuba_memorys.services.agents import artifacts
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import ProjectRow
from cuba_memorys.storage.sql.aliases import alias_id

# The original's row-level-security rule: a session whose project is '*' sees every row.
ALL_PROJECTS = "*"


def list_all(mem: Memory, client: str | None) -> dict:
    active = mem.client(client).project_id
    projects = [{**p, "active": p["id"] == active} for p in mem.store.list_projects()]
    return {"action": "list", "projects": projects, "count": len(projects)}


def current(mem: Memory, client: str | None) -> dict:
    state = mem.client(client)
    project = {"id": state.project_id, "name": state.project_name} if state.project_id else None
    return {"action": "current", "project": project}


def switch(mem: Memory, client: str | None, name: object) -> dict:
    name = validate.name("name", name).strip()
    if name == ALL_PROJECTS:
        mem.set_project(client, None)
        return {"action": "switch", "project": None, "bound_to_session": False,
                "note": "No active project: every row is visible and new rows are unscoped."}
    project = mem.store.get_or_create_project(name)
    mem.set_project(client, project)
    return {"action": "switch", "project": {"id": project["id"], "name": project["name"]},
            "bound_to_session": False}


# -- stats, rename, merge --------------------------------------------------------------------
def _project_name(param: str, value: object) -> str:
    name = validate.name(param, value).strip()
    if name == ALL_PROJECTS:
        raise InvalidInput(param, "'*' means every project, not one", "a project name")
    return name


def _existing(mem: Memory, param: str, value: object) -> ProjectRow:
    name = _project_name(param, value)
    project = mem.store.get_project(name)
    if project is None:
        raise NotFound(f"Project '{name}' not found.", hint="cuba_proyecto action=list shows the projects.")
    return project


def _repoint_clients(mem: Memory, old_id: str, project: Mapping[str, Any]) -> None:
    """Clients keep their active project in memory (Memory.client); after a rename or merge
    the ones on ``old_id`` follow it. The stored copies (meta) were updated with the rows."""
    with mem._lock:
        states = list(mem._clients.values())
    for state in states:
        if state.project_id == old_id:
            state.project_id, state.project_name = project["id"], project["name"]


def stats(mem: Memory, client: str | None, name: object = None) -> dict:
    """Rows of the named project (default: the active one) in every table that has a project."""
    if name is None or name == "":
        active = mem.client(client)
        if active.project_id is None:
            return {"action": "stats", "project": None,
                    "note": "No active project: name one, or switch to one first."}
        named = mem.store.get_project(active.project_name) if active.project_name is not None else None
        project: Mapping[str, Any] = named or {"id": active.project_id, "name": active.project_name}
    else:
        project = _existing(mem, "name", name)
    # Counting another project than the bound one: row-level security (PostgreSQL) would hide
    # its rows, so the counts run bound to no project. Only numbers leave this block.
    with mem.store.bind_project(None):
        counts = mem.store.project_counts(project["id"])
    return {"action": "stats", "project_id": project["id"], "project": project["name"], **counts,
            "created_at": project.get("created_at"), "last_active_at": project.get("last_active_at")}


def rename(mem: Memory, client: str | None, name: object, to: object) -> dict:
    project = _existing(mem, "name", name)
    new = _project_name("to", to)
    if new == project["name"]:
        raise InvalidInput("to", f"is already the project's name ('{new}')")
    if mem.store.get_project(new) is not None:
        raise InvalidInput("to", f"a project named '{new}' already exists",
                           "a free name (to combine the two projects use action=merge)")
    # Unbound: the errors relabelled here may belong to a project other than the caller's.
    with mem.store.bind_project(None):
        mem.store.rename_project(project["id"], project["name"], new)
    _repoint_clients(mem, project["id"], {"id": project["id"], "name": new})
    return {"action": "rename", "from": project["name"], "to": new, "renamed": True, "project_id": project["id"]}


def merge(mem: Memory, client: str | None, name: object, to: object) -> dict:
    """Move every row of project ``name`` into project ``to`` and delete ``name``."""
    source = _existing(mem, "name", name)
    target = _existing(mem, "to", to)
    if source["id"] == target["id"]:
        raise InvalidInput("to", "is the project being merged", "another existing project")
    # Row-level security (PostgreSQL) would let the caller's bound project see and update only
    # its own rows, and refuse moving a row to another project: the merge runs bound to no
    # project, in one transaction, so it moves every row of both or nothing.
    # Two artifacts at one path cannot both move into the target: refused, naming the paths, in
    # the merge's own transaction (the check and the move see the same rows).
    with mem.store.bind_project(None), mem.store.transaction():
        artifacts.refuse_path_collisions(mem, source, target)
        result = mem.store.merge_projects(source, target)
    _repoint_clients(mem, source["id"], target)
    moved = result["moved"]
    counts = {key: value for key, value in result.items() if key != "moved"}
    return {"action": "merge", "from": source["name"], "to": target["name"], "from_id": source["id"],
            "to_id": target["id"], "rows_moved": sum(moved.values()), "moved": moved, **counts}


# -- backfill ----------------------------------------------------------------------------------
def backfill(mem: Memory, client: str | None, name: object = None, confirm: object = None) -> dict:
    """Give every row of no project (every table with a project but grants, where no project
    means every project) the project ``name``: a plan (rows per table) unless ``confirm``.

    An entity of no project whose name the project already uses is merged into the project's
    (as a project merge does; its name becomes an alias). A recipe name both use is refused:
    recipes have no undo record, and so is an entity of no project that rows of another project
    hang on (moving it would hide them from their project). The real run, in one transaction,
    moves the rows, writes one undo file (the merged entities' rows, and the keys of every row
    moved, which `cuba-memorys undo FILE` moves back; removed again if the transaction fails)
    and is audited."""
    project = _existing(mem, "name", name)
    apply = validate.flag("confirm", confirm, False)
    base = {"action": "backfill", "project": project["name"], "project_id": project["id"]}
    # Bound to no project: the rows moved belong to none, and RLS (PostgreSQL) would hide them.
    with mem.store.bind_project(None):
        if not apply:
            entities = _collisions(mem, project)
            counts = mem.store.unscoped_counts()
            return {**base, "dry_run": True, "would_move": counts, "rows": sum(counts.values()),
                    "entities_to_merge": [n for _, _, n in entities],
                    "hint": "Run again with confirm=true to move them; an undo file records the move and the"
                            " change is audited."}
        path: Path | None = None
        try:
            with mem.store.transaction():  # the checks see the rows the move moves
                entities = _collisions(mem, project)
                moved, path = _backfilled(mem, project["id"], entities)
                merged = [n for _, _, n in entities]
                audit_id = audit.record(mem, client, "project.backfill", {
                    "project_id": project["id"], "moved": {t: len(ids) for t, ids in moved.items()},
                    "entities_merged": merged, "undo_file": path.name})
        except BaseException:  # nothing moved (rolled back): an undo file would undo nothing
            if path is not None:
                path.unlink(missing_ok=True)
            raise
    return {**base, "dry_run": False, "moved": {t: len(ids) for t, ids in moved.items()},
            "rows_moved": sum(len(ids) for ids in moved.values()), "entities_merged": merged,
            "undo_file": str(path), "audit_id": audit_id}


def _collisions(mem: Memory, project: ProjectRow) -> list[tuple[str, str, str]]:
    """The entities of no project whose name the project uses (they are merged into its own),
    after refusing what cannot be combined: artifacts at one path, recipes of one name."""
    artifacts.refuse_path_collisions(mem, None, project)
    shared = mem.store.unscoped_entities_shared(project["id"])
    if shared:
        raise Conflict(f"refusing to backfill project '{project['name']}': entities of no project hold rows of other"
                       f" projects, which would be hidden from them: {', '.join(shared[:20])}"
                       f"{' …' if len(shared) > 20 else ''}. Nothing was moved.",
                       hint="Leave them unscoped, or move those rows first (cuba_proyecto merge, or write them to"
                            " the other project's own entity), then backfill again.")
    collisions = mem.store.unscoped_name_collisions(project["id"])
    if collisions["procedures"]:
        names = ", ".join(sorted({n for _, _, n in collisions["procedures"]}))
        raise Conflict(f"refusing to backfill project '{project['name']}': recipes of no project share a name with"
                       f" its own: {names}. Nothing was moved.",
                       hint="Rename or delete one of each pair (cuba_receta), then backfill again.")
    return collisions["entities"]


def _backfilled(mem: Memory, project_id: str, entities: list[tuple[str, str, str]]) -> tuple[dict, Path]:
    """Merge the colliding entities, move every row of no project, then write the undo file:
    the merged entities' rows as they were before (snapshot first), and the moved keys."""
    losers = [loser for loser, _, _ in entities]
    created = [("entity_aliases", "alias_id", [alias_id(winner, n) for _, winner, n in entities
                                                if n not in mem.store.aliases_of(winner)])]
    before = undo.snapshot(mem, [
        ("entities", "id", losers), ("observations", "entity_id", losers), ("episodes", "entity_id", losers),
        ("facts", "subject_entity_id", losers), ("relations", "from_entity_id", losers),
        ("relations", "to_entity_id", losers), ("entity_aliases", "entity_id", losers)]) if losers else []
    for loser, winner, _ in entities:
        mem.store.merge_entity(loser, winner)
    moved = mem.store.backfill_project(project_id)
    keys = [(table, mem.store.row_key(table), ids, None, project_id) for table, ids in moved.items() if ids]
    path = undo.write(mem, "backfill", before, created if losers else [], moved=keys)
    return moved, path
