"""The text judge (judge/heuristic.py over judge/text_rules.py): right when it speaks.

Held to the issue's bar on the project's labelled pairs (tests/grounding_pairs.py) always, and on
the public NLI dev splits when ../shared/bench/nli-dev is on this machine (they are evaluation-only
data the repository may not copy, so a fresh CI checkout skips that test and says why); then
cuba_faro mode=verify end to end on the held-out corpus (tests/grounding_heldout.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cuba_memorys.judge.base import Verdict
from cuba_memorys.judge.chain import JudgeChain
from cuba_memorys.judge.heuristic import HeuristicJudge, clear_conflict, conflict, states_claim
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import verify
from grounding_heldout import FACTS, FALSE_CLAIMS, TRUE_CLAIMS, UNSETTLED_CLAIMS
from grounding_pairs import PAIRS

JUDGE = HeuristicJudge()
NLI_DEV = Path(__file__).resolve().parents[2] / "shared" / "bench" / "nli-dev"


def _wrong(label: str, verdict: str) -> bool:
    return (verdict == "contradicts" and label != "contradiction") or (verdict == "supports" and label != "entailment")


@pytest.mark.parametrize(("evidence", "claim", "label", "lang", "plain"), PAIRS,
                         ids=[f"{p[3]}-{i}" for i, p in enumerate(PAIRS)])
def test_a_labelled_pair_is_never_decided_wrongly(evidence, claim, label, lang, plain):
    verdict = JUDGE.judge_claim(claim, evidence)
    assert not _wrong(label, verdict.verdict), verdict
    if plain:
        assert verdict.verdict == "contradicts" and verdict.rule in ("negation", "number"), verdict


def test_the_rules_still_decide_a_fair_share_of_the_project_pairs():
    """Never wrong is easy by never speaking: the rules must also confirm most restatements and
    catch the plain contradictions (these floors are below today's 16/22 and 12/18)."""
    verdicts = [(label, JUDGE.judge_claim(claim, evidence).verdict) for evidence, claim, label, _, _ in PAIRS]
    assert sum(1 for label, v in verdicts if label == "entailment" and v == "supports") >= 14
    assert sum(1 for label, v in verdicts if label == "contradiction" and v == "contradicts") >= 10


def test_the_negation_about_something_else_is_no_contradiction():
    """The issue's defect: "never with bcrypt" was held against a claim about argon2id."""
    stored = "Passwords are hashed with argon2id, never with bcrypt."
    assert clear_conflict("Passwords are hashed using argon2id.", stored) is None
    supports = JUDGE.judge_claim("Passwords are hashed using argon2id.", stored)
    assert supports.verdict == "supports" and supports.rule == "states_claim"
    against = JUDGE.judge_claim("Passwords are hashed with bcrypt.", stored)
    assert against.verdict == "contradicts" and against.rule == "negation" and "bcrypt" in against.reason
    spanish = "Las contraseñas se cifran con argon2id, nunca con bcrypt."
    assert JUDGE.judge_claim("Las contraseñas se cifran con argon2id.", spanish).verdict == "supports"
    assert JUDGE.judge_claim("Las contraseñas se cifran con bcrypt.", spanish).verdict == "contradicts"


def test_numbers_conflict_only_for_the_same_quantity():
    assert conflict("PostgreSQL listens on port 5432", "PostgreSQL listens on port 6432").rule == "number"
    assert conflict("The job retries 3 times and waits 40 minutes", "The job retries 3 times") is None
    # "waits 40 minutes" lost its subject to the "and": the rules leave it to a model rather than guess
    assert conflict("The job retries 3 times and waits 40 minutes", "The job waits 10 minutes") is None
    assert conflict("The server listens on port 9090 in staging", "The server listens on port 8080") is None
    assert conflict("Version 3 of the client retries 5 times", "Version 4 of the client retries 5 times") is None
    assert conflict("Passwords need at least 12 characters", "Passwords need at least 8 characters") is None
    assert conflict("The job ran on 1 July 2024", "The job ran in 2024") is None  # a date, not a count


def test_support_is_never_similarity_alone():
    for evidence, claim in [("The API server is written in Rust", "The API server is written in Java"),
                            ("The scheduler calls the worker", "The worker calls the scheduler"),
                            ("Some endpoints require a token", "Endpoints require a token"),
                            ("We might move the queue to Kafka", "We move the queue to Kafka"),
                            ("We do not store card numbers in logs", "We do not store card numbers"),
                            ("Alice said the build is broken", "The build is broken")]:
        assert states_claim(claim, evidence) is None, (evidence, claim)


def test_a_pair_conflict_is_symmetric_and_says_its_rule():
    a, b = "We use Redis for session storage", "We do not use Redis for session storage"
    first, second = JUDGE.judge_pair(a, b), JUDGE.judge_pair(b, a)
    assert first.verdict == second.verdict == "contradicts" and first.rule == second.rule == "negation"
    assert JUDGE.judge_pair("We use Redis", "We use Kafka").verdict == "unknown"


class _Fixed:
    """A deciding judge that always answers one verdict (stands in for a model judge)."""

    def __init__(self, verdict: str) -> None:
        self.backend, self.model, self.verdict = "sampling", "fixed", verdict

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        return Verdict(self.verdict, 0.9, "fixed", self.backend, self.model)

    judge_pair = judge_claim


def test_the_chain_keeps_the_rules_veto_and_their_support_below_a_decided_judge():
    stored = "Passwords are hashed with argon2id, never with bcrypt."
    claim = "Passwords are hashed using argon2id."
    assert JudgeChain(sampler=_Fixed("supports")).judge_claim(claim, stored).backend == "sampling"
    vetoed = JudgeChain(sampler=_Fixed("supports")).judge_claim("Passwords are hashed with bcrypt.", stored)
    assert vetoed.verdict == "contradicts" and vetoed.rule == "negation" and "overrules sampling" in vetoed.reason
    undecided = JudgeChain(sampler=_Fixed("unknown")).judge_claim(claim, stored)
    assert undecided.verdict == "supports" and undecided.backend == "heuristic"
    assert "sampling could not tell" in undecided.reason
    # a model's contradiction is not replaced by the rules' weaker support
    assert JudgeChain(sampler=_Fixed("contradicts")).judge_claim(claim, stored).verdict == "contradicts"


@pytest.mark.skipif(not NLI_DEV.is_dir(), reason=f"the NLI dev splits are not on this machine ({NLI_DEV});"
                    " they may not be copied into the repository (evaluation-only licences)")
def test_the_bar_on_the_public_nli_dev_splits():
    """No entailment pair contradicted, ≤ 1% of neutral pairs contradicted, no false support."""
    totals = {"entail_contra": 0, "neutral_contra": 0, "neutral": 0, "false_support": 0}
    for path in sorted(NLI_DEV.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for row in map(json.loads, fh):
                verdict = JUDGE.judge_claim(row["hypothesis"], row["premise"]).verdict
                totals["neutral"] += row["label"] == "neutral"
                totals["entail_contra"] += row["label"] == "entailment" and verdict == "contradicts"
                totals["neutral_contra"] += row["label"] == "neutral" and verdict == "contradicts"
                totals["false_support"] += row["label"] != "entailment" and verdict == "supports"
    assert totals["neutral"] > 1000, totals
    assert totals["entail_contra"] == 0 and totals["false_support"] == 0, totals
    assert totals["neutral_contra"] <= 0.01 * totals["neutral"], totals


def test_verify_on_the_held_out_corpus_without_a_model_judge(memory):
    for entity, content in FACTS:
        write.add(memory, None, entity_name=entity, content=content)
    levels = {claim: verify.verify(memory, None, claim) for claim in
              TRUE_CLAIMS + [c for c, _ in FALSE_CLAIMS] + UNSETTLED_CLAIMS}
    confirmed = [c for c in TRUE_CLAIMS if levels[c]["grounding"] == "partial"]
    assert len(confirmed) >= 7, {c: levels[c]["grounding"] for c in TRUE_CLAIMS}
    assert all(levels[c]["grounding"] != "contradicted" for c in TRUE_CLAIMS)
    assert all(levels[c]["grounding"] != "verified" for c in TRUE_CLAIMS)  # one row: partial at most
    for claim, plain in FALSE_CLAIMS:
        assert levels[claim]["grounding"] not in ("verified", "partial"), levels[claim]
        if plain:
            assert levels[claim]["grounding"] == "contradicted", levels[claim]
    for claim in UNSETTLED_CLAIMS:
        assert levels[claim]["grounding"] in ("unknown", "weak"), levels[claim]


def test_two_independent_observations_stating_a_claim_verify_it(memory):
    claim = "Passwords are hashed using argon2id."
    write.add(memory, None, entity_name="auth", content="Passwords are hashed with argon2id, never with bcrypt.")
    one = verify.verify(memory, None, claim)
    assert one["grounding"] == "partial" and one["confidence"] <= 0.7
    write.add(memory, None, entity_name="security-review", content="Passwords are hashed with argon2id.")
    two = verify.verify(memory, None, claim)
    assert two["grounding"] == "verified", two
    assert sum(1 for e in two["evidence"] if e.get("rule") == "states_claim") >= 2


@pytest.mark.parametrize("text", ["", "n't", "Do n't use Redis", "...", "123", "🙂 🙂", "a" * 20_000,
                                  "; ; ;", "¿?", "version 3", "Use Redis, y no Kafka; o sí."])
def test_odd_input_never_breaks_the_rules(text):
    for a, b in ((text, "We use Redis"), ("We use Redis", text), (text, text)):
        assert JUDGE.judge_claim(a, b).verdict in ("supports", "contradicts", "unknown")
        assert JUDGE.judge_pair(a, b).verdict in ("contradicts", "unknown")


class _Instant:
    """A parallel judge that answers at once, so the text rules of many threads overlap."""

    backend, model, parallel = "cli", "instant", True

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        return Verdict("unknown", 0.0, "instant", self.backend, self.model)

    judge_pair = judge_claim


def _inflected_words(seed: int, count: int) -> list[str]:
    """Distinct, stemmable English words (so every thread misses the stem cache)."""
    roots = ["connect", "deploy", "configur", "hash", "listen", "migrat", "cach", "rout", "schedul", "index"]
    endings = ["ing", "ed", "ions", "ers", "ments", "ations", "ingly", "ables", "ness", "izes"]
    prefixes = ["re", "pre", "dis", "over", "under", "co", "sub", "inter", "multi", "auto"]
    words = [p + r + e for p in prefixes for r in roots for e in endings]
    return [f"{w}{'x' * (seed + 1)}" if i % 2 else w for i, w in enumerate(words[seed::3][:count])]


def test_parallel_judging_gives_what_one_thread_gives():
    """CLI judgments run in threads and the text rules with them: the stemmer they share must not
    mix up words (snowballstemmer keeps state on the object), nor the stem cache keep a wrong one."""
    import sys
    import threading

    import snowballstemmer

    from cuba_memorys import text

    text._stem.cache_clear()
    chain, errors = JudgeChain(cli=_Instant()), []
    batches = {seed: [" ".join(_inflected_words(seed, 40)[i:i + 8]) for i in range(0, 40, 8)] * 4
               for seed in range(8)}

    def work(seed: int) -> None:
        try:
            chain.judge_claims("We deploy the configured routes", batches[seed])
        except Exception as exc:  # the failure this test exists to catch
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show at once
    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    reference = snowballstemmer.stemmer("english")
    words = {w for seed in batches for w in _inflected_words(seed, 40)}
    assert all(text._stem(w, "en") == reference.stemWord(w) for w in words)


def test_a_cached_pair_judgment_still_says_its_rule(memory):
    from cuba_memorys.services import grounding

    a = write.add(memory, None, entity_name="cache", content="We use Redis for session storage")["id"]
    b = write.add(memory, None, entity_name="cache", content="We do not use Redis for session storage")["id"]
    first = grounding.judge_pair(memory, None, a, b)
    again = grounding.judge_pair(memory, None, b, a)
    assert first["cached"] is False and again["cached"] is True
    assert first["judgment"]["rule"] == again["judgment"]["rule"] == "negation"


def test_verify_confirms_in_other_words_and_refutes_another_value(memory):
    """Issue 33's cases, end to end: a passive restatement is partial support from one row, a
    changed count or status is contradicted (citing the clause), and the short answer names the
    deciding row and its rule."""
    webhooks = write.add(memory, None, entity_name="gateway",
                         content="The gateway retries failed webhooks five times with jitter.")["id"]
    status = write.add(memory, None, entity_name="deploy", content="The deploy script exits with status 2.")["id"]
    same = verify.verify(memory, None, "Failed webhooks are retried five times.")
    assert same["grounding"] == "partial" and same["evidence"][0]["id"] == webhooks, same
    assert same["evidence"][0]["rule"] == "states_claim"
    fewer = verify.verify(memory, None, "Failed webhooks are retried three times.")
    assert fewer["grounding"] == "contradicted" and fewer["evidence"][0]["rule"] == "number", fewer
    assert "3 vs 5" in fewer["evidence"][0]["reason"]
    other = verify.verify(memory, None, "The deploy script exits with status 1.")
    assert other["grounding"] == "contradicted" and other["evidence"][0]["id"] == status, other
