"""How every tool call runs: pick the action from the catalogue, check the arguments against
it, call the service in a worker thread under the call's time limit, convert errors.

This is the one place where :class:`CubaError` becomes an MCP tool error (``isError``) whose
text the agent can read and act on, and the one place where calls are routed by action.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import inspect
import json
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from cuba_memorys import deadline, locks
from cuba_memorys.errors import AccessDenied, CubaError, HandlerTimeout, InvalidInput
from cuba_memorys.server.catalog import Action, Tool
from cuba_memorys.server.sampling import progress_reporter, sampling_ask, sampling_judge, sampling_session
from cuba_memorys.server.watchdog import dump_stacks
from cuba_memorys.services import access
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.agents.whoami import Caller
from cuba_memorys.services.memory import DEFAULT_CLIENT, Memory

log = logging.getLogger("cuba_memorys")
# How long a timed-out call's worker may take to reach its next statement (where it stops)
# before the timeout is answered anyway; the worker then stops on its own.
STOP_GRACE_SECONDS = 2.0
CLIENT_TTL_SECS = 24 * 3600.0  # clients idle this long are forgotten (session ids would pile up)
# Tools that announce their own writes on the event bus with kinds that say more (artifact.*).
OWN_EVENTS = frozenset({"cuba_artefacto"})
# Read-only sync peers (CUBA_PEER_TOKEN, services/sync/peers.py): the one tool and the actions a request
# bearing the peer token may call. Checked in dispatch, where cuba_call and the memory_* aliases end
# too, so neither gets round it; resources and anything else asking for the caller's principal are
# refused the peer (Runtime.principal), and server/app.py refuses it the meta tools and lists it
# only cuba_sync.
PEER_TOOL = "cuba_sync"
PEER_ACTIONS = ("status", "pull", "notify")
PEER_REFUSED = ("forbidden: the peer token (CUBA_PEER_TOKEN) reaches only cuba_sync with action status, pull or"
                " notify; use the operator's token (CUBA_HTTP_TOKEN) or a principal's for anything else")
# Actions over the whole store, whatever the caller's project: besides the operator and the peer,
# only a principal with admin on every project ('*=admin') may call them.
# import, fetch and diff read or write whatever projects the bundle holds; export scope=all writes
# every project's rows to disk.
WHOLE_STORE = frozenset({("cuba_sync", "pull"), ("cuba_sync", "notify"), ("cuba_sync", "import"),
                         ("cuba_sync", "fetch"), ("cuba_sync", "diff")})


def whole_store(tool: str, action: str, args: dict[str, Any]) -> bool:
    return (tool, action) in WHOLE_STORE or ((tool, action) == ("cuba_sync", "export") and args.get("scope") == "all")
READS_ONLY = frozenset({("cuba_sync", "pull")})  # an admin's action that writes nothing: no memory.write event


class Runtime:
    """Holds the memory for the server's lifetime; every tool call goes through here.

    ``tokens`` (serve with CUBA_TOKENS_FILE) maps a request's bearer token to its principal,
    whose grants every call is checked against (services/access.py); without it, as over stdio,
    the caller is the one local user and nothing is checked."""

    def __init__(self, memory: Memory, tokens: TokenRegistry | None = None) -> None:
        self.memory = memory
        self.tokens = tokens
        self.timeout = float(memory.settings.handler_timeout_secs)
        self.requests_served = 0  # tool calls received (GET /health); counted on the event loop
        self._seen_lock = locks.lock("clients seen", "bookkeeping")
        self._purged_at = time.time()

    def is_peer(self, ctx: Context | None) -> bool:
        """Whether the request bears the peer token (CUBA_PEER_TOKEN; serve refuses one equal to
        the operator's or a principal's, server/app.py check_peer_token)."""
        expected = self.memory.settings.peer_token
        if not expected or ctx is None:
            return False
        token = bearer_value(authorization(ctx))
        return bool(token) and hmac.compare_digest(token.encode(), expected.encode())

    def principal(self, ctx: Context | None) -> access.Principal | None:
        """The caller's principal, or None for the local user and the operator (CUBA_HTTP_TOKEN).
        The peer has none and is refused here: whatever asks for a principal is not a peer verb."""
        if self.is_peer(ctx):
            raise ToolError(PEER_REFUSED)
        if self.tokens is None or ctx is None:
            return None
        token = bearer_value(authorization(ctx))
        if token and token == self.memory.settings.http_token:
            return None
        name = self.tokens.principal(token)
        if name is None:  # the HTTP guard already refused unknown tokens; this is a second wall
            raise ToolError("unauthorized: this token belongs to no principal")
        return access.load(self.memory, name)

    # -- one call ----------------------------------------------------------------------------
    def call(self, ctx: Context | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(memory, client, *args, **kwargs)`` as the calling client, converting errors."""
        client = self.client_of(ctx)
        self.seen(client)
        try:
            with self.memory.acting_for(client):
                return fn(self.memory, client, *args, **kwargs)
        except ToolError:  # already a message for the caller (the peer token refused, an unknown token)
            raise
        except CubaError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:  # a bug: say so plainly rather than hide it
            log.exception("unexpected error in tool")
            raise ToolError(f"internal error ({type(exc).__name__}: {exc}); this is a bug in"
                            " cuba-memorys, nothing was changed by the failed call") from exc

    def handler(self, tool: Tool) -> Callable[..., Awaitable[Any]]:
        """The function the SDK registers for ``tool``: its signature is the tool function's
        (so the schema is the contract in server/tools/), its body routes the call."""
        if tool.signature is None:
            raise TypeError(f"{tool.name} has no signature to route: the meta tools are built by server/tools/meta.py")
        defaults = {name: p.default for name, p in inspect.signature(tool.signature).parameters.items()
                    if name != "ctx"}

        @functools.wraps(tool.signature)
        async def run(**arguments: Any) -> Any:
            ctx = arguments.pop("ctx", None)
            return await self.dispatch(tool, ctx, arguments, defaults)

        return run

    async def dispatch(self, tool: Tool, ctx: Context | None, arguments: dict[str, Any],
                       defaults: dict[str, Any]) -> Any:
        """Route the call on the event loop (only checks that read nothing stored), then run the
        rest in a worker thread: the caller's principal and grants are read from the store there,
        so the event loop never waits on the database and every other request stays answered."""
        self.requests_served += 1
        peer = self.is_peer(ctx)
        if peer and tool.name != PEER_TOOL:
            raise ToolError(PEER_REFUSED)
        try:
            action = pick_action(tool, arguments)
            args, ignored = action_arguments(tool, action, arguments, defaults)
        except CubaError as exc:
            raise ToolError(str(exc)) from exc
        if peer:
            check_peer(action, args)
        needs = {need: provide(need, ctx, self) for need in action.needs if need != "caller"}
        service = self.authorised(tool, action, ctx, peer)
        return with_ignored(await self.in_worker(tool.name, ctx, service, {**args, **needs}), ignored)

    def authorised(self, tool: Tool, action: Action, ctx: Context | None, peer: bool) -> Callable[..., Any]:
        """The action's service as this caller may run it: behind its principal's grants (read in
        the worker), announcing its writes, with the ``caller`` it needs."""
        writes = tool.role_of(action) != "reader" and (tool.name, action.name) not in READS_ONLY

        def run(mem: Memory, client: str | None, **kwargs: Any) -> Any:
            principal = None if peer else self.principal(ctx)
            if (principal is not None and whole_store(tool.name, action.name, kwargs)
                    and not principal.may("admin", None)):
                raise AccessDenied(f"{principal.name} may not {action.name}: {tool.name} {action.name} covers"
                                   " every project's rows, which needs a '*' grant of admin.")
            if "caller" in action.needs:
                kwargs["caller"] = caller_of(ctx, self)
            service = action.service if principal is None else guarded(principal, tool, action)
            if writes and tool.name not in OWN_EVENTS:
                service = announced(tool.name, action.name, service)
            return service(mem, client, **kwargs)

        return run

    async def in_worker(self, name: str, ctx: Context | None, service: Callable[..., Any],
                        kwargs: dict[str, Any]) -> Any:
        """Run the service in a worker thread under CUBA_HANDLER_TIMEOUT_SECS. Past the limit
        the caller gets the timeout at once; the worker stops at its next statement, rolling
        back what it had not committed (storage checks the same limit, deadline.py). The
        embedding model's time does not count (deadline.not_counted): the worker tells this
        watch when the model starts and ends, and the watch follows."""
        watch = anyio.CancelScope(deadline=anyio.current_time() + self.timeout + STOP_GRACE_SECONDS)

        def follow(paused: bool, left: float) -> None:  # in the worker thread: the watch is the loop's
            with contextlib.suppress(Exception):  # the call was already answered (timed out): nothing to move
                anyio.from_thread.run_sync(_move_watch, watch, paused, left)

        def work() -> Any:
            with deadline.limit(self.timeout, on_pause=follow):
                return self.call(ctx, service, **kwargs)

        with watch:
            try:
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
            except ToolError as exc:
                if isinstance(exc.__cause__, HandlerTimeout):
                    raise ToolError(timeout_message(name, self.timeout)) from exc
                raise
        # The watch ran out: the worker did not reach a statement where it stops. Say where every thread is.
        dump_stacks(f"{name}'s worker is still running {STOP_GRACE_SECONDS:g} s past its time limit")
        raise ToolError(timeout_message(name, self.timeout))

    def seen(self, client: str | None) -> None:
        """Record the client's call time (cuba_whoami, GET /health's clients), forgetting the clients
        idle for a day once an hour (each MCP session without Mcp-Client-Id is a client of its own)."""
        now = time.time()
        with self._seen_lock:
            self.memory.clients_seen[client or DEFAULT_CLIENT] = now
            if now - self._purged_at > 3600:
                self._purged_at = now
                for old in [c for c, at in self.memory.clients_seen.items() if now - at > CLIENT_TTL_SECS]:
                    del self.memory.clients_seen[old]

    def client_of(self, ctx: Context | None) -> str | None:
        """The caller's client id; under principals, prefixed by the principal's name, so two
        principals never share an active project, a session or working memory."""
        client = client_id(ctx, self.memory.settings.client_id)
        if self.is_peer(ctx):  # the peer's notices and clients apart from everyone else's
            return f"peer/{client or 'default'}"
        if self.tokens is None:
            return client
        principal = self.principal(ctx)
        return client if principal is None else f"{principal.name}/{client or 'default'}"


