"""`cuba-memorys` with no command: MCP over stdio for one agent.

Two things the SDK's stdio loop does not do, added here without forking it (the screen sits
between the SDK's stdio transport and its session):

- **A line that is not a valid JSON-RPC message gets an answer.** The SDK hands such a line to
  its session as an exception, which it only logs, so the client waits forever for the reply.
  Here it is answered with a JSON-RPC error: -32700 (parse error) for a line that is not JSON,
  -32600 (invalid request) for JSON that is not a valid message, with the request's ``id``
  when it can be read from the line (Python's own parser also reads what the SDK's strict one
  refuses, such as a lone surrogate escape), else ``id: null`` as JSON-RPC says. A
  notification (no ``id``) gets no reply, as JSON-RPC says.
- **CUBA_HANDSHAKE_TIMEOUT_SECS** (default 60; 0 or off disables): a server that never receives
  ``initialize`` exits, as the original does, instead of waiting forever for a client that
  will not come — also while the client keeps stdin open (the read of stdin is abandoned, not
  waited for).
- **stdin is read strictly as UTF-8** (:class:`StrictStdin`, given to the SDK's transport in place
  of its own reader, which replaces invalid bytes with U+FFFD and so would store and acknowledge
  garbage as text): a line that is not UTF-8 gets -32700. Each line is also screened before the
  SDK sees it for what its parser would take as something else: a request whose ``id`` is not a
  string or an integer (an object, a float, NaN: the SDK reads it as a notification and never
  answers) gets -32600 with ``id: null``, as JSON-RPC says, and a batch array gets -32600 saying
  that batches are not supported. fd 0 points at the null device meanwhile, as the SDK does, so a
  child process (git) reads end of file rather than the protocol.
- **An initialize without protocolVersion** is completed first (server/handshake.py): the
  original assumes 2024-11-05, the SDK would answer -32602.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from cuba_memorys import locks
from cuba_memorys.config import Settings
from cuba_memorys.errors import CubaError
from cuba_memorys.server import handshake
from cuba_memorys.server.app import CubaServer, create_app
from cuba_memorys.server.runtime import configure_logging
from cuba_memorys.server.watchdog import Watchdog
from cuba_memorys.services.lifecycle.rem import RemScheduler
from cuba_memorys.services.memory import Memory

log = logging.getLogger("cuba_memorys")
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # \ud800-\udfff written as an escape


def run_stdio() -> None:
    configure_logging()
    try:
        settings = Settings.from_env()
        memory = Memory.open(settings)
    except CubaError as exc:
        # Refuse to start (e.g. model/dimension mismatch) with the reason on stderr.
        print(f"error: cannot start: {exc}", file=sys.stderr, flush=True)  # as every verb says it (cli/app.py)
        raise SystemExit(2) from None
    # batch writes' vectors, and what an earlier process left without one (services/embedding_queue.py)
    memory.start_embedding_queue()
    consolidation = RemScheduler(memory)  # the background cycle (services/lifecycle/rem.py)
    consolidation.start()
    watchdog = Watchdog(settings.watchdog_secs)
    watchdog.start()
    try:
        finished = anyio.run(serve, create_app(memory), settings.handshake_timeout_secs, watchdog)
    finally:
        watchdog.stop()
        # The client has gone. Closing lets the embedding queue drain (CUBA_EMBED_DRAIN_SECS); a
        # client that will not wait sends SIGTERM (the MCP SDK after 2 s), which from here on
        # only cuts the drain short, so the store still closes cleanly. The rest is committed
        # and embedded at the next start.
        signal.signal(signal.SIGTERM, lambda *_: memory.hurry_embedding_drain())
        consolidation.stop()
        memory.close()
    if not finished:
        print(f"cuba-memorys: no MCP client said initialize within {settings.handshake_timeout_secs:g} s"
              " (CUBA_HANDSHAKE_TIMEOUT_SECS); exiting.", file=sys.stderr, flush=True)
        # The store is closed. A thread may still be blocked reading the silent client's stdin,
        # and the interpreter would wait for it at exit: leave now.
        os._exit(2)


async def serve(app: CubaServer, handshake_timeout: float, watchdog: Watchdog | None = None) -> bool:
    """Serve until the client goes away (True), or until ``handshake_timeout`` seconds pass
    without an ``initialize`` (False; 0 waits forever). The event loop ticks ``watchdog``."""
    locks.serving_loop()  # CUBA_LOCK_CHECK: this loop must never wait on the store
    greeted = anyio.Event()
    server = app._lowlevel_server
    with StrictStdin.claim() as stdin:
        return await _serve(server, stdin, greeted, handshake_timeout, watchdog)


async def _serve(server: Any, stdin: StrictStdin, greeted: anyio.Event, handshake_timeout: float,
                 watchdog: Watchdog | None) -> bool:
    # The handshake limit cancels everything, the transport's reader included (it is abandoned
    # in its read of stdin, so an open but silent stdin does not keep the process alive).
    with anyio.CancelScope() as everything:
        async with stdio_server(stdin=cast(Any, stdin)) as (read_stream, write_stream):
            stdin.outbox = write_stream
            inbox_writer, inbox = create_context_streams[SessionMessage | Exception](0)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(screen, read_stream, inbox_writer, write_stream, greeted)
                if handshake_timeout > 0:
                    tasks.start_soon(watch_handshake, greeted, handshake_timeout, everything)
                if watchdog is not None and watchdog.enabled:
                    tasks.start_soon(watchdog.heartbeat)
                await server.run(inbox, write_stream, server.create_initialization_options())
                tasks.cancel_scope.cancel()
    return greeted.is_set() or handshake_timeout <= 0


async def watch_handshake(greeted: anyio.Event, seconds: float, scope: anyio.CancelScope) -> None:
    with anyio.move_on_after(seconds):
        await greeted.wait()
    if not greeted.is_set():
        scope.cancel()


async def screen(source: Any, inbox: Any, outbox: Any, greeted: anyio.Event) -> None:
    """Pass valid messages on to the session; answer the ones the SDK could not read."""
    async with inbox:
        async for item in source:
            if isinstance(item, Exception):
                reply = error_reply(item)
                if reply is not None:
                    await outbox.send(SessionMessage(reply))
                continue
            if isinstance(item.message, types.JSONRPCRequest) and item.message.method == "initialize":
                greeted.set()
            await inbox.send(item)


class StrictStdin:
    """The process's stdin as the SDK's transport iterates it: lines decoded strictly (an invalid
    byte stays a surrogate escape, which the SDK's parser refuses as not Unicode), each screened
    first (:func:`screen_line`); a line answered here never reaches the SDK. Reading a line is
    abandoned, not waited for, when the serve loop is cancelled (the handshake limit)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.text = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape")
        self.outbox: Any = None  # the transport's write stream, set once it exists

    @classmethod
    @contextmanager
    def claim(cls) -> Iterator[StrictStdin]:
        """Read the protocol from a private copy of fd 0, fd 0 itself on the null device meanwhile."""
        private = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        stream = cls(os.fdopen(private, "rb"))
        try:
            yield stream
        finally:
            with contextlib.suppress(OSError):
                os.dup2(private, 0)  # the wire back on fd 0
            # The private copy is not closed: an abandoned read may still hold its buffer's lock
            # (the handshake limit), and closing would wait for it; the process ends next.

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self.text.readline, abandon_on_cancel=True)
            if not line:
                return
            reply = screen_line(line)
            if reply is None:
                yield handshake.completed_line(line)  # an initialize without protocolVersion, as the original
            elif reply is not NO_REPLY and self.outbox is not None:
                await self.outbox.send(SessionMessage(reply))


