"""`serve`'s web routes besides /mcp (spec §4a): /health, the connect page, /events and its tickets.

- ``GET /health`` (no token): the daemon's state (server/health.py); the operator's token or an
  admin principal's adds the connected clients and the runtime block.
- ``GET /`` and ``GET /connect`` (no token): one static page (server/pages/connect.html) with
  the copy-paste client configuration, the /health status and a live event log. It embeds no
  data: its script fetches /health and the events with the token the user types, kept in
  ``sessionStorage``. Strict security headers (CSP without connect beyond 'self', no framing).
- ``GET /events``: server-sent events from the process's bus (services/events.py), each as
  ``event: <kind>`` and ``data: {kind, at, payload}``, a comment every 15 s to keep proxies from
  closing an idle stream, and ``retry:``. Admits a bearer header, ``?ticket=`` (a browser's
  EventSource cannot send headers) or the legacy ``?token=``; with no token configured, anyone
  (a loopback bind only, app.check_bind). A principal without a ``*`` reader grant sees only the
  events of projects it may read. A slow reader is its own subscription's problem: the bus drops
  its backlog and sends it one ``lagged`` event; the publisher never waits.
- ``POST /events/ticket``: the operator or an admin principal gets a ticket for /events (uuid4,
  120 s). Tickets are single-use: a ticket travels in a URL, where it can end up in a proxy's
  access log, the browser's history or a Referer; once used (or expired) a copy found there opens
  nothing. A page that reconnects asks for a new ticket (connect.html does).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from cuba_memorys import locks
from cuba_memorys.server import health
from cuba_memorys.services import access
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.events import EventBus, Subscription
from cuba_memorys.services.memory import Memory

TICKET_SECS = 120
KEEPALIVE_SECS = 15.0
RETRY_MS = 3000  # how long an EventSource waits before reconnecting
HEALTH_TIMEOUT_SECS = 10.0  # a database that does not answer within this is reported unreachable
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline';"
                               " connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none';"
                               " frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Content-Type-Options": "nosniff"}
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})


# -- who is asking -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Caller:
    """The operator (CUBA_HTTP_TOKEN, or anyone when no token is configured), a principal, or a
    read-only sync peer (CUBA_PEER_TOKEN: no events, no tickets, the public /health)."""

    principal: access.Principal | None = None
    peer: bool = False

    @property
    def admin(self) -> bool:
        return not self.peer and (self.principal is None or self.principal.may("admin", None))

    def sees(self, item: dict[str, Any]) -> bool:
        """Whether this caller may see an event: the operator and '*' readers see all; another
        principal only those of a project it may read (an event of no project is not one)."""
        if self.principal is None or self.principal.may("reader", None) or item.get("kind") == "lagged":
            return True
        project = (item.get("payload") or {}).get("project_id")
        return isinstance(project, str) and self.principal.may("reader", project)


OPERATOR = Caller()
PEER = Caller(peer=True)
PEER_NO_EVENTS = ("forbidden: the peer token (CUBA_PEER_TOKEN) reaches only cuba_sync status, pull and notify over"
                  " /mcp; events need the operator's token (CUBA_HTTP_TOKEN) or a principal's")


class Auth:
    """The tokens `serve` was started with, and who a token belongs to."""

    def __init__(self, memory: Memory, token: str, tokens: TokenRegistry | None) -> None:
        self.memory, self.token, self.tokens = memory, token, tokens
        self.peer_token = memory.settings.peer_token

    def is_peer(self, given: str) -> bool:
        return bool(self.peer_token and given) and hmac.compare_digest(given.encode(), self.peer_token.encode())

    @property
    def required(self) -> bool:
        return bool(self.token) or self.tokens is not None

    def caller(self, given: str) -> Caller | None:
        """Who ``given`` belongs to (None: nobody, or no token given while one is required).
        Reads the principal's grants: call it in a worker thread."""
        if self.is_peer(given):  # first: even a daemon with no operator token holds a peer to its verbs
            return PEER
        if not self.required:
            return OPERATOR
        if not given:
            return None
        if self.token and hmac.compare_digest(given.encode(), self.token.encode()):
            return OPERATOR
        name = self.tokens.principal(given) if self.tokens is not None else None
        return None if name is None else Caller(access.load(self.memory, name))


