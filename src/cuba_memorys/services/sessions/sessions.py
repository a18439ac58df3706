"""cuba_jornada: work sessions, one open per MCP client.

A session names what the agent is doing (name, goals) and, optionally, binds a project. Rows
written while it is open carry its id, so `end` can say what the session added (its diff by
observation type) and `cuba_faro` can boost results about the first goal and point out what
others wrote since the session started. Sessions are per client (the Mcp-Client-Id header over
HTTP, else the client's declared name): two agents on one `serve` daemon never share one.

Where the original is silent: starting a session while one is open ends the open one as
`abandoned` (nothing is lost; it is reported as ``previous_session``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cuba_memorys.models import MAX_NAME_CHARS
from cuba_memorys.services import reminders, validate
from cuba_memorys.services.graph import projects
from cuba_memorys.services.memory import DEFAULT_CLIENT, Memory
from cuba_memorys.storage.rows import SessionRow

OUTCOMES = ("success", "partial", "failed", "abandoned")
LIST_LIMIT = 20
COMPACT_AFTER_SECONDS, COMPACT_AFTER_ROWS = 2 * 3600, 100  # the original's compaction hint
PEER_NOTICES = 20  # open notices of sync peers shown at start (cuba_sync notify; services/sync/peers.py)


def _client(client: str | None) -> str:
    return client or DEFAULT_CLIENT


def open_session(mem: Memory, client: str | None) -> SessionRow | None:
    """The client's open session, or None (also when it was ended elsewhere)."""
    session_id = mem.client(client).session_id
    session = mem.store.get_session(session_id) if session_id else None
    if session is None or session["ended_at"] is not None:
        if session_id:
            mem.set_session(client, None)
        return None
    return session


def start(mem: Memory, client: str | None, name: object = None, goals: object = None,
          project: object = None, allow_secret: bool = False) -> dict:
    name = validate.optional_text("name", name, high=MAX_NAME_CHARS) or "unnamed"
    goals = validate.string_list("goals", goals)
    for field, value in (("name", name), *((f"goals[{i}]", g) for i, g in enumerate(goals))):
        validate.no_secret(field, value, allow_secret)
    if project is not None:
        projects.switch(mem, client, project)
    # The open session may be in the project the caller just left, and the new one belongs to the
    # project it switched to: the call's row-level binding (PostgreSQL) was the old project's, so
    # this runs bound to none; the queries' own scope conditions say what is read.
    with mem.store.bind_project(None), mem.store.transaction():
        still_open = open_session(mem, client)
        if still_open:
            mem.store.end_session(still_open["id"], "abandoned", None)
        previous = mem.store.last_ended_session(_client(client), mem.scope(client))
        state = mem.client(client)
        session = mem.store.start_session(name, goals, _client(client), state.project_id)
        mem.set_session(client, session["id"])
    response: dict[str, Any] = {"action": "started", "session": {
        "id": session["id"], "session_name": session["name"], "goals": goals,
        "started_at": session["started_at"], "project_id": state.project_id, "project_name": state.project_name}}
    if previous:
        response["previous_session"] = {"name": previous["name"], "summary": previous["summary"],
                                        "outcome": previous["outcome"]}
    notices = mem.store.open_peer_notices(PEER_NOTICES)  # what peers announced and is not imported yet
    if notices:
        response["peer_notices"] = notices
    return reminders.attach(mem, client, "on_session_start", [state.project_name or "", name, *goals], response)


def end(mem: Memory, client: str | None, outcome: object = None, summary: object = None,
        allow_secret: bool = False) -> dict:
    outcome = validate.choice("outcome", outcome, OUTCOMES, default="success")
    summary = validate.optional_text("summary", summary, high=10_000)
    if summary:
        validate.no_secret("summary", summary, allow_secret)
    session = open_session(mem, client)
    if session is None:
        return {"action": "ended", "updated": False,
                "reason": "you have no open session; start one with cuba_jornada action=start"}
    updated = mem.store.end_session(session["id"], outcome, summary)
    mem.set_session(client, None)
    return {"action": "ended", "outcome": outcome, "updated": updated,
            "session_diff": mem.store.session_diff(session["id"])}


def list_all(mem: Memory, client: str | None) -> dict:
    sessions = [{"id": s["id"], "name": s["name"], "goals": s["goals"], "outcome": s["outcome"],
                 "summary": s["summary"], "started_at": s["started_at"], "ended_at": s["ended_at"],
                 "project": s.get("project_name"), "client_id": s["client_id"]}
                for s in mem.store.list_sessions(mem.scope(client), LIST_LIMIT)]
    return {"action": "list", "sessions": sessions, "count": len(sessions)}


def current(mem: Memory, client: str | None) -> dict:
    session = open_session(mem, client)
    if session is None:
        return {"action": "current", "session": None, "compaction_hint": False, "last_snapshot": None}
    written = sum(n for kind, n in mem.store.session_diff(session["id"]).items() if kind != "episodes")
    age = (datetime.now(UTC) - datetime.fromisoformat(session["started_at"])).total_seconds()
    return {
        "action": "current",
        "session": {"id": session["id"], "name": session["name"], "goals": session["goals"],
                    "started_at": session["started_at"], "obs_count_in_session": written},
        "compaction_hint": age > COMPACT_AFTER_SECONDS or written > COMPACT_AFTER_ROWS,
        "last_snapshot": _last_snapshot(mem, session["id"]),
    }


def _last_snapshot(mem: Memory, session_id: str) -> dict | None:
    saved = mem.store.latest_snapshot(session_id)
    return {"id": saved["id"], "created_at": saved["created_at"]} if saved else None
