"""Out-of-distribution abstention: is this query about anything this memory knows?

Mahalanobis distance of the query embedding from the trusted observations' embeddings, with a
Ledoit-Wolf shrunk covariance (384 dimensions from a few hundred rows is singular without
shrinkage). Threshold precedence: the call's argument, CUBA_OOD_THRESHOLD, a calibrated value
stored with the data (when its dimension matches), else √χ²₀.₉₉(d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SAMPLES = 50
Z_99 = 2.326347874  # standard normal 0.99 quantile


def default_threshold(dim: int) -> float:
    """√χ²₀.₉₉(d) by the Wilson–Hilferty approximation (≈21.25 at d = 384)."""
    k = 2.0 / (9.0 * dim)
    return math.sqrt(dim * (1.0 - k + Z_99 * math.sqrt(k)) ** 3)


def ledoit_wolf(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Shrunk covariance (1−δ)·S + δ·μI with the Ledoit-Wolf optimal δ; returns (cov, δ)."""
    n, d = x.shape
    centered = x - x.mean(axis=0)
    sample = centered.T @ centered / n
    mu = np.trace(sample) / d
    target = mu * np.eye(d)
    delta_sq = np.sum((sample - target) ** 2) / d
    sq = centered ** 2
    beta_sq = (np.sum(sq.T @ sq) / n - np.sum(sample ** 2)) / (d * n)
    shrinkage = 0.0 if delta_sq == 0 else min(1.0, max(0.0, beta_sq / delta_sq))
    return (1 - shrinkage) * sample + shrinkage * target, shrinkage


@dataclass(frozen=True)
class OodModel:
    mean: np.ndarray
    precision: np.ndarray
    samples: int

    @classmethod
    def fit(cls, vectors: np.ndarray) -> OodModel:
        cov, _ = ledoit_wolf(np.asarray(vectors, dtype=np.float64))
        return cls(vectors.mean(axis=0).astype(np.float64), np.linalg.pinv(cov), len(vectors))

    def distance(self, vector: np.ndarray) -> float:
        diff = np.asarray(vector, dtype=np.float64) - self.mean
        return float(math.sqrt(max(0.0, diff @ self.precision @ diff)))


def conformal_threshold(distances: list[float], alpha: float = 0.05) -> float:
    """The ⌈(n+1)(1−α)⌉-th smallest in-distribution distance (split conformal)."""
    if not distances:
        raise ValueError("no distances to calibrate from")
    ordered = sorted(distances)
    rank = math.ceil((len(ordered) + 1) * (1 - alpha))
    return ordered[min(rank, len(ordered)) - 1]
