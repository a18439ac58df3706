"""The time limit of the call being served (CUBA_HANDLER_TIMEOUT_SECS), as a context variable.

The server sets it for each tool call (server/runtime.py). The storage layer checks it before
every statement and before every commit, so a call that runs past its limit stops at its next
statement and its unfinished transaction rolls back: the caller is told it timed out, and
nothing it was writing is left half-written. Work the answer does not depend on (access counts
written after the answer) runs with no limit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from cuba_memorys.errors import HandlerTimeout

_DEADLINE: ContextVar[float | None] = ContextVar("cuba_deadline", default=None)


@contextmanager
def limit(seconds: float | None) -> Iterator[None]:
    """Run the block under a limit of ``seconds`` from now (None: no limit)."""
    token = _DEADLINE.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check() -> None:
    """Raise :class:`HandlerTimeout` when the current call is past its limit."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise HandlerTimeout("the call ran past its time limit (CUBA_HANDLER_TIMEOUT_SECS) and was stopped;"
                             " what it had not committed was rolled back")


def remaining() -> float | None:
    """Seconds left before the current call's limit (None: no limit; 0 when it has passed)."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())
