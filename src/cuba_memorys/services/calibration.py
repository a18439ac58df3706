"""cuba_calibrar: is verify's confidence borne out by what actually turned out true?

Each ``cuba_faro mode=verify`` call is logged pending; ``resolve`` marks one correct or
incorrect. From the resolved calls, in the caller's project:

- **stats**: per grounding level, Beta(correct + 1, incorrect + 1) and its mean
  p_correct = (c + 1)/(c + i + 2), the ``calibrated_accuracy`` verify then reports for that level;
- **metrics**: Brier = mean((confidence − outcome)²), outcome 1 for correct and 0 for incorrect;
  ECE over 10 equal-width bins of confidence ([0, 0.1), …, [0.9, 1.0], 1.0 in the last)
  = Σ (n_k/N)·|accuracy_k − confidence_k|, each bin a row of the reliability diagram.

Resolving also updates the trust of each *source* behind the claim: every distinct source of the
live observations of the claim's entity gets alpha + 1 (correct) or beta + 1 (incorrect). Trust
is global (a source is a kind of writer, not a project's row) and starts from Beta(1, 1) for the
five known sources. A source's first outcome counts (the original seeds an unknown source at 1/1
and drops that outcome). Verify uses it: evidence from a source whose p_correct = α/(α+β) is
below 0.5 weighs p_correct/0.5 of its usual weight (``weigh_by_trust``).

(No ``from __future__ import annotations``: the answer TypedDicts' ``NotRequired`` must be
evaluated, see services/answers.py.)
"""

import math
from collections.abc import Iterable, Sequence
from typing import Any, NotRequired, TypedDict

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import SOURCES, iso, utc_now
from cuba_memorys.services import audit, validate
from cuba_memorys.services.memory import Memory

OUTCOMES = ("correct", "incorrect")
HISTORY_DEFAULT, HISTORY_MAX = 20, 100
BINS = 10
LOW_TRUST = 0.5  # below this p_correct a source's evidence weighs less in verify
MAX_ID_CHARS = 100

Row = dict[str, Any]


# -- answers ---------------------------------------------------------------------------------
class CalibrationStats(TypedDict):
    action: str
    levels: list[Row]
    overall: dict[str, int]


class CalibrationHistory(TypedDict):
    action: str
    entries: list[Row]
    count: int
    clamped: NotRequired[dict[str, Any]]


class CalibrationResolved(TypedDict):
    action: str
    verify_id: str
    outcome: str
    entity_name: str | None
    sources_credibility_updated: int
    sources: list[Row]  # beyond the original: each updated source's trust after the change
    audit_id: int


class CalibrationTrust(TypedDict):
    action: str
    sources: list[Row]
    interpretation: str


class CalibrationMetrics(TypedDict):
    action: str
    brier: float | None
    ece: float | None
    n: int
    reliability_diagram: list[Row]
    interpretation: str
    note: NotRequired[str]


# -- the formulas (pure) -----------------------------------------------------------------------
def beta_mean(correct: int, incorrect: int) -> float:
    """Mean of Beta(correct + 1, incorrect + 1): the chance the next one is correct."""
    return (correct + 1) / (correct + incorrect + 2)


def interval_width(alpha: float, beta: float) -> float:
    """Two standard deviations of Beta(alpha, beta), at most 1: how unsure p_correct still is."""
    total = alpha + beta
    return min(1.0, 2 * math.sqrt(alpha * beta / (total * total * (total + 1))))


def brier(predictions: Sequence[tuple[float, bool]]) -> float:
    return sum((conf - (1.0 if ok else 0.0)) ** 2 for conf, ok in predictions) / len(predictions)


