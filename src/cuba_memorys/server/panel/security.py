"""The panel's walls: where it answers, who it answers, and the headers of every page.

- Loopback binds only, unless CUBA_PANEL_PUBLIC=1 (checked when serve starts: ``check_public``).
- A request with a proxy-forwarding header is refused unless CUBA_PANEL_PUBLIC=1: behind a
  proxy every caller looks like 127.0.0.1, so the loopback rule would protect nothing.
- With a token configured (CUBA_HTTP_TOKEN or principals), a login form trades the token for a
  random session id in an HttpOnly SameSite=Strict cookie; the server maps the id to the caller
  (the token itself is never stored in the browser). Each session has its own CSRF token, which
  every POST must carry; every POST, the login's too, is refused when its Origin is another site.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from cuba_memorys import locks
from cuba_memorys.errors import ConfigError
from cuba_memorys.server.events_http import Caller

COOKIE = "cuba-panel-session"
SESSION_SECS = 8 * 3600  # a working day; then the login form again
MAX_SESSIONS = 1000  # the oldest go first: a flood of logins cannot grow the table without bound
FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
                      "x-forwarded-server", "x-real-ip", "cf-connecting-ip", "cf-ray", "x-client-ip",
                      "true-client-ip")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:;"
       " base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def check_public(loopback: bool, public: bool) -> None:
    """Refuse to start a panel on a network bind unless CUBA_PANEL_PUBLIC=1 says so."""
    if not loopback and not public:
        raise ConfigError("refusing to serve the panel (CUBA_PANEL=1) beyond loopback: its pages show the whole"
                          " memory to whoever reaches them.",
                          hint="Bind 127.0.0.1 (an SSH tunnel reaches it from elsewhere), or set"
                               " CUBA_PANEL_PUBLIC=1 with CUBA_HTTP_TOKEN set.")


def forwarded(request: Request) -> str | None:
    """The first proxy-forwarding header the request carries (None: none); any x-forwarded-* counts."""
    for name in request.headers:
        if name in FORWARDING_HEADERS or name.startswith("x-forwarded-"):
            return name
    return None


def foreign_origin(request: Request) -> bool:
    """True when a POST says it was sent from another site (its Origin is not this Host). A
    browser sends Origin with every cross-site POST; "null" (a sandboxed or file: page) and a
    missing header are left to the CSRF token, which such a page cannot have."""
    origin = request.headers.get("origin") or ""
    return origin not in ("", "null") and origin.split("://", 1)[-1] != request.headers.get("host", "")


@dataclass
class Session:
    caller: Caller
    csrf: str
    until: float


class Sessions:
    """Login sessions in memory: a restart logs everyone out, as it should."""

    def __init__(self, ttl: float = SESSION_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._by_id: dict[str, Session] = {}
        self._lock = locks.lock("panel sessions", "bookkeeping")

    def open(self, caller: Caller) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            for old in [s for s, found in self._by_id.items() if found.until <= now]:
                del self._by_id[old]
            while len(self._by_id) >= MAX_SESSIONS:
                del self._by_id[next(iter(self._by_id))]
            session = self._by_id[sid] = Session(caller, secrets.token_urlsafe(32), now + self.ttl)
        return sid, session

    def get(self, sid: str) -> Session | None:
        with self._lock:
            found = self._by_id.get(sid)
            if found is not None and found.until <= self.clock():
                del self._by_id[sid]
                return None
            return found

    def close(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)


def csrf_ok(session: Session, given: object) -> bool:
    return isinstance(given, str) and bool(given) and hmac.compare_digest(given.encode(), session.csrf.encode())
