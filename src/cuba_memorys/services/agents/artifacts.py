"""cuba_artefacto: shared, versioned text artifacts between agents on one memory (plans, specs,
checklists several agents edit), as the original's (spec original-0.27.md §2.2).

- **Namespaces.** A path names one artifact in the caller's project; with no project active (or
  CUBA_PROJECT_FILTER=off) the rows of no project. Other projects never see it.
- **Optimistic concurrency.** A put on an existing path must name the version it read
  (``base_version``); a stale one is refused with the current version and content hash and
  announced as ``artifact.conflict``. The check and the write happen in one transaction that
  holds the row (PostgreSQL ``SELECT … FOR UPDATE``; SQLite's write transaction serialises every
  writer), and the write itself is a compare-and-swap on the version, so two puts of the same
  base can never both win. A patch reads and writes inside that same transaction: it cannot lose
  a concurrent write, so it needs no base.
- **Leases.** lock gives the caller the path for 5-3600 s (default 60); a put or patch by anyone
  else is refused meanwhile, and a lease past its end is void (shown as unlocked, cleared by the
  next write or lock).
- **Nothing is lost (ours).** Every version a write replaces is kept, the newest 50 per
  artifact, and ``get version=N`` reads one back.
- **Not audited.** Artifact writes are agents collaborating on a text whose history is kept
  above; the audit log (cuba_archivo) records what deletes memory or changes its trust.

Events (services/events.py, served by ``serve`` at /events): artifact.updated, artifact.locked,
artifact.unlocked and artifact.conflict, each with {path, version, content_hash, actor,
project_id}. The actor is the calling client's id, or "anonymous".

(No ``from __future__ import annotations``: the answer TypedDicts' ``NotRequired`` must be
evaluated, as in services/answers.py.)
"""

import hashlib
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, NotRequired, TypedDict

from cuba_memorys.errors import Conflict, InvalidInput, NotFound, SecretRefused
from cuba_memorys.models import iso, utc_now
from cuba_memorys.secrets_scan import find_secret
from cuba_memorys.services import events, validate
from cuba_memorys.services.answers import Clamped
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import ArtifactRow, ArtifactSummaryRow

MAX_PATH_BYTES = 512
MAX_CONTENT_BYTES = 2 * 1024 * 1024  # 2 MiB of UTF-8
DEFAULT_TTL_SECONDS, MIN_TTL_SECONDS, MAX_TTL_SECONDS = 60, 5, 3600
DEFAULT_LIMIT, MAX_LIMIT = 100, 500
KEEP_VERSIONS = 50  # replaced versions kept per artifact
INDEX_LIMIT = 30  # the context window's artifact index (cuba_contexto)
ANONYMOUS = "anonymous"
EVENTS_URL, TICKET_URL = "/events", "/events/ticket"
PATH_HINT = "a logical path of 1-512 bytes (UTF-8), e.g. docs/plan.md"


# -- answers -----------------------------------------------------------------------------------
class ArtifactEntry(TypedDict):
    id: str
    path: str
    content_hash: str
    version: int
    locked_by: str | None  # None when no lease is held or it has run out
    lock_until: str | None
    updated_at: str
    origin_node: str | None


class ArtifactList(TypedDict):
    action: str
    artifacts: list[ArtifactEntry]
    count: int
    prefix: str | None
    clamped: NotRequired[dict[str, Clamped]]


class ArtifactRead(ArtifactEntry):
    action: str
    content: str
    actor: str  # who wrote this version
    current_version: int
    oldest_version: int  # the oldest version get can still read
    replaced_at: NotRequired[str]  # when reading a replaced version: when a newer one replaced it


class ArtifactWritten(TypedDict):
    action: str
    id: str
    path: str
    version: int
    content_hash: str
    updated_at: str
    created: bool  # the put created the path (version 1)
    previous_version: int | None  # the version this write replaced (kept; get version=N reads it)


class ArtifactLocked(TypedDict):
    action: str
    path: str
    version: int
    locked_by: str
    lock_until: str
    ttl_seconds: int
    clamped: NotRequired[dict[str, Clamped]]


