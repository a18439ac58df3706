"""What anchors do to a search: freshness on the rows, stale rows ranked lower, and recall
seeded by the change at hand (cuba_faro ``context``, ``cuba-memorys recall --diff``).

Only the answer's rows are checked (services/code/anchors.py: annotate, within its time
budget), never the store. A ``changed`` or ``missing`` row's score is multiplied by
STALE_FACTOR and the results re-sorted: it ranks lower, is flagged ``stale: true``, and is never
dropped. Rows without anchors carry nothing new.

The context boost: memories anchored to a file the change touches are weighted SAME_FILE,
those whose anchored lines overlap the diff's changed lines SPAN_OVERLAP, and errors whose
text names a test the change names (a test file's functions, a test named in ``files``)
FAILING_TEST. The overlap is taken with where the anchored symbol is now (the freshness check
finds it; the diff's new-side lines are the working tree's), not its stored lines.
A matched row already found by the query has its score multiplied by (1 + weight); one the
query did not find joins with weight × the best score, so it can lead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cuba_memorys.code import repo
from cuba_memorys.errors import CodeAnchorError
from cuba_memorys.models import SearchFilter
from cuba_memorys.search.fusion import Fused
from cuba_memorys.search.hybrid import SearchOutcome
from cuba_memorys.services import validate
from cuba_memorys.services.code.anchors import STALE_FACTOR, annotate, code_root, current_spans
from cuba_memorys.services.memory import Memory

SPAN_OVERLAP = 1.0
SAME_FILE = 0.5
FAILING_TEST = 0.8
MAX_CONTEXT_ANCHORS = 200
# Finding the context's anchors' current spans (cached per file, no git): at most this long,
# past it the stored lines are compared.
CONTEXT_BUDGET_SECONDS = 0.050
MAX_TESTS = 10
ERRORS_PER_TEST = 5
_TEST_FUNCTION = re.compile(r"^\+\s*(?:async\s+)?(?:def|func|fn|function)\s+(test\w*|Test\w+)", re.MULTILINE)
_TEST_FILE = re.compile(r"(?:^|/)(?:test_\w+|\w+_test|\w+\.test|\w+\.spec)\.\w+$")


@dataclass(frozen=True)
class ChangeContext:
    """The change at hand: touched path -> changed line spans (empty: the file as a whole),
    and the tests it names."""

    spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    tests: tuple[str, ...] = ()


def parse_context(mem: Memory, value: object, param: str = "context") -> ChangeContext | None:
    parsed = validate.context(param, value)
    if parsed is None:
        return None
    files, diff = parsed
    return from_change(mem, files, diff or "")


def from_change(mem: Memory, files: list[str], diff: str) -> ChangeContext:
    root = code_root(mem)
    touched: dict[str, list[tuple[int, int]]] = {}
    for path in files:
        touched.setdefault(_relative(root, path), [])
    for path, changed in repo.diff_paths(diff).items():
        touched.setdefault(_relative(root, path), []).extend(changed)
    tests = list(_TEST_FUNCTION.findall(diff))
    tests += [Path(p).stem for p in touched if _TEST_FILE.search(p)]
    return ChangeContext(touched, tuple(dict.fromkeys(tests))[:MAX_TESTS])


def _relative(root: Path | None, path: str) -> str:
    """A path as anchors store it (posix, relative to the repository root) when it can be."""
    path = path.strip().removeprefix("./")
    if root is not None:
        try:
            return repo.relative_path(root, path)
        except CodeAnchorError:
            pass
    return path


def _overlaps(first: int, last: int, changed: list[tuple[int, int]]) -> bool:
    return any(a <= last and first <= b for a, b in changed)


def matches(mem: Memory, ctx: ChangeContext, flt: SearchFilter) -> dict[tuple[str, str], float]:
    """(kind, id) -> context weight, for the observations anchored to the change's code and
    the errors naming its tests."""
    weights: dict[tuple[str, str], float] = {}
    root = code_root(mem)  # a relative path names another file in another repository
    found = mem.store.anchors_on_paths(list(ctx.spans), flt.scope, MAX_CONTEXT_ANCHORS,
                                       repo_root=str(root) if root is not None else None, flt=flt)
    # the diff's lines are the working tree's: compare them with where each anchored symbol is
    # now, not with the lines stored when the memory was written (the file may have shifted)
    now = current_spans(mem, found, CONTEXT_BUDGET_SECONDS) if any(ctx.spans.values()) else {}
    for anchor in found:
        path, first, last = now.get(anchor["id"], (anchor["path"], anchor["line_start"], anchor["line_end"]))
        changed = ctx.spans.get(path) or ctx.spans.get(anchor["path"], [])
        weight = SPAN_OVERLAP if changed and _overlaps(first, last, changed) else SAME_FILE
        key = ("observation", anchor["observation_id"])
        weights[key] = max(weights.get(key, 0.0), weight)
    for test in ctx.tests:
        for hit in mem.store.text_candidates("error", test, ERRORS_PER_TEST, flt):
            weights[("error", hit.id)] = max(weights.get(("error", hit.id), 0.0), FAILING_TEST)
    return weights


def _searchable(kind: str, row: dict) -> bool:
    if kind != "observation":
        return True
    return row.get("trust", "trusted") == "trusted" and row.get("observation_type") != "superseded"


def context_expander(mem: Memory, ctx: ChangeContext, flt: SearchFilter, kinds: tuple[str, ...], inner=None):
    """A run_search ``expand`` hook (composed after ``inner``) that boosts and adds the
    context's matches of ``kinds`` (the search's scope)."""

    def expand(fused: list[Fused], rows: dict) -> tuple[list[Fused], dict]:
        if inner is not None:
            fused, rows = inner(fused, rows)
        weights = {k: w for k, w in matches(mem, ctx, flt).items() if k[0] in kinds}
        if not weights:
            return fused, rows
        best = max((f.score for f in fused), default=1.0) or 1.0
        out = list(fused)
        for item in out:
            weight = weights.pop(item.key, None)
            if weight is not None:
                # Never below what the row would get had the query missed it (best × weight): the
                # lowest row of the query's min-max range scores 0, and a boost by a factor alone
                # would leave it last (issue 30).
                item.score = max(item.score * (1 + weight), best * weight)
                item.branch_scores["context"] = weight
        for kind in ("observation", "error"):
            ids = [i for k, i in weights if k == kind]
            for row_id, row in mem.store.fetch_rows(kind, ids).items() if ids else ():
                if _searchable(kind, row):
                    weight = weights[(kind, row_id)]
                    rows[(kind, row_id)] = row
                    out.append(Fused(kind, row_id, best * weight, {"context": weight}))
        out.sort(key=lambda f: f.score, reverse=True)
        return out, rows

    return expand


def _score_key(result: dict) -> str | None:
    return next((k for k in ("s", "score") if k in result), None)


def mark_results(mem: Memory, client: str | None, outcome: SearchOutcome,
                 with_context: bool) -> tuple[SearchOutcome, int]:
    """The outcome with freshness on its anchored rows, stale rows ranked lower, and
    ``from_context`` on the rows the context brought; and how many those are."""
    results, chosen = outcome.results, outcome.fused[:len(outcome.results)]
    found = annotate(mem, client, [f.id for f in chosen if f.kind == "observation"])
    from_context = 0
    scored: list[tuple[float, int, Fused, dict[str, Any]]] = []
    for n, (item, result) in enumerate(zip(chosen, results)):
        note = found.get(item.id) if item.kind == "observation" else None
        if note is not None:
            result.update(note)
            factor = STALE_FACTOR.get(note["freshness"])
            if factor is not None:
                item.score *= factor
                key = _score_key(result)
                if key is not None:
                    result[key] = round(result[key] * factor, 6)
                    if "fused_score" in result:
                        result["fused_score"] = result[key]
        if with_context and "context" in item.branch_scores:
            result["from_context"] = True
            from_context += 1
        scored.append((item.score, n, item, result))
    if found:
        scored.sort(key=lambda t: (-t[0], t[1]))  # stable: equal scores keep their order
    fused = [t[2] for t in scored] + outcome.fused[len(results):]
    return replace(outcome, results=[t[3] for t in scored], fused=fused), from_context


RECALL_ROWS = 8
# `recall --diff` runs once per session, in a fresh process (grammars not loaded yet): it may
# take longer than a search to check its few rows.
RECALL_BUDGET_SECONDS = 1.0


def recall_rows(mem: Memory, client: str | None, ctx: ChangeContext, flt: SearchFilter,
                limit: int = RECALL_ROWS) -> list[dict[str, Any]]:
    """`recall --diff`: the memories about the change's code (and errors of its tests), by
    context weight × importance, stale ones lower (STALE_FACTOR), each with its freshness."""
    weights = matches(mem, ctx, flt)
    views: list[tuple[float, dict[str, Any]]] = []
    for kind in ("observation", "error"):
        ids = [i for k, i in weights if k == kind]
        for row_id, row in (mem.store.fetch_rows(kind, ids).items() if ids else ()):
            if not _searchable(kind, row):
                continue
            if kind == "observation":
                view = {"kind": kind, "id": row_id, "entity": row.get("entity_name"), "content": row["content"]}
                importance = float(row.get("importance", 0.5))
            else:
                view = {"kind": kind, "id": row_id, "error_type": row.get("error_type"),
                        "content": row.get("error_message", ""), "resolved": bool(row.get("resolved"))}
                importance = 0.5
            views.append((weights[(kind, row_id)] * (0.5 + importance), view))
    views.sort(key=lambda t: -t[0])
    chosen = [v for _, v in views[:limit * 2]]
    found = annotate(mem, client, [v["id"] for v in chosen if v["kind"] == "observation"], RECALL_BUDGET_SECONDS)
    scored = []
    for weight, view in views[:limit * 2]:
        note = found.get(view["id"])
        if note is not None:
            view.update(note)
            weight *= STALE_FACTOR.get(note["freshness"], 1.0)
        scored.append((weight, view))
    scored.sort(key=lambda t: -t[0])
    return [v for _, v in scored[:limit]]
