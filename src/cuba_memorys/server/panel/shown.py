"""How values read on a page (Jinja filters of every template, routes.templates): a time to the
minute in UTC, an age in words, a count with thousands separators, a duration in its unit. A
page never shows a Python ``None``, ``False`` or a timestamp with microseconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime

MISSING = "—"


def moment(value: object) -> datetime | None:
    """An ISO timestamp or a Unix time (the panel's clients_seen) as an aware datetime; None if neither."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    if not isinstance(value, str | datetime) or value == "":
        return None
    try:
        found = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def when(value: object) -> str:
    """'2026-12-03 11:12 UTC'; text that is no time is shown as it is, nothing as a dash."""
    found = moment(value)
    if found is None:
        return MISSING if value in (None, "") else str(value)
    return found.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def ago(value: object, now: float | None = None) -> str:
    """'just now', '5 min ago', '3 h ago', '2 days ago' (a dash for no time)."""
    found = moment(value)
    if found is None:
        return MISSING
    seconds = (time.time() if now is None else now) - found.timestamp()
    if seconds < 60:
        return "just now"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {'day' if unit == 'days' and count == 1 else unit} ago"
    return "just now"  # unreachable: 60 s and more matched "min"


def number(value: object) -> str:
    """1234 as '1,234'; what is no number as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return MISSING if value is None else str(value)


def duration(ms: object) -> str:
    """A duration given in milliseconds: '15 ms', '2.3 s', '4 min'."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return MISSING
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.0f} min"


FILTERS = {"when": when, "ago": ago, "number": number, "duration": duration}
