"""cuba_sync pull, notify and fetch: read-only sync peers over HTTP (original-0.27.md §4e, "Peer
(HTTP) verbs"). A peer is another machine's ``serve``; it reaches this one with CUBA_PEER_TOKEN,
which opens only cuba_sync status, pull and notify (server/runtime.py enforces it).

**pull** (what a peer calls here). The whole memory is exported (scope all; embeddings too by
default, when an embedding model is recorded) into a temporary folder kept for the next pages,
then sent by pages: at most ``limit`` pieces, and at most 3 MiB a page *as sent* (PAGE_BYTES). A
page goes out twice in one answer, as the tool's structured content and again as its text
content (the same JSON inside a JSON string, so every quote and backslash is escaped once more),
so a piece weighs what it adds to the answer on the wire: its entry's JSON plus that JSON
escaped as a string, with room kept for the answer's own keys and the JSON-RPC and HTTP framing
(ENVELOPE_BYTES). A file is a piece ``{path, text}`` (UTF-8 JSON) or ``{path, hex}`` (binary:
embeddings.bin.zst, or a file too heavy as text); a file too big for one page is cut into
``{path, hex, part, parts}`` pieces, in order (beyond the original, whose one file could exceed
any page). ``offset`` counts pieces; ``total_files`` counts files. The
export is reused while the store's change marker (storage/sql/sync_peers.py) stays put, so
paging does not export per page; the caller passes the ``manifest_hash`` of its first page with
every later one, and when the store changed meanwhile (a new export, another hash) the pull is
refused with a Conflict: the pages of two bundles are never mixed.

**notify** (what a peer calls here): a summary of at most 2000 characters from a node, kept in
``peer_notices`` (200 per node: older ones dropped) and shown at ``cuba_jornada start`` and in
``status`` until the bundle it names is imported (the importer closes it). A credential in the
summary, node_id or node_name is redacted rather than refused, and ``redacted`` names its kinds:
the notice is shown to every agent, so the credential must not be kept, but the peer is a remote
process with no one to correct and resend it, and a refusal would lose the news that a bundle
waits. That is how the rest of the project treats text it did not choose to hold: the importer
quarantines a peer's rows that carry a credential (never drops them), verify_log keeps a claim
redacted.

**fetch** (run here, against a peer): pulls every page of the peer's bundle with this node's
CUBA_PEER_TOKEN (services/sync/peer_inbox.py). Its first pull asks for one piece only (the
bundle's manifest.json, which every answer lists first: small and always there), and it stops there when that hash is
the one taken last time (or one imported here already): an unchanged peer costs one small
call. Otherwise it pulls the rest in full pages, writes the
files into ``<sync folder>/.peer-inbox/<peer>/`` (every path checked to stay inside it: one
that does not refuses the whole fetch, nothing imported), imports them (importer.py) and
remembers the peer (url, hash, when, last error) in ``sync_peers``.

(No ``from __future__ import annotations``: the answer TypedDicts are evaluated, see export.py.)
"""

import json
import math
import tempfile
import threading
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from cuba_memorys.errors import ConfigError, Conflict, CubaError, InvalidInput
from cuba_memorys.models import iso, utc_now
from cuba_memorys.secrets_scan import find_secrets, redact
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync import bundle, export, importer, peer_inbox

PAGE_BYTES = 3 * 1024 * 1024  # one page's answer as sent (see the module docstring)
ENVELOPE_BYTES = 16 * 1024  # of it: the answer's own keys and note, the JSON-RPC and HTTP framing
ENTRY_FRAMING = 64  # an entry's indentation and separators in the text content's indented JSON
PIECE_BYTES = (PAGE_BYTES - ENVELOPE_BYTES - ENTRY_FRAMING - 2000) // 4  # raw bytes of one cut piece: hex
# doubles them and the page carries them twice (the 2000 leave room for its path)
MAX_LIMIT = 100_000
SUMMARY_CHARS = 2000
NOTICES_PER_NODE = 200
DEFAULT_PEER = "default"
NAME_CHARS = 100

