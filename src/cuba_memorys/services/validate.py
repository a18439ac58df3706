"""Input checks shared by every service; each failure names the parameter and what it accepts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cuba_memorys.errors import InvalidInput, SecretRefused
from cuba_memorys.models import MAX_CONTENT_CHARS, MAX_NAME_CHARS, iso
from cuba_memorys.secrets_scan import find_secret


def text(param: str, value: object, *, low: int = 1, high: int = MAX_CONTENT_CHARS) -> str:
    if not isinstance(value, str):
        raise InvalidInput(param, f"must be a string, got {type(value).__name__}")
    no_nul(param, value)
    if not value.strip():
        raise InvalidInput(param, "is required and must not be empty")
    if not low <= len(value) <= high:
        raise InvalidInput(param, f"must be {low}-{high} characters, got {len(value)}")
    return value


def optional_text(param: str, value: object, *, high: int = MAX_CONTENT_CHARS) -> str | None:
    if value is None or value == "":
        return None
    return text(param, value, high=high)


def choice(param: str, value: object, choices: Sequence[str], default: str | None = None) -> str:
    if value is None or value == "":
        if default is None:
            raise InvalidInput(param, "is required", " | ".join(choices))
        return default
    if value not in choices:
        raise InvalidInput(param, f"unknown value {value!r}", " | ".join(choices))
    return str(value)


def int_range(param: str, value: object, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(param, f"must be an integer, got {value!r}", f"{low}..{high}")
    if not low <= value <= high:
        raise InvalidInput(param, f"{value} is out of range", f"{low}..{high}")
    return value


def flag(param: str, value: object, default: bool) -> bool:
    """A strict boolean: "true", 1 or "yes" are refused rather than guessed at."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput(param, f"must be true or false, got {value!r}")
    return value


TIMESTAMP_FORMS = "RFC 3339 / ISO 8601, e.g. 2026-01-31T09:30:00Z"


