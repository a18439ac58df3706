"""Branch fusion: entropy routing, reciprocal rank fusion and result dedup (spec §3)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ..models import Hit
from ..text import query_entropy, same_claim, words

RRF_K = 60
DEDUP_OVERLAP = 0.85


@dataclass(frozen=True)
class BranchWeights:
    text: float
    vector: float
    bm25: float


def route(query: str) -> BranchWeights:
    """Low-entropy (short, repetitive) queries lean lexical; rich ones lean on vectors.

    t = σ(2(H − 2.75)); text = 0.7 − 0.4t; vector = 0.3 + 0.4t; BM25 = text.
    """
    t = 1.0 / (1.0 + math.exp(-2.0 * (query_entropy(query) - 2.75)))
    text = 0.7 - 0.4 * t
    return BranchWeights(text=text, vector=0.3 + 0.4 * t, bm25=text)


@dataclass
class Fused:
    kind: str
    id: str
    score: float = 0.0
    branch_scores: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)


def rrf(branches: dict[str, list[Hit]], weights: dict[str, float]) -> list[Fused]:
    """Each branch adds weight / (k + rank + 1) for every row it ranks (rank from 0)."""
    fused: dict[tuple[str, str], Fused] = {}
    for name, hits in branches.items():
        weight = weights.get(name, 0.0)
        for rank, hit in enumerate(hits):
            item = fused.setdefault((hit.kind, hit.id), Fused(hit.kind, hit.id))
            item.score += weight / (RRF_K + rank + 1)
            item.branch_scores[name] = hit.score
    return sorted(fused.values(), key=lambda f: f.score, reverse=True)


def dedup(items: list[Fused], text_of: dict[tuple[str, str], str]) -> list[Fused]:
    """Drop a row whose word overlap with an already kept row exceeds 0.85 (unless they
    differ in a number or a negation: then both are kept).

    Same test as ``word_overlap`` (|A ∩ B| / min(|A|, |B|) over word sets), but each row's
    words are read once and shared words are counted through a word -> kept-rows map, so
    only kept rows that share a word with the candidate are looked at (this was quadratic
    in re-tokenising and dominated search time with ~100 fused rows)."""
    kept: list[Fused] = []
    kept_texts: list[str] = []
    kept_sizes: list[int] = []
    holders: dict[str, list[int]] = {}
    for item in items:
        text = text_of.get(item.key, "")
        mine = set(words(text))
        if mine:
            shared = Counter(i for w in mine for i in holders.get(w, ()))
            if any(n / min(len(mine), kept_sizes[i]) > DEDUP_OVERLAP and same_claim(text, kept_texts[i])
                   for i, n in shared.items()):
                continue
        for w in mine:
            holders.setdefault(w, []).append(len(kept))
        kept.append(item)
        kept_texts.append(text)
        kept_sizes.append(len(mine))
    return kept
