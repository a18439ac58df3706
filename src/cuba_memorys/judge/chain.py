"""The judge chain: which judge decides, and the heuristic's veto.

Order (the original's): an NLI cross-encoder when a model is installed, else the MCP client's
own model through sampling when the client offers it, else the heuristic. Whatever judge
decides, the heuristic also looks at every pair and its clear contradictions stand: a model
that calls "we do not use Redis" support for "we use Redis" is overruled, so a claim that
stored evidence plainly contradicts is never reported verified.
"""

from __future__ import annotations

from typing import Any

from cuba_memorys.judge.base import UNKNOWN, Judge, Verdict
from cuba_memorys.judge.heuristic import HeuristicJudge

# NLI thresholds (the original's): entailment must be strong to support; contradiction less so.
SUPPORTS_AT, CONTRADICTS_AT = 0.80, 0.60
UNRELATED_AT = 0.80  # pair judging: neutral this sure in both directions → unrelated


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
    """The judge that decides (the first available) plus the heuristic veto."""

    def __init__(self, nli: Any | None = None, nli_name: str | None = None,
                 sampler: Judge | None = None) -> None:
        self.heuristic = HeuristicJudge()
        if nli is not None:
            self.primary: Judge = NliJudge(nli, nli_name)
        elif sampler is not None:
            self.primary = sampler
        else:
            self.primary = self.heuristic

    @property
    def backend(self) -> str:
        return self.primary.backend

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        return self._with_veto(self._safe(self.primary.judge_claim, claim, evidence),
                               self.heuristic.judge_claim(claim, evidence))

    def judge_pair(self, first: str, second: str) -> Verdict:
        return self._with_veto(self._safe(self.primary.judge_pair, first, second),
                               self.heuristic.judge_pair(first, second))

    def _safe(self, method, a: str, b: str) -> Verdict:
        """A judge that fails (a model error, a sampling timeout) answers unknown, with why."""
        try:
            return method(a, b)
        except Exception as exc:
            return Verdict(UNKNOWN, 0.0, f"{self.primary.backend} judge failed: {exc}", self.primary.backend,
                           getattr(self.primary, "model", None))

    def _with_veto(self, decided: Verdict, heuristic: Verdict) -> Verdict:
        if decided.backend == heuristic.backend or heuristic.verdict != "contradicts":
            return decided
        if decided.verdict == "contradicts":
            return decided
        return Verdict("contradicts", heuristic.confidence,
                       f"{heuristic.reason} (overrules {decided.backend}: {decided.verdict})", "heuristic")
