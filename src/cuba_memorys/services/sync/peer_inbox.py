"""fetch's network half: a peer's cuba_sync pull pages over HTTP, drained into the peer's inbox.

**The client.** The official MCP client (``mcp.client.streamable_http`` with ``ClientSession``)
rather than hand-made JSON-RPC: the peer is an MCP server, and the SDK already speaks its
protocol — initialize and the protocol version, the session header, answers sent as JSON or as
server-sent events — that a hand-made client would have to repeat and keep up to date. It runs on
an event loop of its own (``anyio.run``) in the calling thread: fetch is called from a tool
call's worker thread or from the CLI, neither of which has a loop. Every request is bounded by
the handler timeout (CUBA_HANDLER_TIMEOUT_SECS), and the time limit of the tool call is checked
between pages.

**One small call when nothing changed.** The first pull asks for ``limit`` 1: one piece (the
bundle's manifest.json, which the peer puts first: small and always there) and the manifest
hash. When that hash was taken already the fetch stops there; else that piece is the inbox's
first and the following pulls, from offset 1 with the hash, carry no limit (the peer fills each
page up to its bound).

**The inbox.** Pages are written into a fresh folder next to ``<sync folder>/.peer-inbox/<peer>``
and only when every page arrived and the files add up to the manifest hash the pages named is it
renamed into place (the previous inbox goes): the inbox always holds exactly one whole bundle,
which is what the importer computes its hash over. Every path a peer names is checked before
anything is written: relative, no ``..``, no part starting with ``.``, inside the folder with
symbolic links followed; one that is not refuses the whole fetch and nothing is imported.
``.peer-inbox`` holds a ``.gitignore`` of ``*``: an inbox is not part of the repository's bundle.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from cuba_memorys import deadline
from cuba_memorys.errors import CubaError, InvalidInput
from cuba_memorys.services.sync import bundle

INBOX = ".peer-inbox"
# An answer as one server-sent event. Ours stay under 3 MiB as sent (services/sync/peers.py); an
# original's page holds 3 MiB of payload, sent twice and escaped, so several times that.
MAX_EVENT_BYTES = 64 * 1024 * 1024
FIRST_LIMIT = 1  # the first pull asks for one piece: enough to learn the manifest hash
MAX_PATH_CHARS = 1000

Row = dict[str, Any]


@dataclass(frozen=True)
class Received:
    manifest_hash: str
    files: int
    inbox: Path | None  # None: the first page said there is nothing new, and nothing was written
    pages: int = 0  # pull calls answered
    bytes: int = 0  # their answers' size, as JSON


def refused(url: str, what: str) -> InvalidInput:
    return InvalidInput("url", f"the peer at {url} {what}; the fetch was stopped and nothing was imported",
                        "fetch only from a cuba-memorys serve (its cuba_sync pull pages name bundle files)")


class Inbox:
    """A peer's pages, written into a staging folder, then renamed into place as the inbox."""

    def __init__(self, root: Path, peer: str, url: str) -> None:
        self.url = url
        self.parent = root / INBOX
        self.parent.mkdir(parents=True, exist_ok=True)
        bundle.inside(root, f"{INBOX}/{peer}")  # a .peer-inbox that is a link leading out is refused
        ignore = self.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n", encoding="utf-8")
        self.final = self.parent / peer
        self.staging = Path(tempfile.mkdtemp(prefix=f".{peer}.incoming-", dir=self.parent))
        self.complete: set[str] = set()
        self.partial: tuple[str, int, int] | None = None  # (path, next part, parts) of a file being cut

    def _target(self, path: object) -> Path:
        if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
            raise refused(self.url, f"sent a file with no usable path ({str(path)[:80]!r})")
        parts = path.split("/")
        if path.startswith("/") or "\\" in path or "\0" in path or any(p in ("", ".", "..") or p.startswith(".")
                                                                       for p in parts):
            raise refused(self.url, f"sent a file named {path!r}, which is not a path inside its inbox")
        try:
            return bundle.inside(self.staging, path)
        except InvalidInput:
            raise refused(self.url, f"sent a file named {path!r}, which leads outside its inbox") from None

    def write(self, entry: object) -> None:
        """One piece of a page: ``{path, text}``, ``{path, hex}``, or ``{path, hex, part, parts}``."""
        if not isinstance(entry, dict):
            raise refused(self.url, "sent a file entry that is not an object")
        path = entry.get("path")
        target = self._target(path)
        data = self._data(entry)
        part, parts = entry.get("part", 0), entry.get("parts", 1)
        if not (isinstance(part, int) and isinstance(parts, int) and 0 <= part < parts):
            raise refused(self.url, f"sent {path!r} with part {part!r} of {parts!r}")
        expected = (self.partial[0], self.partial[1]) if self.partial else None
        if (expected is not None and expected != (path, part)) or (expected is None and part != 0):
            raise refused(self.url, f"sent part {part} of {path!r} out of order")
        if path in self.complete:
            raise refused(self.url, f"sent {path!r} twice")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._target(path)  # again: a folder made just now is not a link, one that existed could be
            with target.open("ab" if part else "xb") as out:
                out.write(data)
        except OSError as exc:  # e.g. a file where a folder of another path must go
            raise refused(self.url, f"sent {path!r}, which cannot be written in its inbox ({exc.strerror})") from None
        if part + 1 < parts:
            self.partial = (str(path), part + 1, parts)
        else:
            self.partial = None
            self.complete.add(str(path))

    def _data(self, entry: Row) -> bytes:
        text, hexed = entry.get("text"), entry.get("hex")
        if isinstance(text, str) and hexed is None:
            return text.encode("utf-8")
        if isinstance(hexed, str) and text is None:
            try:
                return bytes.fromhex(hexed)
            except ValueError:
                raise refused(self.url, f"sent {entry.get('path')!r} with hex that is not hex") from None
        raise refused(self.url, f"sent {entry.get('path')!r} without exactly one of text or hex")

    def finish(self, manifest_hash: str) -> Path:
        """Check the bundle is whole and is the one the pages named, then make it the inbox."""
        if self.partial is not None:
            raise refused(self.url, f"stopped in the middle of {self.partial[0]!r}")
        manifest_path = self.staging / bundle.MANIFEST
        if bundle.MANIFEST not in self.complete:
            raise refused(self.url, "sent no manifest.json")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            version, project = manifest["schema_version"], manifest.get("project_id")
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            raise refused(self.url, "sent a manifest.json that is not a bundle manifest") from None
        hashes = {p: bundle.sha256((self.staging / p).read_bytes()) for p in self.complete if p != bundle.MANIFEST}
        if bundle.manifest_hash(version, project, hashes) != manifest_hash:
            raise refused(self.url, f"sent files that do not add up to the manifest hash its pages named"
                                    f" ({manifest_hash[:16]}…): a page was lost or altered")
        old = self.parent / f".{self.final.name}.old-{uuid.uuid4().hex[:8]}"
        if self.final.exists() or self.final.is_symlink():
            self.final.rename(old)
        self.staging.rename(self.final)
        shutil.rmtree(old, ignore_errors=True)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class Drain:
    """Checks each page against the first and hands its files to the inbox."""

    def __init__(self, url: str, have: Callable[[str], bool], make_inbox: Callable[[], Inbox]) -> None:
        self.url, self.have, self.make_inbox = url, have, make_inbox
        self.manifest_hash: str | None = None
        self.inbox: Inbox | None = None
        self.offset = 0
        self.total: int | None = None
        self.pages = 0  # pages written into the inbox
        self.calls = 0  # pages taken, the first included when it said there is nothing new
        self.bytes = 0  # the answers' size as JSON (what the peer sent, give or take its framing)

    def page(self, answer: object) -> int | None:
        """Take one page; the offset of the next one, or None when done (or nothing new)."""
        deadline.check()
        if not isinstance(answer, dict) or not isinstance(answer.get("files"), list):
            raise refused(self.url, "answered pull with something that is not a page of files")
        self.calls += 1
        self.bytes += len(json.dumps(answer, ensure_ascii=False).encode("utf-8"))
        digest, total = answer.get("manifest_hash"), answer.get("total_pieces", answer.get("total_files"))
        if not isinstance(digest, str) or not digest or not isinstance(total, int):
            raise refused(self.url, "answered pull without a manifest_hash and a file count")
        if self.manifest_hash is None:
            self.manifest_hash, self.total = digest, total
            if self.have(digest):
                return None
            self.inbox = self.make_inbox()
        elif digest != self.manifest_hash or total != self.total:
            raise refused(self.url, "changed its bundle between pages")
        if answer.get("offset", self.offset) != self.offset:
            raise refused(self.url, f"sent the page at offset {answer.get('offset')!r} when {self.offset} was asked")
        assert self.inbox is not None
        for entry in answer["files"]:
            self.inbox.write(entry)
        self.offset += len(answer["files"])
        self.pages += 1
        if not answer.get("has_more"):
            return None
        if not answer["files"] or answer.get("next_offset") != self.offset or self.offset > total:
            raise refused(self.url, "sent a page that does not move on to the next one")
        return self.offset