def timestamp(param: str, value: object) -> str | None:
    """An ISO 8601 / RFC 3339 date-time, normalised to UTC; a missing zone means UTC. Only None
    means "not given": an empty string is a value, and not a date-time (as_of "" once meant "now"
    without a word, and a caller could not tell it had set no time at all)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(param, f"must be an ISO 8601 date-time string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInput(param, f"{value!r} is empty, not a date-time", f"{TIMESTAMP_FORMS}; or omit {param}")
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidInput(param, f"{value!r} is not a valid date-time", TIMESTAMP_FORMS) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return iso(parsed)


def no_nul(param: str, value: str, accepted: str | None = None) -> None:
    """A NUL character ends a C string: SQLite's length checks stop at it and PostgreSQL's text
    cannot hold it, so the same text would be cut on one backend and refused on the other."""
    if "\x00" in value:
        raise InvalidInput(param, f"must not contain a NUL character (\\u0000, at {value.index(chr(0))})", accepted)


def name(param: str, value: object, *, high: int = MAX_NAME_CHARS) -> str:
    """A name that is stored and shown everywhere (an entity, a project): text, and never a
    credential; unlike content, no allow_secret lets one through."""
    value = text(param, value, high=high)
    match = find_secret(value)
    if match:
        raise SecretRefused(f"refusing to use {param} as a name: it looks like a {match.kind}.",
                            hint="Names are listed, searched and synced everywhere; choose one without the"
                                 " credential.")
    return value


def no_secret(param: str, value: str, allow_secret: bool) -> None:
    if allow_secret:
        return
    match = find_secret(value)
    if match:
        raise SecretRefused(
            f"refusing to write {param}: it looks like a {match.kind} near character {match.position}.",
            hint="Remove the credential, or pass allow_secret=true if storing it is intended.",
        )


def string_list(param: str, value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(param, "must be an array of strings")
    for index, item in enumerate(value):
        no_nul(f"{param}[{index}]", item)
    return list(value)


class Clamps:
    """Numbers the original clamps rather than refuses: accepted, brought into range, and said
    so in the answer as ``clamped: {param: {given, used}}``. A value of the wrong type is still
    an error (what is malformed is refused; only what is out of range is clamped)."""

    def __init__(self) -> None:
        self.changed: dict[str, dict[str, object]] = {}

    def integer(self, param: str, value: object, low: int, high: int, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(param, f"must be an integer, got {value!r}", f"{low}..{high}")
        return int(self._clamp(param, value, low, high))

    def number(self, param: str, value: object, low: float, high: float, default: float) -> float:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidInput(param, f"must be a number, got {value!r}", f"{low}..{high}")
        return float(self._clamp(param, value, low, high))

    def _clamp(self, param: str, value: int | float, low: float, high: float) -> int | float:
        used = min(max(value, low), high)
        if used != value:
            self.changed[param] = {"given": value, "used": used}
        return used

    def note(self, answer: dict[str, Any]) -> dict[str, Any]:
        """``answer`` with ``clamped`` added when a number was brought into range."""
        if self.changed:
            answer["clamped"] = dict(self.changed)
        return answer


MAX_ANCHORS = 20  # anchors per observation
AnchorSpec = tuple[str, str | None, tuple[int, int] | None]  # (path, symbol, (first, last line))


def _lines(param: str, value: object) -> tuple[int, int] | None:
    """ "a-b", "a", a, or [a, b]: 1-based inclusive lines, a <= b."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        first = last = value
    elif isinstance(value, str):
        parts = value.strip().split("-")
        if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
            raise InvalidInput(param, f"{value!r} is not a line range", '"12-30", "12", 12 or [12, 30]')
        first, last = int(parts[0]), int(parts[-1])
    elif (isinstance(value, list) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        first, last = value
    else:
        raise InvalidInput(param, f"{value!r} is not a line range", '"12-30", "12", 12 or [12, 30]')
    if not 1 <= first <= last:
        raise InvalidInput(param, f"{value!r}: lines start at 1 and the first is at most the last")
    return first, last


def anchors(param: str, value: object) -> list[AnchorSpec]:
    """``anchors``: [{path, symbol?, lines?}] — the shape only; services/code/anchors.py checks
    each against the repository."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(param, "must be an array of {path, symbol?, lines?}")
    if len(value) > MAX_ANCHORS:
        raise InvalidInput(param, f"has {len(value)} anchors", f"at most {MAX_ANCHORS}")
    out: list[AnchorSpec] = []
    for i, item in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise InvalidInput(where, "must be an object {path, symbol?, lines?}")
        extra = sorted(set(item) - {"path", "symbol", "lines"})
        if extra:
            raise InvalidInput(f"{where}.{extra[0]}", "is not an anchor field", "path, symbol, lines")
        path = text(f"{where}.path", item.get("path"), high=1000)
        symbol = optional_text(f"{where}.symbol", item.get("symbol"), high=MAX_NAME_CHARS)
        out.append((path.strip(), symbol.strip() if symbol else None, _lines(f"{where}.lines", item.get("lines"))))
    return out


MAX_CONTEXT_FILES = 200
MAX_DIFF_CHARS = 2_000_000


def context(param: str, value: object) -> tuple[list[str], str | None] | None:
    """cuba_faro ``context``: {files?: [paths], diff?: unified diff text} -> (files, diff)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(param, "must be an object {files?: [...], diff?: str}")
    extra = sorted(set(value) - {"files", "diff"})
    if extra:
        raise InvalidInput(f"{param}.{extra[0]}", "is not a context field", "files, diff")
    files = string_list(f"{param}.files", value.get("files"))
    if len(files) > MAX_CONTEXT_FILES:
        raise InvalidInput(f"{param}.files", f"has {len(files)} paths", f"at most {MAX_CONTEXT_FILES}")
    diff = value.get("diff")
    if diff is not None:
        if not isinstance(diff, str):
            raise InvalidInput(f"{param}.diff", f"must be a string (a unified diff), got {type(diff).__name__}")
        no_nul(f"{param}.diff", diff)
        if len(diff) > MAX_DIFF_CHARS:
            raise InvalidInput(f"{param}.diff", f"is {len(diff)} characters", f"at most {MAX_DIFF_CHARS}")
    if not files and not diff:
        raise InvalidInput(param, "names no files and has no diff", "files and/or diff")
    return [f.strip() for f in files if f.strip()], diff or None
