"""What each panel page shows, gathered from the service functions (calls.run, in a worker
thread). Each function returns the template's context; the templates only lay it out."""

from __future__ import annotations

import logging
import weakref
from typing import Any

from cuba_memorys import locks
from cuba_memorys.errors import CubaError
from cuba_memorys.secrets_scan import redact
from cuba_memorys.server.events_http import Caller
from cuba_memorys.server.panel import dedupe, svg
from cuba_memorys.server.panel import overview as parts
from cuba_memorys.server.panel import review as review_parts
from cuba_memorys.server.panel.cache import Fresh
from cuba_memorys.server.panel.calls import client_of, read_as, run
from cuba_memorys.services.admin import doctor
from cuba_memorys.services.code import check
from cuba_memorys.services.memory import Memory

log = logging.getLogger(__name__)
DOCTOR_TTL_SECS = 30.0
_doctors: weakref.WeakKeyDictionary[Memory, Fresh] = weakref.WeakKeyDictionary()
_doctor_lock = locks.lock("panel doctor cache", "cache")
PENDING_LIMIT = 50  # quarantined rows of each kind listed (the overview's count says "50+" past it)
SCOPES = ("all", "entities", "observations", "episodes", "errors")  # cuba_faro's scope values the form offers
TIMELINE_KINDS = frozenset({"session", "decision", "episode", "error"})
ENTITY_FACTS = 200  # the entity page's fact timeline shows the oldest this many
TIMELINE_ROWS = 200  # of each kind read, and shown
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


def land(memory: Memory, caller: Caller) -> str | None:
    """At login: a principal whose panel has no project it may read opens the first one it may
    (the most recently active), or every section of every page would say it has no project. The
    operator and '*' readers read the rows of no project: nothing is chosen for them. Returns the
    project opened (None: none)."""
    principal = caller.principal
    if principal is None or principal.may("reader", None):
        return None
    current, _ = attempt(memory, caller, "cuba_proyecto", "current")
    active = (current or {}).get("project")
    if active and principal.may("reader", active["id"]):
        return None
    readable = projects(memory, caller)["projects"]
    if not readable:
        return None
    run(memory, caller, "cuba_proyecto", "switch", name=readable[0]["name"])
    return str(readable[0]["name"])


def overview(memory: Memory, caller: Caller) -> dict[str, Any]:
    """What the memory holds, what needs attention, the last consolidation and the health, in
    words (server/panel/overview.py shapes each part)."""
    context = projects(memory, caller)
    active = context["active_project"]
    stats, stats_error = (attempt(memory, caller, "cuba_proyecto", "stats", name=active["name"]) if active
                          else (None, None))
    pending, pending_error = attempt(memory, caller, "cuba_eco", "pending", limit=PENDING_LIMIT)
    conflicts, conflicts_error = attempt(memory, caller, "cuba_sync", "conflicts")
    try:
        errors, errors_error = read_as(memory, caller, parts.unresolved), None
    except CubaError as exc:
        errors, errors_error = None, str(exc)
    health, health_age = None, 0.0
    if caller.admin:  # the doctor covers the whole store: the operator's and '*' admins' only
        health, health_age = _doctor_cache(memory).get("doctor", lambda: _checked(memory))
    counts = (dict(stats) if stats is not None else dict((health or {}).get("counts") or {}))
    notices = ((health or {}).get("peers") or {}).get("notices", [])
    return {**context, "held": parts.held(counts), "stats_error": stats_error, "pending": pending,
            "pending_error": pending_error, "conflicts": conflicts, "conflicts_error": conflicts_error,
            "problems": parts.problems(pending, pending_error, PENDING_LIMIT, errors, errors_error, conflicts,
                                       conflicts_error, notices),
            "unresolved": errors, "health": parts.health(health), "health_age": round(health_age),
            "consolidation": parts.consolidation((health or {}).get("consolidation") if health else None),
            "clients": parts.clients(memory.clients_seen) if caller.admin else [],
            "panel_client": client_of(caller), "stale_anchors": stale_code_anchors(memory, caller)}