Row = dict[str, Any]


class SyncPulled(TypedDict):
    action: str
    manifest_hash: str
    node_id: str
    schema_version: int
    with_embeddings: bool
    total_files: int
    total_pieces: int  # beyond the original: files cut into parts count once per part
    offset: int
    files: list[Row]
    has_more: bool
    next_offset: int | None
    note: str


class SyncNotified(TypedDict):
    action: str
    id: str
    recorded: bool
    note: str
    redacted: NotRequired[list[str]]  # beyond the original: the credential kinds cut out of the notice


class SyncFetched(TypedDict):
    action: str
    peer: str
    url: str
    unchanged: bool
    files_received: int
    pages_pulled: int  # beyond the original: pull calls answered (1 when nothing changed)
    bytes_pulled: int  # beyond the original: those answers' size as JSON
    notices_closed: int
    imported: Row | None  # the importer's answer (cuba_sync import); None when unchanged
    manifest_hash: str
    note: str


# -- pull ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    path: str
    part: int
    parts: int
    start: int
    end: int
    text: bool  # sent as UTF-8 text rather than hex
    size: int  # what it adds to a page's answer as sent (_weight)


@dataclass(frozen=True)
class Snapshot:
    """One export kept for paging: its folder, the store's change marker it was made at, its pieces."""

    folder: tempfile.TemporaryDirectory  # removed when the snapshot goes (or the process ends)
    marker: str
    manifest_hash: str
    node_id: str
    with_embeddings: bool
    files: int
    pieces: tuple[Piece, ...]


# Per store (weakly: a closed store's snapshots go with it), per with_embeddings. Only callers that
# may read everything pull (the operator, the peer, a '*' admin: server/runtime.py), so one export
# serves them all.
_snapshots: "weakref.WeakKeyDictionary[Any, dict[bool, Snapshot]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()  # one export at a time; a page is read while no export rewrites its files


def _pieces(root: Path) -> tuple[int, tuple[Piece, ...]]:
    """(files, pieces) of the bundle in ``root``: manifest.json first, then the others by path."""
    files = bundle.bundle_files(root)
    files[bundle.MANIFEST] = bundle.inside(root, bundle.MANIFEST).read_bytes()
    budget = PAGE_BYTES - ENVELOPE_BYTES
    out: list[Piece] = []
    # manifest.json first: it is small and always there, so the one-piece first pull (which tells
    # an unchanged peer) is small; sorted by path, artifacts.json (megabytes) would come first
    for path in sorted(files, key=lambda p: (p != bundle.MANIFEST, p)):
        data = files[path]
        text = data.decode("utf-8") if path.endswith(".json") and _utf8(data) else None
        if text is not None and (weight := _weight({"path": path, "text": text})) <= budget:
            out.append(Piece(path, 0, 1, 0, len(data), True, weight))
            continue
        if (weight := _hex_weight(path, len(data), 1)) <= budget:
            out.append(Piece(path, 0, 1, 0, len(data), False, weight))
            continue
        parts = math.ceil(len(data) / PIECE_BYTES)
        for i in range(parts):
            start, end = i * PIECE_BYTES, min(len(data), (i + 1) * PIECE_BYTES)
            out.append(Piece(path, i, parts, start, end, False, _hex_weight(path, end - start, parts)))
    return len(files), tuple(out)


def _weight(entry: Row) -> int:
    """An entry's bytes in a page's answer: its JSON (the structured content), that JSON again as
    an escaped string (the text content), and its framing."""
    once = json.dumps(entry, ensure_ascii=False)
    return len(once.encode("utf-8")) + len(json.dumps(once, ensure_ascii=False).encode("utf-8")) + ENTRY_FRAMING


