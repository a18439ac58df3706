"""Spans of source text and the hash that says whether a span still reads the same.

The hash ignores what an edit does not mean: trailing whitespace, the indentation of the
whole block (a method moved into a class), blank lines around it and Windows line ends.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections import Counter
from collections.abc import Hashable, Sequence

HASH_CHARS = 32


def normalise(text: str) -> str:
    """Strip trailing whitespace per line, dedent, drop blank lines at both ends, \\r\\n -> \\n."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return textwrap.dedent("\n".join(lines))


def span_hash(text: str) -> str:
    """The first 32 hex characters of the sha256 of :func:`normalise` (text)."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:HASH_CHARS]


def lines_of(source: str, start: int, end: int) -> str:
    """Lines ``start``..``end`` of ``source``, 1-based and inclusive (clipped to the file)."""
    lines = source.replace("\r\n", "\n").split("\n")
    first = max(start, 1) - 1
    return "\n".join(lines[first:max(end, first)])


# -- finding a span again, by its lines ------------------------------------------------------
MIN_FIND_LINES = 3  # fewer non-blank lines than this match too much by chance to say "moved"
BLANK = 0  # the key of a blank line


def line_keys(text: str) -> list[int]:
    """One key per line of ``text`` for :func:`find_span`: the line without its indentation and
    trailing whitespace, hashed (Python's string hash: compare keys within one process, never
    store them); a blank line is BLANK. Indentation is ignored per line, so a caller that needs
    the block's relative indentation to match checks the found span with :func:`span_hash`."""
    keys = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        stripped = line.strip()
        keys.append((hash(stripped) or 1) if stripped else BLANK)  # `or 1`: no line may hash to BLANK
    return keys


def find_span(source_lines_hashes: Sequence[Hashable], span: Sequence[Hashable],
              near_line: int | None = None) -> int | None:
    """The 1-based line of the file where ``span`` (its lines' keys, as :func:`line_keys`
    makes them) starts, when it occurs exactly once; None when it occurs nowhere, more than
    once, or has fewer than MIN_FIND_LINES non-blank lines. Blank lines at both ends of the
    span are not part of it (as :func:`normalise` drops them): the line returned is that of its
    first non-blank line.

    O(n + c·m) for a file of n lines, a span of m and c occurrences of the span's rarest line,
    stopping at the second match: one count of the file's keys, then each place the rarest line
    is, verified. ``near_line`` (where the span was) never breaks a tie: two equal places are
    ambiguous, and guessing the nearer one would call a copy the original.
    """
    del near_line  # accepted so callers can pass it; see the docstring
    first, last = 0, len(span)
    while first < last and span[first] == BLANK:
        first += 1
    while last > first and span[last - 1] == BLANK:
        last -= 1
    wanted = list(span[first:last])
    if sum(key != BLANK for key in wanted) < MIN_FIND_LINES or len(wanted) > len(source_lines_hashes):
        return None
    counts = Counter(source_lines_hashes)
    # the span's line the file has fewest of: its places are the only candidates
    offset = min((i for i, key in enumerate(wanted) if key != BLANK), key=lambda i: counts.get(wanted[i], 0))
    if counts.get(wanted[offset], 0) == 0:
        return None
    found: int | None = None
    size = len(wanted)
    for at, key in enumerate(source_lines_hashes):
        if key != wanted[offset]:
            continue
        start = at - offset
        if start < 0 or start + size > len(source_lines_hashes):
            continue
        if all(source_lines_hashes[start + i] == wanted[i] for i in range(size)):
            if found is not None:
                return None  # twice: ambiguous
            found = start + 1
    return found
