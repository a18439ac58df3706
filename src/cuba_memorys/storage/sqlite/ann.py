"""An HNSW accelerator for the exact vector index, used above a size threshold.

The exact numpy index (:mod:`vector_index`) stays the source every answer is scored from;
this is a cache that only proposes candidates. Measured (docs/benchmarks.md, "Speed at
scale"): the exact scan costs ~14 ms at 100k rows on this 2-core machine, as much as the
query embedding, while an HNSW graph finds the same neighbours in well under a millisecond.

How it stays correct:
- Every change of the exact index (add, re-embed, delete, clear, another process's commit
  picked up by ``refresh_vectors``) is forwarded here, so the graph holds the same keys at
  the same ``embedding_rev`` as SQLite. Candidates it proposes are re-scored exactly from the
  numpy matrix, so scores are the exact cosines; only recall can differ (measured ~0.99
  recall@10 against the exact top-10 on real e5 queries).
- It is built off the request path, in a daemon thread, from a snapshot taken under the
  store's lock; changes arriving during the build are queued and applied before it is used.
  Until it is ready, search is exact.
- It is saved next to the database (one file: the (key, rev) pairs it holds, then the usearch
  graph) after a build and when the store closes, and loaded at start in the same background
  thread; the (key, rev) pairs are compared with SQLite's and only the difference is applied
  (a rebuild if most rows changed). A lost or corrupt file only costs a rebuild.
- Filtered searches use it for their over-fetch; when the filter leaves too few, the caller
  scores every allowed row exactly (``SqliteSearchMixin.vector_candidates``).

Vectors are stored 8-bit quantized in the graph (a quarter of float32's memory and half the
build time; the exact re-scoring makes up the ordering). Needs the ``usearch`` package; without
it search simply stays exact.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from pathlib import Path

import numpy as np

from cuba_memorys import locks

log = logging.getLogger("cuba_memorys")

DEFAULT_MIN_ROWS = 20_000
CONNECTIVITY = 16  # HNSW M
EXPANSION_ADD = 128  # efConstruction
EXPANSION_SEARCH = 256  # efSearch: recall@10 0.987, recall@100 0.96 from a 200-net on real e5 rows
REBUILD_SHARE = 0.3  # a saved graph with more than this share of rows changed is rebuilt
# Rows added per usearch call while building: between calls a stop request is seen, so a process
# can end while a build runs (~0.25 s a chunk here; the whole 100k build is ~25 s).
BUILD_CHUNK = 1000
_MAGIC = b"CUBAANN1"


@lru_cache(maxsize=1)
def available() -> bool:
    _load_onnxruntime_first()
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


def _load_onnxruntime_first() -> None:
    """Loading onnxruntime after usearch (its numkong SIMD library) crashes the process with a
    segmentation fault when an ONNX model then runs (seen with the MiniLM embedder); in the
    other order both work. So when onnxruntime is installed, it is loaded first."""
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime  # noqa: F401


class AnnAccelerator:
    """Candidate keys for a query from an HNSW graph mirroring a :class:`VectorIndex`.

    ``guard`` is the lock the store holds while it changes the exact index (its database
    lock); the build takes its snapshot under it.
    """

    def __init__(self, dim: int, min_rows: int = DEFAULT_MIN_ROWS, path: Path | str | None = None,
                 guard: Callable[[], AbstractContextManager] | None = None) -> None:
        self.dim = dim
        self.min_rows = min_rows
        self.path = Path(path) if path else None
        self._guard = guard or nullcontext
        self._lock = locks.rlock("hnsw accelerator", "ann")
        self._index = None  # usearch Index once ready
        self._revs: dict[int, int] = {}  # what the graph holds
        self._pending: dict[int, tuple[np.ndarray | None, int]] | None = None  # changes during a build
        self._thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []  # every build started and maybe running (stop joins them)
        self._generation = 0  # bumped by clear(): a build of an older generation is dropped
        self._changes_since_save = 0
        self._stop = threading.Event()
        self.last_error: str | None = None
        _LIVE.add(self)

    # -- state ----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._index is not None

    @property
    def building(self) -> bool:
        return self._pending is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a running build finishes (tests and benchmarks); True if ready."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.ready

    def stop(self, timeout: float | None = 5.0) -> None:
        """End a running build between two of its chunks and wait for its thread; search stays
        exact in this process, and nothing partial is saved (the next start builds again).

        A process must not end while a build is inside usearch: the interpreter's exit then
        kills the daemon thread in C++ and the process aborts ("terminate called without an
        active exception", exit code 134). The store's close calls this, and so does an
        exit handler for accelerators never closed."""
        self._stop.set()
        for thread in list(self._threads):  # a build orphaned by clear() may still be running too
            if thread is not threading.current_thread():
                thread.join(timeout)

    def __len__(self) -> int:
        return len(self._revs)

    # -- changes from the exact index -----------------------------------------------------
    def upsert(self, key: int, vector: np.ndarray, rev: int) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending[key] = (np.array(vector, dtype=np.float32), rev)
            elif self._index is not None:
                self._put(self._index, self._revs, key, vector, rev)
                self._changes_since_save += 1

    def remove(self, key: int) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending[key] = (None, 0)
            elif self._index is not None and key in self._revs:
                self._index.remove(key)
                del self._revs[key]
                self._changes_since_save += 1

    def clear(self) -> None:
        """Forget everything (the embeddings were cleared); a later start() builds anew."""
        with self._lock:
            self.last_error = None
            self._generation += 1
            self._index = None
            self._revs = {}
            self._pending = None
            self._changes_since_save = 0
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    @staticmethod
    def _put(index, revs: dict[int, int], key: int, vector: np.ndarray, rev: int) -> None:
        if key in revs:
            index.remove(key)
        index.add(key, np.asarray(vector, dtype=np.float32), threads=1)
        revs[key] = rev

    # -- build ----------------------------------------------------------------------------
    def maybe_start(self, exact) -> bool:
        """Start the background build (or load) when ``exact`` is big enough and none runs.
        Call it while holding the guard (the store's lock)."""
        if (self.ready or self.building or self.last_error is not None or len(exact) < self.min_rows
                or self._stop.is_set() or not available()):
            return False  # a failed build is not retried in this process: search stays exact
        with self._lock:
            if self._index is not None or self._pending is not None:
                return False
            self._pending = {}
            generation = self._generation
        self._thread = threading.Thread(target=self._build, args=(exact, generation),
                                        name="cuba-ann-build", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [self._thread]
        self._thread.start()
        return True

    def _new_index(self):
        from usearch.index import Index

        return Index(ndim=self.dim, metric="ip", dtype="i8", connectivity=CONNECTIVITY,
                     expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)

    def _build(self, exact, generation: int) -> None:
        try:
            index, revs = self._load_saved()
            with self._guard():  # a consistent view of the exact index
                current = exact.revisions()
                with self._lock:  # changes queued so far are in this view already
                    if generation == self._generation and self._pending is not None:
                        self._pending = {}
                if index is not None and _changed_share(revs, current) > REBUILD_SHARE:
                    index, revs = None, {}
                gone = [k for k in revs if k not in current]
                todo = [k for k, r in current.items() if revs.get(k) != r]
                vectors = exact.vectors_of(todo)
            if index is None:
                index, revs = self._new_index(), {}
            if gone:
                index.remove(np.asarray(gone, dtype=np.uint64))
                for key in gone:
                    del revs[key]
            changed = [k for k in todo if k in revs]
            if changed:
                index.remove(np.asarray(changed, dtype=np.uint64))
            for start in range(0, len(todo), BUILD_CHUNK):
                if generation != self._generation:
                    return  # cleared meanwhile: this build's result would be thrown away
                if self._stop.is_set():
                    with self._lock:
                        if generation == self._generation:
                            self._pending = None
                    return
                keys = todo[start:start + BUILD_CHUNK]
                index.add(np.asarray(keys, dtype=np.uint64), vectors[start:start + BUILD_CHUNK], threads=1)
                revs.update((k, current[k]) for k in keys)
            with self._lock:
                if generation != self._generation:
                    return
                for key, (vec, rev) in (self._pending or {}).items():
                    if vec is None:
                        if key in revs:
                            index.remove(key)
                            del revs[key]
                    else:
                        self._put(index, revs, key, vec, rev)
                self._pending = None
                self._index, self._revs = index, revs
                self._changes_since_save = len(todo) + len(gone)
            if self._changes_since_save:
                self.save()
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("vector index accelerator unavailable, search stays exact: %s", self.last_error)
            with self._lock:
                if generation == self._generation:
                    self._pending = None
                    self._index = None

    # -- persistence ----------------------------------------------------------------------
    def save(self) -> bool:
        """Write the graph and the (key, rev) pairs it holds, atomically; True if written."""
        if self.path is None:
            return False
        with self._lock:
            if self._index is None or self._changes_since_save == 0:
                return False
            keys = np.fromiter(self._revs.keys(), dtype=np.int64, count=len(self._revs))
            revs = np.fromiter(self._revs.values(), dtype=np.int64, count=len(self._revs))
            graph = self._index.save()
            self._changes_since_save = 0
        header = json.dumps({"dim": self.dim, "rows": len(keys)}).encode()
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            with tmp.open("wb") as fh:
                fh.write(_MAGIC + struct.pack("<I", len(header)) + header)
                fh.write(keys.tobytes())
                fh.write(revs.tobytes())
                fh.write(graph)
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            log.warning("could not save the vector index accelerator to %s: %s", self.path, exc)
            return False
        return True

    def _load_saved(self):
        if self.path is None or not self.path.exists():
            return None, {}
        try:
            data = self.path.read_bytes()
            if not data.startswith(_MAGIC):
                raise ValueError("not an accelerator file")
            (size,) = struct.unpack("<I", data[8:12])
            header = json.loads(data[12:12 + size])
            if header["dim"] != self.dim:
                raise ValueError(f"saved for {header['dim']}-d vectors")
            n, start = header["rows"], 12 + size
            keys = np.frombuffer(data, dtype=np.int64, count=n, offset=start)
            revs = np.frombuffer(data, dtype=np.int64, count=n, offset=start + 8 * n)
            from usearch.index import Index

            index = Index.restore(bytearray(data[start + 16 * n:]))
            if index is None or len(index) != n or index.ndim != self.dim:
                raise ValueError("graph and key list disagree")
            # usearch defines this property's setter apart from its getter, which mypy reads as read-only.
            index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
            return index, dict(zip(keys.tolist(), revs.tolist()))
        except Exception as exc:
            log.warning("ignoring saved vector index accelerator %s: %s", self.path, exc)
            return None, {}

    # -- search ---------------------------------------------------------------------------
    def search(self, query: np.ndarray, k: int) -> np.ndarray | None:
        """Up to ``k`` candidate keys, or None when the graph is not ready."""
        with self._lock:
            if self._index is None or not self._revs:
                return None
            matches = self._index.search(np.asarray(query, dtype=np.float32), min(k, len(self._revs)), threads=1)
            return np.asarray(matches.keys, dtype=np.int64)


_LIVE: weakref.WeakSet[AnnAccelerator] = weakref.WeakSet()


@atexit.register
def _stop_builds() -> None:
    """At interpreter exit, end the builds still running (see :meth:`AnnAccelerator.stop`)."""
    for accelerator in list(_LIVE):
        accelerator.stop()


def _changed_share(saved: dict[int, int], current: dict[int, int]) -> float:
    if not current:
        return 1.0
    same = sum(1 for k, r in saved.items() if current.get(k) == r)
    return 1.0 - same / max(len(current), len(saved))
