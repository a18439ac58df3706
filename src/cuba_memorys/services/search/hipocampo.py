"""search_hipocampo: Hipocampo's structured + semantic search over this memory, and the query
mini-syntax hook that cuba_faro shares.

Hipocampo's concepts map onto ours (docs/hipocampo.md): code → entity name, categories →
tags, nivel episodica/semantica/automatica → episodes/observations/procedures (procedures do
not exist here: automatica matches nothing and says so), memory_type → observation type.
Ranking is cuba_faro's pipeline (run_search), so both tools order the same rows alike; a
search by filters alone has no text to rank and lists the newest matching rows instead.
Read-only: it never counts accesses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import MAX_NAME_CHARS, SearchFilter, iso
from cuba_memorys.search.format import row_content
from cuba_memorys.search.fusion import Fused
from cuba_memorys.search.hybrid import SearchRequest, run_search
from cuba_memorys.search.query_syntax import (
    DATE_FORMS,
    NIVELES,
    ParsedQuery,
    parse_id,
    parse_nivel,
    parse_query,
    resolve_when,
)
from cuba_memorys.search.selection import (
    KIND_NIVEL,
    MEMORY_KINDS,
    NO_KIND,
    NO_PROCEDURES,
    Selection,
    explicit_wins,
    filter_fields,
    fold_tags,
    memory_types,
    nivel_kinds,
)
from cuba_memorys.services import validate
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.embedding_queue import wait_before_search
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.search import hipocampo_rerank
from cuba_memorys.text import STOPWORDS, words

RERANK_MODES = ("auto", "always", "never")
FORMATS = ("compact", "full", "json")
MAX_OFFSET = 1000
# Rows are fetched in blocks of this size, so every page inside a block comes from the same
# ranked list: a deeper fetch widens each branch and could reorder rows between pages.
FETCH_BLOCK = 50
NO_MODEL = "no embedding model is loaded; ranking used the lexical branches only"


@dataclass(frozen=True)
class Output:
    k: int
    offset: int
    format: str
    snippet_chars: int
    include_scores: bool
    explain: bool
    rerank: str
    rerank_top_k: int
    rerank_budget_ms: int


# -- mapping Hipocampo's vocabulary ---------------------------------------------------------


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _niveles(value: object) -> tuple[str, ...]:
    text = _string("nivel", value)
    out = []
    for part in _split(text):
        nivel = parse_nivel(part)
        if nivel is None:
            raise InvalidInput("nivel", f"unknown value {part!r}", " | ".join(NIVELES))
        out.append(nivel)
    return tuple(dict.fromkeys(out))


ID_FORMS = "numbers such as 4039 (a row's seq, shown as #4039) or UUID strings"


def _ids(value: object) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(UUIDs, seqs) from the ids argument: a list of ints, numeric strings or UUIDs."""
    if value is None:
        return (), ()
    if not isinstance(value, list):
        raise InvalidInput("ids", f"must be an array of ids, got {type(value).__name__}", ID_FORMS)
    uuids: list[str] = []
    seqs: list[int] = []
    for item in value:
        parsed = _one_id(item)
        if parsed is None:
            raise InvalidInput("ids", f"{item!r} is not an id", ID_FORMS)
        if isinstance(parsed, int):
            seqs.append(parsed)
        else:
            uuids.append(parsed)
    return tuple(dict.fromkeys(uuids)), tuple(dict.fromkeys(seqs))


def _one_id(item: object) -> int | str | None:
    if isinstance(item, bool):  # a bool is an int to Python, never an id to an agent
        return None
    if isinstance(item, int):
        return item if item >= 0 else None
    return parse_id(item) if isinstance(item, str) else None


def _categories(value: object) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    items = _split(value) if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise InvalidInput("categories", "must be an array of strings (tags)")
    for index, item in enumerate(items):
        validate.no_nul(f"categories[{index}]", item)
    return fold_tags(items)


def _date(param: str, value: object, now: datetime | None) -> str | None:
    text = _string(param, value)
    if not text:
        return None
    when = resolve_when(text, now)
    if when is None:
        raise InvalidInput(param, f"{text!r} is not a date", DATE_FORMS)
    return iso(when)