def _hex_weight(path: str, raw: int, parts: int) -> int:
    """_weight of a hex entry of ``raw`` bytes, counted without building it (hex needs no escaping)."""
    shape = {"path": path, "hex": "", **({"part": parts, "parts": parts} if parts > 1 else {})}
    return _weight(shape) + 2 * 2 * raw


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _snapshot(mem: Memory, client: str | None, embeddings: bool) -> Snapshot:
    """The kept export while the store has not changed since it was made, else a new one (into
    the same folder: export rewrites only what changed). The marker is read before exporting, so
    a write landing during the export only makes the next page export again."""
    kept = _snapshots.setdefault(mem.store, {})
    marker = mem.store.sync_change_marker()
    snap = kept.get(embeddings)
    if snap is not None and snap.marker == marker:
        return snap
    folder = snap.folder if snap is not None else tempfile.TemporaryDirectory(prefix="cuba-pull-")
    done = export.export(mem, client, dir=folder.name, scope="all", with_embeddings=embeddings)
    files, pieces = _pieces(Path(folder.name))
    kept[embeddings] = Snapshot(folder, marker, done["manifest_hash"], done["node_id"], done["with_embeddings"],
                                files, pieces)
    return kept[embeddings]


def _page(pieces: tuple[Piece, ...], offset: int, limit: int) -> tuple[Piece, ...]:
    """From ``offset``: at most ``limit`` pieces weighing at most PAGE_BYTES - ENVELOPE_BYTES (no
    piece weighs more, so the first always goes)."""
    chosen: list[Piece] = []
    weight = 0
    for piece in pieces[offset:]:
        if len(chosen) >= limit or (chosen and weight + piece.size > PAGE_BYTES - ENVELOPE_BYTES):
            break
        chosen.append(piece)
        weight += piece.size
    return tuple(chosen)


def _entry(root: Path, piece: Piece) -> Row:
    with bundle.inside(root, piece.path).open("rb") as handle:
        handle.seek(piece.start)
        data = handle.read(piece.end - piece.start)
    entry: Row = {"path": piece.path}
    if piece.text:
        entry["text"] = data.decode("utf-8")
    else:
        entry["hex"] = data.hex()
    if piece.parts > 1:
        entry.update(part=piece.part, parts=piece.parts)
    return entry


def embeddings_by_default(mem: Memory) -> bool:
    """pull carries the vectors when there are some to carry (a model is recorded) and zstd is here."""
    model, dim = mem.stored_model()
    return bool(model and dim) and bundle.zstd_available()


def pull(mem: Memory, client: str | None, with_embeddings: object = None, limit: object = None,
         offset: object = 0, manifest_hash: object = None) -> SyncPulled:
    """One page of the whole bundle (see the module docstring)."""
    embeddings = validate.flag("with_embeddings", with_embeddings, embeddings_by_default(mem))
    most = validate.int_range("limit", limit, 1, MAX_LIMIT, MAX_LIMIT)
    start = validate.int_range("offset", 0 if offset is None else offset, 0, 2**31 - 1, 0)
    wanted = validate.optional_text("manifest_hash", manifest_hash, high=128)
    with _lock:
        snap = _snapshot(mem, client, embeddings)
        if wanted is not None and wanted != snap.manifest_hash:
            raise Conflict(f"the bundle changed while it was being pulled: the pages so far belong to manifest"
                           f" {wanted[:16]}…, the memory's bundle is now {snap.manifest_hash[:16]}…; nothing of the"
                           " two is mixed.", hint="Pull again from offset 0 without manifest_hash.")
        if start > len(snap.pieces):
            raise InvalidInput("offset", f"{start} is past the bundle's last piece ({len(snap.pieces)})",
                               f"0..{len(snap.pieces)}, from next_offset")
        chosen = _page(snap.pieces, start, most)
        files = [_entry(Path(snap.folder.name), p) for p in chosen]
    after = start + len(chosen)
    more = after < len(snap.pieces)
    note = (f"More pages: call pull again with offset={after} and manifest_hash={snap.manifest_hash}." if more
            else "Last page: every file of the bundle was sent.")
    return {"action": "pull", "manifest_hash": snap.manifest_hash, "node_id": snap.node_id,
            "schema_version": bundle.SCHEMA_VERSION, "with_embeddings": snap.with_embeddings,
            "total_files": snap.files, "total_pieces": len(snap.pieces), "offset": start, "files": files,
            "has_more": more, "next_offset": after if more else None, "note": note}


