"""The judge that is always there: text rules that decide only what the text plainly says.

They compare clause by clause (text_rules.py), and only plain clauses (asserted, unhedged):

- ``contradicts`` by rule ``negation``: one clause negates another that states every one of the
  negated clause's content words in the same order ("we do not use Redis" / "we use Redis for
  sessions"). An elliptical fragment ("..., never with bcrypt") counts only against a clause
  naming its own words (bcrypt) whose other words come from the sentence it leans on. A negated
  universal ("not all", "not always") is no contradiction.
- ``contradicts`` by rule ``number``: the same statement gives another exact value for the same
  quantity ("port 5432" / "port 6432"; "retried three times" / "the gateway retries failed webhooks
  five times"): word for word, or the claim's words all in the other clause in an order that keeps
  the roles, with nothing added inside a restriction ("port 9090 in staging" is another statement);
  a bound ("at least 3"), an estimate or a date is no value.
- ``supports`` by rule ``states_claim`` (claims only): every clause of the claim is restated by an
  evidence clause — all its content words (stems, listed synonyms, irregular verbs at their base), in
  the same order in the same voice, and across a change of voice ("webhooks are retried" / "the
  gateway retries webhooks") in an order whose subject is not first, so swapped roles never support;
  the claim's phrase not qualified right after ("React Native" is not "React"), no added numbers, the
  same polarity, modals and direction words. A negated claim needs the same negated words. A claim
  clause of one word is stated by any plain clause holding it, beside a longer restated clause.
  Its confidence keeps one observation at ``partial``; verify caps text-rule support at
  ``partial`` unless two independent observations state the claim.

Everything else is ``unknown``: similar wording is not agreement, and "written in Rust" against
"written in Java" is left to a model judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuba_memorys.judge.base import UNKNOWN, Verdict
from cuba_memorys.judge.lexicon import EXISTENTIAL, PRONOUNS, UNIVERSAL
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
    return _comparable(a, b) and a.scope == b.scope and len(a.words) >= MIN_WORDS and a.words == b.words


def _order_fits(claim: tuple[str, ...], claim_passive: bool, evidence: tuple[str, ...], evidence_passive: bool) -> bool:
    """Whether the claim's words may be read in the evidence's order: in the same voice the same
    order ("recruits talk to an officer" is not "an officer talks to the recruits"); across a
    change of voice an order whose subject is not the evidence's first word of them ("failed
    webhooks are retried" / "the gateway retries failed webhooks"; "the billing service is called
    by the ledger" is not "the billing service calls the ledger")."""
    if claim_passive == evidence_passive:
        return is_subsequence(claim, evidence)
    wanted = set(claim)  # across the voices the same order would swap the roles
    first = next((t for t in evidence if t in wanted), None)
    return first is not None and first != claim[0]


def _qualifies_a_claim_word(claim: Clause, evidence: Clause) -> bool:
    """The evidence goes on where the claim's phrase ends: "React Native" is not "React", and
    "Helm charts we wrote years ago" are some charts, not "Helm charts" (a pronoun opens a
    relative clause)."""
    wanted = set(claim.tokens)
    ends = {t for t, tight in zip(claim.tokens, claim.tight_end) if not tight}
    tokens = evidence.tokens
    for i, t in enumerate(tokens):
        if t in ends and evidence.tight_end[i] and i + 1 < len(tokens) and not evidence.adverbs[i + 1]:
            following = tokens[i + 1]  # an adverb ("playing passionately") qualifies the verb, not a thing
            if following not in wanted or following in PRONOUNS:
                return True
    return False


def _comparable(claim: Clause, evidence: Clause) -> bool:
    """Both plain and whole, the same polarity, quantifiers, modals and direction words."""
    if not (claim.plain and evidence.plain) or claim.elliptical or evidence.elliptical:
        return False
    if claim.negated != evidence.negated or claim.relations != evidence.relations:
        return False
    added = claim.scope - evidence.scope  # "some milk" where the evidence says "the milk"
    if added and not (added <= EXISTENTIAL and not evidence.scope):
        return False
    return evidence.scope - claim.scope <= UNIVERSAL


