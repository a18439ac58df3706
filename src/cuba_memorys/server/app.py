"""The MCP server: tools (with their memory_* aliases), stdio and streamable HTTP."""

from __future__ import annotations

import difflib
import hmac
import ipaddress
import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListResourcesResult, ListToolsResult, Tool, ToolAnnotations
from pydantic import ValidationError
from starlette.responses import JSONResponse

from cuba_memorys import __version__
from cuba_memorys.errors import ConfigError, InvalidInput
from cuba_memorys.server import arguments as args_check
from cuba_memorys.server import catalog, events_http, handshake, listing, resources
from cuba_memorys.server.panel import routes as panel
from cuba_memorys.server.runtime import PEER_REFUSED, PEER_TOOL, Runtime
from cuba_memorys.server.tools import meta
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.memory import Memory

INSTRUCTIONS = (
    "Long-term memory for this codebase. Search it (cuba_faro) before answering; write what you"
    " learn (cuba_cronica add / batch_add) and link related things (cuba_puente)."
)


class CubaServer(MCPServer):
    """MCPServer whose tools/list shows only the tools of its profile (``advertised``; None =
    all), and whose tools refuse a parameter they do not have (the SDK would ignore it)."""

    profile: str = "full"
    advertised: frozenset[str] | None = None
    runtime: Runtime | None = None  # set by create_app; resources/list reads the memory through it

    def strict_arguments(self, name: str) -> None:
        """Check the tool's arguments strictly: by default pydantic coerces ("true" to true, true
        to 1, "5" to 5) before the services' own checks could refuse the wrong type. JSON text
        in place of an array or object (what some clients send) is still read first, by the SDK."""
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            model = tool.fn_metadata.arg_model
            model.model_config["strict"] = True
            model.model_rebuild(force=True)

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The tool's whole generated schema: what validates a call."""
        tool = self._tool_manager.get_tool(name)
        return None if tool is None else tool.parameters

    def listed_schema(self, name: str) -> dict[str, Any] | None:
        """The schema tools/list and cuba_tools show: the same, without its overhead (server/listing.py)."""
        schema = self.input_schema(name)
        return None if schema is None else listing.compact_schema(schema)

    async def list_tools(self) -> list[Tool]:
        """The profile's tools, each beside its memory_* alias, at the cost server/listing.py says."""
        tools = [t for t in await super().list_tools() if t.name not in catalog.HIDDEN]
        if self.advertised is not None:
            tools = [t for t in tools if t.name in self.advertised]
        return [listed(t) for t in tools]

    def _peer(self, ctx: Any) -> bool:
        """Whether the request bears CUBA_PEER_TOKEN (read-only sync peers: server/runtime.py)."""
        return self.runtime is not None and self.runtime.is_peer(Context(request_context=ctx, mcp_server=self))

    async def _handle_list_tools(self, ctx, params) -> ListToolsResult:
        """A peer is shown the one tool it may call (cuba_sync, not its memory_sync alias)."""
        found = await super()._handle_list_tools(ctx, params)
        if self._peer(ctx):
            return ListToolsResult(tools=[t for t in found.tools if t.name == PEER_TOOL])
        return found

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        # The peer's first wall (the meta tools do not go through the runtime's dispatch, which
        # checks the tool and its action for everything else).
        entry = catalog.tool(name)
        if (self.runtime is not None and self.runtime.is_peer(context)
                and (entry is None or entry.name != PEER_TOOL)):
            raise ToolError(PEER_REFUSED)
        schema = self.input_schema(name)
        if schema is not None:
            check_known(name, arguments, schema)
            self.validate(name, arguments, schema)
        return await super().call_tool(name, arguments, context)

    def validate(self, name: str, arguments: dict[str, Any], schema: dict[str, Any]) -> None:
        """The SDK's own validation of the arguments, run first so that its refusal reaches the
        agent as one sentence (server/arguments.py) rather than pydantic's dump, framed as the
        SDK frames every other error of a tool (its name first: cuba_call's caller needs it)."""
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return
        try:
            tool.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:  # kept as the cause: the SDK logs the refused fields by it
            raise ToolError(f"Error executing tool {name}: {args_check.sentence(exc, schema)}") from exc

    async def _handle_list_resources(self, ctx, params) -> ListResourcesResult:
        """The SDK lists only fixed resources; add the caller's concrete cuba:// ones (its
        projects, top entities, last snapshot), read in its scope as its tools are."""
        found = await super()._handle_list_resources(ctx, params)
        if self.runtime is None:
            return found
        if self._peer(ctx):  # a peer reads no resource (server/resources.py refuses it too)
            return ListResourcesResult(resources=[])
        context = Context(request_context=ctx, mcp_server=self)
        concrete = await anyio.to_thread.run_sync(resources.listed_for, self.runtime, context)
        return ListResourcesResult(resources=[*found.resources, *concrete])


