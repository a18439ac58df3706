"""The MCP server: tools (with their memory_* aliases), stdio and streamable HTTP."""

from __future__ import annotations

import hmac
import ipaddress
import socket

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ListResourcesResult, Tool
from starlette.requests import Request
from starlette.responses import JSONResponse

from cuba_memorys import __version__
from cuba_memorys.config import TOOL_PROFILES
from cuba_memorys.errors import ConfigError
from cuba_memorys.server import resources
from cuba_memorys.server.runtime import Runtime
from cuba_memorys.server.tools import graph as tools_core
from cuba_memorys.server.tools import grounding as tools_grounding
from cuba_memorys.server.tools import hipocampo as tools_hipocampo
from cuba_memorys.server.tools import incidents as tools_errors
from cuba_memorys.server.tools import meta as tools_meta
from cuba_memorys.server.tools import reminders as tools_reminders
from cuba_memorys.server.tools import sessions as tools_sessions
from cuba_memorys.server.tools import workflow as tools_workflow
from cuba_memorys.services.memory import Memory

INSTRUCTIONS = (
    "Long-term memory for this codebase. Search it (cuba_faro) before answering; write what you"
    " learn (cuba_cronica add / batch_add) and link related things (cuba_puente)."
)


# CUBA_TOOL_PROFILE: the tools tools/list advertises (the original's lists). Every registered
# tool stays callable, directly and through cuba_call; a name not registered (yet) is skipped.
_LEAN = ("cuba_faro", "cuba_expediente", "cuba_decreto", "cuba_jornada", "cuba_cronica", "cuba_ingesta",
         "cuba_alarma", "cuba_remedio", "cuba_receta", "cuba_pizarra", *tools_meta.META_TOOLS)
_AGENT = ("cuba_receta", "cuba_faro", "cuba_cronica", "cuba_alma", "cuba_puente", "cuba_alarma", "cuba_remedio",
          "cuba_expediente", "cuba_jornada", "cuba_decreto", "cuba_ingesta", "cuba_proyecto", "cuba_pre_compact",
          "cuba_pizarra")
PROFILES: dict[str, frozenset[str] | None] = {
    "full": None,  # everything, memory_* aliases included
    "lean": frozenset(_LEAN),
    "agent": frozenset(_AGENT),
    "standard": frozenset((*_AGENT, "cuba_eco", "cuba_reflexion", "cuba_hipotesis", "cuba_contradiccion",
                           "cuba_centinela", "cuba_calibrar")),
}
assert set(PROFILES) == set(TOOL_PROFILES)


def alias_of(name: str) -> str:
    return "memory_" + name.removeprefix("cuba_")


class CubaServer(MCPServer):
    """MCPServer whose tools/list shows only the tools of its profile (``advertised``; None =
    all). ``all_tools`` is every registered tool, for cuba_tools."""

    profile: str = "full"
    advertised: frozenset[str] | None = None
    runtime: Runtime | None = None  # set by create_app; resources/list reads the memory through it

    async def all_tools(self) -> list[Tool]:
        return await super().list_tools()

    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        return tools if self.advertised is None else [t for t in tools if t.name in self.advertised]

    async def _handle_list_resources(self, ctx, params) -> ListResourcesResult:
        """The SDK lists only fixed resources; add the caller's concrete cuba:// ones (its
        projects, top entities, last snapshot), read in its scope as its tools are."""
        found = await super()._handle_list_resources(ctx, params)
        if self.runtime is None:
            return found
        context = Context(request_context=ctx, mcp_server=self)
        concrete = await anyio.to_thread.run_sync(resources.listed_for, self.runtime, context)
        return ListResourcesResult(resources=[*found.resources, *concrete])


def create_app(memory: Memory) -> CubaServer:
    rt = Runtime(memory)
    profile = memory.settings.tool_profile
    if profile not in PROFILES:  # Settings.from_env refuses it first; this guards built Settings
        raise ConfigError(f"CUBA_TOOL_PROFILE={profile!r} is not a tool profile: use one of {', '.join(PROFILES)}.")
    app = CubaServer("cuba-memorys", version=__version__, instructions=INSTRUCTIONS)
    app.profile, app.advertised, app.runtime = profile, PROFILES[profile], rt
    for name, fn, description, annotations in [*tools_core.build(rt), *tools_grounding.build(rt), *tools_workflow.build(rt),
                                                   *tools_sessions.build(rt), *tools_errors.build(rt),
                                                   *tools_reminders.build(rt)]:
        app.add_tool(fn, name=name, description=description, annotations=annotations)
        app.add_tool(fn, name=alias_of(name), description=f"[alias of {name}] {description}",
                     annotations=annotations)
    for name, fn, description, annotations in tools_hipocampo.build(rt):  # own names, no alias
        app.add_tool(fn, name=name, description=description, annotations=annotations)
    for name, fn, description, annotations in tools_meta.build(app):  # cuba_tools, cuba_call
        app.add_tool(fn, name=name, description=description, annotations=annotations)
        app.add_tool(fn, name=alias_of(name), description=f"[alias of {name}] {description}",
                     annotations=annotations)
    resources.register(app, rt)
    memory.store.build_indexes_in_background()  # a server lives long enough to finish them

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