# -- notify ----------------------------------------------------------------------------------
def notify(mem: Memory, client: str | None, summary: object = None, node_id: object = None,
           node_name: object = None, manifest_hash: object = None) -> SyncNotified:
    """Record what a peer announced; shown at cuba_jornada start and in status until that bundle is imported."""
    found: list[str] = []
    text = _redacted(validate.text("summary", summary, high=SUMMARY_CHARS), found)
    node = _redacted(validate.text("node_id", node_id, high=NAME_CHARS * 2).strip(), found)
    name = validate.optional_text("node_name", node_name, high=NAME_CHARS * 2)
    name = None if name is None else _redacted(name, found)
    digest = validate.optional_text("manifest_hash", manifest_hash, high=128)
    now = iso(utc_now())
    # A bundle this store imported already (through git, or an earlier fetch) needs no notice: kept closed.
    imported = digest is not None and mem.store.sync_imported(digest)
    notice_id = str(uuid.uuid4())
    with mem.store.transaction():
        mem.store.peer_notice_insert(notice_id, node, name, digest, text, now, now if imported else None,
                                     NOTICES_PER_NODE)
    mem.events.publish("peer.notice", {"id": notice_id, "node_id": node, "node_name": name,
                                       "manifest_hash": digest, "project_id": None})
    note = ("Recorded closed: that bundle was imported here already." if imported else
            "Shown at the next cuba_jornada start and in cuba_sync status until that bundle is imported"
            " (cuba_sync fetch or import).")
    answer: SyncNotified = {"action": "notify", "id": notice_id, "recorded": True, "note": note}
    if found:
        answer["redacted"] = sorted(set(found))
        answer["note"] += (f" What looked like a credential ({', '.join(answer['redacted'])}) was replaced by"
                           " [redacted ...] before it was kept: send references to credentials, never the"
                           " credentials.")
    return answer


def _redacted(value: str, found: list[str]) -> str:
    """``value`` with its credentials redacted; the kinds of those found are added to ``found``."""
    kinds = [match.kind for match in find_secrets(value)]
    if not kinds:
        return value
    found.extend(kinds)
    return redact(value)


def pending_notices(mem: Memory, limit: int = 20) -> list[Row]:
    """The open notices, newest first (what cuba_jornada start shows)."""
    return mem.store.open_peer_notices(limit)


# -- fetch -----------------------------------------------------------------------------------
def peer_name(value: object) -> str:
    """A peer's name: also its inbox folder's, so letters, digits, '-', '_' and '.' only, not leading '.'."""
    name = DEFAULT_PEER if value is None or value == "" else validate.text("peer", value, high=NAME_CHARS).strip()
    if name.startswith(".") or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise InvalidInput("peer", f"{name!r} is not a peer name", "letters, digits, - _ . (not starting with .)")
    return name


def peer_url(mem: Memory, name: str, given: object) -> str:
    """``url``, else the stored peer's, else CUBA_PEER_URL; the base URL, without a trailing /mcp."""
    raw = validate.optional_text("url", given, high=2000)
    if raw is None:
        stored = mem.store.peer_get(name)
        raw = (stored or {}).get("url") or mem.settings.peer_url or None
    if raw is None:
        raise InvalidInput("url", f"no URL for peer {name!r}: none was given, none is stored for it and"
                           " CUBA_PEER_URL is not set", "url=http://HOST:8787 (the peer's serve; stored for"
                           " the next fetch)")
    url = raw.strip().rstrip("/")
    url = url.removesuffix("/mcp").rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise InvalidInput("url", f"{raw!r} is not an http(s) URL", "http://HOST:PORT of the peer's serve")
    return url


