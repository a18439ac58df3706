"""Exact in-memory cosine index over the embeddings stored in SQLite.

The database row is the source of truth; this index is a cache rebuilt from it at start
and re-synchronised whenever another process commits, so it cannot drift. Exact search was
chosen by measurement (docs/architecture.md): at the sizes an embedded memory reaches it is
fast enough, has recall 1.0, and adds and deletes cost nothing.
"""

from __future__ import annotations

import numpy as np


class VectorIndex:
    """Keys are stable integer row keys; each carries a revision so changes are detectable."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._keys = np.zeros(0, dtype=np.int64)
        self._size = 0
        self._row_of: dict[int, int] = {}
        self._rev_of: dict[int, int] = {}

    def __len__(self) -> int:
        return self._size

    def revisions(self) -> dict[int, int]:
        return dict(self._rev_of)

    def _grow(self, needed: int) -> None:
        capacity = self._matrix.shape[0]
        if needed <= capacity:
            return
        new_capacity = max(needed, capacity * 2, 1024)
        matrix = np.zeros((new_capacity, self.dim), dtype=np.float32)
        matrix[: self._size] = self._matrix[: self._size]
        keys = np.zeros(new_capacity, dtype=np.int64)
        keys[: self._size] = self._keys[: self._size]
        self._matrix, self._keys = matrix, keys

    def upsert(self, key: int, vector: np.ndarray, rev: int = 0) -> None:
        if vector.shape != (self.dim,):
            raise ValueError(f"vector of shape {vector.shape} does not fit a {self.dim}-d index")
        row = self._row_of.get(key)
        if row is None:
            self._grow(self._size + 1)
            row = self._size
            self._size += 1
            self._row_of[key] = row
            self._keys[row] = key
        self._matrix[row] = vector
        self._rev_of[key] = rev

    def remove(self, key: int) -> None:
        """Swap the last row into the hole so the matrix stays dense."""
        row = self._row_of.pop(key, None)
        if row is None:
            return
        self._rev_of.pop(key, None)
        last = self._size - 1
        if row != last:
            moved_key = int(self._keys[last])
            self._matrix[row] = self._matrix[last]
            self._keys[row] = moved_key
            self._row_of[moved_key] = row
        self._size -= 1

    def clear(self) -> None:
        self.__init__(self.dim)

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k keys with the highest cosine similarity (vectors are L2-normalised)."""
        if self._size == 0 or k <= 0:
            return []
        scores = self._matrix[: self._size] @ query.astype(np.float32)
        k = min(k, self._size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self._keys[i]), float(scores[i])) for i in top]

    def score(self, query: np.ndarray, keys: list[int]) -> dict[int, float]:
        """Cosine similarity of the given keys only (for filtered searches)."""
        rows = [self._row_of[k] for k in keys if k in self._row_of]
        if not rows:
            return {}
        scores = self._matrix[rows] @ query.astype(np.float32)
        return {int(self._keys[r]): float(s) for r, s in zip(rows, scores)}

    def vector(self, key: int) -> np.ndarray | None:
        row = self._row_of.get(key)
        return None if row is None else self._matrix[row].copy()
