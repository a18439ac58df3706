"""Transactions as sqlite-utils does them, on both backends: callbacks queued inside a savepoint
that rolls back never run, a COMMIT that fails rolls back and leaves the store usable, and a
call past its time limit stops and keeps nothing it had not committed."""

from __future__ import annotations

import time

import pytest

from cuba_memorys import deadline
from cuba_memorys.errors import HandlerTimeout, StorageError
from cuba_memorys.services.memory import Memory


class Boom(Exception):
    pass


def test_callbacks_of_a_rolled_back_savepoint_do_not_run(memory: Memory):
    store, ran = memory.store, []
    with store.transaction():
        store._after_commit(lambda: ran.append("outer"))
        try:
            with store.transaction():
                store.set_meta("inner", "1")
                store._after_commit(lambda: ran.append("inner, rolled back"))
                raise Boom
        except Boom:
            pass
        with store.transaction():
            store._after_commit(lambda: ran.append("inner, released"))
        assert ran == []  # nothing runs before the outermost commit
    assert ran == ["outer", "inner, released"]
    assert store.get_meta("inner") is None


def test_callbacks_of_a_rolled_back_transaction_do_not_run(memory: Memory):
    store, ran = memory.store, []
    with pytest.raises(Boom), store.transaction():
        with store.transaction():
            store._after_commit(lambda: ran.append("released into a failed outer"))
        raise Boom
    assert ran == []
    with store.transaction():  # and the next transaction's callbacks are its own
        store._after_commit(lambda: ran.append("next"))
    assert ran == ["next"]


def fail_the_commit(memory: Memory) -> None:
    """Queue a write the database accepts now but refuses at COMMIT (a deferred constraint)."""
    store = memory.store
    if store.backend == "sqlite":
        store._exec("PRAGMA defer_foreign_keys = ON")
        store._exec("INSERT INTO observations(id, entity_id, content, created_at, updated_at)"
                    " VALUES ('orphan', 'no-such-entity', 'refused at commit', 'now', 'now')")
    else:
        store._exec("CREATE TEMP TABLE IF NOT EXISTS twice (id int,"
                    " CONSTRAINT once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)")
        store._exec("INSERT INTO twice VALUES (1), (1)")


def test_a_failed_commit_rolls_back_and_the_store_stays_usable(memory: Memory):
    store, ran = memory.store, []
    with pytest.raises(StorageError, match="commit|constraint|duplicate"), store.transaction():
        store.set_meta("half", "written")
        store._after_commit(lambda: ran.append("must not run"))
        fail_the_commit(memory)
    assert ran == [] and store.get_meta("half") is None
    with store.transaction():  # the connection is not left inside the failed transaction
        store.set_meta("after", "ok")
        store._after_commit(lambda: ran.append("ran"))
    assert store.get_meta("after") == "ok" and ran == ["ran"]


def test_past_the_time_limit_nothing_is_committed(memory: Memory):
    store = memory.store
    with pytest.raises(HandlerTimeout), deadline.limit(0.2), store.transaction():
        store.set_meta("slow", "written")
        time.sleep(0.3)  # the call's work outlives its limit before the commit
    assert store.get_meta("slow") is None
    with deadline.limit(0.05):
        time.sleep(0.1)
        with pytest.raises(HandlerTimeout):
            store.get_meta("anything")  # the next statement stops the call
    with deadline.limit(30):
        store.set_meta("fast", "ok")
    assert store.get_meta("fast") == "ok"
