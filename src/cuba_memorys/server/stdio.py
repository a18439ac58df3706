"""`cuba-memorys` with no command: MCP over stdio for one agent."""

from __future__ import annotations

import sys

from ..config import Settings
from ..errors import CubaError
from ..services.memory import Memory
from .app import create_app
from .runtime import configure_logging


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
