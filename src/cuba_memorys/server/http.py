"""`cuba-memorys serve [HOST:PORT]`: one daemon, many agents, over streamable HTTP."""

from __future__ import annotations

import asyncio
import signal
import sys

import uvicorn

from cuba_memorys import locks
from cuba_memorys.config import Settings
from cuba_memorys.server import events_http
from cuba_memorys.server.app import check_bind, check_peer_token, http_app, is_loopback, parse_addr
from cuba_memorys.server.panel import security as panel_security
from cuba_memorys.server.runtime import configure_logging
from cuba_memorys.server.watchdog import Watchdog
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.lifecycle.rem import RemScheduler
from cuba_memorys.services.memory import Memory


class Server(uvicorn.Server):
    """uvicorn's server, ending the /events streams when it shuts down: its graceful shutdown
    waits for every open response to finish, and an event stream never does by itself. Its
    event loop ticks the watchdog's heartbeat (server/watchdog.py)."""

    watchdog: Watchdog | None = None

    async def startup(self, sockets=None) -> None:
        locks.serving_loop()  # CUBA_LOCK_CHECK: this loop must never wait on the store
        await super().startup(sockets)
        if self.watchdog is not None and self.watchdog.enabled:
            self._heartbeat = asyncio.get_running_loop().create_task(self.watchdog.heartbeat())
            self.watchdog.start()

    async def shutdown(self, sockets=None) -> None:
        events_http.end_streams()
        await super().shutdown(sockets)


def run_http(addr: str | None) -> None:
    configure_logging()
    settings = Settings.from_env()
    host, port = parse_addr(addr or settings.http_addr)
    tokens = TokenRegistry(settings.tokens_file) if settings.tokens_file else None
    check_bind(host, settings.http_token, tokens)  # refuse before touching any data
    check_peer_token(host, settings.peer_token, settings.http_token, tokens)
    if settings.panel:  # CUBA_PANEL=1 beyond loopback needs CUBA_PANEL_PUBLIC=1 (server/panel/security.py)
        panel_security.check_public(is_loopback(host), settings.panel_public)
    memory = Memory.open(settings)
    # uvicorn re-raises SIGTERM after its graceful shutdown; with the default handler the
    # process would die before `finally` closes the database (leaving the WAL unmerged).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # batch writes' vectors, and what an earlier process left without one (services/embedding_queue.py)
    memory.start_embedding_queue()
    consolidation = RemScheduler(memory)  # the background cycle (services/lifecycle/rem.py)
    consolidation.start()
    watchdog = Watchdog(settings.watchdog_secs)
    try:
        app = http_app(memory, host, settings.http_token, tokens)
        print(f"cuba-memorys: serving MCP at http://{host}:{port}/mcp (health: /health, connect page: /connect,"
              " events: /events)", file=sys.stderr)
        if settings.panel:
            print(f"cuba-memorys: panel at http://{host}:{port}/panel", file=sys.stderr)
        # a stream opened while shutdown begins is not left to hold the process: 5 s, then it is cut
        server = Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                       timeout_graceful_shutdown=5))
        server.watchdog = watchdog
        server.run()
        if not server.started:  # e.g. the port is taken: fail as uvicorn.run does
            sys.exit(3)
    finally:
        watchdog.stop()  # the event loop has ended: its heartbeat stops with it
        # a second SIGTERM while the embedding queue drains cuts the drain short; the store still
        # closes (what is left is committed, and embedded at the next start)
        signal.signal(signal.SIGTERM, lambda *_: memory.hurry_embedding_drain())
        consolidation.stop()
        memory.close()