def _checked(memory: Memory) -> dict[str, Any]:
    try:
        return dict(doctor.doctor(memory))
    except CubaError as exc:
        return {"ok": False, "warnings": [str(exc)], "counts": {}}


def _doctor_cache(memory: Memory) -> Fresh:
    """The doctor's checks read the whole store (seconds at 100k rows): reused DOCTOR_TTL_SECS."""
    with _doctor_lock:
        found = _doctors.get(memory)
        if found is None:
            found = _doctors[memory] = Fresh(DOCTOR_TTL_SECS)
        return found


def stale_code_anchors(memory: Memory, caller: Caller) -> dict[str, Any] | None:
    """The overview's "stale code anchors" problem line: what the last recorded anchor check
    (post-commit hook, consolidation cycle, `anchors check --record`) found, from the store.
    None (no line) when nothing is stale."""
    try:
        found = read_as(memory, caller, check.stale_summary)
    except CubaError:  # no grant where the caller stands: the other problem lines say why
        return None
    return found if found["count"] else None


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
    details = read_as(memory, caller, _entity_details, name)
    context["metrics"], facts = details["metrics"], details["facts"]
    context.update(facts=facts, facts_chart=svg.fact_spans(facts), facts_shown=ENTITY_FACTS)
    listed, _ = attempt(memory, caller, "cuba_cronica", "list", entity_name=name)
    observations = (listed or {}).get("observations") or found.get("observations") or []
    groups: dict[str, list[dict[str, Any]]] = {}
    for obs in observations:
        obs = {**obs, **details["observations"].get(obs.get("id"), {})}
        groups.setdefault(str(obs.get("type") or obs.get("observation_type") or "other"), []).append(obs)
    context["groups"] = dict(sorted(groups.items()))
    for rel in found.get("relations") or []:
        (context["relations_in"] if rel.get("direction") == "incoming" else context["relations_out"]).append(rel)
    # the timeline holds each observation's version and previous versions, and the entity's episodes
    timeline, _ = attempt(memory, caller, "cuba_cronica", "timeline", entity_name=name)
    context["timeline"] = (timeline or {}).get("items") or []
    return context


def _entity_details(mem: Memory, client: str | None, name: str) -> dict[str, Any]:
    """What the tools' answers leave out of the entity page: each observation's trust, evidence
    and versions, the entity's facts (valid from / to), and its community and PageRank as last
    stored (the consolidation cycle and cuba_zafra compute them)."""
    scope = mem.scope(client)
    entity = mem.store.get_entity(name, scope)
    if entity is None:
        return {"metrics": None, "facts": [], "observations": {}}
    rows = mem.store.observations_of(entity.id, scope)
    observations = {o.id: {"trust": o.trust, "evidence": o.evidence, "version": o.version,
                           "updated_at": o.updated_at,
                           "history": [{**v, "content": redact(str(v.get("content", "")))} for v in o.previous_versions
                                       if isinstance(v, dict)]} for o in rows}
    facts = [{**f, "object": redact(f["object"]),
              "quarantined": observations.get(f["observation_id"] or "", {}).get("trust") == "quarantined"}
             for f in mem.store.entity_facts(entity.id, ENTITY_FACTS)]
    metrics = next((m for m in mem.store.node_metrics(scope) if m["entity_id"] == entity.id), None)
    return {"metrics": metrics, "facts": facts, "observations": observations}


def calibration(memory: Memory, caller: Caller) -> dict[str, Any]:
    context = projects(memory, caller)
    metrics, metrics_error = attempt(memory, caller, "cuba_calibrar", "metrics")
    trust, trust_error = attempt(memory, caller, "cuba_calibrar", "trust")
    diagram = svg.reliability_diagram((metrics or {}).get("reliability_diagram") or []) if metrics else None
    return {**context, "metrics": metrics, "metrics_error": metrics_error, "diagram": diagram,
            "trust": trust, "trust_error": trust_error}