def _move_watch(watch: anyio.CancelScope, paused: bool, left: float) -> None:
    """On the event loop: no deadline while the model runs; then the call's remaining time again."""
    watch.deadline = math.inf if paused else anyio.current_time() + left + STOP_GRACE_SECONDS


def authorization(ctx: Context) -> str:
    """The request's Authorization header ("" over stdio, or outside a request)."""
    try:
        return (ctx.headers or {}).get("authorization", "")
    except (AttributeError, LookupError, RuntimeError, ValueError):
        return ""


def check_peer(action: Action, args: dict[str, Any]) -> None:
    """Refuse the peer anything but cuba_sync status, pull and notify, and a folder of its choosing
    (status reads the manifest in ``dir``: a peer must not probe this machine's files)."""
    if action.name not in PEER_ACTIONS:
        raise ToolError(PEER_REFUSED)
    if args.get("dir") is not None:
        raise ToolError(str(InvalidInput("dir", "a peer may not name a folder", "status without dir (the sync"
                                                                                  " folder)")))


def guarded(principal: access.Principal, tool: Tool, action: Action) -> Callable[..., Any]:
    """The action's service behind the principal's grants: checked, bound for the store's own
    policies, and its answer filtered where it lists projects."""
    role = tool.role_of(action)

    def run(mem: Memory, client: str | None, **kwargs: Any) -> Any:
        if whole_store(tool.name, action.name, kwargs) and not principal.may("admin", None):
            raise AccessDenied(f"{principal.name} may not {action.name}: {tool.name} {action.name} covers every"
                               " project's rows, which needs a '*' grant of admin.")
        access.check(mem, client, principal, tool.name, action.name, role, kwargs)
        with access.bound(mem, principal):
            answer = action.service(mem, client, **kwargs)
        return access.filter_answer(principal, tool.name, action.name, answer)

    return run


