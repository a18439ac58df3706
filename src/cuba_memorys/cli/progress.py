"""Progress of long CLI work (imports, reembed, migrate): a bar with the rate and the time left on a
terminal, plain lines every few seconds otherwise (a log, CI, a pipe), always on stderr so --json's
stdout stays one document. The callable has the shape of an MCP progress report, ``(done, total,
message)``, so a service reports the same way to either."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from cuba_memorys.services.memory import Memory

BAR = 28
PLAIN_EVERY_SECS = 5.0


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 90:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    return f"{minutes} min {secs:02d} s" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    def __init__(self, label: str, unit: str = "rows", stream: TextIO | None = None) -> None:
        self.label, self.unit = label, unit
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.began = time.monotonic()
        self._shown = 0.0
        self._width = 0
        self.done = 0.0
        self.total: float | None = None

    def __call__(self, done: float, total: float | None = None, message: str | None = None) -> None:
        self.done, self.total = done, total if total is not None else self.total
        now = time.monotonic()
        finished = self.total is not None and done >= self.total
        if not self.tty and not finished and now - self._shown < PLAIN_EVERY_SECS:
            return
        self._shown = now
        self._write(self.line(message), final=finished and not self.tty)

    def line(self, message: str | None = None) -> str:
        elapsed = max(time.monotonic() - self.began, 1e-6)
        rate = self.done / elapsed
        parts = [self.label]
        if self.total:
            share = min(1.0, self.done / self.total)
            if self.tty:
                filled = int(BAR * share)
                parts.append("[" + "#" * filled + "." * (BAR - filled) + "]")
            parts.append(f"{int(self.done)}/{int(self.total)} {self.unit} ({share:.0%})")
        else:
            parts.append(f"{int(self.done)} {self.unit}")
        if self.done:
            parts.append(f"{rate:.1f} {self.unit}/s")
            if self.total and self.done < self.total:
                parts.append(f"{_duration((self.total - self.done) / rate)} left")
        if message:
            parts.append(message)
        return " ".join(parts)

    def _write(self, text: str, final: bool = False) -> None:
        if self.tty:
            pad = " " * max(0, self._width - len(text))
            self.stream.write("\r" + text + pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self, message: str | None = None) -> None:
        """The last line (the bar ends with a newline on a terminal)."""
        text = self.line(message)
        if self.tty:
            self._write(text)
            self.stream.write("\n")
            self.stream.flush()
        elif self.done or message:
            self._write(text)


def wait_for_vectors(mem: Memory, wait: bool = True, stream: TextIO | None = None) -> int:
    """After a CLI import: until the background queue has embedded what the import handed it,
    show its progress, so "imported" means searchable by meaning. Ctrl-C (or ``wait`` false:
    --no-wait) stops waiting: the rows stay stored and are found by keyword; the next server
    start embeds them. Returns how many rows still have no vector."""
    pending = mem.embeddings_pending()
    if not pending or not wait:
        if pending:
            mem.hurry_embedding_drain()  # closing does not wait for them either
        return pending
    bar = Progress("embedding", stream=stream)
    try:
        while not mem.wait_for_embeddings(0.5):
            bar(pending - mem.embeddings_pending(), pending)
        bar(pending, pending)
    except KeyboardInterrupt:
        mem.hurry_embedding_drain()
        bar.close("stopped waiting (Ctrl-C)")
        return mem.embeddings_pending()
    bar.close()
    return mem.embeddings_pending()


def vectors_line(left: int) -> str | None:
    """The final line after an import that left rows without a vector (None when none is left)."""
    if not left:
        return None
    return (f"{left} rows still wait for their vectors: keyword search finds them now; the next server start"
            " (or `cuba-memorys reembed`) embeds them.")
