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
  will not come.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from cuba_memorys import locks
from cuba_memorys.config import Settings
from cuba_memorys.errors import CubaError
from cuba_memorys.server.app import CubaServer, create_app
from cuba_memorys.server.runtime import configure_logging
from cuba_memorys.server.watchdog import Watchdog
from cuba_memorys.services.lifecycle.rem import RemScheduler
from cuba_memorys.services.memory import Memory

log = logging.getLogger("cuba_memorys")
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


def run_stdio() -> None:
    configure_logging()
    try:
        settings = Settings.from_env()
        memory = Memory.open(settings)
    except CubaError as exc:
        # Refuse to start (e.g. model/dimension mismatch) with the reason on stderr.
        print(f"cuba-memorys: cannot start: {exc}", file=sys.stderr)
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
              " (CUBA_HANDSHAKE_TIMEOUT_SECS); exiting.", file=sys.stderr)
        raise SystemExit(2)


async def serve(app: CubaServer, handshake_timeout: float, watchdog: Watchdog | None = None) -> bool:
    """Serve until the client goes away (True), or until ``handshake_timeout`` seconds pass
    without an ``initialize`` (False; 0 waits forever). The event loop ticks ``watchdog``."""
    locks.serving_loop()  # CUBA_LOCK_CHECK: this loop must never wait on the store
    greeted = anyio.Event()
    server = app._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        inbox_writer, inbox = create_context_streams[SessionMessage | Exception](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(screen, read_stream, inbox_writer, write_stream, greeted)
            if handshake_timeout > 0:
                tasks.start_soon(watch_handshake, greeted, handshake_timeout, tasks.cancel_scope)
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


def error_reply(exc: Exception) -> types.JSONRPCError | None:
    """The JSON-RPC error for a line the SDK refused, or None for a notification."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    message = read_message(errors)
    if message is not None and "id" not in message:
        return None  # a notification: JSON-RPC sends no reply, even for an error
    raw_id = message.get("id") if message is not None else None
    request_id = raw_id if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None
    invalid_json = any(e["type"] == "json_invalid" for e in errors)
    code, text = (PARSE_ERROR, "Parse error") if invalid_json else (INVALID_REQUEST, "Invalid request")
    detail = errors[0]["msg"] if errors else str(exc)
    log.info("stdio: answered an unreadable message with %s (%s)", code, detail)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                              error=types.ErrorData(code=code, message=text, data=detail[:500]))


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