def check_known(name: str, arguments: dict[str, Any], schema: dict[str, Any]) -> None:
    """A misspelled parameter is an error naming it and the closest known one, rather than
    silently ignored (which would, say, store a fact when a decision was meant)."""
    known = list(schema.get("properties", {}))
    for given in arguments:
        if given not in known:
            close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ToolError(str(InvalidInput(given, f"is not a parameter of {name}{hint}", ", ".join(known))))


def listed(tool: Tool) -> Tool:
    """A tool as tools/list shows it: a memory_* alias as a pointer to its tool, any other compact."""
    row = catalog.tool(tool.name)
    alias = row is not None and row.name != tool.name
    schema = listing.ALIAS_SCHEMA if alias else listing.compact_schema(tool.input_schema)
    output = listing.compact_schema(tool.output_schema) if tool.output_schema else tool.output_schema
    return tool.model_copy(update={"input_schema": schema, "output_schema": output})


def annotations_of(tool: catalog.Tool) -> ToolAnnotations:
    # By field name: mypy sees pydantic's fields, not the camelCase aliases (populate_by_name is on).
    if tool.read_only:
        return ToolAnnotations(read_only_hint=True)
    return ToolAnnotations(read_only_hint=False, destructive_hint=tool.destructive)


def create_app(memory: Memory, tokens: TokenRegistry | None = None) -> CubaServer:
    rt = Runtime(memory, tokens)
    profile = serving_profile(memory.settings.tool_profile, memory.settings.tool_profile_unknown)
    app = CubaServer("cuba-memorys", version=__version__, instructions=INSTRUCTIONS)
    app.profile, app.advertised, app.runtime = profile, catalog.advertised(profile), rt
    meta_tools = meta.build(app)
    for tool in catalog.TOOLS:  # every tool from the catalogue, in one loop
        fn = meta_tools[tool.name] if tool.signature is None else rt.handler(tool)
        for name in filter(None, (tool.name, tool.alias_name, *tool.hidden_aliases)):
            description = tool.description if name == tool.name else listing.alias_description(tool.name)
            app.add_tool(fn, name=name, description=description, annotations=annotations_of(tool))
            app.strict_arguments(name)
    resources.register(app, rt)
    memory.store.build_indexes_in_background()  # a server lives long enough to finish them
    return app


def serving_profile(profile: str, unknown: str = "") -> str:
    """The profile to serve: as the original, an unknown CUBA_TOOL_PROFILE serves full (every
    tool), said on stderr (stdout is the protocol's) and by `cuba-memorys doctor`."""
    if unknown or profile not in catalog.PROFILES:
        print(f"cuba-memorys: warning: CUBA_TOOL_PROFILE={unknown or profile!r} is not a tool profile"
              f" ({', '.join(catalog.PROFILES)}); serving full, every tool.", file=sys.stderr, flush=True)
        return "full"
    return profile


ADDR_FORMS = "HOST:PORT or PORT (e.g. 127.0.0.1:8787, [::1]:8787, or 8787 for 127.0.0.1:8787)"


def parse_addr(addr: str, setting: str = "") -> tuple[str, int]:
    """(host, port) of `serve`'s address: HOST:PORT, [IPv6]:PORT, :PORT or PORT alone, both of
    the last on 127.0.0.1. Anything else is refused as not an address before any bind is checked
    (a bare word would otherwise be read as a host and refused as binding beyond loopback).
    ``setting`` names the variable the address came from, for the message."""
    text = addr.strip()
    shown = f"{addr!r} (from {setting})" if setting else repr(addr)
    if _digits(text):
        return "127.0.0.1", _port(shown, text)
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ConfigError(f"invalid address {shown}: the address must be {ADDR_FORMS}.")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        raise ConfigError(f"invalid address {shown}: an IPv6 address goes in brackets, as in [::1]:8787.")
    return host or "127.0.0.1", _port(shown, port)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "²" is a digit to str.isdigit, not to int()


def _port(shown: str, port: str) -> int:
    if not _digits(port):
        raise ConfigError(f"invalid address {shown}: the port must be a number; the address must be {ADDR_FORMS}.")
    number = int(port)
    if not 0 < number < 65536:
        raise ConfigError(f"invalid address {shown}: the port must be 1-65535.")
    return number


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


# Paths the guard lets through: /health and the connect page need no token; /events checks its
# own (a bearer header, or the ?ticket= a browser's EventSource must use: server/events_http.py).
OPEN_PATHS = frozenset({"/health", "/", "/connect", "/events"})


