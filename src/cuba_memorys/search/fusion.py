"""Branch fusion, neighbour smoothing and result dedup.

The original fuses with reciprocal rank fusion (k=60) weighted by query-entropy routing. On
the dev splits that was beaten, with paired-bootstrap CIs excluding zero, by a weighted sum
of min-max-normalised branch scores over deeper candidate lists (docs/benchmarks.md has the
numbers), so that is what runs here: rank-only fusion throws away how far ahead a branch's
best hit is, and entropy routing moved weight the wrong way on conversational queries.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from cuba_memorys.models import Hit
from cuba_memorys.text import same_claim, words

# Weights chosen on the dev splits (bench/fusion_study.py); the text branch keeps a small
# share because it is the one that tolerates typos and matches entity names.
BRANCH_WEIGHTS = {"vector": 0.45, "bm25": 0.45, "text": 0.10}
BRANCH_DEPTH = 100
NEIGHBOUR_SHARE = 0.15
DEDUP_OVERLAP = 0.85


@dataclass
class Fused:
    kind: str
    id: str
    score: float = 0.0
    branch_scores: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)


def _minmax(hits: list[Hit]) -> list[float]:
    values = [h.score for h in hits]
    low, high = min(values), max(values)
    span = high - low
    return [1.0 if span == 0 else (v - low) / span for v in values]


def score_fusion(branches: dict[str, list[Hit]], weights: dict[str, float],
                 unscorable: dict[str, set[tuple[str, str]]] | None = None) -> list[Fused]:
    """Each branch's scores scaled to 0..1 over its own list, then a weighted sum.

    ``unscorable``: per branch, the rows it could not score at all (the vector branch cannot see
    a row whose vector the background queue has not stored yet). Such a row is not counted as
    the branch's worst: its score is the weighted mean over the branches that could score it,
    scaled to the same total weight. So a store with nothing embedded ranks exactly as the
    lexical branches alone, and a half-embedded one does not put a pending row below an equally
    good embedded one only for lacking a vector."""
    fused: dict[tuple[str, str], Fused] = {}
    present = [name for name, hits in branches.items() if hits]  # in branch order: sums add up alike
    for name in present:
        weight = weights.get(name, 0.0)
        hits = branches[name]
        for hit, scaled in zip(hits, _minmax(hits)):
            item = fused.setdefault((hit.kind, hit.id), Fused(hit.kind, hit.id))
            item.score += weight * scaled
            item.branch_scores[name] = hit.score
    total = sum(weights.get(name, 0.0) for name in present)
    for key, item in fused.items():
        # branches that ran (something was scored) but could not score this row
        lacking = sum(weights.get(name, 0.0) for name, keys in (unscorable or {}).items()
                      if name in present and name not in item.branch_scores and key in keys)
        if lacking and total - lacking > 0:
            item.score *= total / (total - lacking)
            item.branch_scores["rescaled_without"] = round(lacking, 6)
    return sorted(fused.values(), key=lambda f: f.score, reverse=True)


def smooth_neighbours(fused: list[Fused], neighbours: dict[str, list[str]],
                      share: float = NEIGHBOUR_SHARE) -> list[Fused]:
    """Pass a share of each observation's score to the observations written just before and
    after it on the same entity: adjacent notes (turns of one conversation, consecutive notes
    on one module) explain each other, and the one that answers often shares no words with
    the question."""
    by_key = {f.key: f for f in fused}
    gains: dict[str, float] = {}
    for item in fused:
        if item.kind != "observation":
            continue
        for other in neighbours.get(item.id, []):
            gains[other] = gains.get(other, 0.0) + share * item.score
    for other, gain in gains.items():
        target = by_key.get(("observation", other))
        if target is None:
            target = by_key[("observation", other)] = Fused("observation", other)
        target.score += gain
        target.branch_scores["neighbours"] = round(gain, 6)
    return sorted(by_key.values(), key=lambda f: f.score, reverse=True)


def dedup(items: list[Fused], text_of: dict[tuple[str, str], str]) -> list[Fused]:
    """Drop a row whose word overlap with an already kept row exceeds 0.85 (unless they
    differ in a number or a negation: then both are kept).

    Same test as ``word_overlap`` (|A ∩ B| / min(|A|, |B|) over word sets), but each row's
    words are read once and shared words are counted through a word -> kept-rows map, so
    only kept rows sharing a word with the candidate are compared (re-tokenising every pair
    was quadratic and dominated search time with ~100 fused rows)."""
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
