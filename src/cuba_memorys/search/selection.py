"""What a structured search selects, and cuba_faro's query mini-syntax.

Hipocampo's vocabulary maps onto ours (docs/hipocampo.md): code → entity name, categories →
tags, nivel episodica/semantica/automatica → episodes/observations/procedures, memory_type →
observation type. :class:`Selection` holds a search's free text and structured filters once
they are mapped; ``filter_fields`` turns it into SearchFilter fields. Both search tools use it:
search_hipocampo for its arguments and query syntax, cuba_faro (``with_query_syntax``) for the
``code:``/``after:``/``"phrase"`` filters an agent writes into its query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import OBSERVATION_TYPES
from cuba_memorys.search.hybrid import SearchRequest
from cuba_memorys.search.query_syntax import parse_query
from cuba_memorys.text import fold

MEMORY_KINDS = ("observation", "episode")  # Hipocampo's memories; entities and errors are not
NIVEL_KINDS = {"episodica": ("episode",), "semantica": ("observation",), "automatica": ()}
KIND_NIVEL = {"episode": "episodica", "observation": "semantica"}
# A kind no table has: what nivel=automatica alone asks for, so it matches nothing honestly.
NO_KIND = "procedure"
# Hipocampo's memory types with a clear counterpart among ours.
TYPE_ALIASES = {"event": "context", "profile": "preference", "insight": "lesson", "learning": "lesson",
                "fix": "solution", "bug": "error", "tool": "tool_usage", "note": "fact"}
NO_PROCEDURES = ("nivel automatica (procedural memory) is kept as recipes by cuba_receta, which this search"
                 " does not cover, so it matches no rows here: use cuba_receta action=search")


@dataclass
class Selection:
    """What to search for: free text, phrases and the structured filters (already mapped)."""

    text: str = ""
    phrases: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    niveles: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    seqs: tuple[int, ...] = ()
    after: str | None = None
    before: str | None = None
    session_id: str | None = None
    include_pending: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def search_text(self) -> str:
        return " ".join(part for part in (self.text, *self.phrases) if part)

    @property
    def has_filters(self) -> bool:
        return any((self.phrases, self.codes, self.categories, self.niveles, self.types, self.ids,
                    self.seqs, self.after, self.before, self.session_id))

    def described(self) -> list[str]:
        out = [f"code={c}" for c in self.codes]
        out += [f"category={'|'.join(self.categories)}"] if self.categories else []
        out += [f"nivel={'|'.join(self.niveles)}"] if self.niveles else []
        out += [f"type={'|'.join(self.types)}"] if self.types else []
        out += ["id=" + ",".join([f"#{s}" for s in self.seqs] + list(self.ids))] if self.ids or self.seqs else []
        out += [f"after {short_when(self.after)}"] if self.after else []
        out += [f"before {short_when(self.before)}"] if self.before else []
        out += [f"session={self.session_id}"] if self.session_id else []
        out += [f'phrase "{p}"' for p in self.phrases]
        return out + ([] if self.include_pending else ["pending hidden"])

    def as_json(self) -> dict:
        return {"code": list(self.codes), "categories": list(self.categories), "nivel": list(self.niveles),
                "memory_type": list(self.types), "ids": [*self.seqs, *self.ids],
                "created_after": self.after, "created_before": self.before, "session_id": self.session_id,
                "phrases": list(self.phrases), "include_pending": self.include_pending}


def memory_types(param: str, values: Sequence[str]) -> tuple[str, ...]:
    """Observation types for memory_type values (ours, or Hipocampo's names in TYPE_ALIASES)."""
    out = []
    for value in values:
        name = TYPE_ALIASES.get(value.strip().lower(), value.strip().lower())
        if name not in OBSERVATION_TYPES:
            aliases = ", ".join(f"{a}→{t}" for a, t in TYPE_ALIASES.items())
            accepted = " | ".join(OBSERVATION_TYPES) + "; also " + aliases
            raise InvalidInput(param, f"unknown memory type {value!r}", accepted)
        out.append(name)
    return tuple(dict.fromkeys(out))


def nivel_kinds(niveles: Sequence[str]) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(k for n in niveles for k in NIVEL_KINDS[n]))
    return kinds or (NO_KIND,)


def fold_tags(values: Sequence[str]) -> tuple[str, ...]:
    # Tags are stored folded (lowercase, no accents): compare alike.
    return tuple(dict.fromkeys(fold(v.strip()) for v in values if v.strip()))


def explicit_wins(sel_notes: list[str], explicit, from_query, arg: str, key: str):
    """The explicit argument when given (noting a query filter it overrides), else the query's."""
    if explicit:
        if from_query:
            sel_notes.append(f"{key}: in the query was ignored: the {arg} argument wins")
        return explicit
    return from_query


def filter_fields(sel: Selection, default_kinds: tuple[str, ...]) -> dict:
    """SearchFilter fields for a selection (categories both constrain and feed the tag branch)."""
    return {"after": sel.after, "before": sel.before, "tags": sel.categories, "any_tags": sel.categories,
            "kinds": nivel_kinds(sel.niveles) if sel.niveles else default_kinds,
            "entity_names": sel.codes, "observation_types": sel.types, "ids": sel.ids, "seqs": sel.seqs,
            "session_id": sel.session_id, "include_pending": sel.include_pending, "phrases": sel.phrases}


def short_when(value: str | None) -> str:
    """An ISO instant shortened for people: the date alone at midnight, else to the minute."""
    if not value:
        return ""
    return value[:10] if value[11:16] == "00:00" else value[:16] + "Z"


def with_query_syntax(request: SearchRequest, now: datetime | None = None) -> tuple[SearchRequest, dict]:
    """cuba_faro with the mini-syntax: the query's filters apply unless the matching explicit
    argument (after, before, tags) was given; the free text left is what gets searched.

    Returns the request unchanged and no notes when the query uses no syntax, so plain queries
    behave exactly as before. The notes echo the query as given (they are merged into the
    response last) and say what the syntax applied.
    """
    parsed = parse_query(request.query, now)
    if not parsed.used_syntax:
        return request, {}
    if not parsed.search_text:
        raise InvalidInput("query", "holds only filters (code:, after:, …) and no words to search for",
                           "add search words, or use search_hipocampo, which also lists by filters alone")
    flt = request.filter
    notes: list[str] = []
    sel = Selection(text=parsed.text, phrases=parsed.phrases, codes=parsed.codes, niveles=parsed.niveles,
                    types=memory_types("query", parsed.types), ids=parsed.ids, seqs=parsed.seqs, notes=notes)
    sel.after = explicit_wins(notes, flt.after, parsed.after, "after", "after")
    sel.before = explicit_wins(notes, flt.before, parsed.before, "before", "before")
    # An explicit tags argument wins and keeps its own meaning (merged in, not a constraint).
    sel.categories = () if flt.tags else fold_tags(parsed.categories)
    explicit_wins(notes, bool(flt.tags), parsed.categories, "tags", "category")
    fields = filter_fields(sel, ())
    fields["tags"] = flt.tags or sel.categories
    if "automatica" in sel.niveles:
        notes.append(NO_PROCEDURES)
    info = {"searched_text": parsed.search_text, "filters": sel.described()}
    if notes:
        info["notes"] = notes
    return replace(request, query=parsed.search_text, filter=replace(flt, **fields)), {
        "query": request.query, "query_syntax": info}
