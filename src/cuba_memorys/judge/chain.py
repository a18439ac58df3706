"""The judge chain: which judge decides, and what the text rules add.

Order (the original's): an NLI cross-encoder when a model is installed, else the MCP client's
own model through sampling when the client offers it, else a local CLI model (CUBA_JUEZ_CLI),
else the text rules alone. Whatever judge decides, the text rules (heuristic.py) also look at
every pair: their contradictions stand, because they fire only where the text plainly says so
(a model that calls "we do not use Redis" support for "we use Redis" is overruled), and their
``supports`` (the evidence states the claim word for word) stands when the deciding judge could
not tell. A judge's ``supports`` never overrules a text contradiction, and no judge's verdict is
replaced by a weaker one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from cuba_memorys.judge.base import UNKNOWN, Judge, Verdict
from cuba_memorys.judge.heuristic import HeuristicJudge

# NLI thresholds (the original's): entailment must be strong to support; contradiction less so.
SUPPORTS_AT, CONTRADICTS_AT = 0.80, 0.60
UNRELATED_AT = 0.80  # pair judging: neutral this sure in both directions → unrelated
MAX_PARALLEL = 8  # CLI judgments run side by side at most
MIN_REMAINING = 1.0  # seconds: less than this left of a batch's time, a slow judge is not asked


class NliJudge:
    """Adapts an NLI model (``judge(premise, hypothesis) -> {entailment, neutral, contradiction}``)."""

    backend = "nli"

    def __init__(self, model: Any, name: str | None = None) -> None:
        self._model = model
        self.model = name

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        p = self._model.judge(evidence, claim)
        entail, contra = p["entailment"], p["contradiction"]
        if entail >= SUPPORTS_AT and entail > contra:
            return Verdict("supports", entail, f"entailment {entail:.2f}", self.backend, self.model)
        if contra >= CONTRADICTS_AT and contra > entail:
            return Verdict("contradicts", contra, f"contradiction {contra:.2f}", self.backend, self.model)
        return Verdict(UNKNOWN, 0.0, f"entailment {entail:.2f}, contradiction {contra:.2f}: below the"
                       " thresholds", self.backend, self.model)

    def judge_pair(self, first: str, second: str) -> Verdict:
        forward, backward = self._model.judge(first, second), self._model.judge(second, first)
        contra = max(forward["contradiction"], backward["contradiction"])
        entail = max(forward["entailment"], backward["entailment"])
        neutral = min(forward["neutral"], backward["neutral"])
        if contra >= CONTRADICTS_AT and contra > entail:
            return Verdict("contradicts", contra, f"contradiction {contra:.2f}", self.backend, self.model)
        if entail >= SUPPORTS_AT:
            return Verdict("complementary", entail, f"entailment {entail:.2f}: consistent", self.backend, self.model)
        if neutral >= UNRELATED_AT:
            return Verdict("unrelated", neutral, f"neutral {neutral:.2f} both ways", self.backend, self.model)
        return Verdict(UNKNOWN, 0.0, "no label reached its threshold", self.backend, self.model)


class JudgeChain:
    """The judge that decides (the first available: NLI, the client's model, the CLI, the text
    rules) and the text rules beside it: their contradictions overrule, and their plain
    statement of the claim stands when the deciding judge could not tell."""

    def __init__(self, nli: Any | None = None, nli_name: str | None = None,
                 sampler: Judge | None = None, cli: Judge | None = None) -> None:
        self.heuristic = HeuristicJudge()
        if nli is not None:
            self.primary: Judge = NliJudge(nli, nli_name)
        elif sampler is not None:
            self.primary = sampler
        elif cli is not None:
            self.primary = cli
        else:
            self.primary = self.heuristic

    @property
    def backend(self) -> str:
        return self.primary.backend

    def judge_claim(self, claim: str, evidence: str, deadline: float | None = None) -> Verdict:
        decided = self._safe(self.primary, self.primary.judge_claim, claim, evidence, deadline)
        return self._combine(decided, self._safe(self.heuristic, self.heuristic.judge_claim, claim, evidence))

    def judge_pair(self, first: str, second: str, deadline: float | None = None) -> Verdict:
        decided = self._safe(self.primary, self.primary.judge_pair, first, second, deadline)
        return self._combine(decided, self._safe(self.heuristic, self.heuristic.judge_pair, first, second))

    def judge_claims(self, claim: str, evidence: list[str]) -> list[Verdict]:
        """One verdict per piece of evidence; a judge that runs out of process (the CLI) judges
        them side by side, so a verify waits for one judgment's time, not five."""
        return self._map(lambda text, deadline: self.judge_claim(claim, text, deadline), evidence)

    def judge_pairs(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        return self._map(lambda pair, deadline: self.judge_pair(pair[0], pair[1], deadline), pairs)

    def _map(self, judge: Callable[[Any, float | None], Verdict], items: list) -> list[Verdict]:
        """Judge every item. A judge with a ``timeout`` (the CLI) runs them side by side, each given
        only what is left of one timeout counted from the batch's start, and an item whose turn
        comes later is not sent to it (the text rules still judge it): the whole batch ends within
        one judgment's limit."""
        timeout = getattr(self.primary, "timeout", None)
        deadline = time.monotonic() + timeout if timeout else None
        if len(items) > 1 and getattr(self.primary, "parallel", False):
            with ThreadPoolExecutor(max_workers=min(len(items), MAX_PARALLEL)) as pool:
                return list(pool.map(lambda item: judge(item, deadline), items))
        return [judge(item, deadline) for item in items]

    @staticmethod
    def _safe(judge: Judge, method, a: str, b: str, deadline: float | None = None) -> Verdict:
        """A judge that fails (a model error, a sampling timeout) or whose time is spent answers
        unknown, with why."""
        model = getattr(judge, "model", None)
        remaining = deadline - time.monotonic() if deadline is not None else None
        if remaining is not None and remaining < MIN_REMAINING:
            return Verdict(UNKNOWN, 0.0, f"not judged: the {judge.backend} judge's time for this call is spent",
                           judge.backend, model)
        try:
            return method(a, b) if remaining is None else method(a, b, timeout=remaining)
        except Exception as exc:
            return Verdict(UNKNOWN, 0.0, f"{judge.backend} judge failed: {exc}", judge.backend, model)

    def _combine(self, decided: Verdict, text: Verdict) -> Verdict:
        if decided.backend == text.backend:
            return decided
        if text.verdict == "contradicts" and decided.verdict != "contradicts":
            return replace(text, reason=f"{text.reason} (overrules {decided.backend}: {decided.verdict})")
        if text.verdict == "supports" and decided.verdict == UNKNOWN:
            return replace(text, reason=f"{text.reason} ({decided.backend} could not tell: {decided.reason})")
        return decided
