"""cuba_pre_compact: save what the session knows before the agent's context is compacted, and
give it back afterwards.

A snapshot holds the session's most important observations, the project's recent decisions,
its unresolved errors, rows still waiting for an embedding and the session's goals, plus a
markdown summary of all that an agent can paste into its fresh context. ``restore`` returns the
session's latest snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sessions.sessions import open_session
from cuba_memorys.storage.rows import SessionRow, SnapshotParts

KEY_OBSERVATIONS, DECISIONS, ERRORS, PENDING = 15, 10, 10, 10
NO_SESSION = "no open session: start one with cuba_jornada action=start, then snapshot before compacting"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parts(mem: Memory, client: str | None, session: SessionRow) -> SnapshotParts:
    scope = mem.scope(client)
    return {
        "key_observations": [{**o, "content": _clip(o["content"], 240)}
                             for o in mem.store.session_observations(session["id"], KEY_OBSERVATIONS)],
        "decisions": mem.store.recent_decisions(scope, DECISIONS),
        "unresolved_errors": [{**e, "message": _clip(e["message"], 160)}
                              for e in mem.store.unresolved_errors(scope, ERRORS)],
        "pending_embeddings": [{"id": r["id"], "content_preview": _clip(r["content"], 80)}
                               for r in mem.store.unembedded_observations(scope, PENDING)],
        "active_goals": session["goals"],
    }


def _markdown(session: SessionRow, parts: SnapshotParts) -> str:
    lines = [f"# Session: {session['name']} (since {session['started_at']})"]
    sections = (
        ("Goals", [f"- {g}" for g in parts["active_goals"]]),
        ("Key observations", [f"- [{o['type']}] {o['entity']}: {o['content']}" for o in parts["key_observations"]]),
        ("Decisions", [f"- {d['entity']}: {d['content']}" for d in parts["decisions"]]),
        ("Unresolved errors", [f"- {e['error_type']}: {e['message']}" for e in parts["unresolved_errors"]]),
        ("Not yet embedded (run `cuba-memorys reembed`)",
         [f"- {p['content_preview']}" for p in parts["pending_embeddings"]]),
    )
    for title, items in sections:
        if items:
            lines += ["", f"## {title}", *items]
    return "\n".join(lines)


def snapshot(mem: Memory, client: str | None) -> dict:
    session = open_session(mem, client)
    if session is None:
        return {"action": "snapshot", "session_id": None, "summary_md": "", "note": NO_SESSION}
    parts = _parts(mem, client, session)
    count = sum(n for kind, n in mem.store.session_diff(session["id"]).items() if kind != "episodes")
    saved = mem.store.save_snapshot(session["id"], mem.client(client).project_id, _markdown(session, parts),
                                    parts, count)
    return {"action": "snapshot", "snapshot_id": saved["id"], "session_id": session["id"],
            "summary_md": saved["summary_md"], **parts, "obs_count": count}


def restore(mem: Memory, client: str | None) -> dict:
    session = open_session(mem, client)
    if session is None:
        return {"action": "restore", "session_id": None, "snapshot": None, "note": NO_SESSION}
    saved = mem.store.latest_snapshot(session["id"])
    if saved is None:
        return {"action": "restore", "session_id": session["id"], "snapshot": None,
                "note": "this session has no snapshot yet: take one with action=snapshot"}
    keys = ("id", "summary_md", "key_observations", "decisions", "unresolved_errors", "pending_embeddings",
            "active_goals", "obs_count", "created_at")
    row: Mapping[str, Any] = saved  # picked by name below
    return {"action": "restore", "session_id": session["id"], "snapshot": {k: row[k] for k in keys}}