def _recent(mem: Memory, client: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    scope = mem.scope(client)
    return mem.store.panel_recent_episodes(scope, TIMELINE_ROWS), mem.store.panel_recent_errors(scope, TIMELINE_ROWS)


def timeline(memory: Memory, caller: Caller, kinds: frozenset[str] = TIMELINE_KINDS) -> dict[str, Any]:
    """Sessions (started, ended), decisions, episodes and errors, newest first: cuba_jornada list,
    cuba_decreto list, and the store's recent episodes and errors (no tool lists those across
    entities), read with the caller's reader grant. ``kinds`` narrows what is shown."""
    context = projects(memory, caller)
    sessions, sessions_error = attempt(memory, caller, "cuba_jornada", "list")
    decisions, decisions_error = attempt(memory, caller, "cuba_decreto", "list")
    try:
        episodes, errors = read_as(memory, caller, _recent)
        recent_error = None
    except CubaError as exc:
        episodes, errors, recent_error = [], [], str(exc)
    items: list[dict[str, Any]] = []
    for p in episodes:
        items.append({"at": p["started_at"], "kind": "episode", "title": p["entity"], "detail": redact(p["content"]),
                      "end": p["ended_at"], "outcome": None, "entity": p["entity"]})
    for e in errors:
        items.append({"at": e["created_at"], "kind": "error", "title": e["error_type"],
                      "detail": redact(e["error_message"]), "end": e["resolved_at"],
                      "outcome": ("resolved: " + redact(e["solution"] or "")) if e["resolved"] else "unresolved"})
    for s in (sessions or {}).get("sessions") or []:
        items.append({"at": s.get("started_at"), "kind": "session", "title": s.get("name"),
                      "detail": "; ".join(s.get("goals") or []) or "", "end": s.get("ended_at"),
                      "outcome": s.get("outcome")})
    for d in (decisions or {}).get("decisions") or []:
        first, _, rest = str(d.get("content") or "").partition("\n")
        items.append({"at": d.get("created_at"), "kind": "decision", "title": first.removeprefix("Decision: "),
                      "detail": rest, "end": None, "outcome": None})
    counts = {kind: sum(1 for i in items if i["kind"] == kind) for kind in sorted(TIMELINE_KINDS)}
    items = sorted((i for i in items if i["kind"] in kinds), key=lambda i: str(i["at"] or ""), reverse=True)
    return {**context, "items": items[:TIMELINE_ROWS], "counts": counts, "kinds": sorted(kinds),
            "all_kinds": sorted(TIMELINE_KINDS), "lanes": svg.timeline_lanes(items, sorted(TIMELINE_KINDS)),
            "errors": [e for e in (sessions_error, decisions_error, recent_error) if e]}


def review(memory: Memory, caller: Caller, rejects: review_parts.Rejects | None = None) -> dict[str, Any]:
    """The overview's quarantined rows and conflicts, and the near-duplicate entities to merge;
    each button the caller may not use is shown disabled with the grant it lacks, and a row
    rejected from this panel says so (``rejects``)."""
    context = overview(memory, caller)
    active = context["active_project"]
    pairs, pairs_error, age = dedupe.candidates(memory, caller)
    pairs = [{**p, "refusal": review_parts.refusal(memory, caller, review_parts.MERGE_ROLE, p["project_id"])}
             for p in pairs]
    held = (context["pending"] or {}).get("quarantined") or []
    ids = [str(r["observation_id"]) for r in held if r.get("observation_id")]
    importance = read_as(memory, caller, review_parts.importance_of, ids) if ids else {}
    return {**context, "duplicates": pairs, "duplicates_error": pairs_error, "duplicates_age": round(age),
            "refusals": review_parts.refusals(memory, caller, active["id"] if active else None),
            "held_observations": review_parts.marked(held, importance, rejects.known() if rejects else {})}
