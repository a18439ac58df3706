"""cuba_alarma, cuba_remedio, cuba_expediente: the errors an agent met, how they were fixed,
and a warning before it repeats an approach that already failed.

An error is written with the caller's active project (and open session) and read in its
scope, like every other row; quarantined errors are never served. Its ``project`` is a label
(the original's column): the caller's, else the active project's name, else "default".

Similarity is textual, with no model. "The same error again" (alarma's count and pattern
warning, remedio's cross-references) is trigram Jaccard of the messages > 0.5, the original's
pg_trgm rule, among the errors the BM25 search primitive finds for the message's longest
words. expediente ranks the errors the BM25 and full-text primitives find for the query, plus
any of the newest SCAN that hold most of its trigrams (typos), by the share of the query's
trigrams each contains. The anti-repetition warning compares the proposed action with what
each of the newest SCAN errors says was being tried (its context) and with its report.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import MAX_CONTENT_CHARS, MAX_NAME_CHARS, SearchFilter
from cuba_memorys.services import reminders, validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.text import STOPWORDS, analyze, trigram_similarity, trigrams, words

DEFAULT_PROJECT = "default"
MAX_MESSAGE_BYTES = 5000  # stored; a longer message (a stack trace) is cut, not refused
MAX_MESSAGE_CHARS = 100_000  # beyond this it is not an error message
MAX_CONTEXT_CHARS = MAX_CONTENT_CHARS  # the context object as JSON
SIMILAR = 0.5  # trigram similarity of two messages that report the same error
PATTERN_MIN = 3  # this many earlier similar errors make a pattern
SYNAPSE_STEP, SYNAPSE_CAP = 0.1, 5.0
CANDIDATES = 100  # per lexical branch
RESULTS = 20
CROSS_REFERENCES = 5
PROBE_WORDS = 16  # words of a message or query the lexical branches look up
MAX_WORD = 100  # characters; longer tokens are blobs, not words
SCAN = 500  # newest errors also compared directly (typos, approaches kept in the context)
HEAD = 1000  # characters of a message the direct comparisons read (what failed comes first)
TYPO_MATCH = 0.5  # share of the query's trigrams an error must hold to match without a shared word
RESEMBLES = 0.6  # a proposed action this close to a failed approach gets a warning
# Context fields in which a reporter says what was being tried when the error happened.
APPROACH_KEYS = ("approach", "action", "attempt", "attempted", "tried", "command", "cmd", "step",
                 "proposed_action", "what_was_tried")


# -- validation ----------------------------------------------------------------------------
def _message(value: object) -> tuple[str, bool]:
    """The message as stored (≤ MAX_MESSAGE_BYTES of UTF-8, cut on a character) and whether it was cut."""
    message = validate.text("error_message", value, high=MAX_MESSAGE_CHARS).strip()
    encoded = message.encode()
    if len(encoded) <= MAX_MESSAGE_BYTES:
        return message, False
    return encoded[:MAX_MESSAGE_BYTES].decode(errors="ignore"), True


def _context(value: object) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("context", f"must be a JSON object, got {type(value).__name__}")
    try:
        size = len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        raise InvalidInput("context", "must hold only JSON values (strings, numbers, booleans, null,"
                                      " arrays, objects)") from None
    if size > MAX_CONTEXT_CHARS:
        raise InvalidInput("context", f"is {size} characters as JSON", f"≤ {MAX_CONTEXT_CHARS}")
    return value


def _error_id(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("error_id", "is required: the error_id cuba_alarma returned")
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise InvalidInput("error_id", f"{value!r} is not an error id", "a UUID as cuba_alarma returns") from None


def _label(param: str, value: object) -> str | None:
    value = validate.optional_text(param, value, high=MAX_NAME_CHARS)
    return value.strip() if value else None


def _cut(text: str | None, chars: int) -> str | None:
    return text if text is None or len(text) <= chars else text[:chars - 1] + "…"


# -- similarity ----------------------------------------------------------------------------
def _probe(text: str) -> str:
    """The words of ``text`` the lexical branches are asked for: its PROBE_WORDS longest distinct
    content words. Messages that are trigram-similar share most words, so the longest ones
    find them, and the cost stays bounded for a 5000-byte stack trace (PostgreSQL looks up
    each term's frequency). A "word" longer than MAX_WORD (a base64 blob) is no search term,
    and PostgreSQL cannot even put one in a tsquery."""
    found = {w for w in words(text) if len(w) <= MAX_WORD}
    content = found - STOPWORDS or found
    return " ".join(sorted(content, key=lambda w: (-len(w), w))[:PROBE_WORDS])


def _lexical_matches(mem: Memory, client: str | None, text: str, *, words_too: bool = True) -> list[dict]:
    """Visible trusted errors sharing a stem (BM25 branch) or, with ``words_too``, a folded
    word (text branch, which also trigram-scores every candidate: skipped where the caller
    computes its own similarity anyway) with ``text``."""
    text = _probe(text)
    if not text:
        return []
    flt = SearchFilter(scope=mem.scope(client), kinds=("error",))
    hits = mem.store.bm25_candidates("error", analyze(text), CANDIDATES, flt)
    if words_too:
        hits += mem.store.text_candidates("error", text, CANDIDATES, flt)
    rows = list(mem.store.fetch_rows("error", list(dict.fromkeys(h.id for h in hits))).values())
    for row in rows:
        row["resolved"] = bool(row["resolved"])  # a 0/1 column on both backends
    return rows


def similar_errors(mem: Memory, client: str | None, message: str, *, exclude: str | None = None,
                   unresolved_only: bool = False) -> list[tuple[float, dict]]:
    """(similarity, row) of visible errors whose message is trigram-similar > SIMILAR, best first."""
    found = []
    grams = trigrams(message)  # once, not once per candidate
    for row in _lexical_matches(mem, client, message, words_too=False):
        if row["id"] == exclude or (unresolved_only and row["resolved"]):
            continue
        theirs = trigrams(row["error_message"])
        score = len(grams & theirs) / len(grams | theirs) if grams and theirs else 0.0
        if score > SIMILAR:
            found.append((score, row))
    return sorted(found, key=lambda pair: (-pair[0], pair[1]["created_at"]))


def _share(query_grams: set[str], text: str) -> float:
    """Share of the query's trigrams found in the text (pg_trgm's word_similarity, roughly):
    a short query against a long message is judged by what it asks for, not by the length."""
    return len(query_grams & trigrams(text)) / len(query_grams) if query_grams else 0.0


def resemblance(action: str, text: str) -> float:
    """How much a proposed action resembles a text that describes an attempt: the share of
    the action's content words (stemmed) the text contains, or the trigram similarity of
    the two when the wording differs (typos, word order), whichever is higher."""
    wanted = set(analyze(action))
    have = set(analyze(text))
    shared = len(wanted & have)
    share = shared / len(wanted) if wanted and (shared >= 2 or len(wanted) == 1) else 0.0
    return max(share, trigram_similarity(action, text))


def _approaches(row: Mapping[str, Any]) -> list[str]:
    """What was tried when the error happened: approach-like context fields, and the report."""
    context = row["context"] if isinstance(row["context"], dict) else {}
    tried = [str(context[k]) for k in APPROACH_KEYS
             if isinstance(context.get(k), (str, int, float)) and context[k] != ""]
    return [*tried, f"{row['error_type']}: {row['error_message'][:HEAD]}"]


# -- actions -------------------------------------------------------------------------------
def report(mem: Memory, client: str | None, *, error_type: object, error_message: object,
           context: object = None, project: object = None, allow_secret: bool = False) -> dict:
    """cuba_alarma: store the error; count the similar ones and warn when it is a pattern."""
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    error_type = validate.text("error_type", error_type, high=MAX_NAME_CHARS).strip()
    message, cut = _message(error_message)
    context = _context(context)
    state = mem.client(client)
    label = _label("project", project) or state.project_name or DEFAULT_PROJECT
    for param, text in (("error_type", error_type), ("error_message", message),
                        ("context", json.dumps(context, ensure_ascii=False)), ("project", label)):
        validate.no_secret(param, text, allow_secret)
    similar = similar_errors(mem, client, message)
    with mem.store.transaction():
        row = mem.store.add_error(error_type, message, context, label, state.project_id, state.session_id)
        mem.store.strengthen_errors([r["id"] for _, r in similar], SYNAPSE_STEP, SYNAPSE_CAP)
    answer = {"error_id": row["id"], "error_type": error_type, "project": label, "similar_errors": len(similar)}
    if len(similar) >= PATTERN_MIN:
        answer["pattern_warning"] = _pattern_warning(similar)
    solved = [{"error_id": r["id"], "solution": _cut(r["solution"], 500), "similarity": round(s, 4)}
              for s, r in similar if r["resolved"] and r["solution"]][:3]
    if solved:
        answer["known_solutions"] = solved  # the same error was fixed before: say how
    if cut:
        answer["message_truncated"] = True
    return reminders.attach(mem, client, "on_error_match", f"{error_type}: {message}", answer)


def _pattern_warning(similar: list[tuple[float, dict]]) -> str:
    resolved = sum(1 for _, r in similar if r["resolved"])
    return (f"Recurring error: {len(similar)} similar errors were reported before ({resolved} resolved)."
            " Look for the root cause instead of patching it again; cuba_expediente lists them"
            " with their solutions.")


def resolve(mem: Memory, client: str | None, *, error_id: object, solution: object,
            allow_secret: bool = False) -> dict:
    """cuba_remedio: record the solution and point at similar errors still unresolved."""
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    error_id = _error_id(error_id)
    solution = validate.text("solution", solution).strip()
    validate.no_secret("solution", solution, allow_secret)
    row = mem.store.get_error(error_id, mem.scope(client))
    if row is None:
        raise NotFound(f"Error '{error_id}' not found in this project.",
                       hint="Use the error_id cuba_alarma returned, or find it with cuba_expediente.")
    similar = similar_errors(mem, client, row["error_message"], exclude=error_id, unresolved_only=True)
    mem.store.resolve_error(error_id, solution)
    answer = {"error_id": error_id, "resolved": True, "solution": solution,
              "similar_unresolved": [{"id": r["id"], "error_message": _cut(r["error_message"], 100),
                                      "similarity": round(s, 4)} for s, r in similar[:CROSS_REFERENCES]],
              "similar_count": len(similar)}
    if row["resolved"] and row["solution"] and row["solution"] != solution:
        answer["previous_solution"] = row["solution"]
    if similar:
        answer["hint"] = (f"{len(similar)} similar error(s) are still unresolved; if this solution fixes them"
                          " too, resolve them with cuba_remedio.")
    return answer


def search(mem: Memory, client: str | None, *, query: object, project: object = None,
           resolved_only: object = False, proposed_action: object = None) -> dict:
    """cuba_expediente: past errors matching the query (≤ 20, best first), and a warning when
    ``proposed_action`` resembles an approach that already failed."""
    query = validate.text("query", query).strip()
    label = _label("project", project)
    resolved_only = validate.flag("resolved_only", resolved_only, False)
    action = validate.optional_text("proposed_action", proposed_action)
    recent = mem.store.recent_errors(mem.scope(client), SCAN)
    answer = {"query": query, **_matches(mem, client, query, recent, label, resolved_only)}
    if action:
        answer.update(anti_repetition(action.strip(), recent))
    return answer


def _matches(mem: Memory, client: str | None, query: str, recent: Sequence[Mapping[str, Any]], label: str | None,
             resolved_only: bool) -> dict:
    grams = trigrams(query)
    rows: dict[str, Mapping[str, Any]] = {r["id"]: r for r in _lexical_matches(mem, client, query)}
    rows.update({r["id"]: r for r in recent
                 if r["id"] not in rows
                 and _share(grams, f"{r['error_type']} {r['error_message'][:HEAD]}") >= TYPO_MATCH})
    scored = [(_share(grams, f"{r['error_type']} {r['error_message']}"), r) for r in rows.values()
              if (label is None or r["project"] == label) and (r["resolved"] or not resolved_only)]
    # Most similar first; among equals the error that recurred most, then the newest (two
    # stable sorts: created_at is text and cannot be negated).
    scored.sort(key=lambda p: p[1]["created_at"], reverse=True)
    scored.sort(key=lambda p: (-p[0], -p[1]["synapse_weight"]))
    results = [{"id": r["id"], "error_type": r["error_type"], "error_message": _cut(r["error_message"], 200),
                "solution": r["solution"], "resolved": r["resolved"], "project": r["project"],
                "similarity": round(s, 4), "created_at": r["created_at"]} for s, r in scored[:RESULTS]]
    return {"results": results, "count": len(results)}


def anti_repetition(action: str, recent: Sequence[Mapping[str, Any]]) -> dict:
    """The warning when the action resembles what was being done when an error happened. A
    resolved error counts too (its solution says what worked instead), unless the action is
    closer to that solution than to the failure: then it is the fix, not a repetition."""
    failures = []
    for row in recent:
        score, approach = max((resemblance(action, text), text) for text in _approaches(row))
        if score < RESEMBLES:
            continue
        if row["resolved"] and row["solution"] and resemblance(action, row["solution"]) >= score:
            continue
        failures.append((score, approach, row))
    if not failures:
        return {}
    failures.sort(key=lambda f: (f[2]["resolved"], -f[0]))  # unresolved first, then the closest
    attempts = [{"id": r["id"], "error_type": r["error_type"], "error_message": _cut(r["error_message"], 200),
                 "approach": _cut(approach, 200), "resemblance": round(score, 4), "resolved": r["resolved"],
                 "solution": r["solution"]} for score, approach, r in failures[:CROSS_REFERENCES]]
    return {"anti_repetition_warning": _warning(attempts, len(failures)), "failed_attempts": attempts}


def _warning(attempts: list[dict], total: int) -> str:
    first = attempts[0]
    text = (f"This resembles an approach that already failed ({total} past error(s)); closest:"
            f" {first['error_type']}: {first['error_message']}.")
    fixes = [a["solution"] for a in attempts if a["solution"]]
    if fixes:
        return f"{text} What worked instead: {_cut(fixes[0], 300)}"
    return f"{text} It is unresolved: try a different approach, or resolve it with cuba_remedio once fixed."
