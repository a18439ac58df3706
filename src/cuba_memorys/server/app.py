"""The MCP server: tools (with their memory_* aliases), stdio and streamable HTTP."""

from __future__ import annotations

import hmac
import ipaddress
import socket

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse

from .. import __version__
from ..errors import ConfigError
from ..services.memory import Memory
from . import tools_core, tools_grounding, tools_hipocampo, tools_sessions, tools_workflow
from .runtime import Runtime

INSTRUCTIONS = (
    "Long-term memory for this codebase. Search it (cuba_faro) before answering; write what you"
    " learn (cuba_cronica add / batch_add) and link related things (cuba_puente)."
)


def alias_of(name: str) -> str:
    return "memory_" + name.removeprefix("cuba_")


def create_app(memory: Memory) -> MCPServer:
    rt = Runtime(memory)
    app = MCPServer("cuba-memorys", version=__version__, instructions=INSTRUCTIONS)
    for name, fn, description, annotations in [*tools_core.build(rt), *tools_grounding.build(rt), *tools_workflow.build(rt),
                                                   *tools_sessions.build(rt)]:
        app.add_tool(fn, name=name, description=description, annotations=annotations)
        app.add_tool(fn, name=alias_of(name), description=f"[alias of {name}] {description}",
                     annotations=annotations)
    for name, fn, description, annotations in tools_hipocampo.build(rt):  # own names, no alias
        app.add_tool(fn, name=name, description=description, annotations=annotations)

    @app.custom_route("/health", methods=["GET"])
    async def health(_: Request) -> JSONResponse:
        counts = memory.store.counts()
        return JSONResponse({"status": "ok", "version": __version__, "backend": memory.store.backend,
                             "observations": counts["observations"],
                             "embedder": memory.embedder.name if memory.embedder else None})

    return app


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = addr, "8787"
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"invalid address {addr!r}: the port must be a number (e.g. 127.0.0.1:8787).") from None
    if not 0 < number < 65536:
        raise ConfigError(f"invalid address {addr!r}: the port must be 1-65535.")
    return host, number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


class BearerGuard:
    """ASGI middleware: every request except GET /health needs `Authorization: Bearer <token>`."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") != "/health":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = JSONResponse({"error": "unauthorized: send Authorization: Bearer <CUBA_HTTP_TOKEN>"},
                                        status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def check_bind(host: str, token: str) -> None:
    """Refuse a non-loopback bind without a token."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"refusing to serve on {host}: binding beyond loopback exposes the memory to the network.",
            hint="Set CUBA_HTTP_TOKEN to a long random secret (clients send it as a Bearer token),"
                 " or bind 127.0.0.1.",
        )


def http_app(memory: Memory, host: str, token: str):
    """The Starlette app for `serve` (the bind is checked again, whoever calls this)."""
    check_bind(host, token)
    from mcp.server.transport_security import TransportSecuritySettings

    # DNS-rebinding protection guards loopback servers from browsers (the SDK's defaults);
    # behind a token on a public bind the Host header is whatever name clients use.
    security = None if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = create_app(memory).streamable_http_app(host=host, transport_security=security)
    return BearerGuard(app, token) if token else app
