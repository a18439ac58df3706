"""cuba_vigia: the memory watched as a whole — summary (what it holds), health (importance,
staleness, coverage, the entropy of what it knows, how errors get resolved) and drift (whether
this week's errors differ from the month before). The graph metrics (communities, bridges,
structural) are services/graph/analysis.py.
"""

import math
from datetime import datetime, timedelta
from typing import Any, NotRequired, TypedDict

from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.memory import Memory

TOKENS_PER_ROW = 50  # the original's estimate: estimated_tokens = (observations + episodes) × 50
STALE_DAYS = 30
DRIFT_WINDOW = timedelta(days=7)
BASELINE = (timedelta(days=7), timedelta(days=37))  # days 7-37 ago: about four weeks
BASELINE_WEEKS = 4  # the original divides the baseline by 4 to get one week's expected count
MIN_EXPECTED = 0.5  # an error type unseen in the baseline still has a finite expected count
DRIFT_P = 0.05


# -- answers (typed as services/answers.py explains; no postponed annotations: NotRequired) ----------
class Summary(TypedDict):
    metric: str
    entities: int
    observations: int
    episodes: int
    relations: int
    errors: int
    sessions: int
    estimated_tokens: int
    project_scoped: bool


class Health(TypedDict):
    metric: str
    avg_importance: float
    stale_observations: int
    unused_entities: int
    database_size: int
    null_embeddings: int
    active_triggers: int
    table_sizes: dict[str, int]
    embedding_model: str | None
    embedding_dim: NotRequired[int | None]
    entropy: dict[str, Any]
    error_metrics: dict[str, Any]


class Drift(TypedDict):
    metric: str
    chi_squared: float
    degrees_of_freedom: int
    p_value: float
    categories: int
    drift_detected: bool
    error_distribution: list[dict[str, Any]]
    baseline_weekly: NotRequired[dict[str, float]]


# -- summary ---------------------------------------------------------------------------------
def summary(mem: Memory, client: str | None) -> dict:
    counts = mem.store.scope_counts(mem.scope(client))
    return {"metric": "summary", **counts,
            "estimated_tokens": (counts["observations"] + counts["episodes"]) * TOKENS_PER_ROW,
            "project_scoped": mem.project_scoped(client)}


# -- health ----------------------------------------------------------------------------------
def normalised_entropy(counts: dict[str, int]) -> float:
    """Shannon entropy of a distribution divided by log2 of its number of categories (0..1;
    0 for one category or none), rounded to 3 decimals as the original."""
    total = sum(counts.values())
    present = [c for c in counts.values() if c > 0]
    if total == 0 or len(present) < 2:
        return 0.0
    entropy = -sum(c / total * math.log2(c / total) for c in present)
    return round(entropy / math.log2(len(present)), 3)


def _entropy_block(types: dict[str, dict[str, int]]) -> dict:
    entity, observation = (normalised_entropy(types[k]) for k in ("entity_types", "observation_types"))
    score = round((entity + observation) / 2, 3)
    if score >= 0.7:
        meaning = "diverse: knowledge is spread over many kinds of entities and observations"
    elif score >= 0.4:
        meaning = "moderate: a few kinds dominate"
    else:
        meaning = "narrow: almost everything is of one kind (record decisions, lessons, errors too)"
    return {"entity_types": entity, "observation_types": observation, "knowledge_diversity_score": score,
            "interpretation": meaning}


def _error_metrics(rows: list[tuple[str, str | None, int]]) -> dict:
    resolved = [(c, r) for c, r, done in rows if done and r]
    minutes = [(datetime.fromisoformat(r) - datetime.fromisoformat(c)).total_seconds() / 60 for c, r in resolved]
    return {"resolution_rate": round(sum(1 for *_, done in rows if done) / len(rows), 4) if rows else None,
            "mttr_minutes": round(sum(minutes) / len(minutes), 2) if minutes else None}


def health(mem: Memory, client: str | None) -> dict:
    scope = mem.scope(client)
    figures = mem.store.health_figures(scope, iso(utc_now() - timedelta(days=STALE_DAYS)))
    name, dim = mem.stored_model()
    return {"metric": "health", "avg_importance": round(float(figures["avg_importance"]), 4),
            "stale_observations": figures["stale_observations"], "unused_entities": figures["unused_entities"],
            "database_size": mem.store.database_bytes(), "null_embeddings": figures["null_embeddings"],
            "active_triggers": figures["active_triggers"], "table_sizes": mem.store.scope_counts(scope),
            "embedding_model": name or (mem.embedder.name if mem.embedder else None),
            "embedding_dim": dim, "entropy": _entropy_block(mem.store.type_counts(scope)),
            "error_metrics": _error_metrics(mem.store.error_resolution(scope))}


# -- drift -----------------------------------------------------------------------------------
def chi2_survival(x: float, dof: int) -> float:
    """P(χ² ≥ x) for ``dof`` degrees of freedom: the closed forms of the regularised upper
    gamma function for integer and half-integer shape (no statistics dependency for one tail)."""
    if dof <= 0:
        return 1.0
    if x <= 0:
        return 1.0
    half = x / 2
    if dof % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, dof // 2):
            term *= half / i
            total += term
        return min(1.0, math.exp(-half) * total)
    total = math.erfc(math.sqrt(half))
    term = math.sqrt(half / math.pi) * math.exp(-half) * 2
    for i in range(1, (dof + 1) // 2):
        total += term
        term *= half / (i + 0.5)
    return min(1.0, max(0.0, total))


def drift(mem: Memory, client: str | None) -> dict:
    now = utc_now()
    scope = mem.scope(client)
    recent = mem.store.error_types_between(scope, iso(now - DRIFT_WINDOW), iso(now + timedelta(seconds=1)))
    baseline = mem.store.error_types_between(scope, iso(now - BASELINE[1]), iso(now - BASELINE[0]))
    categories = sorted(set(recent) | set(baseline))
    chi = sum((recent.get(c, 0) - e) ** 2 / e for c in categories
              for e in [max(MIN_EXPECTED, baseline.get(c, 0) / BASELINE_WEEKS)])
    dof = max(0, len(categories) - 1)
    p_value = chi2_survival(chi, dof) if categories else 1.0
    return {"metric": "drift", "chi_squared": round(chi, 4), "degrees_of_freedom": dof,
            "p_value": round(p_value, 6), "categories": len(categories), "drift_detected": p_value < DRIFT_P,
            "error_distribution": [{"error_type": c, "count": recent.get(c, 0)} for c in categories],
            "baseline_weekly": {c: round(baseline.get(c, 0) / BASELINE_WEEKS, 3) for c in categories}}

