"""cuba_centinela: reminders that fire when an entity is touched, a session starts or an error
is reported, and show up as ``triggered_reminders`` in the response that fired them.

A trigger belongs to the project active when it was created (visible there and, like every
row, everywhere when it has no project) and records the client that left it (``from_agent``),
so it doubles as a note from one agent to the next.

Matching (the original used exact or trigram > 0.5; a glob says what it means and cannot
match by accident): ``entity_pattern`` is a case- and accent-insensitive glob (``*`` any run
of characters, ``?`` one, ``[abc]`` a set).
- on_access: it must match the whole entity name (``auth*`` matches ``auth-service`` and
  ``Auth``, ``auth`` only ``auth``). Fired by cuba_alma get, cuba_cronica add / batch_add /
  list and cuba_ingesta on the entities they read or write.
- on_session_start and on_error_match: it may match anywhere in the subject (``timeout``
  matches ``TimeoutError: read timed out``). A session's subjects are its project's name, its
  name and its goals (``*`` fires at every session start); an error's is
  ``"<error_type>: <error_message>"``.

A trigger fires at most ``max_fires`` times (−1: no limit) and never once ``expires_at`` has
passed; the firing that reaches max_fires switches it off (``deactivated: true``), and an
expired one is switched off when next met. Firing writes nothing when no trigger matches.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import MAX_NAME_CHARS, iso, utc_now
from cuba_memorys.services import validate
from cuba_memorys.services.memory import DEFAULT_CLIENT, Memory
from cuba_memorys.storage.rows import TriggerRow
from cuba_memorys.text import fold

CONDITIONS = ("on_access", "on_session_start", "on_error_match")
UNLIMITED = -1
MAX_FIRES = 10_000
LIST_LIMIT = 500
WILDCARDS = "*?["


# -- matching and firing (called by the services that fire reminders) -----------------------
def matches(pattern: str, subject: str, *, whole: bool) -> bool:
    """Whether the glob ``pattern`` matches ``subject`` (all of it when ``whole``, else anywhere)."""
    pattern, subject = fold(pattern.strip()), fold(subject)
    if pattern == subject or (not whole and pattern in subject):
        return True
    if not any(ch in pattern for ch in WILDCARDS):
        return False
    return fnmatchcase(subject, pattern if whole else f"*{pattern}*")


def fired_view(row: TriggerRow) -> dict[str, Any]:
    return {"trigger_id": row["id"], "entity_pattern": row["entity_pattern"], "message": row["message"],
            "from_agent": row["from_agent"], "fire_count": row["fire_count"], "deactivated": not row["active"]}


def fire(mem: Memory, client: str | None, condition_type: str, subject: str | Sequence[str]) -> list[dict]:
    """Fire the caller's visible triggers of ``condition_type`` matching ``subject`` (one text or
    several); returns the fired reminders, [] when none (then nothing is written)."""
    if condition_type not in CONDITIONS:
        raise InvalidInput("condition_type", f"unknown value {condition_type!r}", " | ".join(CONDITIONS))
    subjects = [subject] if isinstance(subject, str) else [s for s in subject if s]
    # Bound again: the caller may have switched project during the call (cuba_jornada start).
    with mem.acting_for(client):
        armed = mem.store.armed_triggers(condition_type, mem.scope(client))
        whole = condition_type == "on_access"
        picked = [t for t in armed if any(matches(t["entity_pattern"], s, whole=whole) for s in subjects)]
        if not picked:
            return []
        now = iso(utc_now())
        if any(t["expires_at"] and t["expires_at"] <= now for t in picked):
            mem.store.expire_triggers(mem.scope(client), now)
        fired = [mem.store.fire_trigger(t["id"], now) for t in picked]
    return [fired_view(row) for row in fired if row is not None]


def attach(mem: Memory, client: str | None, condition_type: str, subject: str | Sequence[str],
           response: dict) -> dict:
    """``response`` with ``triggered_reminders`` added when something fired (the hook the other
    services call after their work succeeded)."""
    fired = fire(mem, client, condition_type, subject)
    if fired:
        response["triggered_reminders"] = fired
    return response


# -- validation ----------------------------------------------------------------------------
def _max_fires(clamps: validate.Clamps, value: object) -> int:
    """-1 (unlimited) or 1..MAX_FIRES, clamped as the original clamps; 0 could never fire."""
    if value == 0 and not isinstance(value, bool):
        raise InvalidInput("max_fires", "0 would never fire", f"{UNLIMITED} (unlimited) or 1..{MAX_FIRES}")
    return clamps.integer("max_fires", value, UNLIMITED, MAX_FIRES, 1)


def _expires_at(value: object) -> str | None:
    """RFC 3339, in the future; an invalid one is an error (the original ignored it silently,
    leaving a reminder that never expires)."""
    expires = validate.timestamp("expires_at", value)
    if expires is not None and expires <= iso(utc_now()):
        raise InvalidInput("expires_at", f"{value!r} has already passed", "a future RFC 3339 date-time")
    return expires


def _trigger_id(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("trigger_id", "is required: the trigger_id create returned")
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise InvalidInput("trigger_id", f"{value!r} is not a trigger id", "a UUID as create returns") from None


def _view(row: TriggerRow) -> dict[str, Any]:
    return {"id": row["id"], "entity_pattern": row["entity_pattern"], "condition_type": row["condition_type"],
            "message": row["message"], "active": row["active"], "fire_count": row["fire_count"],
            "max_fires": row["max_fires"], "created_at": row["created_at"], "expires_at": row["expires_at"],
            "from_agent": row["from_agent"], "last_fired_at": row["last_fired_at"]}


# -- actions -------------------------------------------------------------------------------
def create(mem: Memory, client: str | None, *, entity_pattern: object = None, condition_type: object = None,
           message: object = None, max_fires: object = None, expires_at: object = None,
           allow_secret: bool = False) -> dict:
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    pattern = validate.text("entity_pattern", entity_pattern, high=MAX_NAME_CHARS).strip()
    condition = validate.choice("condition_type", condition_type, CONDITIONS)
    message = validate.text("message", message).strip()
    clamps = validate.Clamps()
    count = _max_fires(clamps, max_fires)
    expires = _expires_at(expires_at)
    validate.no_secret("entity_pattern", pattern, allow_secret)
    validate.no_secret("message", message, allow_secret)
    row = mem.store.add_trigger(pattern, condition, message, count, expires, client or DEFAULT_CLIENT,
                                mem.client(client).project_id)
    return clamps.note({"action": "create", "trigger_id": row["id"], "entity_pattern": pattern,
                        "condition_type": condition, "message": message, "max_fires": count, "expires_at": expires,
                        "from_agent": row["from_agent"]})


def list_all(mem: Memory, client: str | None) -> dict:
    """Visible triggers, newest first, active or not (expired ones are switched off first)."""
    mem.store.expire_triggers(mem.scope(client), iso(utc_now()))
    triggers = [_view(row) for row in mem.store.list_triggers(mem.scope(client), LIST_LIMIT)]
    return {"action": "list", "triggers": triggers, "count": len(triggers)}


def delete(mem: Memory, client: str | None, trigger_id: object = None) -> dict:
    trigger_id = _trigger_id(trigger_id)
    if mem.store.get_trigger(trigger_id, mem.scope(client)) is None:
        raise NotFound(f"Trigger '{trigger_id}' not found in this project.",
                       hint="List the triggers with cuba_centinela action=list.")
    mem.store.delete_trigger(trigger_id)
    return {"action": "delete", "trigger_id": trigger_id}


def check(mem: Memory, client: str | None, *, entity_pattern: object = None,
          condition_type: object = None) -> dict:
    """Fire the triggers of ``condition_type`` (default on_access) that match ``entity_pattern``,
    here the subject: an entity name, a session's name or an error text."""
    condition = validate.choice("condition_type", condition_type, CONDITIONS, default="on_access")
    subject = validate.text("entity_pattern", entity_pattern).strip()
    fired = fire(mem, client, condition, subject)
    return {"action": "check", "condition_type": condition, "subject": subject, "triggered": fired,
            "count": len(fired)}
