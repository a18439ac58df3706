"""cuba_whoami: who this client is to the daemon, in one call.

Several agents share one `serve` daemon; each is told apart by its client id (the
Mcp-Client-Id header, else its MCP session, else its declared name: server/runtime.py), and
each has its own active project, work session and working memory. This answers, for the
caller: those ids, whether the database's row-level security binds this server's statements,
which judges can rule on a claim here, the resource plan, and the HTTP endpoints.

``server`` says what answers (cuba-memorys) and ``compatible_with`` which version of the
original's tools it answers as: an agent written against MemoryIndustry 0.27 finds the same
keys, and nobody is told this is a build it is not.

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from
evaluated annotations.)
"""

from dataclasses import dataclass
from typing import Any, TypedDict

from cuba_memorys import __version__
from cuba_memorys.judge import judges, list_models, resource_plan
from cuba_memorys.services.memory import DEFAULT_CLIENT, Memory

SERVER = "cuba-memorys"
COMPATIBLE_WITH = "MemoryIndustry 0.27"
ENDPOINTS = {"mcp_endpoint": "/mcp", "connect_page": "/connect", "events": "/events",
             "events_ticket": "/events/ticket"}
MIB = 1024 * 1024
# What the resource plan loads, from least to most: nothing, the embedder, one judge model, both.
TIERS = ("minimal", "lean", "standard", "full")
NO_GRAPH_DB = ("no graph database projection (FalkorDB / Neo4j) in this build: the graph lives in the store"
               " itself and is analysed in process")
NO_JUDGE_HINT = ("only the text rules judge claims here: install an NLI model (`cuba-memorys models install nli"
                 " DIR`), connect with a client that supports MCP sampling, or set CUBA_JUEZ_CLI to a local LLM"
                 " command (e.g. the claude CLI)")


@dataclass(frozen=True)
class Caller:
    """What the runtime knows of the caller from its MCP context (server/runtime.py builds it)."""

    mcp_session: str | None = None  # the Mcp-Session-Id header (HTTP only)
    transport: str = "stdio"  # "http" | "stdio"
    can_sample: bool = False  # the client declared the sampling capability
    principal: str | None = None  # the token's principal (CUBA_TOKENS_FILE), None for the operator / local user
    scope: str = "full"  # "full" | "peer" (CUBA_PEER_TOKEN: only cuba_sync status, pull and notify)


LOCAL = Caller()  # a call from outside MCP (the CLI, a test): the local user over no transport


class Llm(TypedDict):
    configured: bool
    provider: str | None
    judge_available: bool
    judges: list[dict[str, Any]]
    hint: str


class GraphDb(TypedDict):
    backend: None
    note: str


class Resources(TypedDict):
    tier: str
    describe: str
    ram_available_mb: int | None
    vram_free_mb: None


class WhoAmI(TypedDict):
    server: str
    compatible_with: str
    version: str
    client_id: str
    mcp_session: str | None
    session_id: str | None
    transport: str
    principal: str | None
    scope: str
    rls_enforced: bool
    db_role: str | None
    rls_note: str
    node_id: str
    project_id: str | None
    project_name: str | None
    llm: Llm
    graph_db: GraphDb
    resources: Resources
    mcp_endpoint: str
    connect_page: str
    events: str
    events_ticket: str
    endpoints_available: bool
    endpoints_note: str


def open_session_id(mem: Memory, client: str | None) -> str | None:
    """The client's open work session, or None; unlike sessions.open_session it writes nothing
    when the session was ended elsewhere (whoami and contexto only read). Read bound to no
    project: the session may belong to the project the client has since switched away from,
    which row-level security (PostgreSQL) would hide while SQLite shows it."""
    session_id = mem.client(client).session_id
    if not session_id:
        return None
    with mem.store.bind_project(None):
        row = mem.store.get_session(session_id)
    return session_id if row is not None and row["ended_at"] is None else None


def resource_tier(plan: dict[str, Any]) -> str:
    """minimal (no model fits), lean (the embedder), standard (+ a reranker or NLI), full (both)."""
    steps = plan["models"]
    if not steps["embedder"]["load"]:
        return TIERS[0]
    return TIERS[1 + sum(bool(steps[kind]["load"]) for kind in ("reranker", "nli"))]


