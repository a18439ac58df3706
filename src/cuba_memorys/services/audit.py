"""cuba_archivo: the hash-chained audit log (append, verify, tail), and ``record``, which every
destructive or trust-changing action calls inside its own transaction.

Each link's hash covers the link before it, so changing, inserting or removing a row breaks
every link after it:

    current_hash = H(prev_hash | action | payload | created_at [| project_id])

- H is HMAC-SHA256 keyed with CUBA_AUDIT_KEY (else the content of
  ``~/.cache/cuba-memorys/audit_key``, surrounding whitespace stripped; never created here),
  or plain SHA-256 when there is no key. Both are 64 hex digits; verify tells them apart by
  recomputing.
- ``|`` is a literal separator; the fields are UTF-8. ``payload`` is the event's JSON object
  in canonical form (sorted keys, no spaces, UTF-8 rather than \\u escapes), stored exactly as
  hashed. ``created_at`` is ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` (models.iso).
- ``| project_id`` is appended only for an event recorded in a project: rows without one hash
  exactly as the original's formula, and moving an event to another project breaks its link.
  The id is not hashed; the order of the rows is bound by the links.
- The first link's prev_hash is GENESIS_HASH (64 zeros).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuba_memorys.config import Settings
from cuba_memorys.errors import ConfigError, InvalidInput, SecretRefused
from cuba_memorys.models import iso, utc_now
from cuba_memorys.secrets_scan import find_secret
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import AuditRow
from cuba_memorys.storage.sql.audit import GENESIS_HASH

MAX_EVENT_ACTION_CHARS = 200
MAX_PAYLOAD_CHARS = 100_000
VERIFY_DEFAULT, VERIFY_MAX = 10_000, 1_000_000
TAIL_DEFAULT, TAIL_MAX = 20, 200
VERIFY_PAGE = 1_000  # rows read per query while verifying


def key_file() -> Path:
    return Path.home() / ".cache" / "cuba-memorys" / "audit_key"


def audit_key(settings: Settings) -> bytes | None:
    """The HMAC key: CUBA_AUDIT_KEY, else the key file's content; None means plain SHA-256."""
    if settings.audit_key:
        return settings.audit_key.encode()
    path = key_file()
    try:
        key = path.read_bytes().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        # Refused rather than falling back to plain SHA-256: the chain would silently lose its
        # protection, and verify would later report the downgrade as a break.
        raise ConfigError(f"cannot read the audit key file {path}: {exc}",
                          hint="Fix its permissions, or set CUBA_AUDIT_KEY.") from exc
    return key or None


def canonical_json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def link_hash(key: bytes | None, prev_hash: str, action: str, payload: str, created_at: str,
              project_id: str | None) -> str:
    parts = [prev_hash, action, payload, created_at] + ([project_id] if project_id is not None else [])
    message = "|".join(parts).encode()
    if key is None:
        return hashlib.sha256(message).hexdigest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _append(mem: Memory, client: str | None, action: str, payload: str) -> AuditRow:
    key = audit_key(mem.settings)
    created_at = iso(utc_now())  # when the event was recorded (an append may then wait for the lock)
    project_id = mem.client(client).project_id
    return mem.store.append_audit(action, payload, project_id, created_at,
                                  lambda prev: link_hash(key, prev, action, payload, created_at, project_id))


def record(mem: Memory, client: str | None, action: str, payload: dict[str, Any]) -> int:
    """Append one event (inside the caller's transaction when there is one); returns its id.

    Call it last in the transaction: on PostgreSQL the append lock is held until the commit.
    The payload is kept for ever (the log cannot be changed), so it must name rows by id and
    never carry content a later forget would have to remove."""
    return _append(mem, client, action, canonical_json(payload))["id"]


