"""What every tool shares: the open memory, the caller's identity, and error conversion.

This is the one place where :class:`CubaError` becomes an MCP tool error (``isError``)
whose text the agent can read and act on.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from cuba_memorys.errors import CubaError
from cuba_memorys.services.memory import Memory

log = logging.getLogger("cuba_memorys")


class Runtime:
    """Holds the memory for the server's lifetime; tools reach it through here."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def call(self, ctx: Context | None, fn: Callable[..., dict], *args: Any, **kwargs: Any) -> dict:
        client = client_id(ctx)
        try:
            with self.memory.acting_for(client):
                return fn(self.memory, client, *args, **kwargs)
        except CubaError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:  # a bug: say so plainly rather than hide it
            log.exception("unexpected error in tool")
            raise ToolError(f"internal error ({type(exc).__name__}: {exc}); this is a bug in"
                            " cuba-memorys, nothing was changed by the failed call") from exc


def client_id(ctx: Context | None) -> str | None:
    """Mcp-Client-Id header over HTTP, else the client's declared name, else None."""
    if ctx is None:
        return None
    try:
        headers = ctx.headers
        if headers:
            value = headers.get("mcp-client-id") or headers.get("Mcp-Client-Id")
            if value:
                return value[:200]
        params = ctx.session.client_params
        if params is not None and params.client_info is not None:
            return params.client_info.name[:200]
    except (AttributeError, LookupError, RuntimeError):
        pass
    return None


def configure_logging() -> None:
    # stdout belongs to the MCP protocol on stdio: logs go to stderr only.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