async def _pull_pages(url: str, token: str, timeout: float, drain: Drain, client_name: str) -> None:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}", "Mcp-Client-Id": f"cuba-memorys-fetch/{client_name}"[:200]}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout), follow_redirects=False) as http,
        streamable_http_client(f"{url}/mcp", http_client=http, max_sse_event_size=MAX_EVENT_BYTES)
        as (read, write),
        ClientSession(read, write, read_timeout_seconds=timeout) as session,
    ):
        with anyio.fail_after(timeout):
            await session.initialize()
        # One piece first: a peer whose bundle was taken already sends next to nothing. The next
        # pages go unbounded by count (the peer's 3 MiB a page still holds).
        arguments: Row = {"action": "pull", "limit": FIRST_LIMIT}
        while True:
            with anyio.fail_after(timeout):
                result = await session.call_tool("cuba_sync", arguments)
            if getattr(result, "is_error", False):
                content = getattr(result, "content", None) or []
                text = getattr(content[0], "text", "") if content else ""
                raise refused(url, f"refused pull: {text[:500]}")
            following = drain.page(_answer(result))
            if following is None:
                return
            arguments = {"action": "pull", "offset": following, "manifest_hash": drain.manifest_hash}


def _answer(result: Any) -> Any:
    """The tool's answer: its structured content, else the JSON of its text (a peer that sends
    only text content, as the original's does)."""
    structured = getattr(result, "structured_content", None)
    if isinstance(structured, dict) and "files" in structured:
        return structured
    content = getattr(result, "content", None) or []
    try:
        return json.loads(getattr(content[0], "text", "")) if content else None
    except ValueError:
        return None


