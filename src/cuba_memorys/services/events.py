"""The event bus: what happened in this server process, for `/events` subscribers.

Services publish ({kind, at, payload}) from whatever thread they run in; each subscriber has its
own bounded buffer and is woken on its own event loop. Publishing never blocks and never fails
the write that published: a subscriber whose buffer is full loses what it had not read and gets
one ``lagged`` event (with how many it missed) in its place, so a slow reader cannot stall the
server nor grow its memory. The bus is in-process, as the original's: each `serve` daemon has its
own, and events of another process (a CLI import, another server) are not seen.

Kinds (the original's plus ours): artifact.updated, artifact.locked, artifact.unlocked,
artifact.conflict, memory.write, memory.delete, sync.import, sync.conflict_resolved, rem.cycle,
peer.notice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cuba_memorys import locks

CAPACITY = 256  # events a subscriber may fall behind by before it is told it lagged
RECENT = 40  # kept for a new subscriber's first look (the connect page's log)
KINDS = ("artifact.updated", "artifact.locked", "artifact.unlocked", "artifact.conflict", "memory.write",
         "memory.delete", "sync.import", "sync.conflict_resolved", "rem.cycle", "peer.notice")


def event(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "at": datetime.now(UTC).isoformat(timespec="milliseconds"), "payload": payload}


@dataclass(eq=False)  # compared by identity: each reader is its own subscription
class Subscription:
    """One reader's buffer. ``next()`` waits (on the reader's loop) for the next event."""

    loop: asyncio.AbstractEventLoop
    capacity: int = CAPACITY
    buffer: deque = field(default_factory=deque)
    missed: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, item: dict[str, Any]) -> None:
        """Called on the reader's loop: buffer ``item``, or drop the backlog and count it."""
        if len(self.buffer) >= self.capacity:
            self.missed += len(self.buffer)
            self.buffer.clear()
        self.buffer.append(item)
        self.wake.set()

    async def next(self) -> dict[str, Any]:
        while not self.buffer and not self.missed:
            self.wake.clear()
            await self.wake.wait()
        if self.missed:
            missed, self.missed = self.missed, 0
            return event("lagged", {"missed": missed, "note": "this subscriber fell behind; events were dropped"})
        return self.buffer.popleft()


class EventBus:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._subscribers: set[Subscription] = set()
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._lock = locks.lock("event bus", "events")
        self.published = 0

    def publish(self, kind: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """Announce an event to every subscriber, from any thread; never raises."""
        item = event(kind, payload or {})
        with self._lock:
            self._recent.append(item)
            self.published += 1
            subscribers = list(self._subscribers)
        for sub in subscribers:
            with contextlib.suppress(RuntimeError):  # its loop has closed: it is being unsubscribed
                sub.loop.call_soon_threadsafe(sub.offer, item)
        return item

    def subscribe(self) -> Subscription:
        """A new subscription on the running event loop (call from async code)."""
        sub = Subscription(asyncio.get_running_loop(), self.capacity)
        with self._lock:
            self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    def recent(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._recent)

    @property
    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)
