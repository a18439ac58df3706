"""`cuba-memorys` with no command: MCP over stdio for one agent."""

from __future__ import annotations

import sys

from cuba_memorys.config import Settings
from cuba_memorys.errors import CubaError
from cuba_memorys.server.app import create_app
from cuba_memorys.server.runtime import configure_logging
from cuba_memorys.services.memory import Memory


def run_stdio() -> None:
    configure_logging()
    try:
        memory = Memory.open(Settings.from_env())
    except CubaError as exc:
        # Refuse to start (e.g. model/dimension mismatch) with the reason on stderr.
        print(f"cuba-memorys: cannot start: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        create_app(memory).run("stdio")
    finally:
        memory.close()