class ArtifactUnlocked(TypedDict):
    action: str
    path: str
    released: bool  # a lease in force ended (False: none was held, or it had run out)


class ArtifactWatchHint(TypedDict):
    action: str
    events_url: str
    ticket_url: str
    kinds: list[str]
    note: str


class ArtifactIndexEntry(TypedDict):
    path: str
    version: int
    content_hash: str


# -- checks ------------------------------------------------------------------------------------
def _utf8_size(param: str, value: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate, which JSON can carry
        raise InvalidInput(param, "is not valid Unicode text (it holds a lone surrogate)") from None


def _path(value: object, param: str = "path") -> str:
    if value is None or value == "":
        raise InvalidInput(param, "is required and must not be empty", PATH_HINT)
    if not isinstance(value, str):
        raise InvalidInput(param, f"must be a string, got {type(value).__name__}", PATH_HINT)
    validate.no_nul(param, value)
    if not value.strip():
        raise InvalidInput(param, "must not be blank", PATH_HINT)
    size = _utf8_size(param, value)
    if size > MAX_PATH_BYTES:
        raise InvalidInput(param, f"is {size} bytes in UTF-8; at most {MAX_PATH_BYTES}", PATH_HINT)
    match = find_secret(value)
    if match:  # the message does not repeat the path: it would repeat the credential
        raise SecretRefused(f"refusing to use this {param}: it looks like a {match.kind} near character"
                            f" {match.position}, i.e. a credential.",
                            hint="Paths are listed to every agent of the project; choose one without the credential.")
    return value


def _text(param: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(param, f"must be a string, got {type(value).__name__}")
    validate.no_nul(param, value)
    _utf8_size(param, value)
    return value


def _content(param: str, value: str, allow_secret: bool) -> str:
    size = _utf8_size(param, value)
    if size > MAX_CONTENT_BYTES:
        raise InvalidInput(param, f"is {size:,} bytes ({size / 2**20:.2f} MiB) in UTF-8; at most 2 MiB"
                                  f" ({MAX_CONTENT_BYTES:,} bytes)", "split it into several artifacts")
    validate.no_secret(param, value, allow_secret)
    return value


def _base_version(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput("base_version", f"must be a whole number ≥ 0, got {value!r}",
                           "the version you read; 0 or omitted for a new path")
    return value


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


# -- who, where, when ---------------------------------------------------------------------------
def _actor(client: str | None) -> str:
    return client or ANONYMOUS


def _namespace(mem: Memory, client: str | None) -> str | None:
    """The project whose artifacts the caller reads and writes (None: the rows of no project)."""
    return mem.scope(client).project_id


def _holder(row: Mapping[str, Any], now: str) -> str | None:
    """Who holds the path's lease now (None: nobody, or the lease has run out)."""
    until = row["lock_until"]
    return row["locked_by"] if row["locked_by"] is not None and until is not None and until > now else None


def _entry(row: ArtifactSummaryRow, now: str) -> ArtifactEntry:
    holder = _holder(row, now)
    return {"id": row["id"], "path": row["path"], "content_hash": row["content_hash"], "version": row["version"],
            "locked_by": holder, "lock_until": row["lock_until"] if holder else None,
            "updated_at": row["updated_at"], "origin_node": row["origin_node"]}


def _announce(mem: Memory, kind: str, row: Mapping[str, Any], actor: str, **extra: Any) -> None:
    mem.events.publish(kind, {"path": row["path"], "version": row["version"], "content_hash": row["content_hash"],
                              "actor": actor, "project_id": row["project_id"], **extra})


def _not_found(path: str) -> NotFound:
    return NotFound(f"No artifact at {path!r} in this project.",
                    hint="cuba_artefacto action=list shows the paths; put (without base_version) creates one.")


def _refuse_if_leased(row: ArtifactRow, actor: str, now: str) -> None:
    holder = _holder(row, now)
    if holder is not None and holder != actor:
        raise Conflict(f"{row['path']} is locked by {holder} until {row['lock_until']}; nothing was written.",
                       hint="Wait for the lease to end (it frees itself then) or ask its holder to unlock it.")


def _check_base(mem: Memory, row: ArtifactRow, base: int | None, actor: str) -> None:
    state = f"version {row['version']} (content_hash {row['content_hash']})"
    if base is None:
        raise InvalidInput("base_version", f"is required to overwrite {row['path']}, which is at {state}",
                           f"get it, then put with base_version={row['version']}")
    if base != row["version"]:
        raise _stale(mem, row, base, actor)


def _stale(mem: Memory, row: ArtifactRow, base: int, actor: str) -> Conflict:
    """The refusal of a write based on ``base`` when ``row`` is the current state (announced)."""
    _announce(mem, "artifact.conflict", row, actor, base_version=base)
    return Conflict(f"conflict: base_version {base} is stale; {row['path']} is at version {row['version']}"
                    f" (content_hash {row['content_hash']}), last written by {row['crdt_actor']} at"
                    f" {row['updated_at']}. Nothing was written.",
                    hint=f"get it, reapply your change to that text, and put with base_version={row['version']}.")


# -- writes ------------------------------------------------------------------------------------
def _write(mem: Memory, client: str | None, action: str, path: str, base: int | None,
           content_for: Callable[[ArtifactRow | None], str]) -> ArtifactWritten:
    """The one write path of put and patch: in one transaction holding the row, check the lease
    and the base, then insert version 1 or write version + 1 (the replaced one kept)."""
    store, project, actor = mem.store, _namespace(mem, client), _actor(client)
    now = iso(utc_now())
    with store.transaction():
        row = store.get_artifact(project, path, True)
        written = None
        if row is None:
            if action == "patch":
                raise _not_found(path)
            if base not in (None, 0):
                raise Conflict(f"conflict: base_version {base} names a version, but {path} does not exist (it"
                               " was never written in this project). Nothing was written.",
                               hint="put with base_version 0 (or none) to create it.")
            content = content_for(None)
            written = store.insert_artifact(project, path, content, content_hash(content), actor, now)
            if written is None:  # another writer created it between our read and our insert
                raced = store.get_artifact(project, path, True)
                if raced is None:  # cannot happen: the insert met the row it could not see
                    raise Conflict(f"conflict: {path} was being created by another writer; retry.")
                if action == "put":  # our create lost the race: the same conflict as a stale base
                    raise _stale(mem, raced, base or 0, actor)
                row = raced
        if written is None:
            if row is None:  # cannot happen: the insert met the row it could not see
                raise Conflict(f"conflict: {path} was being created by another writer; retry.")
            _refuse_if_leased(row, actor, now)
            if action == "put":
                _check_base(mem, row, base, actor)
            content = content_for(row)
            written = store.update_artifact(row, content, content_hash(content), actor, now, KEEP_VERSIONS)
            if written is None:  # the compare-and-swap lost: the row moved on under us (a second wall)
                raise _stale(mem, store.get_artifact(project, path, True) or row, row["version"], actor)
    _announce(mem, "artifact.updated", written, actor)
    return {"action": action, "id": written["id"], "path": written["path"], "version": written["version"],
            "content_hash": written["content_hash"], "updated_at": written["updated_at"],
            "created": row is None, "previous_version": None if row is None else row["version"]}


def put(mem: Memory, client: str | None, *, path: object, content: object, base_version: object = None,
        allow_secret: object = False) -> ArtifactWritten:
    """Create a path (base_version absent or 0) or overwrite it from the version read."""
    path = _path(path)
    allow = validate.flag("allow_secret", allow_secret, False)
    text = _content("content", _text("content", content), allow)
    base = _base_version(base_version)
    return _write(mem, client, "put", path, base, lambda _row: text)


def occurrences(text: str, find: str, stop: int | None = None) -> int:
    """How many times ``find`` occurs in ``text``, overlapping ones counted ("aa" twice in "aaa"):
    a patch is unambiguous only if there is exactly one place it could apply."""
    count, start = 0, text.find(find)
    while start >= 0 and (stop is None or count < stop):
        count += 1
        start = text.find(find, start + 1)
    return count


def patch(mem: Memory, client: str | None, *, path: object, find: object, replace: object = None,
          allow_secret: object = False) -> ArtifactWritten:
    """Replace the one occurrence of ``find`` in the current text (0 or several: refused)."""
    path = _path(path)
    needle = _text("find", find)
    if not needle:
        raise InvalidInput("find", "must not be empty", "the exact text to replace, occurring once")
    replacement = "" if replace is None else _text("replace", replace)
    allow = validate.flag("allow_secret", allow_secret, False)
    validate.no_secret("replace", replacement, allow)

    def patched(row: ArtifactRow | None) -> str:
        assert row is not None  # _write refuses a patch of a missing path first
        found = occurrences(row["content"], needle)
        where = f"{row['path']} (version {row['version']})"
        if found == 0:
            raise InvalidInput("find", f"does not occur in {where}; nothing was written",
                               "text copied exactly from the current content (get it first)")
        if found > 1:
            raise InvalidInput("find", f"occurs {found} times in {where}: refusing an ambiguous patch;"
                                       " nothing was written", "include more surrounding text so it occurs once")
        start = row["content"].find(needle)
        result = row["content"][:start] + replacement + row["content"][start + len(needle):]
        return _content("content", result, allow)

    return _write(mem, client, "patch", path, None, patched)


def lock(mem: Memory, client: str | None, *, path: object, ttl_seconds: object = None) -> ArtifactLocked:
    """Hold the path for ttl_seconds: other writers are refused until then."""
    path = _path(path)
    clamps = validate.Clamps()
    ttl = clamps.integer("ttl_seconds", ttl_seconds, MIN_TTL_SECONDS, MAX_TTL_SECONDS, DEFAULT_TTL_SECONDS)
    store, actor = mem.store, _actor(client)
    started = utc_now()
    now = iso(started)
    with store.transaction():
        row = store.get_artifact(_namespace(mem, client), path, True)
        if row is None:
            raise _not_found(path)
        _refuse_if_leased(row, actor, now)
        row = store.set_artifact_lock(row["id"], actor, _until(started, ttl))
    _announce(mem, "artifact.locked", row, actor, lock_until=row["lock_until"])
    answer: ArtifactLocked = {"action": "lock", "path": path, "version": row["version"], "locked_by": actor,
                              "lock_until": row["lock_until"] or "", "ttl_seconds": ttl}
    if clamps.changed:
        answer["clamped"] = _clamped(clamps)
    return answer


def _clamped(clamps: validate.Clamps) -> dict[str, Clamped]:
    return {param: {"given": change["given"], "used": change["used"]} for param, change in clamps.changed.items()}


def _until(started: datetime, ttl: int) -> str:
    return iso(started + timedelta(seconds=ttl))


def unlock(mem: Memory, client: str | None, *, path: object) -> ArtifactUnlocked:
    """End the caller's lease; anyone may clear one that has run out."""
    path = _path(path)
    store, actor = mem.store, _actor(client)
    now = iso(utc_now())
    with store.transaction():
        row = store.get_artifact(_namespace(mem, client), path, True)
        if row is None:
            raise _not_found(path)
        holder = _holder(row, now)
        if holder is not None and holder != actor:
            raise Conflict(f"{path} is locked by {holder} until {row['lock_until']}; only its holder can unlock"
                           " it before then.", hint="Wait for the lease to end: it frees itself.")
        cleared = row["locked_by"] is not None
        if cleared:
            row = store.set_artifact_lock(row["id"], None, None)
    if cleared:
        _announce(mem, "artifact.unlocked", row, actor)
    return {"action": "unlock", "path": path, "released": holder is not None}


# -- reads -------------------------------------------------------------------------------------
def get(mem: Memory, client: str | None, *, path: object, version: object = None) -> ArtifactRead:
    """The current text, or a replaced version still kept (the newest 50)."""
    path = _path(path)
    wanted = validate.int_range("version", version, 1, 2**63 - 1, 0)
    row = mem.store.get_artifact(_namespace(mem, client), path)
    if row is None:
        raise _not_found(path)
    current = row["version"]
    oldest = mem.store.oldest_artifact_version(row["id"]) or current
    entry = _entry(row, iso(utc_now()))
    read: ArtifactRead = {**entry, "action": "get", "content": row["content"], "actor": row["crdt_actor"],
                          "current_version": current, "oldest_version": oldest}
    if wanted in (0, current):
        return read
    if wanted > current:
        raise NotFound(f"{path} has no version {wanted}: it is at version {current}.")
    old = mem.store.artifact_version(row["id"], wanted)
    if old is None:
        raise NotFound(f"version {wanted} of {path} is no longer kept: versions {oldest}-{current} are"
                       f" (the newest {KEEP_VERSIONS} replaced ones and the current one).")
    read.update({"version": wanted, "content": old["content"], "content_hash": old["content_hash"],
                 "updated_at": old["written_at"], "origin_node": old["origin_node"], "actor": old["actor"],
                 "replaced_at": old["replaced_at"]})
    return read


def list_all(mem: Memory, client: str | None, *, prefix: object = None, limit: object = None) -> ArtifactList:
    """The project's artifacts by path (without their content)."""
    start = None if prefix is None or prefix == "" else _path(prefix, "prefix")
    clamps = validate.Clamps()
    count = clamps.integer("limit", limit, 1, MAX_LIMIT, DEFAULT_LIMIT)
    now = iso(utc_now())
    rows = mem.store.list_artifacts(_namespace(mem, client), start or "", count)
    answer: ArtifactList = {"action": "list", "artifacts": [_entry(r, now) for r in rows], "count": len(rows),
                            "prefix": start}
    if clamps.changed:
        answer["clamped"] = _clamped(clamps)
    return answer


def watch_hint(mem: Memory, client: str | None) -> ArtifactWatchHint:
    """Where to follow changes instead of polling."""
    return {"action": "watch_hint", "events_url": EVENTS_URL, "ticket_url": TICKET_URL, "kinds": list(events.KINDS),
            "note": "`cuba-memorys serve` streams these as server-sent events at GET /events (the same bearer token"
                    " as /mcp; a browser gets a 120 s ticket from POST /events/ticket). Over stdio there is no"
                    " stream: poll list and compare each artifact's version or content_hash."}


def index(mem: Memory, client: str | None, limit: int = INDEX_LIMIT) -> list[ArtifactIndexEntry]:
    """The caller's most recently updated artifacts, {path, version, content_hash} (cuba_contexto)."""
    rows = mem.store.recent_artifacts(_namespace(mem, client), limit)
    return [{"path": r["path"], "version": r["version"], "content_hash": r["content_hash"]} for r in rows]


# -- projects ------------------------------------------------------------------------------------
def refuse_path_collisions(mem: Memory, source: Mapping[str, Any] | None, target: Mapping[str, Any]) -> None:
    """Before moving a project's rows into ``target`` (merge; ``source`` None: the rows of no
    project, as a backfill moves): refuse when both hold an artifact at the same path, naming
    them, rather than keep one and drop the other's text and history."""
    paths = mem.store.artifact_path_collisions(None if source is None else source["id"], target["id"])
    if not paths:
        return
    shown = ", ".join(repr(p) for p in paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
    origin = "the rows of no project" if source is None else f"project '{source['name']}'"
    raise Conflict(f"refusing to move {origin} into project '{target['name']}': both have artifacts at"
                   f" {len(paths)} path(s): {shown}. Nothing was moved.",
                   hint="A path names one artifact per project and cuba_artefacto deletes none (nor does the"
                        " original's), so these projects cannot be combined while both hold these paths; keep them"
                        " apart (cuba_proyecto rename can give one a clearer name).")