DELETES = frozenset({("cuba_forget", ""), ("cuba_zafra", "prune")})  # besides every action named delete


def announced(tool: str, action: str, service: Callable[..., Any]) -> Callable[..., Any]:
    """The service, announcing on the event bus (serve's /events) what it wrote once it returned:
    ``memory.write`` (``memory.delete`` for deletions) with the tool, action, client, project and
    the ids the answer names. A dry run (``dry_run: true``) wrote nothing and announces nothing."""

    def run(mem: Memory, client: str | None, **kwargs: Any) -> Any:
        answer = service(mem, client, **kwargs)
        if not (isinstance(answer, dict) and answer.get("dry_run") is True):
            deleted = action == "delete" or (tool, action) in DELETES
            mem.events.publish("memory.delete" if deleted else "memory.write",
                               write_event(mem, tool, action, client, answer))
        return answer

    return run


def write_event(mem: Memory, tool: str, action: str, client: str | None, answer: Any) -> dict[str, Any]:
    try:
        project_id = mem.client(client).project_id
    except Exception:  # the write committed: announcing it must not turn it into an error
        log.exception("reading the client's project for its write event")
        project_id = None
    payload: dict[str, Any] = {"tool": tool, "action": action or None, "client": client or DEFAULT_CLIENT,
                               "project_id": project_id}
    if isinstance(answer, dict):
        for key in ("id", "ids", "deleted_id"):
            if key in answer:
                payload[key] = answer[key]
    return payload


