"""Principals and grants: who may read, write or administer which project.

A daemon shared by a team (``serve`` with ``CUBA_TOKENS_FILE``) maps each bearer token to a
principal; a principal holds grants of reader, writer or admin, each on one project or on every
project ('*', which also covers the rows of no project). Every tool call is checked here before
its service runs (server/runtime.py): reads need reader, writes writer, and renaming, merging
or deleting need admin, on the project the call acts in (the caller's active project) or, for
cuba_proyecto, on the projects it names. On PostgreSQL the same project sets are bound for the
restrictive row-level policies (storage/postgres/migrations/0009_grants.sql), a second wall
under this one. Without principals (stdio, or serve with no token file) nothing is checked:
one local user, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from cuba_memorys.errors import AccessDenied, InvalidInput, NotFound
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory

ROLES = ("reader", "writer", "admin")
RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}
EVERY_PROJECT = "*"


@dataclass(frozen=True)
class Principal:
    name: str
    grants: Mapping[str | None, str]  # project id (None: every project) -> role

    def rank_on(self, project_id: str | None) -> int:
        """The principal's rank on a project: its grant there or its '*' grant, the higher."""
        here = RANK.get(self.grants.get(project_id, ""), 0) if project_id is not None else 0
        return max(here, RANK.get(self.grants.get(None, ""), 0))

    def may(self, role: str, project_id: str | None) -> bool:
        return self.rank_on(project_id) >= RANK[role]

    def projects(self, role: str) -> frozenset[str]:
        """The project ids it may ``role`` ({'*'} with a '*' grant of that role)."""
        if RANK.get(self.grants.get(None, ""), 0) >= RANK[role]:
            return frozenset({EVERY_PROJECT})
        return frozenset(p for p, granted in self.grants.items() if p is not None and RANK[granted] >= RANK[role])


def load(mem: Memory, name: str) -> Principal:
    return Principal(name, {g["project_id"]: g["role"] for g in mem.store.grants_of(name)})


def bound(mem: Memory, principal: Principal | None) -> AbstractContextManager[Any]:
    """Bind what the principal may read and write for the store's own policies (PostgreSQL)."""
    if principal is None:
        return mem.store.bind_access(None, None)
    return mem.store.bind_access(principal.projects("reader"), principal.projects("writer"))


def check(mem: Memory, client: str | None, principal: Principal, tool: str, action: str, role: str,
          args: Mapping[str, Any]) -> None:
    """Refuse the call unless ``principal`` holds ``role`` where it acts (AccessDenied)."""
    if tool == "cuba_whoami":  # the caller's own identity: what to fix when other calls are refused
        return
    if tool == "cuba_proyecto" and action in ("switch", "rename", "merge", "backfill", "stats", "list", "current"):
        _check_projects(mem, client, principal, action, args)
        return
    if tool == "cuba_jornada" and action == "start" and args.get("project"):
        _check_switch(mem, principal, args["project"])
    project_id = mem.client(client).project_id
    if not principal.may(role, project_id):
        raise AccessDenied(_denied(principal, role, mem.client(client).project_name, project_id is None))


def _check_projects(mem: Memory, client: str | None, principal: Principal, action: str,
                    args: Mapping[str, Any]) -> None:
    if action == "switch":
        _check_switch(mem, principal, args.get("name"))
    elif action in ("rename", "merge"):
        for param in ("name", "to") if action == "merge" else ("name",):
            _require_on_named(mem, principal, "admin", param, args.get(param))
    elif action == "backfill":
        # It takes the rows of no project, which only a '*' grant covers, into the named one.
        if not principal.may("admin", None):
            raise AccessDenied(f"{principal.name} may not backfill: moving the rows of no project needs a '*'"
                               " grant of admin.", hint=_grants_hint(principal, mem))
        _require_on_named(mem, principal, "admin", "name", args.get("name"))
    elif action == "stats" and args.get("name"):
        _require_on_named(mem, principal, "reader", "name", args.get("name"))


def _check_switch(mem: Memory, principal: Principal, name: object) -> None:
    value = validate.text("name", name).strip()
    if value == EVERY_PROJECT:
        if not principal.may("reader", None):
            raise AccessDenied(f"{principal.name} may not clear its project: it has no '*' grant, so it always"
                               " works in a project it was granted.")
        return
    project = mem.store.get_project(value)
    if project is None:
        if not principal.may("writer", None):
            raise AccessDenied(f"{principal.name} may not create project '{value}': creating a project needs"
                               " a '*' grant of writer or admin.", hint=_grants_hint(principal, mem))
        return
    if not principal.may("reader", project["id"]):
        raise AccessDenied(f"{principal.name} has no grant on project '{value}'.", hint=_grants_hint(principal, mem))


def _require_on_named(mem: Memory, principal: Principal, role: str, param: str, name: object) -> None:
    value = validate.text(param, name).strip()
    project = mem.store.get_project(value)
    if project is None:  # say "not found" only to someone who could see it
        if principal.may("reader", None):
            raise NotFound(f"Project '{value}' not found.", hint="cuba_proyecto action=list shows the projects.")
        raise AccessDenied(f"{principal.name} has no grant on project '{value}'.")
    if not principal.may(role, project["id"]):
        raise AccessDenied(f"{principal.name} needs {role} on project '{value}' for this",
                           hint=_grants_hint(principal, mem))


def _denied(principal: Principal, role: str, project: str | None, unscoped: bool) -> str:
    if unscoped:
        return (f"{principal.name} has no active project and no '*' grant of {role}: switch to a project it was"
                " granted (cuba_proyecto action=switch).")
    return f"{principal.name} needs {role} on project '{project}' for this call."


def _grants_hint(principal: Principal, mem: Memory) -> str:
    names = sorted(g["project"] or EVERY_PROJECT for g in mem.store.grants_of(principal.name))
    return f"Its grants: {', '.join(names) or 'none'} (cuba-memorys principal list)."


def filter_answer(principal: Principal, tool: str, action: str, answer: Any) -> Any:
    """What a principal may see of an answer that lists projects: only its granted ones."""
    if tool == "cuba_proyecto" and action == "list" and isinstance(answer, dict):
        answer["projects"] = [p for p in answer["projects"] if principal.may("reader", p["id"])]
        answer["count"] = len(answer["projects"])
    return answer


def parse_grant(text: str) -> tuple[str, str]:
    """``PROJECT=ROLE`` (``*=reader`` for every project) as (project, role)."""
    project, sep, role = text.partition("=")
    if not sep or not project.strip() or role.strip() not in ROLES:
        raise InvalidInput("--grant", f"{text!r} is not PROJECT=ROLE", f"ROLE one of {', '.join(ROLES)};"
                                                                      " PROJECT a name, or * for every project")
    return project.strip(), role.strip()
