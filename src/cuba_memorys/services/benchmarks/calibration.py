"""`cuba-memorys calibrate`: an OOD threshold from the user's own in-distribution questions."""

from __future__ import annotations

import math
from pathlib import Path

from cuba_memorys.errors import InvalidInput, ModelUnavailable
from cuba_memorys.search.ood import conformal_threshold, default_threshold
from cuba_memorys.services.benchmarks.evaluation import read_jsonl
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.search.ood import OodState, save_calibration, threshold

MIN_QUESTIONS = 20


def calibrate(mem: Memory, dataset: Path, *, alpha: float = 0.05, apply: bool = False) -> dict:
    if mem.embedder is None:
        raise ModelUnavailable(f"cannot calibrate without an embedding model: {mem.embedder_status.reason}")
    if not 0 < alpha < 1:
        raise InvalidInput("alpha", f"{alpha} is out of range", "0 < alpha < 1")
    questions = [row["query"] for row in read_jsonl(dataset) if isinstance(row.get("query"), str)]
    if len(questions) < MIN_QUESTIONS:
        raise InvalidInput("dataset", f"has {len(questions)} questions with a 'query'",
                           f"at least {MIN_QUESTIONS} questions this memory should be able to answer")
    state = OodState()
    model, why = state.model(mem)
    if model is None:
        raise InvalidInput("memory", why or "cannot fit the out-of-distribution model")
    distances = [model.distance(mem.embedder.embed_query(q)) for q in questions]
    value = conformal_threshold(distances, alpha)
    current, source = threshold(mem, None)
    if apply:
        save_calibration(mem, value, len(questions), alpha)
    return {
        "questions": len(questions), "alpha": alpha,
        "conformal_rank": min(math.ceil((len(questions) + 1) * (1 - alpha)), len(questions)),
        "threshold": round(value, 4),
        "default_threshold": round(default_threshold(mem.embedder.dim), 4),
        "threshold_in_use": None if current is None else round(current, 4), "threshold_in_use_source": source,
        "would_abstain_with_new": _share(d > value for d in distances),
        "would_abstain_with_current": 0.0 if current is None else _share(d > current for d in distances),
        "would_abstain_with_default": _share(d > default_threshold(mem.embedder.dim) for d in distances),
        "distance_median": round(sorted(distances)[len(distances) // 2], 4),
        "fitted_on": model.samples, "dim": mem.embedder.dim, "applied": apply,
    }


def _share(flags) -> float:
    data = list(flags)
    return round(sum(data) / len(data), 4) if data else 0.0