def local_host(request: Request) -> bool:
    """Whether the request names this machine in its Host header. Without a token a loopback daemon
    trusts its callers; a web page that rebinds its own name to 127.0.0.1 reaches it too, but with its
    own name as Host (the SDK refuses such requests to /mcp the same way)."""
    host = request.headers.get("host", "").strip().lower()
    name = host[: host.find("]") + 1] if host.startswith("[") else host.rsplit(":", 1)[0]
    return name in LOCAL_HOSTS


def bearer(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


# -- tickets -------------------------------------------------------------------------------------

class Tickets:
    """Short-lived single-use tickets for /events, in memory (a restart forgets them, as it should)."""

    def __init__(self, ttl: float = TICKET_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._issued: dict[str, tuple[float, Caller]] = {}
        self._lock = locks.lock("event tickets", "bookkeeping")

    def issue(self, caller: Caller) -> str:
        ticket = str(uuid.uuid4())
        with self._lock:
            now = self.clock()
            for old in [t for t, (until, _) in self._issued.items() if until <= now]:
                del self._issued[old]  # expired ones go as new ones are made: the dict stays small
            self._issued[ticket] = (now + self.ttl, caller)
        return ticket

    def redeem(self, ticket: str) -> Caller | None:
        """The ticket's caller, once: the ticket is gone after this, used or expired."""
        with self._lock:
            found = self._issued.pop(ticket, None)
        if found is None or found[0] <= self.clock():
            return None
        return found[1]


# -- the event stream ----------------------------------------------------------------------------

_CLOSING: dict[str, Any] = {"kind": "_closing"}  # offered to open streams when the server shuts down
_open: set[Subscription] = set()
_open_lock = locks.lock("event streams", "events")


def end_streams() -> int:
    """End every open /events stream of this process (serve's graceful shutdown would otherwise
    wait for them forever: an event stream never finishes by itself). Returns how many."""
    with _open_lock:
        subscriptions = list(_open)
    for sub in subscriptions:
        with contextlib.suppress(RuntimeError):  # its loop is gone; so is the stream
            sub.loop.call_soon_threadsafe(sub.offer, _CLOSING)
    return len(subscriptions)


def frame(item: dict[str, Any]) -> str:
    """One server-sent event. JSON has no raw newline, so ``data`` is one line."""
    return f"event: {item['kind']}\ndata: {json.dumps(item, ensure_ascii=False, default=str)}\n\n"


async def event_frames(bus: EventBus, caller: Caller, *, recent: bool = False,
                       keepalive: float = KEEPALIVE_SECS) -> AsyncIterator[str]:
    """The stream one /events reader gets: ``retry:``, the recent events when asked, then each
    event as it comes, a comment when none came for ``keepalive`` seconds. Subscribed before the
    first line is sent, so a reader that saw it misses nothing published afterwards."""
    sub = bus.subscribe()
    with _open_lock:
        _open.add(sub)
    try:
        yield f"retry: {RETRY_MS}\n: subscribed\n\n"
        if recent:
            for item in bus.recent():
                if caller.sees(item):
                    yield frame(item)
        while True:
            try:
                item = await asyncio.wait_for(sub.next(), keepalive)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if item is _CLOSING:
                return
            if caller.sees(item):
                yield frame(item)
    finally:
        bus.unsubscribe(sub)
        with _open_lock:
            _open.discard(sub)


# -- the routes ----------------------------------------------------------------------------------

def unauthorized(message: str) -> JSONResponse:
    return JSONResponse({"error": f"unauthorized: {message}"}, status_code=401,
                        headers={"WWW-Authenticate": "Bearer"})


def foreign_host() -> JSONResponse:
    return JSONResponse({"error": "forbidden: this daemon has no token and answers only requests addressed to"
                                  " localhost, 127.0.0.1 or [::1] (set CUBA_HTTP_TOKEN to reach it by another name)"},
                        status_code=403)


def connect_page() -> str:
    return resources.files("cuba_memorys.server").joinpath("pages/connect.html").read_text(encoding="utf-8")


class Routes:
    """The handlers, over one memory, its runtime (for requests_served) and the tokens."""

    def __init__(self, memory: Memory, served: health.Served, auth: Auth, tickets: Tickets | None = None,
                 *, loopback: bool = True) -> None:
        self.memory, self.served, self.auth = memory, served, auth
        self.tickets = tickets or Tickets()
        self.page = connect_page()  # read once: it is static
        self.check_host = loopback and not auth.required  # the only wall of a daemon without a token
        self._health_threads: anyio.CapacityLimiter | None = None

    def _foreign(self, request: Request) -> bool:
        return self.check_host and not local_host(request)

    async def _caller(self, given: str) -> Caller | None:
        return await anyio.to_thread.run_sync(self.auth.caller, given)

    async def health(self, request: Request) -> JSONResponse:
        given, foreign = bearer(request), self._foreign(request)

        def body_of() -> dict[str, Any]:
            caller = self.auth.caller(given) if given or not self.auth.required else None
            full = caller is not None and caller.admin and not foreign
            return health.report(self.memory, self.served, full=full)

        if self._health_threads is None:  # its own threads: a pool full of waiting tool calls cannot delay it
            self._health_threads = anyio.CapacityLimiter(2)
        try:
            with anyio.fail_after(HEALTH_TIMEOUT_SECS):
                body = await anyio.to_thread.run_sync(body_of, abandon_on_cancel=True, limiter=self._health_threads)
        except TimeoutError:
            body = {"status": "degraded", "database": "unreachable", "ready": False,
                    "why": [f"the database did not answer within {HEALTH_TIMEOUT_SECS:g} s"],
                    "connect": health.CONNECT, "events": health.EVENTS, "backend": self.memory.store.backend}
        return JSONResponse(body, headers={"Cache-Control": "no-store"})  # 200 whatever the status

    async def connect(self, _: Request) -> HTMLResponse:
        return HTMLResponse(self.page, headers=PAGE_HEADERS)

    async def ticket(self, request: Request) -> JSONResponse:
        if self._foreign(request):
            return foreign_host()
        caller = await self._caller(bearer(request))
        if caller is None:  # the guard refused unknown tokens already; this is a second wall
            return unauthorized("send Authorization: Bearer <CUBA_HTTP_TOKEN>")
        if caller.peer:
            return JSONResponse({"error": PEER_NO_EVENTS}, status_code=403)
        if not caller.admin:
            return JSONResponse({"error": "forbidden: an events ticket needs the operator's token (CUBA_HTTP_TOKEN)"
                                          " or a principal with admin on every project ('*=admin'); send your own"
                                          " token as a bearer header to GET /events instead"}, status_code=403)
        ticket = self.tickets.issue(caller)
        return JSONResponse({"ticket": ticket, "expires_in_secs": TICKET_SECS, "events": health.EVENTS,
                             "single_use": True}, headers={"Cache-Control": "no-store"})

    async def events(self, request: Request) -> Response:
        caller = await self._events_caller(request)
        if isinstance(caller, Response):
            return caller
        recent = request.query_params.get("recent", "") in ("1", "true")
        return StreamingResponse(event_frames(self.memory.events, caller, recent=recent),
                                 media_type="text/event-stream", headers=STREAM_HEADERS)

    async def _events_caller(self, request: Request) -> Caller | Response:
        if self.auth.is_peer(bearer(request) or request.query_params.get("token") or ""):
            return JSONResponse({"error": PEER_NO_EVENTS}, status_code=403)
        if not self.auth.required:
            return foreign_host() if self._foreign(request) else OPERATOR
        ticket, token = request.query_params.get("ticket"), request.query_params.get("token")
        if ticket is not None:
            found = self.tickets.redeem(ticket)
            return found or unauthorized("this ticket is unknown, used or expired (a ticket opens one stream"
                                         f" within {TICKET_SECS} s): POST /events/ticket for a new one")
        given = bearer(request) or (token or "")
        if not given:
            return unauthorized("send Authorization: Bearer <token>, or ?ticket= from POST /events/ticket")
        caller = await self._caller(given)
        return caller or unauthorized("this token belongs to no one: send CUBA_HTTP_TOKEN or a principal's token")


def register(server: Any, memory: Memory, token: str, tokens: TokenRegistry | None, *, loopback: bool) -> Routes:
    """Add the routes to ``server`` (an MCPServer, before its streamable_http_app is made)."""
    routes = Routes(memory, server.runtime, Auth(memory, token, tokens), loopback=loopback)
    server.custom_route("/health", methods=["GET"])(routes.health)
    server.custom_route("/", methods=["GET"])(routes.connect)
    server.custom_route("/connect", methods=["GET"])(routes.connect)
    server.custom_route("/events", methods=["GET"])(routes.events)
    server.custom_route("/events/ticket", methods=["POST"])(routes.ticket)
    return routes
