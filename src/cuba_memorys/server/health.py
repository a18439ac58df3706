"""What `serve`'s GET /health answers (spec §4a "/health").

Everyone (no token needed) sees whether the daemon can serve: ``status`` (ok, starting or
degraded), the database's reachability, counts and the endpoints. The operator (CUBA_HTTP_TOKEN)
or a principal with admin on every project also sees who is connected and the ``runtime``
block: mode, resource tier, each model's state and the LLM judge.

The HTTP status is always 200, whatever ``status`` says: a load balancer or a script reads the
body; a 503 would hide the reason, and a daemon whose embedder is missing still answers every
tool (search degrades to its lexical branches).

The body is built in a worker thread (the database is asked, model folders are looked at), never
on the event loop that serves the other requests.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from cuba_memorys import __version__
from cuba_memorys.judge import judges, list_models, resource_plan
from cuba_memorys.services.agents.whoami import resource_tier
from cuba_memorys.services.memory import Memory

CONNECT, EVENTS = "/connect", "/events"
CLIENT_TTL_SECS = 24 * 3600.0  # a client idle longer is no longer listed (as the original purges them)
MAX_CLIENTS_LISTED = 200


class Served(Protocol):
    """What health reads of the runtime (server/runtime.py): how many tool calls it served."""

    requests_served: int


def report(memory: Memory, served: Served, *, full: bool) -> dict[str, Any]:
    """The /health body; ``full`` adds ``clients`` and ``runtime`` (for the operator or an admin)."""
    database, observations = _database(memory)
    builds = memory.store.index_builds()  # read once: the status and the operator's view agree
    building = builds["building"]
    status = _status(memory, database, building)
    now = time.time()
    seen = _recent_clients(memory, now)
    body: dict[str, Any] = {
        "status": status, "version": __version__, "uptime_secs": int(now - memory.started_at),
        "requests_served": served.requests_served, "database": database,
        "ready": database == "up" and not building,
        "connect": CONNECT, "events": EVENTS, "clients_count": len(seen),
        "backend": memory.store.backend, "graph_db": {"backend": memory.store.backend, "reachable": database == "up"},
        "observations": observations,
        "embedder": memory.embedder.name if memory.embedder else None,
    }
    if status != "ok":
        body["why"] = _why(memory, database, building, detail=full)
    if full:
        body["clients"] = [{"id": client, "idle_secs": round(now - at, 1)} for client, at in seen[:MAX_CLIENTS_LISTED]]
        body["runtime"] = runtime_block(memory)
        body["index_builds"] = builds
    return body


def _database(memory: Memory) -> tuple[str, int | None]:
    """("up", observations) when the store answers a query, ("unreachable", None) when it fails.
    The count is the existing /health's ``observations``; its query is the liveness probe."""
    try:
        return "up", int(memory.store.counts()["observations"])
    except Exception:  # any failure to answer is "unreachable": the body says so instead of a 500
        return "unreachable", None


def _status(memory: Memory, database: str, building: list[str]) -> str:
    if database != "up" or memory.embedder is None:
        return "degraded"
    return "starting" if building else "ok"


def _why(memory: Memory, database: str, building: list[str], *, detail: bool) -> list[str]:
    """Why the status is not ok. Only the operator sees the model's own reason (it can name local
    paths); everyone else gets the kind of problem."""
    reasons = []
    if database != "up":
        reasons.append("the database does not answer")
    if memory.embedder is None:
        why = f": {memory.embedder_status.reason or 'none loaded'}" if detail else ""
        reasons.append(f"no embedding model{why} (search answers from its lexical branches only)")
    if building:
        reasons.append(f"vector indexes are being built: {', '.join(building)} (search is slower meanwhile)")
    return reasons


def _recent_clients(memory: Memory, now: float) -> list[tuple[str, float]]:
    """(client id, last call) of the clients seen in the last 24 h, the most recent first."""
    seen = dict(memory.clients_seen)  # a copy: tool calls record into it from worker threads
    return sorted(((c, at) for c, at in seen.items() if now - at <= CLIENT_TTL_SECS), key=lambda x: -x[1])


# -- the runtime block -------------------------------------------------------------------------

def runtime_block(memory: Memory) -> dict[str, Any]:
    """Mode, resource tier, each model's state and the LLM judge, from the files (nothing is loaded)."""
    settings = memory.settings
    models = list_models(settings, memory.embedder_status, load=False)
    plan = resource_plan(settings, models)
    return {
        "mode": settings.mode,
        "resource_tier": resource_tier(plan),  # as cuba_whoami's resources.tier
        "resource_plan": plan["summary"],
        "models": {kind: model_state(kind, models[kind], plan["models"][kind]) for kind in ("embedder", "reranker",
                                                                                          "nli")},
        "llm": llm_block(memory, models),
    }


def model_state(kind: str, entry: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """{state, device, reason}: loaded (the embedder in this process), available (installed; loaded
    on first use), skipped (the resource plan leaves it out), off, missing or failed."""
    reason = entry.get("reason")
    if kind == "embedder":
        state = "loaded" if entry.get("loads") else "off" if entry.get("name") == "none" else "failed"
    elif entry.get("selected") == "none":
        state = "off"
    elif not entry.get("present"):
        state = "missing"
    elif entry.get("loads") is False:
        state = "failed"
    elif step.get("fits") is False and not step.get("set_by_user"):
        state, reason = "skipped", step.get("reason")
    else:
        state = "available"
    return {"state": state, "device": "cpu", "reason": reason, "name": entry.get("name")}


def llm_block(memory: Memory, models: dict[str, dict]) -> dict[str, Any]:
    """The LLM judge: the CLI judge when one runs here; the client's own model (sampling) depends on
    which client calls, so it is named, never counted as configured."""
    cli = next(j for j in judges(memory.settings, models) if j["judge"] == "cli")
    configured = bool(cli["available"])
    return {"configured": configured, "backend": "cli" if configured else None,
            "model": cli["model"] if configured else None,
            "reason": None if configured else cli["reason"],
            "sampling": "used for a client that declares the sampling capability"}
