"""NPMI autolink (spec §4h): entities written about in the same work sessions are related.

Co-occurrence is counted over distinct (entity, session) pairs from live, trusted observations
written in a session: with N sessions, p_a = sessions of a / N and p_ab = sessions of both / N,
NPMI = ln(p_ab / (p_a p_b)) / (−ln p_ab). A pair of one project sharing ≥ ``min_sessions``
sessions with NPMI ≥ ``threshold`` becomes a bidirectional related_to edge with provenance
'predicted' and strength NPMI clamped to [0, 1]. Existing edges are never changed: a pair that
already has a related_to edge keeps it as it is.

``link`` plans by default; ``apply`` writes every edge in one transaction and appends an audit
event with the counts. The consolidation cycle runs :func:`autolink` inside its own transaction.
"""

from __future__ import annotations

from typing import Any

from cuba_memorys.errors import InvalidInput
from cuba_memorys.graph.linkpred import npmi
from cuba_memorys.models import Scope
from cuba_memorys.services import audit, validate
from cuba_memorys.services.memory import Memory

DEFAULT_THRESHOLD, DEFAULT_MIN_SESSIONS, DEFAULT_SHOW = 0.3, 2, 40
AUDIT_ACTION = "graph.autolink"


def candidates(mem: Memory, scope: Scope, threshold: float, min_sessions: int) -> tuple[int, list[dict[str, Any]]]:
    """(sessions counted, the pairs that qualify, strongest first)."""
    counts = mem.store.session_cooccurrence(scope, min_sessions)
    total, per_entity = counts["sessions"], counts["entity_sessions"]
    found: list[dict[str, Any]] = []
    for a, b, together in counts["pairs"]:
        score = npmi(together, per_entity.get(a, 0), per_entity.get(b, 0), total)
        if score is not None and score >= threshold:
            found.append({"a": a, "b": b, "shared_sessions": together, "npmi": score})
    found.sort(key=lambda p: (-p["npmi"], -p["shared_sessions"], p["a"], p["b"]))
    return total, found


def autolink(mem: Memory, scope: Scope, threshold: float = DEFAULT_THRESHOLD,
             min_sessions: int = DEFAULT_MIN_SESSIONS) -> int:
    """Write every qualifying pair's edge (the caller's transaction); returns the edges written."""
    _, found = candidates(mem, scope, threshold, min_sessions)
    return mem.store.add_predicted_relations([(p["a"], p["b"], p["npmi"]) for p in found], None)


def link(mem: Memory, client: str | None, *, threshold: object = DEFAULT_THRESHOLD,
         min_sessions: object = DEFAULT_MIN_SESSIONS, show: object = DEFAULT_SHOW, apply: object = False) -> dict:
    cut = _threshold(threshold)
    least = validate.int_range("min_sessions", min_sessions, 1, 1_000_000, DEFAULT_MIN_SESSIONS)
    shown = validate.int_range("show", show, 0, 100_000, DEFAULT_SHOW)
    do_it = validate.flag("apply", apply, False)
    scope = mem.scope(client)
    total, found = candidates(mem, scope, cut, least)
    names = {i: e.name for i, e in mem.store.entities_by_ids(
        sorted({p["a"] for p in found[:shown]} | {p["b"] for p in found[:shown]})).items()}
    answer: dict[str, Any] = {
        "action": "link", "dry_run": not do_it, "threshold": cut, "min_sessions": least, "sessions": total,
        "candidates": len(found),
        "pairs": [_pair_view(p, names) for p in found[:shown]],
        "edges_created": 0,
    }
    if not do_it:
        answer["hint"] = "Nothing was written; run with --apply to create these edges."
        return answer
    with mem.store.transaction():
        created = mem.store.add_predicted_relations([(p["a"], p["b"], p["npmi"]) for p in found], None)
        audit.record(mem, client, AUDIT_ACTION, {"candidates": len(found), "edges_created": created,
                                                 "threshold": cut, "min_sessions": least})
    answer["edges_created"] = created
    answer["already_linked"] = len(found) - created
    return answer


def _pair_view(pair: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    a, b = sorted((names.get(pair["a"], pair["a"]), names.get(pair["b"], pair["b"])))  # a stable order to read
    return {"a": a, "b": b, "shared_sessions": pair["shared_sessions"], "npmi": round(pair["npmi"], 4),
            "strength": round(min(1.0, max(0.0, pair["npmi"])), 4)}


def _threshold(value: object) -> float:
    if value is None:
        return DEFAULT_THRESHOLD
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput("threshold", f"must be a number, got {value!r}", "-1..1 (NPMI)")
    if not -1.0 <= value <= 1.0:
        raise InvalidInput("threshold", f"{value} is out of range", "-1..1 (NPMI)")
    return float(value)