def _restated(claim: Clause, evidence: Clause) -> bool:
    """The claim's words all in the evidence clause, in an order that keeps who does what, the
    evidence not qualifying the claim's last word of a phrase nor adding numbers."""
    if not _comparable(claim, evidence) or len(claim.tokens) < MIN_WORDS:
        return False
    if claim.negated:  # negation reverses entailment: only the same negated words support
        return set(claim.tokens) == set(evidence.tokens) and _order_fits(
            claim.tokens, claim.passive, evidence.tokens, evidence.passive)
    wanted = set(claim.tokens)
    if not wanted <= set(evidence.tokens) or not _order_fits(claim.tokens, claim.passive, evidence.tokens,
                                                             evidence.passive):
        return False
    if _qualifies_a_claim_word(claim, evidence):
        return False
    return not any(t.startswith("#") and t not in wanted for t in evidence.tokens)


def _same_statement_in_other_words(claim: Clause, evidence: Clause) -> bool:
    """The claim's words (numbers aside) all stated by the evidence clause, in an order that keeps
    who does what, and nothing the evidence adds restricts it ("in staging", "for sessions")."""
    if not _comparable(claim, evidence) or claim.scope != evidence.scope:
        return False
    if not claim.opens_sentence:  # "…and waits 40 minutes": who waits went with the clause before
        return False
    words = claim.words
    if len(words) < MIN_WORDS:  # "status 1" / "status 2": one word, only when it is all either says
        return len(words) == 1 and words == evidence.words
    wanted = set(words)
    if not wanted <= set(evidence.words) or not _order_fits(words, claim.passive, evidence.words, evidence.passive):
        return False
    return not any(q for t, q in zip(evidence.tokens, evidence.qualified) if not t.startswith("#") and t not in wanted)


def _number_conflict(a: Clause, b: Clause) -> str | None:
    """"port 5432" against "port 6432": a number of ``a`` whose quantity ``b`` also gives, only
    with other values, in the same statement (word for word, or ``a``'s words all in ``b``)."""
    if not (_same_statement(a, b) or _same_statement_in_other_words(a, b)):
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
            values = _number_conflict(x, y) or _number_conflict(y, x)
            if values:
                return Finding("number", f"{NUMBER_REASON} ({values}): “{x.text}” vs “{y.text}”")
    return None


def _fragment_stated(fragment: Clause, evidence: tuple[Clause, ...]) -> Clause | None:
    """A claim clause of one content word ("the girl", "and singing"): stated when a plain clause
    of the evidence with the same polarity, quantifiers and direction words holds that word
    ("looking down" is not "looking up")."""
    if not fragment.plain or fragment.elliptical:
        return None
    return next((e for e in evidence if e.plain and e.negated == fragment.negated
                 and e.relations == fragment.relations and e.scope == fragment.scope
                 and set(fragment.tokens) <= set(e.tokens)), None)


def states_claim(claim: str, evidence: str) -> Finding | None:
    """Whether ``evidence`` plainly states ``claim``: every clause of the claim is stated by one
    clause of the evidence (a clause of one word, by a clause holding it, as long as a clause of
    the claim with more words is stated too). None when any claim clause is hedged, conditional
    or unmatched."""
    claim_clauses, evidence_clauses = clauses(claim), clauses(evidence)
    matched, whole = [], False
    for c in claim_clauses:
        if len(c.tokens) < MIN_WORDS:
            found = _fragment_stated(c, evidence_clauses)
        else:
            found = next((e for e in evidence_clauses if _restated(c, e)), None)
            whole = whole or found is not None
        if found is None:
            return None
        matched.append(found.text)
    if not whole:
        return None
    return Finding("states_claim", f"{STATES_REASON}, with the same numbers and polarity:"
                                   f" “{'; '.join(dict.fromkeys(matched))}”")


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
