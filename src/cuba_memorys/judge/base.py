"""What every judge answers: a verdict about a claim against one piece of evidence, or about
how two stored observations relate.

Judges are tried in a fixed order (chain.py): the NLI model, the MCP client's own model through
sampling, then a conservative heuristic. A judge that cannot tell says ``unknown``; it never
guesses. Similarity is not entailment ("written in Rust" and "written in Java" embed almost alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

CLAIM_VERDICTS = ("supports", "contradicts", "unknown")
PAIR_VERDICTS = ("contradicts", "supersedes", "complementary", "unrelated", "unknown")


@dataclass(frozen=True)
class Verdict:
    verdict: str  # CLAIM_VERDICTS for claims, PAIR_VERDICTS for pairs
    confidence: float  # the judge's own confidence in the verdict, 0..1 (0 for unknown)
    reason: str
    backend: str  # nli | sampling | cli | heuristic
    model: str | None = None
    rule: str | None = None  # the text rule that decided (heuristic verdicts): negation | number | states_claim

    @property
    def decided(self) -> bool:
        return self.verdict != "unknown"


UNKNOWN = "unknown"


class Judge(Protocol):
    backend: str
    model: str | None

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        """Does ``evidence`` (a stored observation) support or contradict ``claim``?"""

    def judge_pair(self, first: str, second: str) -> Verdict:
        """How do two stored observations relate (``first`` is the older one)?"""
