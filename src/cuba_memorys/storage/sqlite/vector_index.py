"""Exact in-memory cosine index over the embeddings stored in SQLite.

The database row is the source of truth; this index is a cache rebuilt from it at start
and re-synchronised whenever another process commits, so it cannot drift. Exact search was
chosen by measurement (docs/architecture.md): at the sizes an embedded memory reaches it is
fast enough, has recall 1.0, and adds and deletes cost nothing.
"""

from __future__ import annotations

import numpy as np

from cuba_memorys import locks


class VectorIndex:
    """Keys are stable integer row keys; each carries a revision so changes are detectable.

    ``accelerator`` (optional, :class:`~cuba_memorys.storage.sqlite.ann.AnnAccelerator`) mirrors every
    change and, once ready, proposes the candidates of :meth:`search`; they are re-scored
    exactly here. Changes are made under the owning store's lock; searches are not (a search
    must not wait for a write transaction), so the index has a lock of its own, a leaf taken
    after the store's (cuba_memorys/locks.py): a search racing a change that grew the matrix
    once read a matrix and a size of two different moments (issue 28's load test).
    """

    def __init__(self, dim: int, accelerator=None) -> None:
        self.dim = dim
        self.accelerator = accelerator
        self._lock = locks.rlock("vector index", "index")
        self._empty()

    def _empty(self) -> None:
        """No rows: the state of a new index."""
        self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        self._keys = np.zeros(0, dtype=np.int64)
        self._size = 0
        self._row_of: dict[int, int] = {}
        self._rev_of: dict[int, int] = {}

    def __len__(self) -> int:
        return self._size

    def revisions(self) -> dict[int, int]:
        with self._lock:
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
        with self._lock:
            self._upsert(key, vector, rev)

    def _upsert(self, key: int, vector: np.ndarray, rev: int) -> None:
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
        accelerator = self.accelerator
        if accelerator is not None:
            accelerator.upsert(key, self._matrix[row], rev)
            if self._size >= accelerator.min_rows and not (accelerator.ready or accelerator.building):
                accelerator.maybe_start(self)  # in the background

    def remove(self, key: int) -> None:
        """Swap the last row into the hole so the matrix stays dense."""
        with self._lock:
            self._remove(key)

    def _remove(self, key: int) -> None:
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
        if self.accelerator is not None:
            self.accelerator.remove(key)

    def clear(self) -> None:
        with self._lock:
            self._empty()
        if self.accelerator is not None:
            self.accelerator.clear()

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k keys with the highest cosine similarity (vectors are L2-normalised)."""
        with self._lock:
            return self._search(query, k)

    def _search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        if self._size == 0 or k <= 0:
            return []
        query = query.astype(np.float32)
        if self.accelerator is not None and k < self._size:
            candidates = self.accelerator.search(query, k)
            if candidates is not None:
                rows = np.fromiter((self._row_of[key] for key in candidates.tolist() if key in self._row_of),
                                   dtype=np.int64)
                scores = self._matrix[rows] @ query
                order = np.argsort(-scores, kind="stable")[:k]
                return [(int(self._keys[rows[i]]), float(scores[i])) for i in order]
        scores = self._matrix[: self._size] @ query
        k = min(k, self._size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self._keys[i]), float(scores[i])) for i in top]

    def score(self, query: np.ndarray, keys: list[int]) -> dict[int, float]:
        """Cosine similarity of the given keys only (for filtered searches)."""
        with self._lock:
            return self._score(query, keys)

    def _score(self, query: np.ndarray, keys: list[int]) -> dict[int, float]:
        rows = [self._row_of[k] for k in keys if k in self._row_of]
        if not rows:
            return {}
        scores = self._matrix[rows] @ query.astype(np.float32)
        return {int(self._keys[r]): float(s) for r, s in zip(rows, scores)}

    def vectors_of(self, keys: list[int]) -> np.ndarray:
        """(len(keys), dim) copy of the stored vectors of ``keys`` (all must be present)."""
        with self._lock:
            return self._matrix[[self._row_of[k] for k in keys]] if keys else np.zeros((0, self.dim), np.float32)

    def vector(self, key: int) -> np.ndarray | None:
        with self._lock:
            row = self._row_of.get(key)
            return None if row is None else self._matrix[row].copy()
