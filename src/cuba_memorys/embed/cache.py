"""A persistent cache of passage embeddings, keyed by model and exact text.

Embedding dominates ingest time (~20 texts/s for e5-small on one core). Benchmarks and
re-imports embed the same texts again and again; with `CUBA_EMBED_CACHE=/path/cache.sqlite`
each text is embedded once per model, ever. The vectors are identical to a fresh embedding,
so results do not change.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cuba_memorys import locks
from cuba_memorys.embed.base import Embedder


class CachedEmbedder:
    """Wraps an :class:`Embedder`; passages are looked up before they are computed."""

    def __init__(self, inner: Embedder, path: Path | str) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), check_same_thread=False, timeout=60)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA secure_delete = ON")  # a forgotten passage's vector leaves no copy
        self._conn.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        self._lock = locks.lock("embedding cache file", "cache")

    def _key(self, text: str) -> bytes:
        return hashlib.sha1(f"{self.name}\0{self.dim}\0{text}".encode()).digest()

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        keys = [self._key(t) for t in texts]
        found = self._lookup(keys)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            fresh = self.inner.embed_passages([texts[i] for i in missing])
            with self._lock, self._conn:
                self._conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                                       [(keys[i], fresh[j].tobytes()) for j, i in enumerate(missing)])
            for j, i in enumerate(missing):
                found[keys[i]] = fresh[j]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = found[key]
        return out

    def _lookup(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                rows = self._conn.execute(
                    f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def forget_passages(self, texts: Sequence[str]) -> int:
        """Remove the cached vectors of these passages (cuba_forget); returns how many were cached."""
        keys = [(self._key(t),) for t in dict.fromkeys(texts)]
        with self._lock:
            with self._conn:
                removed = sum(self._conn.execute("DELETE FROM vectors WHERE key = ?", key).rowcount for key in keys)
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)