def reliability_bins(predictions: Sequence[tuple[float, bool]]) -> list[Row]:
    """The non-empty bins of the reliability diagram, lowest first."""
    members: dict[int, list[tuple[float, bool]]] = {}
    for conf, ok in predictions:
        # A tiny epsilon so a confidence stored as 0.3 is not put in [0.2, 0.3) by 0.3·10 = 2.999…
        members.setdefault(min(int(conf * BINS + 1e-9), BINS - 1), []).append((conf, ok))
    rows = []
    for k in sorted(members):
        got = members[k]
        accuracy = sum(1 for _, ok in got if ok) / len(got)
        confidence = sum(conf for conf, _ in got) / len(got)
        rows.append({"bin_lo": round(k / BINS, 1), "bin_hi": round((k + 1) / BINS, 1), "n": len(got),
                     "accuracy": round(accuracy, 4), "confidence": round(confidence, 4),
                     "gap": round(abs(accuracy - confidence), 4), "_gap": abs(accuracy - confidence)})
    return rows


def ece(bins: Sequence[Row], total: int) -> float:
    return sum(b["n"] / total * b["_gap"] for b in bins)


# -- trust -------------------------------------------------------------------------------------
def trust_rows(mem: Memory) -> list[Row]:
    """Every known source with its Beta trust: the stored ones, and the prior Beta(1, 1) for a
    known source without an outcome yet (updated_at None)."""
    stored = {r["source"]: r for r in mem.store.source_trust()}
    rows = [stored.get(s, {"source": s, "alpha": 1.0, "beta": 1.0, "updated_at": None}) for s in SOURCES]
    rows += [r for s, r in stored.items() if s not in SOURCES]
    return [_with_figures(r) for r in rows]


def _with_figures(row: Row) -> Row:
    a, b = row["alpha"], row["beta"]
    return {"source": row["source"], "alpha": a, "beta": b, "p_correct": round(a / (a + b), 4),
            "credible_interval_width": round(interval_width(a, b), 4), "total_resolved": int(round(a + b - 2)),
            "updated_at": row["updated_at"]}


def source_p_correct(mem: Memory) -> dict[str, float]:
    """p_correct of each source that has had an outcome (the others are at 0.5)."""
    return {r["source"]: r["alpha"] / (r["alpha"] + r["beta"]) for r in mem.store.source_trust()}


def weigh_by_trust(evidence: Iterable[Row], p_correct: dict[str, float]) -> list[Row]:
    """Give each evidence row from a source below LOW_TRUST the weight p_correct/0.5
    (``trust_weight``, which verify.score multiplies in); returns the sources so weighed."""
    adjusted: dict[str, Row] = {}
    for item in evidence:
        p = p_correct.get(item.get("source") or "")
        if p is None or p >= LOW_TRUST:
            continue
        item["trust_weight"] = round(p / LOW_TRUST, 4)
        adjusted[item["source"]] = {"source": item["source"], "p_correct": round(p, 4),
                                    "weight": item["trust_weight"]}
    return list(adjusted.values())


def calibrated_accuracy(mem: Memory, client: str | None, level: str) -> float | None:
    """(correct + 1)/(resolved + 2) of the resolved verify calls of ``level`` in the caller's
    project; None while none is resolved."""
    found = mem.store.level_outcomes(mem.scope(client), level)
    return round(beta_mean(found[0][1], found[0][2]), 4) if found else None


# -- cuba_calibrar -------------------------------------------------------------------------------
def stats(mem: Memory, client: str | None) -> dict[str, Any]:
    scope = mem.scope(client)
    levels = [{"grounding_level": level, "alpha": c + 1, "beta": i + 1, "p_correct": round(beta_mean(c, i), 4),
               "total_resolved": c + i} for level, c, i in mem.store.level_outcomes(scope)]
    counts = mem.store.outcome_counts(scope)
    return {"action": "stats", "levels": levels,
            "overall": {"total_predictions": counts["total"], "correct": counts["correct"],
                        "incorrect": counts["incorrect"], "pending": counts["pending"]}}


def history(mem: Memory, client: str | None, *, limit: object = None) -> dict[str, Any]:
    clamps = validate.Clamps()
    used = clamps.integer("limit", limit, 1, HISTORY_MAX, HISTORY_DEFAULT)
    entries = [{key: row[key] for key in ("id", "claim", "entity_name", "confidence", "grounding_level",
                                          "outcome", "created_at")}
               for row in mem.store.verify_entries(mem.scope(client), used)]
    return clamps.note({"action": "history", "entries": entries, "count": len(entries)})