def _first_cuba_error(exc: BaseException) -> CubaError | None:
    """Our own error inside the task groups' exception groups the MCP client raises, if any."""
    if isinstance(exc, CubaError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_cuba_error(inner)
            if found is not None:
                return found
    cause = exc.__cause__ or exc.__context__
    return _first_cuba_error(cause) if isinstance(cause, BaseException) and cause is not exc else None


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "did not answer in time"
    return f"could not be reached or did not answer as an MCP server ({type(exc).__name__}: {str(exc)[:300]})"


def receive(url: str, token: str, root: Path, peer: str, timeout: float, have: Callable[[str], bool],
            client_name: str = "") -> Received:
    """Every page of the peer's bundle into ``root/.peer-inbox/peer`` (see the module docstring);
    the first pull asks for one piece, and it stops there when ``have(manifest_hash)``."""
    drain = Drain(url, have, lambda: Inbox(root, peer, url))
    try:
        anyio.run(_pull_pages, url, token, timeout, drain, client_name)
        if drain.manifest_hash is None:
            raise refused(url, "sent no page")
        if drain.inbox is None:
            return Received(drain.manifest_hash, 0, None, drain.calls, drain.bytes)
        final = drain.inbox.finish(drain.manifest_hash)
        return Received(drain.manifest_hash, len(drain.inbox.complete), final, drain.calls, drain.bytes)
    except Exception as exc:
        if drain.inbox is not None:
            drain.inbox.discard()
        ours = _first_cuba_error(exc)
        if ours is not None:
            raise ours from None
        raise refused(url, _reason(exc)) from exc
