"""The review page's writes as a person meets them: which buttons the caller may use (a principal
sees the others disabled, with the grant it lacks), and what a reject did. A reject is
`cuba_eco negative` (the observation's importance drops; it stays quarantined, never searched),
which leaves no mark on the row itself, so the panel remembers its rejects (``Rejects``, while
this serve runs) and the page shows them, with each observation's importance."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cuba_memorys import locks
from cuba_memorys.server import catalog
from cuba_memorys.server.events_http import Caller
from cuba_memorys.server.panel.calls import missing_grant
from cuba_memorys.services.memory import Memory

ACTIONS = {"promote": ("cuba_eco", "promote"), "reject": ("cuba_eco", "negative"),
           "resolve": ("cuba_sync", "resolve")}  # the page's buttons and the service each runs
MERGE_ROLE = "admin"  # a near-duplicate merge (dedupe.merge) needs it on the pair's project
REMEMBERED = 1000  # rejects kept in mind; the oldest are forgotten first


def role_of(what: str) -> str:
    tool_name, action_name = ACTIONS[what]
    tool = catalog.tool(tool_name)
    action = tool.action(action_name) if tool is not None else None
    if tool is None or action is None:  # a bug in the panel, not the user's input
        raise LookupError(f"no service {tool_name} {action_name!r} in the catalogue")
    return tool.role_of(action)


def refusal(memory: Memory, caller: Caller, role: str, project_id: str | None) -> str | None:
    """None when the caller may act with ``role`` on the project, else why not (the button's title)."""
    if caller.principal is None or caller.principal.may(role, project_id):
        return None
    return missing_grant(memory, caller.principal.name, role, project_id)


def refusals(memory: Memory, caller: Caller, project_id: str | None) -> dict[str, str | None]:
    """For each review button, why the caller may not use it where the panel acts (None: it may);
    the service would refuse the same way (access.check on the active project)."""
    return {what: refusal(memory, caller, role_of(what), project_id) for what in ACTIONS}


@dataclass(frozen=True)
class Reject:
    by: str
    at: float


class Rejects:
    """The observations rejected from this panel since it started (a restart forgets them; their
    lowered importance stays in the store)."""

    def __init__(self) -> None:
        self._by_id: OrderedDict[str, Reject] = OrderedDict()
        self._lock = locks.lock("panel rejects", "bookkeeping")

    def remember(self, observation_id: str, by: str) -> None:
        with self._lock:
            self._by_id.pop(observation_id, None)
            self._by_id[observation_id] = Reject(by, time.time())
            while len(self._by_id) > REMEMBERED:
                self._by_id.popitem(last=False)

    def forget(self, observation_id: str) -> None:
        with self._lock:
            self._by_id.pop(observation_id, None)

    def known(self) -> dict[str, Reject]:
        with self._lock:
            return dict(self._by_id)


def importance_of(mem: Memory, client: str | None, ids: list[str]) -> dict[str, float]:
    """The listed observations' importance (what a reject lowers), read with the caller's reader grant."""
    return {row_id: round(float(row.get("importance") or 0.0), 3)
            for row_id, row in mem.store.fetch_rows("observation", ids).items()}


def marked(rows: list[dict[str, Any]], importance: Mapping[str, float], rejects: Mapping[str, Reject]
           ) -> list[dict[str, Any]]:
    """The quarantined observations with their importance and, when rejected here, by whom and when."""
    return [{**row, "importance": importance.get(row.get("observation_id") or ""),
             "rejected": rejects.get(row.get("observation_id") or "")} for row in rows]