def _rls(mem: Memory) -> tuple[bool, str | None, str]:
    """(enforced, the database role, why)."""
    role = mem.store.runtime_role()
    if role is None:
        return False, None, ("SQLite has no row-level security (one file, one local user): projects are kept"
                             " apart by the scope condition of every query")
    if role["superuser"] or role["bypass_rls"]:
        return False, role["role"], (f"statements run as {role['role']}, a superuser or BYPASSRLS role that skips"
                                     " row-level security: run `cuba-memorys secure` to create a role it binds")
    return True, role["role"], f"statements run as {role['role']}, which row-level security binds"


def _llm(mem: Memory, caller: Caller, models: dict[str, dict[str, Any]]) -> Llm:
    nli, nli_name = mem.nli_model()
    cli = mem.cli_judge()
    nli_entry = {**models["nli"], "loads": nli is not None}
    if nli is None and not nli_entry.get("reason"):
        nli_entry["reason"] = "installed but not loaded by the resource plan"
    listed = judges(mem.settings, {**models, "nli": nli_entry})
    for entry in listed:
        if entry["judge"] == "nli" and nli is not None:
            entry["model"] = nli_name
        if entry["judge"] == "sampling":
            entry["available"] = caller.can_sample
            if not caller.can_sample:
                entry["reason"] = "this client did not declare the MCP sampling capability"
    usable = [e["judge"] for e in listed if e["available"] and e["judge"] != "heuristic"]
    # The chain asks the client's model before the CLI: that is the LLM a verdict would come from.
    provider = "sampling" if caller.can_sample else ("cli" if cli is not None else None)
    hint = f"claims are judged by {usable[0]} here (then the text rules)" if usable else NO_JUDGE_HINT
    return {"configured": cli is not None, "provider": provider, "judge_available": bool(usable),
            "judges": listed, "hint": hint}


def _resources(plan: dict[str, Any]) -> Resources:
    available = plan["memory"]["available_bytes"]
    return {"tier": resource_tier(plan), "describe": plan["summary"],
            "ram_available_mb": None if available is None else int(available // MIB), "vram_free_mb": None}


def _for_principal(llm: Llm) -> Llm:
    """What a token's principal may read of the judges: which there are, not the machine's
    commands, paths and failure texts (the operator sees those, in doctor and here)."""
    hidden = ("command", "install", "reason", "setting")
    return {**llm, "judges": [{k: v for k, v in e.items() if k not in hidden} for e in llm["judges"]]}


def whoami(mem: Memory, client: str | None, caller: Caller | None = None) -> WhoAmI:
    caller = caller or LOCAL
    state = mem.client(client)
    enforced, role, why = _rls(mem)
    models = list_models(mem.settings, mem.embedder_status, load=False)
    llm = _llm(mem, caller, models)
    if caller.principal is not None:
        llm, role = _for_principal(llm), None
    over_http = caller.transport == "http"
    return {
        "server": SERVER, "compatible_with": COMPATIBLE_WITH, "version": __version__,
        "client_id": client or DEFAULT_CLIENT, "mcp_session": caller.mcp_session,
        "session_id": open_session_id(mem, client), "transport": caller.transport,
        "principal": caller.principal, "scope": caller.scope,
        "rls_enforced": enforced, "db_role": role, "rls_note": why,
        "node_id": mem.settings.node_name, "project_id": state.project_id, "project_name": state.project_name,
        "llm": llm,
        "graph_db": {"backend": None, "note": NO_GRAPH_DB},
        "resources": _resources(resource_plan(mem.settings, models)),
        "mcp_endpoint": ENDPOINTS["mcp_endpoint"], "connect_page": ENDPOINTS["connect_page"],
        "events": ENDPOINTS["events"], "events_ticket": ENDPOINTS["events_ticket"],
        "endpoints_available": over_http,
        "endpoints_note": ("paths on this server's origin" if over_http else
                           "these routes exist only under `cuba-memorys serve` (HTTP); this client talks over"
                           " stdio"),
    }
