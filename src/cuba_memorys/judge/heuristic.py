"""The judge that is always there: text rules that decide only what the text plainly says.

They compare clause by clause (text_rules.py), and only plain clauses (asserted, unhedged):

- ``contradicts`` by rule ``negation``: one clause negates another that states every one of the
  negated clause's content words in the same order ("we do not use Redis" / "we use Redis for
  sessions"). An elliptical fragment ("..., never with bcrypt") counts only against a clause
  naming its own words (bcrypt) whose other words come from the sentence it leans on. A negated
  universal ("not all", "not always") is no contradiction.
- ``contradicts`` by rule ``number``: the same statement, word for word, gives another exact value
  for the same quantity ("port 5432" / "port 6432"; "port 9090 in staging" is another statement);
  a bound ("at least 3"), an estimate or a date is no value.
- ``supports`` by rule ``states_claim`` (claims only): an evidence clause opens with the claim's
  content words (stems, listed synonyms) in order with nothing between them, does not qualify the
  last of them ("React Native" is not "React") nor add numbers, and has the same polarity,
  quantifiers, modals and direction words. A negated claim must match exactly.
  Its confidence keeps one observation at ``partial``; verify caps text-rule support at
  ``partial`` unless two independent observations state the claim.

Everything else is ``unknown``: similar wording is not agreement, and "written in Rust" against
"written in Java" is left to a model judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuba_memorys.judge.base import UNKNOWN, Verdict
from cuba_memorys.judge.lexicon import UNIVERSAL
from cuba_memorys.judge.text_rules import Clause, clauses, is_subsequence, quantities

CONFIDENCE = 0.5  # the original's heuristic confidence for a contradiction
SUPPORT_CONFIDENCE = 0.6  # one observation at similarity 1 scores 0.70: partial, not verified
MIN_WORDS = 2  # a clause of one content word says too little to compare
NEGATION_REASON = "one text negates what the other states"
NUMBER_REASON = "the same statement with another value"
STATES_REASON = "the evidence states every content word of the claim"


@dataclass(frozen=True)
class Finding:
    rule: str  # negation | number | states_claim
    reason: str


def _negation_conflict(neg: Clause, pos: Clause) -> bool:
    if not (neg.plain and pos.plain and neg.negated and not pos.negated) or pos.elliptical:
        return False
    if neg.scope or not pos.scope <= UNIVERSAL:  # "not all", "not always", "some": not a plain negation
        return False
    if neg.elliptical:  # "never with bcrypt": bcrypt plus the words of the clause it leans on
        rest = set(pos.tokens) - set(neg.tokens)
        return (is_subsequence(neg.tokens, pos.tokens) and bool(rest) and rest <= set(neg.context)
                and pos.tokens[0] == neg.context[0])
    return len(neg.tokens) >= MIN_WORDS and is_subsequence(neg.tokens, pos.tokens)


def _same_statement(a: Clause, b: Clause) -> bool:
    """Two plain clauses that say the same thing, word for word, up to their numbers ("port 8080"
    against "port 9090 in staging" is another statement: it says where)."""
    if not (a.plain and b.plain) or a.elliptical or b.elliptical or a.negated != b.negated:
        return False
    return (a.scope == b.scope and a.relations == b.relations and len(a.words) >= MIN_WORDS
            and a.words == b.words)


def _number_conflict(a: Clause, b: Clause) -> str | None:
    """"port 5432" against "port 6432": a number of ``a`` whose quantity ``b`` also gives, only
    with other values."""
    if not _same_statement(a, b):
        return None
    qb = quantities(b)
    for q in quantities(a):
        same = [other for other in qb if q.same_quantity(other)]
        if same and all(other.value != q.value for other in same):
            what = (q.after or q.before).lstrip("@=")
            return f"{what}: {q.value} vs {', '.join(sorted({o.value for o in same}))}"
    return None


def conflict(a: str, b: str) -> Finding | None:
    """Why ``a`` and ``b`` plainly contradict each other, or None (symmetric)."""
    ca, cb = clauses(a), clauses(b)
    for x in ca:
        for y in cb:
            for neg, pos in ((x, y), (y, x)):
                if _negation_conflict(neg, pos):
                    return Finding("negation", f"{NEGATION_REASON}: “{neg.text}” vs “{pos.text}”")
            values = _number_conflict(x, y)
            if values:
                return Finding("number", f"{NUMBER_REASON} ({values}): “{x.text}” vs “{y.text}”")
    return None


def _states(claim: Clause, evidence: Clause) -> bool:
    """The evidence clause opens with the claim's words, in order and nothing between them, and
    does not go on to qualify the last of them ("React" is not "React Native") or to add numbers."""
    if not (claim.plain and evidence.plain) or claim.elliptical or evidence.elliptical:
        return False
    if claim.negated != evidence.negated or len(claim.tokens) < MIN_WORDS:
        return False
    if not claim.scope <= evidence.scope or not evidence.scope - claim.scope <= UNIVERSAL:
        return False
    if claim.relations != evidence.relations:
        return False
    if claim.negated:  # negation reverses entailment: only the same negated statement supports
        return claim.tokens == evidence.tokens
    n = len(claim.tokens)
    if evidence.tokens[:n] != claim.tokens or evidence.tight_end[n - 1]:
        return False
    return not any(t.startswith("#") for t in evidence.tokens[n:])


def states_claim(claim: str, evidence: str) -> Finding | None:
    """Whether ``evidence`` plainly states ``claim``: every clause of the claim is stated by one
    clause of the evidence. None when any claim clause is hedged, conditional or unmatched."""
    claim_clauses, evidence_clauses = clauses(claim), clauses(evidence)
    if not claim_clauses:
        return None
    matched = []
    for c in claim_clauses:
        found = next((e for e in evidence_clauses if _states(c, e)), None)
        if found is None:
            return None
        matched.append(found.text)
    return Finding("states_claim", f"{STATES_REASON}, in order, with the same numbers and polarity:"
                                   f" “{'; '.join(matched)}”")


def rule_of(reason: str | None) -> str | None:
    """The rule a stored text-rule reason came from (cached judgments keep only the reason)."""
    for rule, start in (("negation", NEGATION_REASON), ("number", NUMBER_REASON), ("states_claim", STATES_REASON)):
        if reason and reason.startswith(start):
            return rule
    return None


def clear_conflict(a: str, b: str) -> str | None:
    """The reason ``a`` and ``b`` plainly contradict each other, or None."""
    found = conflict(a, b)
    return found.reason if found else None


class HeuristicJudge:
    backend = "heuristic"
    model: str | None = None  # as the Judge protocol declares it

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        found = conflict(claim, evidence)
        if found:
            return Verdict("contradicts", CONFIDENCE, found.reason, self.backend, rule=found.rule)
        stated = states_claim(claim, evidence)
        if stated:
            return Verdict("supports", SUPPORT_CONFIDENCE, stated.reason, self.backend, rule=stated.rule)
        return Verdict(UNKNOWN, 0.0, "the text rules find neither a plain conflict nor the claim stated",
                       self.backend)

    def judge_pair(self, first: str, second: str) -> Verdict:
        found = conflict(first, second)
        if found:
            return Verdict("contradicts", CONFIDENCE, found.reason, self.backend, rule=found.rule)
        return Verdict(UNKNOWN, 0.0, "no plain conflict; text rules cannot tell more", self.backend)
