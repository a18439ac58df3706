"""Time a query implies ("in March 2024", "last week", "ayer"), as a window for a soft boost.

Explicit filters (after/before, since:7d) restrict; this only re-weights, because a mention of
time in a question is a hint about when the answer was written, not a demand."""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

from cuba_memorys.models import iso
from cuba_memorys.text import fold

BOOST = 0.15  # share added to a candidate's fused score when it falls inside the window

_MONTHS = {name: i for i, name in enumerate(calendar.month_name) if name} | {
    "enero": 1, "febrero": 2, "marzo": 3, "abril": 4, "mayo": 5, "junio": 6, "julio": 7,
    "agosto": 8, "septiembre": 9, "setiembre": 9, "octubre": 10, "noviembre": 11, "diciembre": 12}
_MONTHS = {k.lower(): v for k, v in _MONTHS.items()}
_MONTH_YEAR = re.compile(r"\b(" + "|".join(_MONTHS) + r")(?:\s+(?:de\s+|of\s+)?(\d{4}))?\b")
_YEAR = re.compile(r"\b(?:in|en|during|durante|del?)\s+((?:19|20)\d{2})\b")
_AMBIGUOUS = {"may", "march", "mayo"}  # also ordinary words: only with a year
_RELATIVE = {
    "today": (0, 1), "hoy": (0, 1), "yesterday": (1, 1), "ayer": (1, 1),
    "last week": (7, 7), "la semana pasada": (7, 7), "this week": (7, 8), "esta semana": (7, 8),
    "last month": (31, 31), "el mes pasado": (31, 31),
}


def implied_window(query: str, now: datetime | None = None) -> tuple[str, str] | None:
    """(start, end) ISO UTC of the period the query names, or None."""
    now = now or datetime.now(UTC)
    text = fold(query)
    for phrase, (back, length) in _RELATIVE.items():
        if re.search(rf"\b{phrase}\b", text):
            start = (now - timedelta(days=back)).replace(hour=0, minute=0, second=0, microsecond=0)
            return iso(start), iso(start + timedelta(days=length))
    match = _MONTH_YEAR.search(text)
    if match and (match.group(2) or match.group(1) not in _AMBIGUOUS):
        month = _MONTHS[match.group(1)]
        year = int(match.group(2)) if match.group(2) else now.year
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
        return iso(start), iso(end)
    match = _YEAR.search(text)
    if match:
        year = int(match.group(1))
        return iso(datetime(year, 1, 1, tzinfo=UTC)), iso(datetime(year + 1, 1, 1, tzinfo=UTC))
    return None


def boost_in_window(fused: list, created: dict[tuple[str, str], str], window: tuple[str, str]) -> list:
    """Raise candidates written inside ``window`` by BOOST of their score; re-sorted."""
    start, end = window
    for item in fused:
        when = created.get(item.key)
        if when and start <= when < end:
            item.score *= 1 + BOOST
            item.branch_scores["time_window"] = True
    return sorted(fused, key=lambda f: f.score, reverse=True)
