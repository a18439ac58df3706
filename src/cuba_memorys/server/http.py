"""`cuba-memorys serve [HOST:PORT | PORT]`: one daemon, many agents, over streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from types import FrameType

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

FORCED_LIFESPAN_SECS = 2.0  # after a second Ctrl-C: how long the app's own shutdown may take


class Server(uvicorn.Server):
    """uvicorn's server, ending the /events streams when it shuts down: its graceful shutdown
    waits for every open response to finish, and an event stream never does by itself. Its
    event loop ticks the watchdog's heartbeat (server/watchdog.py)."""

    watchdog: Watchdog | None = None
    stopped_by: int | None = None  # the signal that asked it to stop (Ctrl-C, SIGTERM)
    hurry: Callable[[], None] | None = None  # on a second signal: the embedding drain waits no longer

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Ctrl-C or SIGTERM stops serving; a second one stops without waiting for open requests
        (nor, later, for the embedding queue). uvicorn's own handler also raises the signal again
        once it has stopped, which printed a KeyboardInterrupt traceback before run_http closed
        the store: here the stop is only recorded, and run_http ends quietly."""
        self.stopped_by = sig
        if self.should_exit:
            self.force_exit = True
            if self.hurry is not None:
                self.hurry()
        self.should_exit = True

    async def startup(self, sockets=None) -> None:
        locks.serving_loop()  # CUBA_LOCK_CHECK: this loop must never wait on the store
        await super().startup(sockets)
        if self.watchdog is not None and self.watchdog.enabled:
            self._heartbeat = asyncio.get_running_loop().create_task(self.watchdog.heartbeat())
            self.watchdog.start()

    async def shutdown(self, sockets=None) -> None:
        events_http.end_streams()
        await super().shutdown(sockets)
        if self.force_exit:
            # uvicorn then skips the app's lifespan shutdown, and the lifespan task, cancelled
            # when the loop ends, logs a traceback: shut it down anyway, briefly.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FORCED_LIFESPAN_SECS):
                    await self.lifespan.shutdown()


def run_http(addr: str | None) -> None:
    configure_logging()
    settings = Settings.from_env()
    host, port = parse_addr(addr) if addr else parse_addr(settings.http_addr, "CUBA_HTTP_ADDR")
    tokens = TokenRegistry(settings.tokens_file) if settings.tokens_file else None
    check_bind(host, settings.http_token, tokens)  # refuse before touching any data
    check_peer_token(host, settings.peer_token, settings.http_token, tokens)
    if settings.panel:  # CUBA_PANEL=1 beyond loopback needs CUBA_PANEL_PUBLIC=1 (server/panel/security.py)
        panel_security.check_public(is_loopback(host), settings.panel_public)
    memory = Memory.open(settings)
    # Until uvicorn takes the signals over (and again after it hands them back): SIGTERM ends the
    # process through `finally`, which closes the database (the default would leave the WAL
    # unmerged); Ctrl-C does the same as a KeyboardInterrupt, which the CLI says in one line.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    consolidation = RemScheduler(memory)  # the background cycle (services/lifecycle/rem.py)
    watchdog = Watchdog(settings.watchdog_secs)
    server: Server | None = None
    try:
        # batch writes' vectors, and what an earlier process left without one (services/embedding_queue.py)
        memory.start_embedding_queue()
        consolidation.start()
        app = http_app(memory, host, settings.http_token, tokens)
        print(f"cuba-memorys: serving MCP at http://{host}:{port}/mcp (health: /health, connect page: /connect,"
              " events: /events)", file=sys.stderr)
        if settings.panel:
            print(f"cuba-memorys: panel at http://{host}:{port}/panel", file=sys.stderr)
        # a stream opened while shutdown begins is not left to hold the process: 5 s, then it is cut
        server = Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                       timeout_graceful_shutdown=5))
        server.watchdog, server.hurry = watchdog, memory.hurry_embedding_drain
        server.run()
        if not server.started:  # e.g. the port is taken: fail as uvicorn.run does
            sys.exit(3)
    finally:
        # a further SIGTERM or Ctrl-C while the embedding queue drains cuts the drain short; the
        # store still closes (what is left is committed, and embedded at the next start)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: memory.hurry_embedding_drain())
        watchdog.stop()  # the event loop has ended: its heartbeat stops with it
        consolidation.stop()
        memory.close()
    if server is not None and server.stopped_by is not None:
        print("cuba-memorys: stopped; the store is closed.", file=sys.stderr, flush=True)