def fetch(mem: Memory, client: str | None, peer: object = None, url: object = None, conflict: object = None,
          confirm: object = False, deletes: object = None) -> SyncFetched:
    """Pull a peer's bundle over HTTP and import it (see the module docstring)."""
    name = peer_name(peer)
    # checked before any network work, as the importer will check them
    validate.choice("conflict", conflict, importer.MODES, default="merge")
    validate.flag("confirm", confirm, False)
    validate.choice("deletes", deletes, importer.DELETES, default="apply")
    token = mem.settings.peer_token
    if not token:
        raise ConfigError("fetch needs CUBA_PEER_TOKEN: it is the bearer token this node presents to the peer.",
                          hint="Set CUBA_PEER_TOKEN to the peer's own CUBA_PEER_TOKEN.")
    base = peer_url(mem, name, url)
    last = (mem.store.peer_get(name) or {}).get("last_manifest_hash")
    root = export.sync_dir(mem, None)
    try:
        got = peer_inbox.receive(base, token, root, name, float(mem.settings.handler_timeout_secs),
                                 lambda digest: digest == last or mem.store.sync_imported(digest),
                                 client_name=mem.settings.node_name)
    except CubaError as exc:
        _failed(mem, name, base, exc)
        raise
    if got.inbox is None:
        return _unchanged(mem, name, base, got, seen_last=got.manifest_hash == last)
    try:
        imported = importer.import_bundle(mem, client, dir=str(got.inbox), conflict=conflict, confirm=confirm,
                                          deletes=deletes)
    except CubaError as exc:
        _failed(mem, name, base, exc)
        raise
    now = iso(utc_now())
    with mem.store.transaction():
        mem.store.peer_synced(name, base, got.manifest_hash, now)
        closed = mem.store.sync_close_notices([got.manifest_hash])  # also when the importer skipped it
    notices = int(imported.get("peer_notices_closed") or 0) + closed
    mem.events.publish("sync.fetch", {"peer": name, "manifest_hash": got.manifest_hash, "unchanged": False,
                                      "project_id": None})
    what = ("skipped: those exact files were imported here already" if imported.get("skipped")
            else f"imported {imported.get('rows_inserted', 0)} new rows")
    return {"action": "fetch", "peer": name, "url": base, "unchanged": False, "files_received": got.files,
            "pages_pulled": got.pages, "bytes_pulled": got.bytes, "notices_closed": notices,
            "imported": dict(imported), "manifest_hash": got.manifest_hash,
            "note": f"Received {got.files} files into {got.inbox} and {what}."}


def _unchanged(mem: Memory, name: str, base: str, got: peer_inbox.Received, *, seen_last: bool) -> SyncFetched:
    digest = got.manifest_hash
    now = iso(utc_now())
    with mem.store.transaction():
        mem.store.peer_synced(name, base, digest, now)
        closed = mem.store.sync_close_notices([digest])
    why = ("the peer's bundle is the one taken last time" if seen_last
           else "the peer's bundle was imported here already")
    return {"action": "fetch", "peer": name, "url": base, "unchanged": True, "files_received": 0,
            "pages_pulled": got.pages, "bytes_pulled": got.bytes, "notices_closed": closed,
            "imported": None, "manifest_hash": digest,
            "note": f"Nothing to import: {why} (only its first page, of one piece, was read)."}


def _failed(mem: Memory, name: str, base: str, exc: CubaError) -> None:
    """Remember why the peer failed (status and doctor show it); never hides the error itself."""
    try:
        with mem.store.transaction():
            mem.store.peer_failed(name, base, str(exc)[:2000])
    except CubaError:  # e.g. the call is past its time limit: the original error is what matters
        pass
