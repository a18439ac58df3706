"""cuba_proyecto: the active project scopes what a client reads and tags what it writes."""

from __future__ import annotations

from ..models import MAX_NAME_CHARS
from . import validate
from .memory import Memory

# The original's row-level-security rule: a session whose project is '*' sees every row.
ALL_PROJECTS = "*"


def list_all(mem: Memory, client: str | None) -> dict:
    projects = mem.store.list_projects()
    active = mem.client(client).project_id
    for p in projects:
        p["active"] = p["id"] == active
    return {"action": "list", "projects": projects, "count": len(projects)}


def current(mem: Memory, client: str | None) -> dict:
    state = mem.client(client)
    project = {"id": state.project_id, "name": state.project_name} if state.project_id else None
    return {"action": "current", "project": project}


def switch(mem: Memory, client: str | None, name: object) -> dict:
    name = validate.text("name", name, high=MAX_NAME_CHARS).strip()
    if name == ALL_PROJECTS:
        mem.set_project(client, None)
        return {"action": "switch", "project": None, "bound_to_session": False,
                "note": "No active project: every row is visible and new rows are unscoped."}
    project = mem.store.get_or_create_project(name)
    mem.set_project(client, project)
    return {"action": "switch", "project": {"id": project["id"], "name": project["name"]},
            "bound_to_session": False}
