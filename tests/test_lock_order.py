"""The lock order (cuba_memorys/locks.py) and the two deadlocks of issue 28, reproduced directly.

The checker's own rules are tested on CheckedLock objects. The deadlocks are reproduced in a child
process on a real store with many threads: a process whose threads wait on each other for ever
cannot be stopped from inside (the GIL itself is one of the locks), so the parent gives the child
a wall-clock limit and fails the test when it is not back by then.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from cuba_memorys import locks
from cuba_memorys.locks import CheckedLock, LockOrderError


@pytest.fixture
def checked(monkeypatch):
    """The checker on for this process's module-level helpers, its violations cleared after."""
    monkeypatch.setattr(locks, "ENABLED", True)
    yield
    locks.violations.clear()


def test_a_leaf_taken_before_the_store_lock_is_refused(checked):
    store, leaf = CheckedLock("store", "store", True), CheckedLock("memory", "memory", False)
    with store, leaf:  # the order: the store first, then a leaf
        pass
    with leaf, pytest.raises(LockOrderError, match="took store .* while holding memory"):
        store.acquire()
    assert locks.held() == []
    assert len(locks.violations) == 1


def test_the_store_lock_is_reentrant_and_leaves_do_not_nest_backwards(checked):
    store = CheckedLock("store", "store", True)
    queue, cache = CheckedLock("queue", "queue", False), CheckedLock("cache", "cache", False)
    with store, store, queue, cache:
        assert locks.held() == ["store", "queue", "cache"]
    with cache, pytest.raises(LockOrderError):
        queue.acquire()


def test_a_condition_wait_gives_the_lock_back_and_takes_it_again(checked):
    cond = threading.Condition(CheckedLock("queue", "queue", False))
    done = []

    def notify() -> None:
        with cond:
            done.append(True)
            cond.notify_all()

    with cond:
        threading.Thread(target=notify).start()
        assert cond.wait_for(lambda: done, timeout=10)
        assert locks.held() == ["queue"]
    assert locks.held() == []


def test_waiting_under_a_lock_is_refused(checked):
    store, leaf = CheckedLock("store", "store", True), CheckedLock("memory", "memory", False)
    with store:
        locks.before_waiting("the database", store_allowed=True)  # a statement inside a transaction
        with pytest.raises(LockOrderError, match="waited on the embedding model while holding store"):
            locks.before_waiting("the embedding model")
    with leaf, pytest.raises(LockOrderError, match="waited on the database while holding memory"):
        locks.before_waiting("the database", store_allowed=True)


def test_the_event_loop_never_takes_the_store_lock(checked):
    store = CheckedLock("store", "store", True)

    async def on_a_command_loop() -> None:  # a CLI command's own loop serves no one else
        with store:
            pass

    async def on_the_server_loop() -> None:
        locks.serving_loop()
        store.acquire()

    asyncio.run(on_a_command_loop())
    with pytest.raises(LockOrderError, match="event-loop thread"):
        asyncio.run(on_the_server_loop())


def test_unchecked_locks_are_plain_threading_locks(monkeypatch):
    monkeypatch.setattr(locks, "ENABLED", False)
    assert not isinstance(locks.lock("x", "cache"), CheckedLock)
    with pytest.raises(ValueError):
        locks.lock("x", "no such kind")


# -- the deadlocks, in a child process --------------------------------------------------------------

STRESS = textwrap.dedent('''
    import sys, threading, time
    from dataclasses import replace
    from pathlib import Path
    from cuba_memorys.config import Settings
    from cuba_memorys.services import audit
    from cuba_memorys.services.memory import Memory

    folder = Path(sys.argv[1])
    settings = replace(Settings.from_env(), data_dir=folder, undo_dir=folder / "undo", juez_cli="none",
                       reranker_kind="cross-encoder", embed_model="none")
    mem = Memory.open(settings)
    store = mem.store
    with store.transaction():
        for n in range(300):
            store.set_meta(f"k{n}", "v" * 50)
    until = time.monotonic() + float(sys.argv[2])
    counts = [0] * 8

    def audited(n):  # a write transaction that asks for its client (audit.record does)
        i = 0
        while time.monotonic() < until:
            i += 1
            with store.transaction():
                store.set_meta(f"w{n}", str(i))
                audit.record(mem, f"client-{n}-{i}", "load.test", {"i": i})
            counts[n] += 1

    def new_clients(n):  # a new client's state is read from the store
        i = 0
        while time.monotonic() < until:
            i += 1
            mem.client(f"reader-{n}-{i}")
            counts[n] += 1

    def reads(n):  # many rows fetched, and statements that call back into Python (least/greatest)
        while time.monotonic() < until:
            store._q("SELECT key, value FROM meta")
            store._one("SELECT greatest(1, 2, length(value)), least(3, 4) FROM meta LIMIT 1")
            counts[n] += 1

    threads = [threading.Thread(target=f, args=(n,), daemon=True)
               for n, f in enumerate([audited, audited, new_clients, new_clients, reads, reads, reads, new_clients])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("done", sum(counts), flush=True)
''')


def test_many_threads_on_one_store_never_deadlock(tmp_path: Path):
    """Before issue 28 this stopped within a second or two: a thread in a transaction waited for
    Memory's lock held by a thread reading the store, or a cursor read outside the store's lock
    waited (holding the GIL) for SQLite's mutex held by a statement calling back into Python."""
    try:
        done = subprocess.run([sys.executable, "-c", STRESS, str(tmp_path), "6"], capture_output=True,
                              text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the threads deadlocked: the child did not finish 6 s of work within 90 s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LockOrderError" not in done.stderr
    finished = int(done.stdout.split()[-1])
    assert finished > 100  # every thread got work done, not just one
