"""A lock held by one process at a time across every process on a PostgreSQL database: a
session-level advisory lock on a connection of its own, held while the caller works and
released when that connection closes (also when the process dies and the server drops it)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psycopg

from cuba_memorys.storage.postgres.db import PgDatabase, one_value

# The original's key for the consolidation cycle, so an old and a new server on one database
# do not run two cycles at once.
NAMED_KEYS = {"rem": 0x0CBAA0D171060034}


def lock_key(name: str) -> int:
    """The advisory lock key of ``name``: a signed 64-bit integer, as PostgreSQL takes it."""
    if name in NAMED_KEYS:
        return NAMED_KEYS[name]
    return int.from_bytes(hashlib.sha256(f"cuba-memorys:{name}".encode()).digest()[:8], "big", signed=True)


@contextmanager
def advisory_lock(db: PgDatabase, name: str) -> Iterator[bool]:
    conn = db.connect()
    try:
        held = bool(one_value(conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(name),))))
        try:
            yield held
        finally:
            if held:
                with suppress(psycopg.Error):  # closing the connection below releases it anyway
                    conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(name),))
    finally:
        conn.close()
