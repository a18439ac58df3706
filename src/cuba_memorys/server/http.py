"""`cuba-memorys serve [HOST:PORT]`: one daemon, many agents, over streamable HTTP."""

from __future__ import annotations

import signal
import sys

import uvicorn

from cuba_memorys.config import Settings
from cuba_memorys.server.app import check_bind, http_app, parse_addr
from cuba_memorys.server.runtime import configure_logging
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.lifecycle.rem import RemScheduler
from cuba_memorys.services.memory import Memory


def run_http(addr: str | None) -> None:
    configure_logging()
    settings = Settings.from_env()
    host, port = parse_addr(addr or settings.http_addr)
    tokens = TokenRegistry(settings.tokens_file) if settings.tokens_file else None
    check_bind(host, settings.http_token, tokens)  # refuse before touching any data
    memory = Memory.open(settings)
    # uvicorn re-raises SIGTERM after its graceful shutdown; with the default handler the
    # process would die before `finally` closes the database (leaving the WAL unmerged).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    consolidation = RemScheduler(memory)  # the background cycle (services/lifecycle/rem.py)
    consolidation.start()
    try:
        app = http_app(memory, host, settings.http_token, tokens)
        print(f"cuba-memorys: serving MCP at http://{host}:{port}/mcp (health: /health)", file=sys.stderr)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        consolidation.stop()
        memory.close()
