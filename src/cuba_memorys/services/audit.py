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

No chain shows that its newest rows were cut off the end, so the server keeps the chain's head
beside it, in ``meta`` (HEAD_KEY): the last link's id and hash and the number of links, written
in the transaction of every append, under the append lock. With a key the head carries an HMAC
tag over ``audit_head|last_id|last_hash|rows``, so whoever cuts the tail cannot move the head
back without the key. A store written before the head existed has none: the first append or
verify adopts the chain's end as it is then, and says so (``head`` in verify's answer, ``note``
in append's); what was cut before that cannot be caught. A head that does not match the chain
is never moved on by an append: it stays as the evidence that verify reports.

A server holding the key wants the newest link to be HMAC: a chain whose newest link is plain
SHA-256 was written, or rewritten, without the key (a downgrade), even when no HMAC row is left
to show where it began.
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
from cuba_memorys.models import Scope, iso, utc_now
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
HEAD_KEY = "audit_head"  # meta key of the chain's head (see the module docstring)


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


def _fields(row: AuditRow) -> tuple[str, str, str, str, str | None]:
    return row["prev_hash"], row["action"], row["payload"], row["created_at"], row["project_id"]


def _hashed_with(key: bytes | None, row: AuditRow) -> bool:
    return hmac.compare_digest(link_hash(key, *_fields(row)), row["current_hash"])


def _append(mem: Memory, client: str | None, action: str, payload: str) -> tuple[AuditRow, str | None]:
    """The appended row, and a note when its append adopted the head (a store from before it)."""
    key = audit_key(mem.settings)
    created_at = iso(utc_now())  # when the event was recorded (an append may then wait for the lock)
    project_id = mem.client(client).project_id
    with mem.store.audit_transaction():  # the head moves with the row, under the same lock
        row = mem.store.append_audit(action, payload, project_id, created_at,
                                     lambda prev: link_hash(key, prev, action, payload, created_at, project_id))
        return row, _advance_head(mem, key, row)


# -- the head kept beside the chain ------------------------------------------------------------
@dataclass(frozen=True)
class Head:
    last_id: int
    last_hash: str
    rows: int
    tag: str | None = None  # HMAC of the three, when written with the key
    adopted_at: str | None = None  # when a store from before the head adopted its chain's end


def _head_tag(key: bytes, last_id: int, last_hash: str, rows: int) -> str:
    return hmac.new(key, f"audit_head|{last_id}|{last_hash}|{rows}".encode(), hashlib.sha256).hexdigest()


def _read_head(mem: Memory) -> tuple[Head | None, str | None]:
    """(the stored head or None when there is none yet, what is wrong with it when unreadable)."""
    raw = mem.store.get_meta(HEAD_KEY)
    if raw is None:
        return None, None
    try:
        data = json.loads(raw)
        return Head(int(data["last_id"]), str(data["last_hash"]), int(data["rows"]), data.get("tag"),
                    data.get("adopted_at")), None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, (f"the chain's head kept in meta ({HEAD_KEY}) is not what the server writes: it was changed"
                      " outside the server, so whether rows were cut off the end cannot be told.")


def _write_head(mem: Memory, key: bytes | None, row: AuditRow, rows: int, adopted_at: str | None) -> None:
    head: dict[str, Any] = {"last_id": row["id"], "last_hash": row["current_hash"], "rows": rows}
    if key is not None:
        head["tag"] = _head_tag(key, row["id"], row["current_hash"], rows)
    if adopted_at is not None:
        head["adopted_at"] = adopted_at
    mem.store.set_meta(HEAD_KEY, canonical_json(head))


def _adopted(rows: int) -> str:
    return (f"the audit chain had no stored head yet (a store from before it): its end as it is now ({rows} rows)"
            " was adopted, so rows cut off the end from now on are caught; any cut before now cannot be.")


