"""cuba_pizarra: a scratchpad of short-lived notes (working memory) with a time to live.

Whose notes: the caller's. Entries belong to the client (the Mcp-Client-Id header over HTTP,
else the client's name) and, while it has a work session open (cuba_jornada), to that session:
a new session starts with a clean scratchpad. Like every other row, an entry also carries the active
project, so switching projects shows that project's notes (plus unscoped ones).

Expiry: an entry past its ``expires_at`` is never returned, and every write and read first
deletes all expired entries (of every client: nobody can read them again).
"""

from __future__ import annotations

from datetime import timedelta

from cuba_memorys.models import MAX_NAME_CHARS, iso, utc_now
from cuba_memorys.services import validate
from cuba_memorys.services.memory import DEFAULT_CLIENT, Memory

DEFAULT_TTL_SECONDS = 3600
# Working memory is for the task at hand; a year also keeps expires_at a valid date.
MAX_TTL_SECONDS = 365 * 24 * 3600
READ_LIMIT = 100


def _owner(mem: Memory, client: str | None) -> tuple[str, str | None]:
    """(client id, the client's open session or None): entries belong to the client, and to its
    session while one is open."""
    return client or DEFAULT_CLIENT, mem.client(client).session_id


def _tag(tag: object) -> str | None:
    value = validate.optional_text("tag", tag, high=MAX_NAME_CHARS)
    return value.strip() if value else None


def _purge(mem: Memory) -> str:
    now = iso(utc_now())
    mem.store.purge_expired_working_memory(now)
    return now


def write(mem: Memory, client: str | None, *, content: object, tag: object = None,
          ttl_seconds: object = None, allow_secret: bool = False) -> dict:
    content = validate.text("content", content)
    tag = _tag(tag)
    ttl = validate.int_range("ttl_seconds", ttl_seconds, 1, 2**63, DEFAULT_TTL_SECONDS)  # must be > 0
    clamps = validate.Clamps()
    ttl = clamps.integer("ttl_seconds", ttl, 1, MAX_TTL_SECONDS, DEFAULT_TTL_SECONDS)  # a year at most
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    validate.no_secret("content", content, allow_secret)
    if tag is not None:
        validate.no_secret("tag", tag, allow_secret)
    client_id, session_id = _owner(mem, client)
    with mem.store.transaction():
        _purge(mem)
        now = utc_now()
        row = mem.store.add_working_memory(client_id, session_id, mem.client(client).project_id, content,
                                           tag, ttl, iso(now), iso(now + timedelta(seconds=ttl)))
    return clamps.note({"action": "write", "id": row["id"], "session_id": session_id, "tag": tag,
                        "ttl_seconds": ttl, "created_at": row["created_at"], "expires_at": row["expires_at"]})


def read(mem: Memory, client: str | None, tag: object = None) -> dict:
    tag = _tag(tag)
    client_id, session_id = _owner(mem, client)
    now = _purge(mem)
    rows = mem.store.working_memory_entries(client_id, session_id, mem.scope(client), tag, now, READ_LIMIT)
    entries = [{"id": r["id"], "content": r["content"], "tag": r["tag"], "created_at": r["created_at"],
                "expires_at": r["expires_at"]} for r in rows]
    return {"action": "read", "entries": entries, "count": len(entries), "session_id": session_id}


def clear(mem: Memory, client: str | None, tag: object = None) -> dict:
    """Delete the caller's entries of ``tag``, or all of them when no tag is given."""
    tag = _tag(tag)
    client_id, session_id = _owner(mem, client)
    _purge(mem)  # so `deleted` counts only entries the caller could still read
    deleted = mem.store.clear_working_memory(client_id, session_id, mem.scope(client), tag)
    return {"action": "clear", "deleted": deleted, "tag": tag, "session_id": session_id}
