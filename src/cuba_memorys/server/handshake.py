"""An ``initialize`` without ``protocolVersion`` is accepted, as the original accepts it (issue 32).

The original assumes protocol version 2024-11-05 when a client names none; the SDK's model of the
request requires the field (and ``capabilities`` and ``clientInfo``, which the original never
reads either) and answers -32602. Here the request is completed before the SDK reads it: over
stdio line by line (server/stdio.py), over HTTP by :class:`InitializeDefaults` in front of /mcp.
A field the client did send is never changed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

ASSUMED_PROTOCOL_VERSION = "2024-11-05"
# What a client that names nothing is taken to have said: the oldest version, no capabilities.
DEFAULTS: dict[str, Any] = {"protocolVersion": ASSUMED_PROTOCOL_VERSION, "capabilities": {},
                            "clientInfo": {"name": "unnamed-client", "version": "0"}}
MAX_BODY = 64 * 1024  # an initialize is small; a larger body is passed on unread
MCP_PATH = "/mcp"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def completed(message: Any) -> bool:
    """Fill in the fields ``message`` (an initialize request) lacks; True when it changed."""
    if not isinstance(message, dict) or message.get("method") != "initialize" or "id" not in message:
        return False
    params = message.get("params")
    if params is None:
        params = message["params"] = {}
    if not isinstance(params, dict):
        return False  # not an object: the SDK's -32600 says so
    missing = {key: value for key, value in DEFAULTS.items() if key not in params}
    params.update(missing)
    return bool(missing)


def completed_line(line: str) -> str:
    """A stdio line, its initialize completed (any other line as it was)."""
    if '"initialize"' not in line:  # the cheap test first: every message passes here
        return line
    if any("\ud800" <= ch <= "\udfff" for ch in line):  # bytes that are not UTF-8: the SDK refuses the line
        return line
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return line
    return json.dumps(message) + "\n" if completed(message) else line


class InitializeDefaults:
    """ASGI middleware: a POST to /mcp whose body is an initialize lacking the fields above is
    handed on completed (with its Content-Length); every other request passes untouched."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        body, more = await _read(receive)
        if not more:
            amended = _amended(body)
            if amended is not None:
                body = amended
                scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", [])
                                              if k.lower() != b"content-length"]
                         + [(b"content-length", str(len(body)).encode())]}
        await self.app(scope, _replay(body, more, receive), send)


async def _read(receive: Receive) -> tuple[bytes, bool]:
    """Up to MAX_BODY bytes of the body; whether more is left to read."""
    chunks: list[bytes] = []
    size, more = 0, True
    while more and size <= MAX_BODY:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False  # the client went away: the app will see it
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body"))
    return b"".join(chunks), more


def _amended(body: bytes) -> bytes | None:
    if b'"initialize"' not in body:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return json.dumps(message).encode() if completed(message) else None


def _replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """The receive channel the app reads: the body read so far, then the rest from the client."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replayed
