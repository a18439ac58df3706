"""OOD abstention state: the fitted model (refit as the memory grows) and the threshold."""

from __future__ import annotations

import json

import numpy as np

from cuba_memorys import locks
from cuba_memorys.search.ood import MIN_SAMPLES, OodModel
from cuba_memorys.services.memory import Memory

REFIT_GROWTH = 0.05  # refit once the trusted, embedded rows grew or shrank by 5%


class OodState:
    def __init__(self) -> None:
        self._model: OodModel | None = None
        self._fitted_on = -1
        self._lock = locks.lock("ood fit", "cache")

    def model(self, mem: Memory) -> tuple[OodModel | None, str | None]:
        """The fitted model, or None and why it cannot judge."""
        count = mem.store.trusted_embedding_count()
        with self._lock:
            stale = self._model is None or abs(count - self._fitted_on) > REFIT_GROWTH * max(self._fitted_on, 1)
        if stale and count >= MIN_SAMPLES:
            # Read and fitted with no lock held (a leaf lock never waits on the store); two threads
            # may fit at once, the later one's fit is kept.
            fitted = OodModel.fit(mem.store.sample_embeddings(mem.settings.ood_fit_limit))
            with self._lock:
                self._model, self._fitted_on = fitted, count
        if count < MIN_SAMPLES:
            return None, (f"out-of-distribution check needs at least {MIN_SAMPLES} embedded trusted"
                          f" observations; this memory has {count}")
        with self._lock:
            return self._model, None


def threshold(mem: Memory, argument: float | None) -> tuple[float | None, str]:
    """(threshold, where it came from): argument → CUBA_OOD_THRESHOLD → calibrated → none.

    The original falls back to √χ²₀.₉₉(d) (21.25 at d = 384). Measured here, that default
    refuses every question: e5 embeds queries with their own prefix, and on LoCoMo every
    question, answerable or not, lies ~42 from the passages' centre (bench/ood_study.py; a
    self-calibration from stored rows asked as queries refused 77% of answerable questions).
    So without a threshold from the caller, the environment or `cuba-memorys calibrate`, the
    search does not abstain and says why, rather than refusing everything."""
    if argument is not None:
        return argument, "argument"
    if mem.settings.ood_threshold is not None:
        return mem.settings.ood_threshold, "CUBA_OOD_THRESHOLD"
    dim = mem.loaded_embedder().dim
    saved = mem.store.get_meta("ood_calibration")
    if saved:
        data = json.loads(saved)
        if data.get("dim") == dim:
            return float(data["threshold"]), "calibrated"
    return None, "uncalibrated"


def save_calibration(mem: Memory, value: float, samples: int, alpha: float) -> None:
    embedder = mem.loaded_embedder()
    mem.store.set_meta("ood_calibration", json.dumps(
        {"threshold": value, "dim": embedder.dim, "model": embedder.name,
         "samples": samples, "alpha": alpha}))


def distance(mem: Memory, state: OodState, query_vec: np.ndarray) -> tuple[float | None, str | None]:
    model, why = state.model(mem)
    if model is None:
        return None, why
    return model.distance(query_vec), None
