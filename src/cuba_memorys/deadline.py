"""The time limit of the call being served (CUBA_HANDLER_TIMEOUT_SECS), as a context variable.

The server sets it for each tool call (server/runtime.py). The storage layer checks it before
every statement and before every commit, so a call that runs past its limit stops at its next
statement and its unfinished transaction rolls back: the caller is told it timed out, and
nothing it was writing is left half-written. Work the answer does not depend on (access counts
written after the answer) runs with no limit.

The limit bounds *waiting* (for the database, for a lock, for other calls), not work that is
making progress: the embedding model's time inside :func:`not_counted` (a write embedding its
rows before its transaction, with the background queue off: a maximum-size batch of 100 long
texts is minutes of model time on a small machine) moves the limit on by as long as it took, up
to MODEL_SECS_MAX per call, and the runtime is told (``on_pause``) so its own watch follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from cuba_memorys.errors import HandlerTimeout

MODEL_SECS_MAX = 1800.0  # model time a call may spend beyond its limit (a hung model still ends)


@dataclass
class Limit:
    at: float | None  # time.monotonic() past which the call stops (None: no limit)
    on_pause: Callable[[bool, float], None] | None = None  # (paused, seconds left): the runtime's watch
    depth: int = 0  # nested not_counted blocks
    model_secs: float = 0.0  # model time not counted so far


_DEADLINE: ContextVar[Limit | None] = ContextVar("cuba_deadline", default=None)


@contextmanager
def limit(seconds: float | None, on_pause: Callable[[bool, float], None] | None = None) -> Iterator[None]:
    """Run the block under a limit of ``seconds`` from now (None: no limit)."""
    token = _DEADLINE.set(Limit(None if seconds is None else time.monotonic() + seconds, on_pause))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check() -> None:
    """Raise :class:`HandlerTimeout` when the current call is past its limit."""
    found = _DEADLINE.get()
    if found is not None and found.at is not None and found.depth == 0 and time.monotonic() > found.at:
        raise HandlerTimeout("the call ran past its time limit (CUBA_HANDLER_TIMEOUT_SECS) and was stopped;"
                             " what it had not committed was rolled back")


def remaining() -> float | None:
    """Seconds left before the current call's limit (None: no limit; 0 when it has passed)."""
    found = _DEADLINE.get()
    return None if found is None or found.at is None else max(0.0, found.at - time.monotonic())


@contextmanager
def not_counted() -> Iterator[None]:
    """Model work (the caller holds no lock and waits on nothing else): its time does not count
    toward the call's limit, up to MODEL_SECS_MAX in all."""
    found = _DEADLINE.get()
    if found is None or found.at is None or found.model_secs >= MODEL_SECS_MAX:
        yield
        return
    began = time.monotonic()
    found.depth += 1
    if found.depth == 1 and found.on_pause is not None:
        found.on_pause(True, max(0.0, found.at - began))
    try:
        yield
    finally:
        found.depth -= 1
        if found.depth == 0:
            spent = min(time.monotonic() - began, MODEL_SECS_MAX - found.model_secs)
            found.model_secs += spent
            found.at += spent
            if found.on_pause is not None:
                found.on_pause(False, max(0.0, found.at - time.monotonic()))
