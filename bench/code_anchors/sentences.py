"""A commit message as memories: its sentences as written, and the touched symbols each is about.

Splitting: the subject line into its "; "-separated clauses (this project's subjects list the
changes that way), the body into bullets ("- " lines, continuations joined) and, inside a
paragraph, sentences ending in ". ". Nothing is reworded. A fragment of fewer than MIN_WORDS
words is dropped (it says nothing on its own).

Anchoring: a commit that touches at most SMALL_COMMIT symbols anchors every sentence to all of
them. A larger one anchors each sentence to the touched symbols it names or is nearest in words
to (name, name parts, the file's name), at most MAX_ANCHORS; a sentence that names none of them
is kept unanchored (a distractor).
"""

from __future__ import annotations

import re

from bench.code_anchors.history import Touched

MIN_WORDS = 3
SMALL_COMMIT = 6
MAX_ANCHORS = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Words every path or name here has, or that carry no subject.
_COMMON = {"src", "cuba", "memorys", "py", "init", "the", "and", "for", "with", "from", "into", "one",
           "not", "its", "are", "was", "all", "now", "def", "self", "get", "set", "new", "run", "test", "tests"}


def split(text: str) -> list[str]:
    """The sentences of a commit message, in order, as written."""
    lines = text.replace("\r\n", "\n").strip().split("\n")
    if not lines or not lines[0].strip():
        return []
    out = [c.strip() for c in lines[0].split("; ")]
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.extend(_SENTENCE_END.split(" ".join(paragraph)))
            paragraph.clear()

    for line in lines[1:]:
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith(("- ", "* ")):
            flush()
            paragraph.append(stripped[2:])
        else:
            paragraph.append(stripped)
    flush()
    return [s.strip() for s in out if len(s.split()) >= MIN_WORDS]


def _stem(word: str) -> str:
    word = word.lower()
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def words(text: str) -> set[str]:
    """Identifiers and their underscore parts, lowercased and crudely singular."""
    out: set[str] = set()
    for token in _WORD.findall(text):
        out.add(_stem(token))
        out.update(_stem(p) for p in token.split("_") if len(p) >= 3)
    return out - _COMMON


def score(sentence_words: set[str], touched: Touched) -> int:
    """How plainly a sentence is about a symbol: its name 3, its file's name 2, a name part 1."""
    name = _stem(touched.simple)
    stem = _stem(touched.path.rsplit("/", 1)[-1].removesuffix(".py"))
    parts = {_stem(p) for p in touched.simple.split("_") if len(p) >= 3} - _COMMON
    return (3 * (name in sentence_words) + 2 * (stem in sentence_words and stem not in _COMMON)
            + len(parts & sentence_words))


def anchors_for(sentence: str, touched: list[Touched]) -> list[Touched]:
    """The touched (innermost) symbols the sentence is anchored to; see the module docstring."""
    candidates = sorted((t for t in touched if t.innermost), key=lambda t: t.key)
    if len(candidates) <= SMALL_COMMIT:
        return candidates
    said = words(sentence)
    ranked = sorted(((score(said, t), t) for t in candidates), key=lambda p: (-p[0], p[1].key))
    return [t for s, t in ranked if s > 0][:MAX_ANCHORS]