def bearer_value(header: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, the scheme in any case."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def pick_action(tool: Tool, arguments: dict[str, Any]) -> Action:
    if not tool.selector:
        return tool.actions[0]
    chosen = arguments.get(tool.selector)
    action = tool.action(chosen) if isinstance(chosen, str) else None
    if action is None:
        raise InvalidInput(tool.selector, f"unknown value {chosen!r}", " | ".join(a.name for a in tool.actions))
    return action


def action_arguments(tool: Tool, action: Action, arguments: dict[str, Any],
                     defaults: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The arguments ``action`` reads, and the names of those given that it does not read:
    parameters of the tool's other actions, which the original accepts and ignores, so they are
    ignored here too and the answer says so (``ignored``). A value equal to the parameter's
    default counts as not given. A misspelled name never gets here (server/app.py check_known
    refuses it); a required one missing is an error."""
    ignored = [name for name, value in arguments.items()
               if name != tool.selector and name not in action.params and value != defaults.get(name)]
    for name in action.required:
        if arguments.get(name) in (None, "", []):
            raise InvalidInput(name, f"is required for {tool.selector}={action.name}" if tool.selector
                               else "is required")
    return {name: arguments[name] for name in action.params if name in arguments}, ignored


def with_ignored(answer: Any, ignored: list[str]) -> Any:
    """The answer, saying which arguments the action did not read (a text answer on a last line)."""
    if not ignored:
        return answer
    if isinstance(answer, dict):
        return {**answer, "ignored": ignored}
    if isinstance(answer, str):
        return f"{answer}\nignored: {json.dumps(ignored)}"
    return answer


def provide(need: str, ctx: Context | None, runtime: Runtime | None = None) -> Any:
    """What the runtime hands a service from the MCP context (catalog.NEEDS)."""
    if need == "caller":
        return caller_of(ctx, runtime)
    if need == "sampler":
        return sampling_judge(ctx)
    if need == "ask":
        return sampling_ask(ctx)
    if need == "progress":
        return progress_reporter(ctx)
    raise ValueError(f"unknown need {need!r}")


def caller_of(ctx: Context | None, runtime: Runtime | None = None) -> Caller:
    """Who is calling, as cuba_whoami reports it: its MCP session and transport (HTTP requests
    carry headers, stdio messages none), whether it can sample, and its principal."""
    try:
        headers = ctx.headers if ctx is not None else None
    except (AttributeError, LookupError, RuntimeError, ValueError):
        headers = None
    session = (headers.get("mcp-session-id") or None) if headers is not None else None
    peer = runtime is not None and runtime.is_peer(ctx)
    principal = runtime.principal(ctx) if runtime is not None and not peer else None
    return Caller(mcp_session=session[:200] if session else None,
                  transport="http" if headers is not None else "stdio",
                  can_sample=sampling_session(ctx) is not None,
                  principal=principal.name if principal is not None else None, scope="peer" if peer else "full")


def timeout_message(tool: str, seconds: float) -> str:
    return (f"{tool} did not finish within {seconds:g} s (CUBA_HANDLER_TIMEOUT_SECS) and was stopped; a write"
            " it had not committed was rolled back. Retry with less work per call (fewer items, a smaller"
            " limit), or raise CUBA_HANDLER_TIMEOUT_SECS.")


def client_id(ctx: Context | None, configured: str = "") -> str | None:
    """Who the caller is, for its active project, session and working memory: the Mcp-Client-Id
    header over HTTP, else its transport session (Mcp-Session-Id: two HTTP clients that declare
    the same name must not share state); over stdio ``configured`` (CUBA_CLIENT_ID, as the
    original reads it when there is no header), else the client's declared name; else None.
    ``configured`` never applies over HTTP: one server-wide name would merge every client."""
    if ctx is None:
        return None
    try:
        headers = ctx.headers
        if headers is None and configured:
            return configured
        if headers:
            value = headers.get("mcp-client-id") or headers.get("Mcp-Client-Id")
            if value:
                return value[:200]
            session = headers.get("mcp-session-id") or headers.get("Mcp-Session-Id")
            if session:
                return f"session:{session[:190]}"
        params = ctx.session.client_params  # Context.session is unannotated in the SDK (Any)
        if params is not None and params.client_info is not None:
            name: str = params.client_info.name
            return name[:200]
    except (AttributeError, LookupError, RuntimeError):
        pass
    return None


def configure_logging() -> None:
    # stdout belongs to the MCP protocol on stdio: logs go to stderr only.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
