"""A lock held by one process at a time on an embedded store: an OS file lock (flock) on a
file beside the database. The kernel releases it when the holder's file is closed, including
when the process dies, so a crashed cycle never leaves the store locked."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(database: str, name: str) -> Path:
    """``memory.db`` → ``memory.db.<name>-lock``."""
    path = Path(database)
    return path.with_name(f"{path.name}.{name}-lock")


@contextmanager
def file_lock(database: str, name: str) -> Iterator[bool]:
    """Yields True while this process holds the lock, False (at once) when another open file
    holds it. An in-memory database has no other process to exclude: always True."""
    if database == ":memory:":
        yield True
        return
    fd = os.open(lock_path(database, name), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            held = False
        try:
            yield held
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