def _string(param: str, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(param, f"must be a string, got {type(value).__name__}")
    validate.no_nul(param, value)
    return value.strip()


def _rerank(value: object) -> str:
    # Hipocampo's rerank used to be a boolean: true meant always, false never.
    if isinstance(value, bool):
        return "always" if value else "never"
    if isinstance(value, str) and value.strip().lower() in RERANK_MODES:
        return value.strip().lower()
    if value is None or value == "":
        return "auto"
    raise InvalidInput("rerank", f"unknown value {value!r}", "auto | always | never (or true/false)")


def _options(args: dict) -> Output:
    return Output(
        k=validate.int_range("k", args.get("k"), 1, 20, 5),
        offset=validate.int_range("offset", args.get("offset"), 0, MAX_OFFSET, 0),
        format=validate.choice("format", args.get("format"), FORMATS, default="compact"),
        snippet_chars=validate.int_range("snippet_chars", args.get("snippet_chars"), 80, 2000, 300),
        include_scores=validate.flag("include_scores", args.get("include_scores"), False),
        explain=validate.flag("explain", args.get("explain"), False),
        rerank=_rerank(args.get("rerank")),
        rerank_top_k=validate.int_range("rerank_top_k", args.get("rerank_top_k"), 3, 20, 8),
        rerank_budget_ms=validate.int_range("rerank_budget_ms", args.get("rerank_budget_ms"), 100, 5000, 800),
    )


def _selection(parsed: ParsedQuery, args: dict, now: datetime | None) -> Selection:
    sel = Selection(text=parsed.text, phrases=parsed.phrases)
    code = _bounded("code", args.get("code"), MAX_NAME_CHARS)
    sel.codes = explicit_wins(sel.notes, (code,) if code else (), parsed.codes, "code", "code")
    sel.categories = explicit_wins(sel.notes, _categories(args.get("categories")), fold_tags(parsed.categories),
                                    "categories", "category")
    sel.niveles = explicit_wins(sel.notes, _niveles(args.get("nivel")), parsed.niveles, "nivel", "nivel")
    explicit_types = memory_types("memory_type", _split(_string("memory_type", args.get("memory_type"))))
    sel.types = explicit_wins(sel.notes, explicit_types, memory_types("query", parsed.types),
                               "memory_type", "type")
    ids, seqs = _ids(args.get("ids"))
    if ids or seqs:
        explicit_wins(sel.notes, True, parsed.ids or parsed.seqs, "ids", "id")
        sel.ids, sel.seqs = ids, seqs
    else:
        sel.ids, sel.seqs = parsed.ids, parsed.seqs
    sel.after = explicit_wins(sel.notes, _date("created_after", args.get("created_after"), now),
                               parsed.after, "created_after", "after")
    sel.before = explicit_wins(sel.notes, _date("created_before", args.get("created_before"), now),
                                parsed.before, "created_before", "before")
    sel.session_id = _bounded("session_id", args.get("session_id"), 200) or None
    sel.include_pending = validate.flag("include_pending", args.get("include_pending"), True)
    return sel


def _bounded(param: str, value: object, high: int) -> str:
    text = _string(param, value)
    if len(text) > high:
        raise InvalidInput(param, f"must be at most {high} characters, got {len(text)}")
    return text


# -- search_hipocampo -------------------------------------------------------------------------
SEARCH_ARGS = ("query", "session_id", "rerank", "k", "offset", "code", "categories", "nivel", "memory_type",
               "ids", "created_after", "created_before", "include_pending", "rerank_top_k",
               "rerank_budget_ms", "format", "snippet_chars", "include_scores", "explain")


def search(mem: Memory, client: str | None, *, now: datetime | None = None, **args: object) -> str:
    """search_hipocampo. Arguments as the tool's (SEARCH_ARGS); returns the formatted text or JSON."""
    unknown = sorted(set(args) - set(SEARCH_ARGS))
    if unknown:
        raise InvalidInput(unknown[0], "is not a search_hipocampo parameter", ", ".join(SEARCH_ARGS))
    out = _options(args)
    query = _string("query", args.get("query"))
    if len(query) > 10_000:
        raise InvalidInput("query", f"must be at most 10000 characters, got {len(query)}")
    sel = _selection(parse_query(query, now), args, now)
    if not sel.search_text and not sel.has_filters:
        raise InvalidInput("query", "is empty and no filter was given",
                           "search words and/or filters: code, categories, nivel, memory_type, ids,"
                           " created_after, created_before, session_id, or code:/category:/nivel:/type:/"
                           "id:/after:/since:/before:/\"phrase\" inside query")
    page = Page(query=query, sel=sel, out=out, notes=list(sel.notes))
    if "automatica" in sel.niveles:
        page.notes.append(NO_PROCEDURES)
    if sel.niveles and nivel_kinds(sel.niveles) == (NO_KIND,):
        return render(page)
    flt = SearchFilter(scope=mem.scope(client), **filter_fields(sel, MEMORY_KINDS))
    fetch = (out.offset + out.k) // FETCH_BLOCK * FETCH_BLOCK + FETCH_BLOCK
    if sel.search_text:
        _ranked(mem, page, flt, fetch)
    else:
        _listed(mem, page, flt, fetch)
    page.rerank = hipocampo_rerank.apply(mem, page)
    if out.rerank == "always" and not page.rerank["applied"]:
        page.notes.append(f"rerank=always was not applied: {page.rerank['reason']}")
    shown = page.items[out.offset: out.offset + out.k]
    page.freshness = code_anchors.annotate(mem, client, [i.id for i in shown if i.kind == "observation"])
    return render(page)


@dataclass
class Page:
    query: str
    sel: Selection
    out: Output
    notes: list[str]
    items: list[Fused] = field(default_factory=list)
    rows: dict = field(default_factory=dict)
    ranked: bool = False
    degraded: bool = False
    rerank: dict = field(default_factory=dict)
    freshness: dict = field(default_factory=dict)  # observation id -> freshness of its anchors


def _ranked(mem: Memory, page: Page, flt: SearchFilter, fetch: int) -> None:
    request = SearchRequest(query=page.sel.search_text, scope="all", limit=fetch, filter=flt,
                            max_tokens=10**9, compact_chars=page.out.snippet_chars, track_access=False)
    wait_before_search(mem, flt.scope)  # rows batch writes left to the queue: a bounded wait for their vectors
    outcome = run_search(mem.store, mem.embedder, request)
    page.items, page.rows, page.ranked = outcome.fused, outcome.rows, True
    if outcome.degraded_reason:
        page.degraded = True
        page.notes.append(NO_MODEL)


def _listed(mem: Memory, page: Page, flt: SearchFilter, fetch: int) -> None:
    hits = mem.store.tag_candidates((), fetch, flt)
    page.items = [Fused(h.kind, h.id, h.score) for h in hits]
    for kind in {h.kind for h in hits}:
        found = mem.store.fetch_rows(kind, [h.id for h in hits if h.kind == kind])
        page.rows.update({(kind, row_id): row for row_id, row in found.items()})
    page.items = [item for item in page.items if item.key in page.rows]


# -- one result -----------------------------------------------------------------------------
def _record(rank: int, item: Fused, row: dict, page: Page, best: float) -> dict:
    kind, sel = item.kind, page.sel
    struct = _struct_matches(kind, row, sel)
    channels = _channels(item, row, sel.search_text) if page.ranked else []
    rec = {
        "rank": rank, "id": row["id"], "seq": row["seq"], "kind": kind, "nivel": KIND_NIVEL.get(kind, kind),
        "code": row.get("entity_name") or row.get("name") or row.get("error_type"),
        "type": row.get("observation_type", kind), "created_at": row.get("created_at"),
        "tags": row.get("tags", []), "importance": round(float(row.get("importance", 0.5)), 4),
        "snippet": snippet(row_content(kind, row), page.out.snippet_chars, _needles(sel)),
        "relevance": round(item.score / best, 4) if page.ranked and best > 0 else None,
        "score": round(item.score, 6) if page.ranked else None,
        "reason": "; ".join(p for p in ("+".join(channels), ", ".join(struct)) if p) or "filters",
    }
    if kind == "observation" and item.id in page.freshness:
        rec.update(page.freshness[item.id])  # freshness, anchors, stale (docs/code-anchors.md)
    if page.out.explain:
        scores = item.branch_scores
        rec["explain"] = {"vec": _round(scores.get("vector")),
                          "lex": {"text": _round(scores.get("text")), "bm25": _round(scores.get("bm25"))},
                          "struct": struct}
    return rec


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _channels(item: Fused, row: dict, text: str) -> list[str]:
    """Which ranking channels found the row: its words (text/BM25) and/or its meaning (vectors)."""
    scores = item.branch_scores
    query_words = set(words(text)) - STOPWORDS
    shares_words = bool(query_words & set(words(row_content(item.kind, row))))
    out = ["words"] if "bm25" in scores or ("text" in scores and shares_words) else []
    return out + (["meaning"] if "vector" in scores else [])


def _struct_matches(kind: str, row: dict, sel: Selection) -> list[str]:
    """The structured conditions this row met, for the reason and explain's ``struct``."""
    out = []
    name = row.get("entity_name")
    out += [f"code={name}"] if sel.codes and name in sel.codes else []
    out += [f"category={t}" for t in row.get("tags", []) if t in sel.categories]
    out += [f"type={row['observation_type']}"] if sel.types and kind == "observation" else []
    out += [f"nivel={KIND_NIVEL.get(kind, kind)}"] if sel.niveles else []
    out += [f"id=#{row['seq']}"] if row.get("seq") in sel.seqs else []
    out += [f"id={row['id']}"] if row["id"] in sel.ids else []
    out += ["date"] if sel.after or sel.before else []
    out += ["session"] if sel.session_id else []
    return out + [f'phrase "{p}"' for p in sel.phrases]


def _needles(sel: Selection) -> list[str]:
    return [*sel.phrases, *(w for w in sel.text.split() if len(w) > 2 and w.lower() not in STOPWORDS)]


def snippet(text: str, limit: int, needles: Sequence[str] = ()) -> str:
    """One line of at most ``limit`` characters, centred near the first needle when cut."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    low = flat.lower()
    found = [p for p in (low.find(n.lower()) for n in needles if n) if p >= 0]
    start = max(0, min(found) - limit // 4) if found else 0
    start = min(start, len(flat) - limit + 1)
    head = "…" if start > 0 else ""
    room = limit - len(head) - 1
    return head + flat[start:start + room] + "…"


# -- rendering ------------------------------------------------------------------------------
def render(page: Page) -> str:
    out = page.out
    best = page.items[0].score if page.items else 0.0
    chosen = page.items[out.offset: out.offset + out.k]
    records = [_record(out.offset + i + 1, item, page.rows[item.key], page, best)
               for i, item in enumerate(chosen)]
    more = len(page.items) > out.offset + out.k
    if out.format == "json":
        return json.dumps(_json(page, records, more), ensure_ascii=False)
    lines = [_header(page, records, more)]
    for rec in records:
        lines += _full_lines(rec, out) if out.format == "full" else _compact_lines(rec, out)
    lines += [f"note: {n}" for n in page.notes]
    return "\n".join(lines)


def _header(page: Page, records: list[dict], more: bool) -> str:
    sel, out = page.sel, page.out
    about = f'"{sel.search_text}"' if sel.search_text else "filters only"
    filters = f" · filters: {', '.join(sel.described())}" if sel.has_filters or not sel.include_pending else ""
    if not records:
        if page.items:
            return (f"search_hipocampo: no results at offset {out.offset} for {about}{filters};"
                    f" the search found {len(page.items)} (use a smaller offset)")
        return (f"search_hipocampo: the search was valid but found nothing for {about}{filters}."
                " Try other words or fewer filters.")
    span = f"{records[0]['rank']}-{records[-1]['rank']}"
    order = "" if page.ranked else " · newest first"
    tail = f" · more: offset={out.offset + out.k}" if more else ""
    return f"search_hipocampo: results {span} for {about}{filters}{order}{tail}"


def _compact_lines(rec: dict, out: Output) -> list[str]:
    label = rec["nivel"] if rec["kind"] != "observation" else f"{rec['nivel']}/{rec['type']}"
    rel = f"rel {rec['relevance']:.2f}" if rec["relevance"] is not None else "rel -"
    score = f" score {rec['score']:.6f}" if out.include_scores and rec["score"] is not None else ""
    stale = f" [code {rec['freshness']}]" if rec.get("stale") else ""
    line = (f"{rec['rank']}. #{rec['seq']} {rel}{score} · {rec['code']} · {(rec['created_at'] or '')[:10]}"
            f" · {label} — {rec['snippet']} [{rec['reason']}]{stale}")
    return [line] + ([f"   explain: {_explained(rec['explain'])}"] if out.explain else [])


def _explained(ex: dict) -> str:
    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    struct = ", ".join(ex["struct"]) or "-"
    return f"vec {num(ex['vec'])} | lex text {num(ex['lex']['text'])} bm25 {num(ex['lex']['bm25'])} | struct {struct}"


def _full_lines(rec: dict, out: Output) -> list[str]:
    score = (f"relevance {rec['relevance']:.2f} · score {rec['score']:.6f}" if rec["relevance"] is not None
             else "listed by filters (newest first)")
    lines = [
        f"[{rec['rank']}] #{rec['seq']} · {rec['nivel']} · {rec['type']} · code {rec['code']}",
        f"    id {rec['id']} · created {rec['created_at']} · importance {rec['importance']:.2f}"
        + (f" · tags {', '.join(rec['tags'])}" if rec["tags"] else ""),
        f"    {score} · matched: {rec['reason']}",
    ]
    if rec.get("anchors"):
        lines.append("    code: " + "; ".join(f"{a['path']}:{a['lines'][0]}-{a['lines'][1]} {a['status']}"
                                           for a in rec["anchors"]))
    if out.explain:
        lines.append(f"    explain: {_explained(rec['explain'])}")
    return lines + [f"    {rec['snippet']}", ""]


def _json(page: Page, records: list[dict], more: bool) -> dict:
    out = page.out
    return {
        "query": page.query, "searched_text": page.sel.search_text, "filters": page.sel.as_json(),
        "ranking": "hybrid" if page.ranked else "filters (newest first)",
        "offset": out.offset, "k": out.k, "count": len(records), "has_more": more,
        "next_offset": out.offset + out.k if more else None,
        "rerank": page.rerank or {"mode": out.rerank, "applied": False, "reason": "nothing to rerank",
                                  "top_k": out.rerank_top_k, "budget_ms": out.rerank_budget_ms},
        "degraded": page.degraded, "notes": page.notes, "results": records,
        "message": None if records else _header(page, records, more),
    }


# -- cuba_faro's hook ---------------------------------------------------------------------------
