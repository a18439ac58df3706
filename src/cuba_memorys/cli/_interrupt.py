"""Ctrl-C while the program is still starting — importing its modules, before any command runs —
ends it with one line rather than a traceback of whichever import it hit. Once a command runs,
:class:`cuba_memorys.cli.app.CubaGroup` says it instead. Only an interrupt is quieted: every
other uncaught exception goes to the hook that was there before."""

from __future__ import annotations

import sys
from types import TracebackType

_previous = sys.excepthook


def _quiet_interrupt(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write("cuba-memorys: interrupted\n")  # Python still exits with status 130
        return
    _previous(kind, value, tb)


sys.excepthook = _quiet_interrupt