def _advance_head(mem: Memory, key: bytes | None, row: AuditRow) -> str | None:
    """Move the head onto ``row`` (in the append's transaction); a note when it was adopted."""
    head, unreadable = _read_head(mem)
    if unreadable:
        return None  # kept as found: verify reports it
    if head is None:
        rows = mem.store.audit_count(row["id"])
        before = rows - 1  # a fresh chain (this row its first) adopts nothing
        _write_head(mem, key, row, rows, iso(utc_now()) if before else None)
        return _adopted(before) if before else None
    on_head = head.last_hash == row["prev_hash"]
    if _head_problem(mem, key, head, on_head) is not None:
        return None  # never moved on past a mismatch: the head stays as evidence of it
    # not on the head: rows were appended after it by a server that keeps no head (an older one)
    rows = head.rows + 1 if on_head else mem.store.audit_count(row["id"])
    _write_head(mem, key, row, rows, head.adopted_at)
    return None


@dataclass(frozen=True)
class HeadProblem:
    reason: str
    tail_cut: bool = False


def _last_row(mem: Memory) -> AuditRow | None:
    newest = mem.store.audit_tail(Scope(), 1)  # the whole chain, not the caller's project
    return newest[0] if newest else None


def _row(mem: Memory, row_id: int) -> AuditRow | None:
    found = mem.store.audit_rows(row_id - 1, 1)
    return found[0] if found and found[0]["id"] == row_id else None


def _head_problem(mem: Memory, key: bytes | None, head: Head, on_head: bool = False) -> HeadProblem | None:
    """What is wrong between the stored head and the chain. ``on_head``: an append just read the
    head's hash as the last link's, so only its tag needs checking (no scan per append)."""
    if key is not None and head.tag is not None and \
            not hmac.compare_digest(_head_tag(key, head.last_id, head.last_hash, head.rows), head.tag):
        return HeadProblem(f"the chain's head kept in meta ({HEAD_KEY}) was changed without CUBA_AUDIT_KEY (or"
                           " written with another key): rows may have been cut off the end and the head moved back.")
    if on_head and (key is None or head.tag is not None):
        return None
    row = _row(mem, head.last_id)
    if row is None:
        return _cut(mem, head)
    if row["current_hash"] != head.last_hash:
        return HeadProblem(f"row {head.last_id}, the newest the server appended, is not as it was appended: its hash"
                           " changed, so the chain was rewritten after it was written.")
    if key is not None and head.tag is None and _hashed_with(key, row):
        return HeadProblem(f"the chain's head kept in meta ({HEAD_KEY}) names an HMAC row but carries no tag: it was"
                           " rewritten without CUBA_AUDIT_KEY, so rows may have been cut off the end.")
    if (count := mem.store.audit_count(head.last_id)) != head.rows:
        return HeadProblem(f"{head.rows} rows up to row {head.last_id} were appended, {count} are there now: rows"
                           f" were {'removed' if count < head.rows else 'inserted'} outside the server.")
    return None


def _cut(mem: Memory, head: Head) -> HeadProblem:
    left = mem.store.audit_count(head.last_id)
    last = _last_row(mem)
    ends = f"ends at row {last['id']}" if last is not None else "is empty"
    return HeadProblem(f"the tail was cut: the server's last append was row {head.last_id}, when the chain held"
                       f" {head.rows} rows, but the chain now {ends}: {head.rows - left} rows were removed from its"
                       " end outside the server.", tail_cut=True)


def _adopt_head(mem: Memory, key: bytes | None) -> str | None:
    """Give a store from before the head one (verify's part of the upgrade); what to say about it."""
    if mem.store.read_only:
        return None  # a standby: the primary adopts it
    with mem.store.audit_transaction():
        head, unreadable = _read_head(mem)
        last = _last_row(mem)
        # Without the key an HMAC end is not adopted: untagged, it would look rewritten to a keyed server.
        if head is not None or unreadable or last is None or (key is None and not _hashed_with(None, last)):
            return None
        rows = mem.store.audit_count(last["id"])
        _write_head(mem, key, last, rows, iso(utc_now()))
    return _adopted(rows)


