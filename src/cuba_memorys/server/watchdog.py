"""A watchdog that cannot be wedged: it sees a stalled event loop and makes the hang explain itself.

The server's event loop ticks a heartbeat every second (:meth:`Watchdog.heartbeat`, a task on that
loop). A plain thread, which takes none of the locks the handlers take, looks at the heartbeat; when
the loop has not turned for CUBA_WATCHDOG_SECS it writes every thread's Python stack to stderr with
:mod:`faulthandler` (which needs no lock and no allocation) and says so again only after the loop has
turned once more. A worker that outlives its call's time limit is reported the same way
(:func:`dump_stacks`), since a stuck worker holds a thread of the pool for good.
"""

from __future__ import annotations

import faulthandler
import logging
import sys
import threading
import time
from typing import TextIO

import anyio

log = logging.getLogger("cuba_memorys")
TICK_SECS = 1.0


def dump_stacks(why: str, stream: TextIO | None = None) -> None:
    """Every thread's stack on ``stream`` (stderr), headed by ``why``."""
    out = stream or sys.stderr
    try:
        out.write(f"cuba-memorys watchdog: {why}; the stack of every thread follows\n")
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
    except (OSError, ValueError):  # stderr closed: nothing to tell
        pass


class Watchdog:
    def __init__(self, stall_secs: float, stream: TextIO | None = None) -> None:
        self.stall_secs = stall_secs
        self.stream = stream
        self.last_tick = time.monotonic()
        self.reports = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.stall_secs > 0

    async def heartbeat(self) -> None:
        """Run on the event loop for the server's lifetime."""
        while True:
            self.last_tick = time.monotonic()
            await anyio.sleep(TICK_SECS)

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self.last_tick = time.monotonic()
            self._thread = threading.Thread(target=self._watch, name="cuba-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        reported_at: float | None = None
        while not self._stop.wait(min(TICK_SECS, self.stall_secs / 4)):
            stalled = time.monotonic() - self.last_tick
            if stalled < self.stall_secs:
                reported_at = None
                continue
            if reported_at == self.last_tick:
                continue  # this stall was reported; the next report waits for the loop to turn
            reported_at = self.last_tick
            self.reports += 1
            log.error("the event loop has not turned for %.0f s (CUBA_WATCHDOG_SECS=%g)", stalled, self.stall_secs)
            dump_stacks(f"the event loop has not turned for {stalled:.0f} s", self.stream)
