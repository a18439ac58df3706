"""cuba_proyecto: the active project scopes what a client reads and tags what it writes.

Besides list/current/switch: stats (rows per table), rename, and merge (every row of one
project moves into another, same-name entities and recipes are merged; see
storage/sql_errors.py), both of which keep clients whose active project it was on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import ProjectRow

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
    with mem.store.bind_project(None):
        result = mem.store.merge_projects(source, target)
    _repoint_clients(mem, source["id"], target)
    moved = result["moved"]
    counts = {key: value for key, value in result.items() if key != "moved"}
    return {"action": "merge", "from": source["name"], "to": target["name"], "from_id": source["id"],
            "to_id": target["id"], "rows_moved": sum(moved.values()), "moved": moved, **counts}