NO_REPLY = types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=0, message=""))  # a marker


def screen_line(line: str) -> types.JSONRPCError | None:
    """The reply for a line the SDK would misread (None: pass it on; NO_REPLY: answer nothing)."""
    if not line.strip():
        return NO_REPLY
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None  # the SDK's parser says what is wrong (screen() answers it)
    if isinstance(message, list):
        return _error(None, INVALID_REQUEST, "Invalid request", "batch requests (a JSON array) are not supported:"
                      " send one JSON-RPC message per line")
    if not isinstance(message, dict) or "id" not in message:
        return None
    request_id = message["id"]
    valid = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    if valid or request_id is None:
        return None
    return _error(None, INVALID_REQUEST, "Invalid request", f"id: {json.dumps(request_id)[:80]} is not a string or"
                  " an integer (JSON-RPC allows a string, an integer or null)")


def _error(request_id: str | int | None, code: int, text: str, detail: str) -> types.JSONRPCError:
    log.info("stdio: answered an unreadable message with %s (%s)", code, detail)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=text,
                                                                                 data=detail[:500]))


def error_reply(exc: Exception) -> types.JSONRPCError | None:
    """The JSON-RPC error for a line the SDK refused, or None for a notification."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    message = read_message(errors)
    if message is not None and "id" not in message:
        return None  # a notification: JSON-RPC sends no reply, even for an error
    raw_id = message.get("id") if message is not None else None
    request_id = raw_id if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None
    unreadable = any(e["type"] in ("json_invalid", "string_unicode") for e in errors)
    code, text = (PARSE_ERROR, "Parse error") if unreadable else (INVALID_REQUEST, "Invalid request")
    return _error(request_id, code, text, _detail(errors, exc))


def _detail(errors: list[Any], exc: Exception) -> str:
    """What was wrong, in words: the field a message lacks, a byte that is not UTF-8, a lone
    surrogate escape (not the parser's "hex escape" wording)."""
    if not errors:
        return str(exc)
    first = errors[0]
    if first["type"] == "string_unicode":
        return "the line is not valid UTF-8: send the message as UTF-8 text"
    raw = first.get("input") if isinstance(first.get("input"), str) else ""
    if first["type"] == "json_invalid" and ("surrogate" in first["msg"] or SURROGATE_ESCAPE.search(raw)):
        return ("a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair) is not a character: send"
                f" valid Unicode ({first['msg']})")
    if first["type"] == "missing" and first.get("loc"):
        # the union's first member is the request: what a message with an id lacks to be one
        request = [e for e in errors if e["type"] == "missing" and e.get("loc") and e["loc"][0] == "JSONRPCRequest"]
        missing = sorted({str(e["loc"][-1]) for e in request or errors if e["type"] == "missing"})
        return f"field required: {', '.join(missing)}"
    return str(first["msg"])


def read_message(errors: list[Any]) -> dict[str, Any] | None:
    """The message as a JSON object, when it can be read: the SDK's error carries the raw line
    (json_invalid: Python's parser reads some lines pydantic's refuses, such as a lone
    surrogate escape) or, for a message of the wrong shape, the parsed object."""
    for error in errors:
        candidate = error.get("input")
        if isinstance(candidate, str):
            try:
                candidate = json.loads(candidate)
            except (ValueError, RecursionError):
                continue
        if isinstance(candidate, dict) and "jsonrpc" in candidate:
            return candidate
    return None