class BearerGuard:
    """ASGI middleware: every request except those of OPEN_PATHS needs `Authorization: Bearer
    <token>` (the scheme in any case, as RFC 7235 says): the operator's CUBA_HTTP_TOKEN, a
    principal's token from the token file (CUBA_TOKENS_FILE), or the peer's (CUBA_PEER_TOKEN)."""

    def __init__(self, app, token: str, tokens: TokenRegistry | None = None, peer_token: str = "") -> None:
        self.app = app
        self.expected = token.encode()
        self.tokens = tokens
        self.peer = peer_token.encode()  # CUBA_PEER_TOKEN: let in, then held to the peer verbs (runtime.py)

    def admits(self, given: bytes) -> bool:
        if self.expected and hmac.compare_digest(given, self.expected):
            return True
        if self.peer and hmac.compare_digest(given, self.peer):
            return True
        return self.tokens is not None and self.tokens.principal(given.decode(errors="replace")) is not None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") not in OPEN_PATHS and not panel_path(scope.get("path")):
            given = bearer_token(dict(scope.get("headers") or []).get(b"authorization", b""))
            if not given or not self.admits(given):
                response = JSONResponse({"error": "unauthorized: send Authorization: Bearer <CUBA_HTTP_TOKEN>"},
                                        status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def panel_path(path: object) -> bool:
    """/panel and below check their own session (server/panel/security.py): a browser sends no bearer header."""
    return isinstance(path, str) and (path == "/panel" or path.startswith("/panel/"))


def bearer_token(header: bytes) -> bytes:
    """The token of an ``Authorization: Bearer <token>`` header (b"" when it is not one)."""
    scheme, _, token = header.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


MIN_TOKEN_CHARS = 32  # off loopback, as the newest original requires


def check_bind(host: str, token: str, tokens: TokenRegistry | None = None) -> None:
    """Refuse a non-loopback bind without a token of at least MIN_TOKEN_CHARS characters (the
    operator's, or principals' from the token file, which are always long enough)."""
    if is_loopback(host):
        return
    if not token and tokens is not None and tokens.count():
        return
    if not token:
        raise ConfigError(
            f"refusing to serve on {host}: binding beyond loopback exposes the memory to the network.",
            hint="Set CUBA_HTTP_TOKEN to a long random secret (clients send it as a Bearer token),"
                 " e.g. $(openssl rand -hex 32), or bind 127.0.0.1.",
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"refusing to serve on {host}: CUBA_HTTP_TOKEN has {len(token)} characters, and a"
                          f" token that guards a network bind needs at least {MIN_TOKEN_CHARS}.",
                          hint="Use a long random secret, e.g. $(openssl rand -hex 32).")


def check_peer_token(host: str, peer_token: str, token: str, tokens: TokenRegistry | None = None) -> None:
    """Refuse a CUBA_PEER_TOKEN that is also the operator's or a principal's token (a peer would
    get their grants, or they a peer's few), or too short for a network bind."""
    if not peer_token:
        return
    hint = "Give the peer a secret of its own, e.g. $(openssl rand -hex 32)."
    if token and hmac.compare_digest(peer_token.encode(), token.encode()):
        raise ConfigError("refusing to serve: CUBA_PEER_TOKEN equals CUBA_HTTP_TOKEN, so a peer would hold the"
                          " operator's every grant; the two must differ.", hint=hint)
    owner = tokens.principal(peer_token) if tokens is not None else None
    if owner is not None:
        raise ConfigError(f"refusing to serve: CUBA_PEER_TOKEN is the token of principal {owner!r}"
                          " (CUBA_TOKENS_FILE); one token cannot be both.",
                          hint=hint + f" Or give {owner} a new one: cuba-memorys principal token {owner}.")
    if not is_loopback(host) and len(peer_token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"refusing to serve on {host}: CUBA_PEER_TOKEN has {len(peer_token)} characters, and a"
                          f" token that guards a network bind needs at least {MIN_TOKEN_CHARS}.", hint=hint)


def http_app(memory: Memory, host: str, token: str, tokens: TokenRegistry | None = None):
    """The Starlette app for `serve` (the bind and the peer token are checked again, whoever calls this)."""
    check_bind(host, token, tokens)
    peer_token = memory.settings.peer_token
    check_peer_token(host, peer_token, token, tokens)
    from mcp.server.transport_security import TransportSecuritySettings

    # DNS-rebinding protection guards loopback servers from browsers (the SDK's defaults);
    # behind a token on a public bind the Host header is whatever name clients use.
    security = None if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    server = create_app(memory, tokens)
    # /health, /connect, /events (before the app is made)
    routes = events_http.register(server, memory, token, tokens, loopback=is_loopback(host))
    if memory.settings.panel:  # CUBA_PANEL=1: /panel (server/panel/), sharing the tokens and the tickets
        panel.register(server, memory, routes.auth, routes.tickets, loopback=is_loopback(host))
    # an initialize without protocolVersion is completed first, as stdio's (server/handshake.py)
    app = handshake.InitializeDefaults(server.streamable_http_app(host=host, transport_security=security))
    return BearerGuard(app, token, tokens, peer_token) if token or tokens is not None else app