def record(mem: Memory, client: str | None, action: str, payload: dict[str, Any]) -> int:
    """Append one event (inside the caller's transaction when there is one); returns its id.

    Call it last in the transaction: on PostgreSQL the append lock is held until the commit.
    The payload is kept for ever (the log cannot be changed), so it must name rows by id and
    never carry content a later forget would have to remove."""
    return _append(mem, client, action, canonical_json(payload))[0]["id"]


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
    row, adopted = _append(mem, client, action, body)
    # retries: appends wait for the lock instead of failing and retrying (SERIALIZABLE in the original).
    answer: dict[str, Any] = {"action": "append", "id": row["id"], "current_hash": row["current_hash"], "retries": 0}
    if adopted:
        answer["note"] = adopted[0].upper() + adopted[1:]
    return answer


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
            f" recomputed without the key. Rows cut off the end are caught by the head kept in meta ({HEAD_KEY}),"
            " unless whoever cut them also rewrote that head, which only the key prevents.")


def _newest_problem(key: bytes | None, newest: AuditRow | None, sealed: bool) -> dict[str, Any] | None:
    """With the key, the newest link must be HMAC: a plain one is a downgrade, even with no HMAC row
    left to show where the rewrite began."""
    if key is None or newest is None or _hashed_with(key, newest):
        return None
    rid = newest["id"]
    if not _hashed_with(None, newest):
        return {"first_break_id": rid, "reason": f"row {rid}, the newest, was changed after it was written: its"
                " hash matches neither HMAC-SHA256 with CUBA_AUDIT_KEY nor plain SHA-256 of its contents."}
    none_sealed = "" if sealed else " and no row checked is HMAC-SHA256"
    return {"downgraded": True, "reason": (
        f"row {rid}, the newest, is plain SHA-256 although this server holds CUBA_AUDIT_KEY{none_sealed}: a"
        " downgrade. Someone without the key may have rewritten the chain and recomputed every hash. If the key"
        " was set only after that row was written, this is expected until the next append seals the chain with"
        " it; only the operator can tell the two apart.")}


def _walk(chain: ChainCheck, mem: Memory, limit: int) -> tuple[int, int, dict[str, Any] | None]:
    """(rows checked, the last id checked, the first break) over the oldest ``limit`` rows."""
    checked, after = 0, 0
    while checked < limit:
        rows = mem.store.audit_rows(after, min(VERIFY_PAGE, limit - checked))
        if not rows:
            break
        for row in rows:
            problem = chain.check(row)
            if problem:
                return checked, after, {"first_break_id": row["id"], "reason": problem}
        checked, after = checked + len(rows), rows[-1]["id"]
    return checked, after, None


def _check_head(mem: Memory, key: bytes | None) -> tuple[dict[str, Any] | None, str | None]:
    """(what is wrong between the chain and its stored head, the note of the head's adoption)."""
    head, unreadable = _read_head(mem)
    if unreadable:
        return {"reason": unreadable}, None
    if head is None:
        return None, _adopt_head(mem, key)
    problem = _head_problem(mem, key, head)
    if problem is None:
        return None, None
    return {"reason": problem.reason, **({"tail_cut": True} if problem.tail_cut else {})}, None


def verify(mem: Memory, client: str | None, *, limit: object = None) -> dict[str, Any]:
    clamps = validate.Clamps()
    limit = clamps.integer("limit", limit, 1, VERIFY_MAX, VERIFY_DEFAULT)
    key = audit_key(mem.settings)
    chain = ChainCheck(key)
    checked, after, broken = _walk(chain, mem, limit)
    broken = broken or _newest_problem(key, _last_row(mem), chain.sealed)
    adopted = None
    if broken is None:
        broken, adopted = _check_head(mem, key)
    if broken is not None:
        return clamps.note({"action": "verify", "ok": False, **broken})
    answer: dict[str, Any] = {"action": "verify", "ok": True, "rows_checked": checked,
                              "unprotected_rows": chain.plain_rows}
    if chain.plain_rows:
        answer["what_this_does_not_establish"] = _not_established(chain.plain_rows, checked)
    if checked == limit and mem.store.audit_rows(after, 1):
        answer["note"] = f"checked the oldest {checked} rows only; pass a larger limit to check the newer ones."
    if adopted:
        answer["head"] = adopted[0].upper() + adopted[1:]
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
