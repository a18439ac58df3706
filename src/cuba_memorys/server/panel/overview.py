"""The overview page's parts, in words a person reads: what the memory holds, what needs
attention (each with its count and where to act on it), the last consolidation cycle, and the
doctor's verdict. views.overview gathers the service answers; this module only shapes them, so
no raw answer (a dict, None, False, a timestamp with microseconds) reaches the page."""

from __future__ import annotations

from typing import Any

from cuba_memorys.models import Scope
from cuba_memorys.secrets_scan import redact
from cuba_memorys.server.panel import shown
from cuba_memorys.services.memory import Memory

# What the memory holds, in this order: the project's counts name every table with a project,
# most of them bookkeeping (grants, tombstones, verify_log …) that says nothing to a reader.
HELD = (("entities", "entities"), ("observations", "observations"), ("relations", "relations"),
        ("facts", "facts"), ("episodes", "episodes"), ("errors", "errors"), ("sessions", "sessions"),
        ("procedures", "recipes"), ("artifacts", "artifacts"), ("projects", "projects"))
UNRESOLVED_COUNTED = 1000  # the page counts the unresolved errors up to this, then says "1,000+"
UNRESOLVED_SHOWN = 5
# What a consolidation cycle's counts mean, for the cycle's lines (a zero is left out): one, many.
CYCLE_FINDINGS = {"communities": ("community found", "communities found"),
                  "duplicate_candidates": ("near-duplicate name pair", "near-duplicate name pairs"),
                  "decayed_count": ("observation decayed", "observations decayed"),
                  "episodes_decayed": ("episode decayed", "episodes decayed"),
                  "embeddings_backfilled": ("embedding backfilled", "embeddings backfilled"),
                  "autolink_edges": ("relation linked", "relations linked"),
                  "facts_extracted": ("fact extracted", "facts extracted"),
                  "protected_entities": ("entity protected from decay", "entities protected from decay"),
                  "entities_scanned": ("entity scanned", "entities scanned"),
                  "relation_scan_failed": ("relation scan failed", "relation scans failed"),
                  "extraction_failed": ("extraction failed", "extractions failed")}

TRIGGERS = {"cli": "cuba-memorys rem", "schedule": "the server's schedule"}  # who started a cycle


def held(counts: dict[str, Any]) -> list[dict[str, Any]]:
    """The count cards: (label, value) of each table in HELD that the counts hold."""
    return [{"key": key, "label": label, "value": shown.number(counts[key])}
            for key, label in HELD if isinstance(counts.get(key), int)]


def unresolved(mem: Memory, client: str | None) -> dict[str, Any]:
    """The scope's unresolved errors: how many (counted up to UNRESOLVED_COUNTED) and the newest few."""
    scope: Scope = mem.scope(client)
    rows = mem.store.unresolved_errors(scope, UNRESOLVED_COUNTED + 1)
    count = min(len(rows), UNRESOLVED_COUNTED)
    return {"count": count, "more": len(rows) > UNRESOLVED_COUNTED,
            "latest": [{"type": r["error_type"], "message": redact(str(r["message"] or ""))}
                       for r in rows[:UNRESOLVED_SHOWN]]}


def problem(key: str, label: str, count: int | None, href: str, refusal: str | None = None,
            more: bool = False) -> dict[str, Any]:
    """One line of "Needs attention": its count (None: the service refused, ``refusal`` says why;
    ``more``: the count stopped at a limit, shown as "50+")."""
    return {"key": key, "label": label, "count": count, "shown": shown.number(count) + ("+" if more else ""),
            "href": href, "refusal": refusal}


def problems(pending: dict | None, pending_error: str | None, pending_limit: int, errors: dict | None,
             errors_error: str | None, conflicts: dict | None, conflicts_error: str | None,
             notices: list) -> list[dict[str, Any]]:
    listed = [pending.get(k) or [] for k in ("quarantined", "quarantined_episodes", "quarantined_errors")
              ] if pending else []
    return [
        problem("quarantined", "quarantined rows waiting for review", (pending or {}).get("count"), "/panel/review",
                pending_error, more=any(len(rows) >= pending_limit for rows in listed)),
        problem("unresolved-errors", "unresolved errors", (errors or {}).get("count"), "/panel/timeline?kind=error",
                errors_error, more=bool((errors or {}).get("more"))),
        problem("conflicts", "open sync conflicts", (conflicts or {}).get("total_open"), "/panel/review",
                conflicts_error),
        problem("peer-notices", "peer notices", len(notices), ""),
    ]


def consolidation(rem: dict[str, Any] | None) -> dict[str, Any] | None:
    """The last consolidation (REM) cycle in words; None when the doctor was not asked (not an admin)."""
    if rem is None:
        return None
    last = rem.get("last_cycle")
    hours = rem.get("stale_after_hours")
    view: dict[str, Any] = {"ran": last is not None, "stale": bool(rem.get("stale")),
                            "stale_after_hours": f"{hours:g}" if isinstance(hours, int | float) else shown.MISSING,
                            "server_up_since": shown.when(rem.get("server_up_since"))}
    if last is not None:
        counts = last.get("counts") or {}
        view.update(finished=shown.when(last.get("finished_at")), ago=shown.ago(last.get("finished_at")),
                    took=shown.duration(last.get("duration_ms")),
                    trigger=TRIGGERS.get(str(last.get("trigger")), str(last.get("trigger") or "")),
                    error=last.get("error"), findings=findings(counts))
    return view


def findings(counts: dict[str, Any]) -> list[str]:
    """A cycle's non-zero counts as lines: '9 communities found', '1 near-duplicate name pair'."""
    lines = []
    for key, (one, many) in CYCLE_FINDINGS.items():
        value = counts.get(key)
        if isinstance(value, int) and value:
            lines.append(f"{shown.number(value)} {one if value == 1 else many}")
    return lines


def health(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The doctor's verdict, its warnings, and the few facts a reader checks first."""
    if report is None:
        return None
    model = report.get("model") or {}
    coverage = report.get("embedding_coverage") or {}
    loaded = model.get("loaded")
    facts = [("version", report.get("version")), ("backend", report.get("backend")),
             ("embedding model", f"{loaded} ({model.get('dimension')} dimensions)" if loaded
              else f"none loaded: {model.get('reason') or 'not configured'}"),
             ("observations embedded", f"{shown.number(coverage.get('embedded'))} of"
                                       f" {shown.number(coverage.get('observations'))}" if coverage else None)]
    return {"ok": bool(report.get("ok")), "warnings": list(report.get("warnings") or []),
            "facts": [(label, value) for label, value in facts if value not in (None, "")]}


def clients(seen: dict[str, float]) -> list[dict[str, str]]:
    """The clients that called this server, latest first, with when."""
    return [{"name": name, "seen": shown.ago(at)} for name, at in sorted(seen.items(), key=lambda kv: -kv[1])]
