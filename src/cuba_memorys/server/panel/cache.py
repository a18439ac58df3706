"""Answers the panel reuses for a while: the doctor's whole-store checks (seconds at 100k rows) and
the near-duplicate pairs (trigram pairs over every entity name: tens of seconds at 10k names on a
busy machine). A page must answer in well under a second, so a value younger than its ``ttl`` is
served as is; an older one is still served while one background thread computes the next (the
page says how old it is); only the very first request of a key waits. Each key's ``compute`` is
the full guarded call (grants checked, policies bound), so a refresh reads what the caller may.
The panel's own merges drop the pairs at once (``forget``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from cuba_memorys import locks

log = logging.getLogger(__name__)
MAX_KEYS = 64  # projects x principals a panel serves; the oldest go first


@dataclass
class Entry:
    value: Any
    at: float
    refreshing: bool = False


class Fresh:
    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS) -> None:
        self.ttl, self.clock, self.max_keys = ttl, clock, max_keys
        self._entries: dict[Hashable, Entry] = {}
        self._lock = locks.lock("panel cache", "cache")

    def get(self, key: Hashable, compute: Callable[[], Any]) -> tuple[Any, float]:
        """(value, its age in seconds); ``compute`` runs here only when the key has no value yet."""
        with self._lock:
            found = self._entries.get(key)
            stale = found is not None and self.clock() - found.at >= self.ttl and not found.refreshing
            if stale and found is not None:
                found.refreshing = True
        if found is None:
            value = compute()  # errors reach the caller: nothing is cached
            self._store(key, value)
            return value, 0.0
        if stale:
            threading.Thread(target=self._refresh, args=(key, compute), daemon=True,
                             name="panel-cache-refresh").start()
        return found.value, self.clock() - found.at

    def _refresh(self, key: Hashable, compute: Callable[[], Any]) -> None:
        try:
            self._store(key, compute())
        except Exception:  # a failed refresh keeps the old value; the next stale read tries again
            log.warning("refreshing the panel's cached %r failed", key, exc_info=True)
            with self._lock:
                found = self._entries.get(key)
                if found is not None:
                    found.refreshing = False

    def _store(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._entries.pop(key, None)
            while len(self._entries) >= self.max_keys:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = Entry(value, self.clock())

    def forget(self) -> None:
        with self._lock:
            self._entries.clear()