# -- cuba_archivo ------------------------------------------------------------------------------
def _payload_text(payload: object) -> str:
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidInput("payload", f"must be a JSON object, got {type(payload).__name__}",
                           'an object, e.g. {"ticket": "OPS-12"}')
    try:
        text = canonical_json(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidInput("payload", f"is not plain JSON ({exc})", "strings, numbers, booleans, null,"
                           " arrays and objects; no NaN or Infinity") from None
    if len(text) > MAX_PAYLOAD_CHARS:
        raise InvalidInput("payload", f"is {len(text)} characters as JSON", f"at most {MAX_PAYLOAD_CHARS}")
    return text


def _no_secret(param: str, text: str) -> None:
    """The log can never be changed or cleaned, so a credential in it would stay for ever."""
    match = find_secret(text)
    if match:
        raise SecretRefused(f"refusing to append {param}: it looks like a {match.kind} near character"
                            f" {match.position}.",
                            hint="The audit log can never be edited or deleted; record a reference to the"
                                 " credential (its name, where it is kept), not the credential.")


def append(mem: Memory, client: str | None, *, event_action: object, payload: object = None) -> dict[str, Any]:
    action = validate.text("event_action", event_action, high=MAX_EVENT_ACTION_CHARS)
    body = _payload_text(payload)
    _no_secret("event_action", action)
    _no_secret("payload", body)
    row = _append(mem, client, action, body)
    # retries: appends wait for the lock instead of failing and retrying (SERIALIZABLE in the original).
    return {"action": "append", "id": row["id"], "current_hash": row["current_hash"], "retries": 0}


@dataclass
class ChainCheck:
    """Walks the chain in id order; ``check`` says what is wrong with the next row, if anything."""

    key: bytes | None
    last_hash: str = GENESIS_HASH
    last_id: int | None = None
    sealed: bool = False  # an HMAC row verified: from here on a plain row is a downgrade
    plain_rows: int = 0

    def check(self, row: AuditRow) -> str | None:
        rid = row["id"]
        if row["prev_hash"] != self.last_hash:
            before = f"row {self.last_id}" if self.last_id is not None else "the start of the chain"
            return (f"row {rid}'s prev_hash is not the hash of {before}: a row between them was removed or"
                    " inserted, or one of the two was rewritten.")
        fields = (row["prev_hash"], row["action"], row["payload"], row["created_at"], row["project_id"])
        stored = row["current_hash"]
        if self.key is not None and hmac.compare_digest(link_hash(self.key, *fields), stored):
            self.sealed = True
        elif hmac.compare_digest(link_hash(None, *fields), stored):
            if self.sealed:
                return (f"row {rid} is plain SHA-256 after HMAC-protected rows: a downgrade. Someone without"
                        " CUBA_AUDIT_KEY may have rewritten the chain from this row on.")
            self.plain_rows += 1
        elif self.key is None:
            return (f"row {rid}'s hash is not the plain SHA-256 of its contents: either it was written with an"
                    " HMAC key (set CUBA_AUDIT_KEY to that key to verify it; without the key HMAC rows cannot"
                    " be checked), or it was changed after it was written.")
        else:
            return (f"row {rid} was changed after it was written: its hash matches neither HMAC-SHA256 with"
                    " CUBA_AUDIT_KEY nor plain SHA-256 of its contents (or it was written with another key).")
        self.last_hash, self.last_id = stored, rid
        return None


def _not_established(plain_rows: int, checked: int) -> str:
    return (f"{plain_rows} of the {checked} rows checked are plain SHA-256 (written without CUBA_AUDIT_KEY)."
            " Their hashes show that the chain is internally consistent, but not that it is authentic: anyone"
            " with write access to the database could rewrite those rows and recompute every hash after them,"
            " and this check would still pass. Rows written with CUBA_AUDIT_KEY (HMAC-SHA256) cannot be"
            " recomputed without the key. No hash shows whether the newest rows were cut off the end of the"
            " chain.")


def verify(mem: Memory, client: str | None, *, limit: object = None) -> dict[str, Any]:
    clamps = validate.Clamps()
    limit = clamps.integer("limit", limit, 1, VERIFY_MAX, VERIFY_DEFAULT)
    chain = ChainCheck(audit_key(mem.settings))
    checked, after = 0, 0
    while checked < limit:
        rows = mem.store.audit_rows(after, min(VERIFY_PAGE, limit - checked))
        if not rows:
            break
        for row in rows:
            problem = chain.check(row)
            if problem:
                return clamps.note({"action": "verify", "ok": False, "first_break_id": row["id"],
                                    "reason": problem})
        checked, after = checked + len(rows), rows[-1]["id"]
    answer: dict[str, Any] = {"action": "verify", "ok": True, "rows_checked": checked,
                              "unprotected_rows": chain.plain_rows}
    if chain.plain_rows:
        answer["what_this_does_not_establish"] = _not_established(chain.plain_rows, checked)
    if checked == limit and mem.store.audit_rows(after, 1):
        answer["note"] = f"checked the oldest {checked} rows only; pass a larger limit to check the newer ones."
    return clamps.note(answer)


def tail(mem: Memory, client: str | None, *, limit: object = None) -> dict[str, Any]:
    clamps = validate.Clamps()
    limit = clamps.integer("limit", limit, 1, TAIL_MAX, TAIL_DEFAULT)
    entries = [{"id": r["id"], "action": r["action"], "payload": _decoded(r["payload"]),
                "created_at": r["created_at"]} for r in mem.store.audit_tail(mem.scope(client), limit)]
    return clamps.note({"action": "tail", "entries": entries, "count": len(entries)})


def _decoded(payload: str) -> Any:
    """The payload object; a row changed into text that is not JSON is shown as that text
    (verify reports the break) rather than failing the whole tail."""
    try:
        return json.loads(payload)
    except ValueError:
        return payload
