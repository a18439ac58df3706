"""Retrieval metrics and the paired bootstrap used to report them honestly."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int = 10) -> float:
    """Binary-gain nDCG@k; the ideal ranking places every relevant id first."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, rid in enumerate(ranked[:k]) if rid in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & relevant) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], relevant: set[str]) -> float:
    for i, rid in enumerate(ranked):
        if rid in relevant:
            return 1.0 / (i + 1)
    return 0.0


def bootstrap_ci(values: Sequence[float] | np.ndarray, resamples: int = 2000, seed: int = 7,
                 level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the mean, by resampling questions with replacement."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - level) / 2
    return float(data.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired_bootstrap(before: Sequence[float], after: Sequence[float], resamples: int = 2000,
                     seed: int = 7) -> tuple[float, float, float]:
    """Mean difference (after − before) over the same questions, with its 95% CI."""
    diffs = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    return bootstrap_ci(diffs, resamples=resamples, seed=seed)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan
