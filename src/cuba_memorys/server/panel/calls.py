"""How a panel page reaches the memory: the catalogue's service functions, behind the caller's
grants exactly as an MCP tool call (runtime.guarded: access.check, the store's bound policies,
the answer filtered), in a worker thread under the handler time limit. No internal HTTP hop."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread

from cuba_memorys import deadline
from cuba_memorys.errors import AccessDenied
from cuba_memorys.server import catalog
from cuba_memorys.server.events_http import Caller
from cuba_memorys.server.runtime import OWN_EVENTS, READS_ONLY, STOP_GRACE_SECONDS, announced, guarded
from cuba_memorys.services import access
from cuba_memorys.services.memory import Memory

PANEL_CLIENT = "panel"  # the panel is a client of its own: its active project is nobody else's


def client_of(caller: Caller) -> str:
    """The panel's client id; under principals prefixed by the principal's name, as runtime.client_of does."""
    return PANEL_CLIENT if caller.principal is None else f"{caller.principal.name}/{PANEL_CLIENT}"


def run(memory: Memory, caller: Caller, tool_name: str, action_name: str, **kwargs: Any) -> Any:
    """One service call as ``caller`` (in the calling thread). Raises the services' CubaErrors."""
    tool = catalog.tool(tool_name)
    action = tool.action(action_name) if tool is not None else None
    if tool is None or action is None:  # a bug in the panel, not the user's input
        raise LookupError(f"no service {tool_name} {action_name!r} in the catalogue")
    service = action.service if caller.principal is None else guarded(caller.principal, tool, action)
    writes = tool.role_of(action) != "reader" and (tool.name, action.name) not in READS_ONLY
    if writes and tool.name not in OWN_EVENTS:
        service = announced(tool.name, action.name, service)
    client = client_of(caller)
    memory.clients_seen[client] = time.time()
    with deadline.limit(memory.settings.handler_timeout_secs), memory.acting_for(client):
        return service(memory, client, **kwargs)


async def call(memory: Memory, caller: Caller, tool_name: str, action_name: str, **kwargs: Any) -> Any:
    """``run`` in a worker thread, given up after the handler time limit (the worker rolls back)."""
    with anyio.fail_after(memory.settings.handler_timeout_secs + STOP_GRACE_SECONDS):
        return await anyio.to_thread.run_sync(lambda: run(memory, caller, tool_name, action_name, **kwargs),
                                              abandon_on_cancel=True)


async def in_worker(fn: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


def read_as(memory: Memory, caller: Caller, fn: Any, *args: Any) -> Any:
    """A read that is no catalogue action (the graph page's layout): the principal needs reader where
    the panel acts, checked as access.check checks a tool's read, and the store's policies are bound."""
    client = client_of(caller)
    with deadline.limit(memory.settings.handler_timeout_secs), memory.acting_for(client):
        if caller.principal is None:
            return fn(memory, client, *args)
        access.check(memory, client, caller.principal, "cuba_vigia", "communities", "reader", {})
        with access.bound(memory, caller.principal):
            return fn(memory, client, *args)


def act_as(memory: Memory, caller: Caller, fn: Any, role: str, on_project: str | None, **kwargs: Any) -> Any:
    """A service call that is no catalogue action (the CLI's dedupe merge, undo): the principal
    needs ``role`` on ``on_project`` (the id of the project the rows are in), and the store's policies
    are bound, as for a tool call. A write passes ``fn`` through runtime.announced first."""
    client = client_of(caller)
    memory.clients_seen[client] = time.time()
    with deadline.limit(memory.settings.handler_timeout_secs), memory.acting_for(client):
        if caller.principal is None:
            return fn(memory, client, **kwargs)
        if not caller.principal.may(role, on_project):
            raise AccessDenied(missing_grant(memory, caller.principal.name, role, on_project))
        with access.bound(memory, caller.principal):
            return fn(memory, client, **kwargs)


def missing_grant(memory: Memory, name: str, role: str, project_id: str | None) -> str:
    """Why a principal may not do this, with the command that would let it (the CLI's verb is
    `principal`, its grant is PROJECT=ROLE; '*' for the rows of no project)."""
    project = next((p["name"] for p in memory.store.list_projects() if p["id"] == project_id), access.EVERY_PROJECT)
    return (f"principal '{name}' needs {role} on project '{project}' for this; the operator grants it with"
            f" `cuba-memorys principal grant {name} {project}={role}`.")