def _already_resolved(verify_id: str, outcome: str) -> InvalidInput:
    return InvalidInput("verify_id", f"verify call {verify_id} is already resolved as {outcome}; an outcome is"
                        " set once", "a pending verify call (cuba_calibrar action=history lists them)")


def resolve(mem: Memory, client: str | None, *, verify_id: object, outcome: object) -> dict[str, Any]:
    vid = validate.text("verify_id", verify_id, high=MAX_ID_CHARS)
    result = validate.choice("outcome", outcome, OUTCOMES)
    scope = mem.scope(client)
    entry = mem.store.verify_entry(vid, scope)
    if entry is None:
        raise NotFound(f"verify call {vid!r} not found in this project.",
                       hint="cuba_calibrar action=history lists the verify calls and their ids.")
    if entry["outcome"] != "pending":
        raise _already_resolved(vid, entry["outcome"])
    at = iso(utc_now())
    with mem.store.transaction():
        if not mem.store.resolve_verify(vid, result, at):  # resolved meanwhile by another call
            raise _already_resolved(vid, "another outcome")
        entity = entry["entity_name"]
        sources = mem.store.claim_sources(entity, scope) if entity else []
        updated = [_with_figures(mem.store.credit_source(s, result == "correct", at)) for s in sources]
        audit_id = audit.record(mem, client, "calibration.resolve", {"verify_id": vid, "outcome": result})
    return {"action": "resolve", "verify_id": vid, "outcome": result, "entity_name": entity,
            "sources_credibility_updated": len(updated), "sources": updated, "audit_id": audit_id}


def trust(mem: Memory, client: str | None) -> dict[str, Any]:
    rows = sorted(trust_rows(mem), key=lambda r: (-r["p_correct"], r["source"]))
    low = [r["source"] for r in rows if r["p_correct"] < LOW_TRUST]
    text = ("p_correct is the mean of each source's Beta(alpha, beta): how often claims resting on its"
            " observations were resolved correct (1/1 is the prior: no outcome yet); a wide"
            " credible_interval_width means few outcomes.")
    text += (f" Below 0.5, so weighed less in verify: {', '.join(low)}." if low
             else " No source is below 0.5: verify weighs every source's evidence fully.")
    return {"action": "trust", "sources": rows, "interpretation": text}


def _metrics_interpretation(ece_value: float, n: int, accuracy: float, confidence: float) -> str:
    quality = ("well calibrated" if ece_value < 0.05 else "somewhat miscalibrated" if ece_value < 0.15
               else "poorly calibrated")
    lean = ("overconfident: confidence runs above how often it is right" if confidence > accuracy + 0.02
            else "underconfident: it is right more often than its confidence says" if accuracy > confidence + 0.02
            else "neither over- nor underconfident on average")
    text = f"Verify is {quality} (ECE {ece_value:.3f}) and {lean} ({n} resolved calls)."
    return text + (" Fewer than 30 outcomes: read these figures as rough." if n < 30 else "")


def metrics(mem: Memory, client: str | None) -> dict[str, Any]:
    predictions = mem.store.resolved_predictions(mem.scope(client))
    if not predictions:
        return {"action": "metrics", "brier": None, "ece": None, "n": 0, "reliability_diagram": [],
                "interpretation": "No verify call is resolved yet, so calibration cannot be measured.",
                "note": "Resolve verify calls with cuba_calibrar action=resolve (verify_id from action=history,"
                        " outcome correct or incorrect)."}
    n = len(predictions)
    bins = reliability_bins(predictions)
    ece_value = ece(bins, n)
    accuracy = sum(1 for _, ok in predictions if ok) / n
    confidence = sum(conf for conf, _ in predictions) / n
    return {"action": "metrics", "brier": round(brier(predictions), 4), "ece": round(ece_value, 4), "n": n,
            "reliability_diagram": [{k: v for k, v in b.items() if k != "_gap"} for b in bins],
            "interpretation": _metrics_interpretation(ece_value, n, accuracy, confidence)}
