"""Clause analysis for the text judge: what each clause of a sentence asserts, and how surely.

The text judge (heuristic.py) compares a claim with a piece of evidence clause by clause, so a
negation or a number is only held against the words it belongs to: in "Passwords are hashed
with argon2id, never with bcrypt" the "never" is about bcrypt, and a claim about argon2id does
not collide with it. A clause is the stretch between punctuation, contrast words ("but",
"pero", "although") and "and"/"y".

Each clause keeps its content words in order, stemmed in the text's language (English or
Spanish) with listed synonyms folded to one token, numbers as ``#value`` tokens, its polarity,
and what makes it unsafe to compare (lexicon.py): a question or a condition (not asserted); a
hedge, report, plan, obligation, future, disjunction or implicit negative (hedged); quantifiers,
modals and bounds (scope); direction words; a date. The rules only ever decide on clauses that
are asserted and plain; everything else is left to a model judge or ``unknown``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from cuba_memorys.judge import lexicon as lx
from cuba_memorys.text import STOPWORDS, fold, guess_language, stem

_TOKEN = re.compile(r"(?P<num>\d+(?:[.,]\d+)*)(?![^\W_])|(?P<word>[^\W_]+(?:['’][^\W_]+)*)"
                    r"|(?P<punct>[,;:.!?¿¡()\[\]\"])", re.UNICODE)
_NUMBER_UNIT = re.compile(r"^(\d+(?:\.\d+)?)([a-z]{1,3})$")
_SPANISH_FUTURE = re.compile(r"(?:ar|er|ir)(?:á|án|ás)$")  # usará, serán: a future is no present fact
MAX_CLAUSES = 64  # per text: comparing clause pairs grows with the square
_SKIPPED = lx.NEGATIONS | lx.SCOPE | lx.LIGHT | lx.HEDGES | lx.CONDITIONAL | lx.RELATIONS | STOPWORDS


def _build_synonyms() -> dict[tuple[str, str], str]:
    table = {}
    for canonical, forms in lx.SYNONYMS.items():
        for form in lx.split(forms):
            for language in ("en", "es"):
                table[(language, stem(form, language))] = canonical
    return table


_SYNONYMS = _build_synonyms()  # built once at import: no thread ever sees it half-made


@dataclass(frozen=True)
class Clause:
    text: str  # the clause's words as written (folded), for reasons
    tokens: tuple[str, ...]  # content tokens in order: stems, "=synonym" groups, "#number", "@unit"
    tight_end: tuple[bool, ...]  # per token: the very next word is a content word too ("React Native")
    negated: bool
    asserted: bool  # not part of a question or a conditional sentence
    hedged: bool
    scope: frozenset[str]  # quantifiers, modals and bounds ("≥", "~") in the clause
    relations: frozenset[str]  # where or which way ("front", "up", "after")
    dated: bool  # names a month: its numbers are a date
    elliptical: bool  # "never with bcrypt": a negated fragment leaning on the clause before it
    context: tuple[str, ...] = ()  # the clause before an elliptical fragment
    passive: bool = False  # "are retried", "se cifran": the subject is what the verb acts on
    qualified: tuple[bool, ...] = ()  # per token: inside a restriction ("in staging", "para X")
    adverbs: tuple[bool, ...] = ()  # per token: an English -ly adverb ("passionately")
    opens_sentence: bool = True  # the sentence's first clause (a later one may have lost its subject)

    @property
    def plain(self) -> bool:
        """Asserted without hedges: the only clauses the rules compare."""
        return self.asserted and not self.hedged

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(t for t in self.tokens if not t.startswith("#"))


def _word_tokens(token: str, original: str) -> list[str]:
    """One matched word as the tokens the rules read: "don't" → do not, "we'll" → we will,
    "30s" → 30 s, "usará" → usara will."""
    unit = _NUMBER_UNIT.match(token)
    if unit:
        return [unit.group(1), unit.group(2)]
    if token.endswith("n't"):
        base = lx.CONTRACTED_NOT.get(token, token[:-3])
        return [base, "not"] if base else ["not"]
    if "'" in token:
        base, suffix = token.split("'", 1)
        expanded = lx.CONTRACTIONS.get(suffix, "")
        return [t for t in (base, expanded) if t]
    if _SPANISH_FUTURE.search(original):
        return [token, "will"]
    return [token]


def _raw_tokens(text: str) -> list[str]:
    out: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        original = match.group(0).replace("’", "'")
        token = fold(original)
        out.extend(_word_tokens(token, original) if match.group("word") else [token])
    return out


def _is_number(token: str) -> bool:
    return token[:1].isdigit()


def _number_value(token: str) -> str:
    """'5,432' and '5432' are one value; '1,5' (Spanish) and '1.5' are one value."""
    if re.fullmatch(r"\d{1,3}(?:[.,]\d{3})+", token):
        return re.sub(r"[.,]", "", token)
    return token.replace(",", ".")


def _sentences(tokens: list[str]) -> list[list[str]]:
    out: list[list[str]] = []
    current: list[str] = []
    for token in tokens:
        current.append(token)
        if token in (".", "!", "?", ";"):
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def _asserted(sentence: list[str]) -> bool:
    """Not a question (a "?", a "¿", or an auxiliary opening it) and not a condition."""
    words = [t for t in sentence if t[:1].isalnum()]
    question = sentence[-1] == "?" or "¿" in sentence or (
        len(words) > 1 and words[0] in lx.QUESTION_OPENERS and words[1] in lx.NEW_SUBJECT | lx.PRONOUNS)
    return not question and not any(t in lx.CONDITIONAL or t in lx.NOTE_MARKERS for t in sentence)


def _instruction(sentence: list[str]) -> bool:
    """"Don't use Redis", "Never deploy on Friday": a rule to follow, not a statement of fact."""
    words = [t for t in sentence if t[:1].isalnum()]
    return any(tuple(words[:len(opener)]) == opener for opener in lx.INSTRUCTION_OPENERS)


def _clause_spans(sentence: list[str]) -> list[list[str]]:
    """Split at punctuation, contrast words and "and"/"y"."""
    spans: list[list[str]] = []
    current: list[str] = []
    for token in sentence:
        if token in (",", ":", "(", ")", "[", "]", '"') or token in lx.CONTRAST or token in lx.AND:
            if current:
                spans.append(current)
            current = []
        elif token not in (".", "!", "?", ";", "¿", "¡"):
            current.append(token)
    if current:
        spans.append(current)
    return spans


def _negated(span: list[str]) -> bool:
    for i, token in enumerate(span):
        following = span[i + 1] if i + 1 < len(span) else ""
        if token in lx.NEGATIONS and (token, following) not in lx.NOT_NEGATING:
            return True
    return False


def _hedged(span: list[str]) -> bool:
    pairs = list(zip(span, span[1:], strict=False))
    return (any(t in lx.HEDGES for t in span) or span[0] in lx.NOT_PREDICATING
            or any(b == "to" and a in lx.HEDGED_BEFORE_TO for a, b in pairs)
            or any(b == "que" and a in lx.HEDGED_BEFORE_QUE for a, b in pairs))


def _scope(span: list[str]) -> set[str]:
    found = {t for t in span if t in lx.SCOPE}
    for i in range(len(span)):
        for phrase, mark in lx.BOUNDS.items():
            if tuple(span[i:i + len(phrase)]) == phrase:
                found.add(mark)
    return found


def _lifetime(span: list[str], i: int) -> bool:
    """"valid for 30 minutes": "valid" followed in its clause by a number and a time unit."""
    rest = span[i + 1:]
    return any(_is_number(a) and "@" + lx.UNITS.get(b, "") in lx.TIME_UNITS for a, b in zip(rest, rest[1:],
                                                                                              strict=False))


def _content_token(span: list[str], i: int, language: str) -> str | None:
    token = span[i]
    if token in lx.NUMBER_WORDS:
        return "#" + lx.NUMBER_WORDS[token]
    if _is_number(token):
        return "#" + _number_value(token)
    if token in lx.UNITS:
        return "@" + lx.UNITS[token]
    if token in lx.PRONOUNS:
        return token
    if token in _SKIPPED or not token[:1].isalnum():
        return None
    if token in lx.VALID_FORMS and _lifetime(span, i):
        return "=expire"
    if language == "en":
        token = lx.IRREGULAR_VERBS.get(token, token)
    stemmed = stem(token, language)
    return _SYNONYMS.get((language, stemmed), stemmed)


def _passive(span: list[str]) -> bool:
    """A form of "to be" with a participle in the next two words ("are retried", "is being
    eaten", "fue escrito"), or Spanish "se" before a word ("se cifran")."""
    for i, token in enumerate(span):
        if token in lx.SE and i + 1 < len(span):
            return True
        if token in lx.BE_FORMS:
            for word in span[i + 1:i + 3]:
                if word in lx.PARTICIPLES or (len(word) > 4 and word.endswith(lx.PARTICIPLE_ENDINGS)):
                    return True
    return False


def _qualified(span: list[str], positions: list[int]) -> tuple[bool, ...]:
    """Per content token (at ``positions`` of the span): whether it sits in a restriction opened
    by a qualifying preposition ("in the staging environment": staging, environment)."""
    out: list[bool] = []
    for n, p in enumerate(positions):
        before = p - 1
        while before >= 0 and span[before] in lx.ARTICLES:
            before -= 1
        opened = before >= 0 and span[before] in lx.QUALIFYING
        carried = n > 0 and out[-1] and positions[n - 1] == p - 1  # the next word of the same phrase
        out.append(opened or carried)
    return tuple(out)


def _content(span: list[str], language: str) -> tuple[tuple[str, ...], tuple[bool, ...], list[int]]:
    """(content tokens, per token whether the next word of the span is a content word too, the
    tokens' positions in the span)."""
    tokens: list[str] = []
    positions: list[int] = []
    for i, raw in enumerate(span):
        if _is_number(raw) and i > 0 and span[i - 1] in lx.IDENTIFIERS and tokens:
            tokens[-1] += "#" + _number_value(raw)  # "version#3": a name, not a quantity
            positions[-1] = i
            continue
        token = _content_token(span, i, language)
        if token is not None:
            tokens.append(token)
            positions.append(i)
    kept = set(positions)
    tight = tuple(p + 1 in kept for p in positions)
    return tuple(tokens), tight, positions


def clauses(text: str) -> tuple[Clause, ...]:
    """The clauses of ``text``, in order (at most MAX_CLAUSES)."""
    return _clauses(text)


@lru_cache(maxsize=4096)
def _clauses(text: str) -> tuple[Clause, ...]:
    tokens = _raw_tokens(text)
    language = guess_language([t for t in tokens if t.isalpha()])
    out: list[Clause] = []
    for sentence in _sentences(tokens):
        asserted = _asserted(sentence)
        instruction = _instruction(sentence)
        previous: Clause | None = None
        first_of_sentence = len(out)
        for index, span in enumerate(_clause_spans(sentence)):
            content, tight, positions = _content(span, language)
            if not content:
                continue
            negated = _negated(span)
            elliptical = bool(negated and span[0] in lx.NEGATIONS and previous is not None and len(content) <= 3)
            clause = Clause(
                text=" ".join(span), tokens=content, tight_end=tight, negated=negated, asserted=asserted,
                hedged=_hedged(span) or (instruction and index == 0), scope=frozenset(_scope(span)),
                relations=frozenset(t for t in span if t in lx.RELATIONS),
                dated=any(t in lx.MONTHS for t in span), elliptical=elliptical,
                context=previous.tokens if elliptical and previous is not None else (),
                passive=_passive(span), qualified=_qualified(span, positions),
                adverbs=tuple(len(span[p]) > 4 and span[p].endswith("ly") for p in positions),
                opens_sentence=not any(c.tokens for c in out[first_of_sentence:]))
            out.append(clause)
            previous = clause if not elliptical else previous
            if len(out) >= MAX_CLAUSES:
                return tuple(out)
    return tuple(out)


def is_subsequence(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    """Whether every token of ``short`` occurs in ``long`` in the same order."""
    remaining = iter(long)
    return all(token in remaining for token in short)


@dataclass(frozen=True)
class Quantity:
    value: str
    before: str  # the content word before the number ("port 5432"), "" if none
    after: str  # the unit or word after it ("30 minutes" → "@min"), "" if none

    def same_quantity(self, other: Quantity) -> bool:
        """Whether two numbers count the same thing: the same word after them, or (when either has
        none after it) the same word before."""
        if self.after and other.after:
            return self.after == other.after
        return bool(self.before) and self.before == other.before


def quantities(clause: Clause) -> list[Quantity]:
    """The clause's exact numbers with their neighbouring words; none when the clause holds a
    bound or an estimate ("at least 3", "about 10") or a date, which are no values to compare."""
    if {"≥", "≤", ">", "<", "~"} & clause.scope or clause.dated:
        return []
    tokens, found = clause.tokens, []
    for i, token in enumerate(tokens):
        if token.startswith("#"):
            after = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("#") else ""
            before = tokens[i - 1] if i > 0 and not tokens[i - 1].startswith("#") else ""
            found.append(Quantity(token[1:], before, after))
    return found
