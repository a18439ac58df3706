"""What each panel page shows, gathered from the service functions (calls.run, in a worker
thread). Each function returns the template's context; the templates only lay it out."""

from __future__ import annotations

import logging
from typing import Any

from cuba_memorys.errors import CubaError
from cuba_memorys.server.events_http import Caller
from cuba_memorys.server.panel import svg
from cuba_memorys.server.panel.calls import client_of, read_as, run
from cuba_memorys.services.admin import doctor
from cuba_memorys.services.memory import Memory

log = logging.getLogger(__name__)
SCOPES = ("all", "entities", "observations", "episodes", "errors")  # cuba_faro's scope values the form offers
SCORES = ("score", "fused_score", "text_score", "bm25_score", "vector_score")  # cuba_faro format=verbose


def attempt(memory: Memory, caller: Caller, tool: str, action: str, **kwargs: Any) -> tuple[Any, str | None]:
    """A service call whose refusal (no grant, nothing there) is shown on the page, not a failure of it."""
    try:
        return run(memory, caller, tool, action, **kwargs), None
    except CubaError as exc:
        return None, str(exc)


def projects(memory: Memory, caller: Caller) -> dict[str, Any]:
    """The project picker of every page: the projects the caller may read, and the active one."""
    listed, _ = attempt(memory, caller, "cuba_proyecto", "list")
    rows = (listed or {}).get("projects", [])
    active = next((p for p in rows if p.get("active")), None)
    return {"projects": rows, "active_project": active}


def overview(memory: Memory, caller: Caller) -> dict[str, Any]:
    context = projects(memory, caller)
    active = context["active_project"]
    stats, stats_error = (attempt(memory, caller, "cuba_proyecto", "stats", name=active["name"]) if active
                          else (None, None))
    pending, pending_error = attempt(memory, caller, "cuba_eco", "pending", limit=50)
    conflicts, conflicts_error = attempt(memory, caller, "cuba_sync", "conflicts")
    health = None
    if caller.admin:  # the doctor covers the whole store: the operator's and '*' admins' only
        try:
            health = doctor.doctor(memory)
        except CubaError as exc:
            health = {"ok": False, "warnings": [str(exc)], "counts": {}}
    counts = ({k: v for k, v in (stats or {}).items() if isinstance(v, int)} if stats is not None
              else dict((health or {}).get("counts") or {}))
    clients = sorted(memory.clients_seen.items(), key=lambda kv: -kv[1]) if caller.admin else []
    return {**context, "counts": counts, "stats_error": stats_error, "health": health,
            "consolidation": (health or {}).get("consolidation"),
            "pending": pending, "pending_error": pending_error,
            "conflicts": conflicts, "conflicts_error": conflicts_error,
            "peer_notices": ((health or {}).get("peers") or {}).get("notices", []),
            "clients": [c for c, _ in clients], "panel_client": client_of(caller)}


def search(memory: Memory, caller: Caller, form: dict[str, str]) -> dict[str, Any]:
    context = projects(memory, caller)
    query = form.get("query", "").strip()
    options = {"query": query, "scope": form.get("scope") or "all", "limit": form.get("limit") or "10",
               "rerank": form.get("rerank") == "1", "associative": form.get("associative") == "1",
               "diversify": form.get("diversify") == "1", "enable_bm25": form.get("enable_bm25", "1") == "1",
               "after": form.get("after", ""), "before": form.get("before", "")}
    context.update(options=options, scopes=SCOPES, answer=None, error=None, results=[])
    if not query:
        return context
    args: dict[str, Any] = {"query": query, "scope": options["scope"], "format": "verbose",
                            "rerank": options["rerank"], "associative": options["associative"],
                            "diversify": options["diversify"], "enable_bm25": options["enable_bm25"],
                            "track_access": False}
    try:
        args["limit"] = int(str(options["limit"]))
    except ValueError:
        context["error"] = f"limit: {options['limit']!r} is not a whole number (use 1-50)"
        return context
    for bound in ("after", "before"):
        if options[bound]:
            args[bound] = options[bound]
    answer, error = attempt(memory, caller, "cuba_faro", "hybrid", **args)
    context.update(answer=answer, error=error)
    if answer is not None:
        rows = answer.get("results", [])
        top = {k: max((float(r[k]) for r in rows if isinstance(r.get(k), int | float)), default=1.0) for k in SCORES}
        context["results"] = [{**row, "bars": svg.score_bars({k: row.get(k) for k in SCORES}, top)} for row in rows]
    return context


def entity(memory: Memory, caller: Caller, name: str) -> dict[str, Any]:
    context = projects(memory, caller)
    found, error = attempt(memory, caller, "cuba_alma", "get", name=name)
    context.update(name=name, entity=None, error=error, groups={}, relations_in=[], relations_out=[], timeline=[],
                   metrics=None)
    if found is None:
        return context
    context["entity"] = found.get("entity")
    # community and PageRank as last stored (the consolidation cycle and cuba_zafra compute them)
    context["metrics"] = read_as(memory, caller, lambda mem, client: next(
        (m for m in mem.store.node_metrics(mem.scope(client)) if m["name"] == name), None))
    listed, _ = attempt(memory, caller, "cuba_cronica", "list", entity_name=name)
    observations = (listed or {}).get("observations") or found.get("observations") or []
    groups: dict[str, list[dict[str, Any]]] = {}
    for obs in observations:
        groups.setdefault(str(obs.get("type") or obs.get("observation_type") or "other"), []).append(obs)
    context["groups"] = dict(sorted(groups.items()))
    for rel in found.get("relations") or []:
        (context["relations_in"] if rel.get("direction") == "incoming" else context["relations_out"]).append(rel)
    # the timeline holds each observation's version and previous versions, and the entity's episodes
    timeline, _ = attempt(memory, caller, "cuba_cronica", "timeline", entity_name=name)
    context["timeline"] = (timeline or {}).get("items") or []
    return context


def calibration(memory: Memory, caller: Caller) -> dict[str, Any]:
    context = projects(memory, caller)
    metrics, metrics_error = attempt(memory, caller, "cuba_calibrar", "metrics")
    trust, trust_error = attempt(memory, caller, "cuba_calibrar", "trust")
    diagram = svg.reliability_diagram((metrics or {}).get("reliability_diagram") or []) if metrics else None
    return {**context, "metrics": metrics, "metrics_error": metrics_error, "diagram": diagram,
            "trust": trust, "trust_error": trust_error}


def timeline(memory: Memory, caller: Caller) -> dict[str, Any]:
    """Sessions (started, ended) and decisions, newest first, from cuba_jornada list and cuba_decreto list."""
    context = projects(memory, caller)
    sessions, sessions_error = attempt(memory, caller, "cuba_jornada", "list")
    decisions, decisions_error = attempt(memory, caller, "cuba_decreto", "list")
    items: list[dict[str, Any]] = []
    for s in (sessions or {}).get("sessions") or []:
        items.append({"at": s.get("started_at"), "kind": "session", "title": s.get("name"),
                      "detail": "; ".join(s.get("goals") or []) or "", "end": s.get("ended_at"),
                      "outcome": s.get("outcome")})
    for d in (decisions or {}).get("decisions") or []:
        first, _, rest = str(d.get("content") or "").partition("\n")
        items.append({"at": d.get("created_at"), "kind": "decision", "title": first.removeprefix("Decision: "),
                      "detail": rest, "end": None, "outcome": None})
    items.sort(key=lambda i: str(i["at"] or ""), reverse=True)
    return {**context, "items": items, "errors": [e for e in (sessions_error, decisions_error) if e]}
