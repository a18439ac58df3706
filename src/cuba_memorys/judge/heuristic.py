"""The judge that is always there: text rules that only ever find clear contradictions.

It reports ``contradicts`` when two texts say the same thing except that one negates it
("we use Redis" / "we do not use Redis") or gives another number for it ("port 8080" /
"port 9090"), and ``unknown`` otherwise. It can never report ``supports``: word overlap is not
agreement, so a claim is never verified on its say-so.
"""

from __future__ import annotations

from cuba_memorys.judge.base import UNKNOWN, Verdict
from cuba_memorys.text import STOPWORDS, has_negation, numbers, words

CONFIDENCE = 0.5  # the original's heuristic confidence for a negation mismatch
MIN_OVERLAP = 0.6  # share of the shorter text's content words the other must contain


def _content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS and not w.isdigit()}


def _overlap(a: str, b: str) -> float:
    wa, wb = _content_words(a), _content_words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / min(len(wa), len(wb))


def clear_conflict(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` plainly contradict each other, or None."""
    if _overlap(a, b) < MIN_OVERLAP:
        return None
    if has_negation(a) != has_negation(b):
        return "one text negates what the other states"
    na, nb = numbers(a), numbers(b)
    if na and nb and na != nb:
        return f"the same statement with different numbers ({', '.join(na)} vs {', '.join(nb)})"
    return None


class HeuristicJudge:
    backend = "heuristic"
    model: str | None = None  # as the Judge protocol declares it

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        reason = clear_conflict(claim, evidence)
        if reason:
            return Verdict("contradicts", CONFIDENCE, reason, self.backend)
        return Verdict(UNKNOWN, 0.0, "no clear conflict; text rules cannot confirm agreement", self.backend)

    def judge_pair(self, first: str, second: str) -> Verdict:
        reason = clear_conflict(first, second)
        if reason:
            return Verdict("contradicts", CONFIDENCE, reason, self.backend)
        return Verdict(UNKNOWN, 0.0, "no clear conflict; text rules cannot tell more", self.backend)
