"""The query mini-syntax shared by search_hipocampo and cuba_faro.

    code:auth  category:infra,ci  nivel:semantica  type:decision  id:4039  #4039
    after:2026-10-01  since:7d  before:today  "exact phrase"  ...and free text, in any order

Pure: no store, no model. :func:`parse_query` splits a query into free text, exact phrases
and filters; relative dates resolve against an injectable ``now`` so tests are exact. Only
the keys below are syntax: any other ``word:value`` stays free text, because agents paste
URLs, ``std::vector`` and "note: ..." into queries and those must search as written. A known
key with a value that cannot be read (``after:soon``) is an error naming the token: quietly
dropping a filter the agent asked for would return confidently wrong results.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import iso, utc_now
from cuba_memorys.text import fold

NIVELES = ("episodica", "semantica", "automatica")
DATE_FORMS = "YYYY-MM-DD, an ISO 8601 date-time, Nh / Nd / Nw (hours/days/weeks ago), today, yesterday"

# key → the field it fills. "since" is "after" under another name; "categories" is "category".
_KEYS = {"code": "codes", "category": "categories", "categories": "categories", "nivel": "niveles",
         "type": "types", "id": "ids", "after": "after", "since": "after", "before": "before"}

# A key with a quoted value, a quoted phrase, or any other run of non-space characters.
_TOKEN = re.compile(r'(?P<key>[A-Za-z_]+):"(?P<qval>[^"]*)"|"(?P<phrase>[^"]*)"|(?P<word>\S+)')
_SMART_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"'})
_RELATIVE = re.compile(r"^(\d{1,5})([hdw])$")
_SEQ = re.compile(r"^#?(\d{1,18})$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class ParsedQuery:
    """A query split into its parts. Dates are ISO 8601 UTC strings (as rows store them)."""

    text: str = ""  # the free text left over, words in their original order
    phrases: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()  # entity names, exact
    categories: tuple[str, ...] = ()  # tags, lowercased
    niveles: tuple[str, ...] = ()  # episodica | semantica | automatica (accents folded)
    types: tuple[str, ...] = ()  # memory types as written, lowercased (mapped by the service)
    ids: tuple[str, ...] = ()  # UUID row ids
    seqs: tuple[int, ...] = ()  # numeric ids: a row's integer seq
    after: str | None = None  # created strictly after this instant
    before: str | None = None  # created strictly before this instant

    @property
    def search_text(self) -> str:
        """What the ranking branches should search: free text plus the phrases' words."""
        return " ".join(part for part in (self.text, *self.phrases) if part)

    @property
    def used_syntax(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name != "text")

    def keys_used(self) -> set[str]:
        """Which filters the query set, by field name."""
        return {f.name for f in fields(self) if f.name not in ("text", "phrases") and getattr(self, f.name)}


def resolve_when(value: str, now: datetime | None = None) -> datetime | None:
    """A point in time from an ISO date/date-time, "Nh"/"Nd"/"Nw" ago, "today" or "yesterday".

    Dates mean midnight UTC, so ``after:2026-10-01`` includes that day and ``before:2026-10-05``
    excludes it (as mail search does). None when ``value`` is none of these forms.
    """
    now = (now or utc_now()).astimezone(UTC)
    word = value.strip().lower()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if word == "today":
        return midnight
    if word == "yesterday":
        return midnight - timedelta(days=1)
    relative = _RELATIVE.match(word)
    if relative:
        return now - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
    try:
        parsed = datetime.fromisoformat(word.upper().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_id(value: str) -> int | str | None:
    """A numeric id (``4039`` or ``#4039``) as an int, a UUID as its canonical string, else None."""
    text = value.strip()
    seq = _SEQ.match(text)
    if seq:
        return int(seq.group(1))
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def parse_nivel(value: str) -> str | None:
    folded = fold(value.strip())
    return folded if folded in NIVELES else None


def parse_query(query: str, now: datetime | None = None) -> ParsedQuery:
    """Split ``query`` into free text, phrases and filters (see the module docstring).

    Repeated keys add up (``code:a code:b`` is either entity); two date bounds of one side keep
    the narrower. Raises InvalidInput("query", ...) for a known key with an unreadable value.
    """
    acc: dict[str, list] = {name: [] for name in ("text", "phrases", "codes", "categories",
                                                  "niveles", "types", "ids", "seqs")}
    bounds: dict[str, list[datetime]] = {"after": [], "before": []}
    for match in _TOKEN.finditer(query.translate(_SMART_QUOTES)):
        if match.group("phrase") is not None:
            if match.group("phrase").strip():
                acc["phrases"].append(" ".join(match.group("phrase").split()))
            continue
        if match.group("key") is not None:
            key, value = match.group("key"), match.group("qval")
        else:
            key, _, value = match.group("word").partition(":")
            if match.group("word").startswith("#") and _SEQ.match(match.group("word")):
                acc["seqs"].append(int(match.group("word")[1:]))
                continue
        field_name = _KEYS.get(key.lower())
        if field_name is None or not value.strip():
            acc["text"].append(match.group(0))
            continue
        _take(field_name, key.lower(), value.strip(), acc, bounds, now)
    return ParsedQuery(
        text=" ".join(acc["text"]), phrases=_unique(acc["phrases"]), codes=_unique(acc["codes"]),
        categories=_unique(acc["categories"]), niveles=_unique(acc["niveles"]),
        types=_unique(acc["types"]), ids=_unique(acc["ids"]), seqs=_unique(acc["seqs"]),
        after=iso(max(bounds["after"])) if bounds["after"] else None,
        before=iso(min(bounds["before"])) if bounds["before"] else None,
    )


def _take(field_name: str, key: str, value: str, acc: dict[str, list],
          bounds: dict[str, list[datetime]], now: datetime | None) -> None:
    """Record one ``key:value`` filter, or raise naming the token when the value is unreadable."""
    token = f"{key}:{value}"
    if field_name == "codes":
        acc["codes"].append(value)
    elif field_name == "categories":
        acc["categories"].extend(c.strip().lower() for c in value.split(",") if c.strip())
    elif field_name == "types":
        acc["types"].extend(t.strip().lower() for t in value.split(",") if t.strip())
    elif field_name == "niveles":
        for part in (p for p in value.split(",") if p.strip()):
            nivel = parse_nivel(part)
            if nivel is None:
                raise InvalidInput("query", f"{token!r}: unknown nivel {part!r}", " | ".join(NIVELES))
            acc["niveles"].append(nivel)
    elif field_name == "ids":
        for part in (p for p in value.split(",") if p.strip()):
            parsed = parse_id(part)
            if parsed is None:
                raise InvalidInput("query", f"{token!r}: {part!r} is not an id",
                                   "a number such as 4039 (or #4039) or a UUID")
            acc["seqs" if isinstance(parsed, int) else "ids"].append(parsed)
    else:  # after / before
        when = resolve_when(value, now)
        if when is None:
            raise InvalidInput("query", f"{token!r}: {value!r} is not a date", DATE_FORMS)
        bounds[field_name].append(when)


def _unique(items: list) -> tuple:
    return tuple(dict.fromkeys(items))
