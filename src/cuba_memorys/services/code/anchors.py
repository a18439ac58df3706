"""Anchors: observations tied to the code they are about (issue 19).

Writing (cuba_cronica add/batch_add, cuba_ingesta, ``save --anchor``): each ``{path, symbol?,
lines?}`` is checked against the repository before anything is written — inside it, a source
file, the symbol defined there — and stored with the HEAD commit, the span (the symbol's lines
when one is named, else the lines given, else the whole file) and the hash of its normalised
text. Proposals: content that names an existing file or a codegraph symbol gets
``proposed_anchors`` in the answer, never stored on its own (a path in prose is often an
example or a counter-example; only the writer knows which code the memory is about).

Reading: :func:`annotate` gives every anchored row its ``freshness`` within a time budget
(code/freshness.py does the comparing); ``moved`` anchors are brought to where their text is
now, after the answer, audited (``memory.reanchor`` carries the old place: the way back).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cuba_memorys.code import repo, spans
from cuba_memorys.code.freshness import (
    STALE,
    Anchor,
    Freshness,
    FreshnessCache,
    check_anchor,
    known,
    symbol_name,
    with_history,
)
from cuba_memorys.code.languages import language_for
from cuba_memorys.code.symbols import find_symbol, parse_file
from cuba_memorys.errors import CodeAnchorError, InvalidInput
from cuba_memorys.models import iso, new_id, utc_now
from cuba_memorys.services import audit, validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.anchor_rows import AnchorRow, AnchorStatus

# Read-time cost: the anchors of one answer's rows are checked for at most this long; the rest
# say "unverifiable" (not checked: time budget) rather than make a slow disk slow the search.
BUDGET_SECONDS = 0.020
# After the answer, the rows the budget left out are checked for at most this long (on the
# background thread), so the next search that meets them pays a cache lookup.
WARM_SECONDS = 2.0
# How much lower a stale row ranks: its score is multiplied by this (docs/code-anchors.md).
STALE_FACTOR = {"changed": 0.8, "missing": 0.6}
# The status a row shows when its anchors disagree: the worst one.
SEVERITY = ("missing", "changed", "unverifiable", "moved", "fresh")
MAX_PROPOSALS = 5
_PATH_WORD = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.[A-Za-z0-9]{1,5})(?![\w/])")
_BACKTICKED = re.compile(r"`([^`\s]{2,200})`")


@dataclass(frozen=True)
class NewAnchor:
    """An anchor checked against the repository, ready to store with its observation."""

    repo_root: str
    commit: str | None
    path: str
    symbol: str | None
    line_start: int
    line_end: int
    span_hash: str


def code_root(mem: Memory) -> Path | None:
    """The repository anchors are in: CUBA_CODE_ROOT's, else the current directory's."""
    start = mem.settings.code_root or Path.cwd()
    return repo.repo_root(Path(start).expanduser())


# -- writing --------------------------------------------------------------------------------
def resolve(mem: Memory, param: str, value: object) -> list[NewAnchor]:
    """``anchors`` (already any JSON) checked against the repository; [] when none given."""
    specs = validate.anchors(param, value)
    if not specs:
        return []
    root = code_root(mem)
    if root is None:
        where = mem.settings.code_root or Path.cwd()
        raise InvalidInput(param, f"there is no git repository to anchor to ({where} is not in one)",
                           "set CUBA_CODE_ROOT to the repository, or run the server inside it")
    head = repo.head_commit(root)
    return [_resolve_one(root, head, f"{param}[{i}]", spec) for i, spec in enumerate(specs)]


def _resolve_one(root: Path, head: str | None, where: str,
                 spec: validate.AnchorSpec) -> NewAnchor:
    path, symbol_asked, lines = spec
    try:
        rel = repo.relative_path(root, path)
        source = repo.read_source(root, rel)
    except CodeAnchorError as exc:
        raise InvalidInput(f"{where}.path", exc.message, exc.hint) from None
    if source is None:
        raise InvalidInput(f"{where}.path", f"{rel} is not a file in the repository {root}")
    symbol = None
    if symbol_asked:
        language = language_for(rel)
        if language is None:
            raise InvalidInput(f"{where}.symbol", f"symbols are known only in source files the codegraph parses;"
                                                  f" {rel} is not one", "give lines instead")
        try:
            symbols = parse_file(rel, source, language)[0]
        except CodeAnchorError as exc:
            raise InvalidInput(f"{where}.symbol", str(exc)) from None
        found = find_symbol(symbols, symbol_asked)
        if found is None:
            names = sorted({symbol_name(s) for s in symbols})
            shown = ", ".join(names[:40]) + (" …" if len(names) > 40 else "") if names else "(none)"
            raise InvalidInput(f"{where}.symbol", f"{symbol_asked!r} is not defined in {rel}", f"its symbols: {shown}")
        first, last, symbol = found.line_start, found.line_end, symbol_name(found)
    elif lines is not None:
        first, last = lines
        count = len(source.splitlines())
        if last > count:
            raise InvalidInput(f"{where}.lines", f"{rel} has {count} lines, not {last}")
    else:
        first, last = 1, max(1, len(source.splitlines()))
    text = spans.lines_of(source, first, last)
    if not spans.normalise(text):
        raise InvalidInput(f"{where}.lines", f"lines {first}-{last} of {rel} are blank: nothing to anchor to")
    return NewAnchor(str(root), head, rel, symbol, first, last, spans.span_hash(text))


def store(mem: Memory, observation_id: str, project_id: str | None, anchors: list[NewAnchor]) -> int:
    """Store ``anchors`` on the observation (inside the caller's transaction); an anchor the row
    already has (same path and symbol, or the same lines) is not stored twice."""
    if not anchors:
        return 0
    have = mem.store.anchors_of([observation_id]).get(observation_id, [])
    seen = {(a["path"], a["symbol"] or f"{a['line_start']}-{a['line_end']}") for a in have}
    now = iso(utc_now())
    rows: list[AnchorRow] = []
    for a in anchors:
        key = (a.path, a.symbol or f"{a.line_start}-{a.line_end}")
        if key in seen:
            continue
        seen.add(key)
        rows.append({"id": new_id(), "observation_id": observation_id, "project_id": project_id,
                     "repo_root": a.repo_root, "commit_sha": a.commit, "path": a.path, "symbol": a.symbol,
                     "line_start": a.line_start, "line_end": a.line_end, "span_hash": a.span_hash,
                     "created_at": now, "updated_at": now, "status": "fresh", "status_checked_at": now,
                     "changed_since": None})
    return mem.store.add_anchors(rows)


def view_of(anchor: NewAnchor | AnchorRow) -> dict[str, Any]:
    if isinstance(anchor, NewAnchor):
        return {"path": anchor.path, "symbol": anchor.symbol, "lines": [anchor.line_start, anchor.line_end],
                "commit": anchor.commit}
    return {"path": anchor["path"], "symbol": anchor["symbol"], "lines": [anchor["line_start"], anchor["line_end"]],
            "commit": anchor["commit_sha"]}


def propose(mem: Memory, client: str | None, content: str) -> list[dict[str, Any]]:
    """Anchors the content suggests: file paths it names that exist in the repository, and
    codegraph symbols (entities of type code_symbol) it names in backticks. Cheap: a regex, a
    stat per candidate, one entity lookup per backticked word; at most MAX_PROPOSALS."""
    paths, named = _PATH_WORD.findall(content)[:20], _BACKTICKED.findall(content)[:20]
    if not paths and not named:  # most writes: no git asked at all
        return []
    root = code_root(mem)
    if root is None:
        return []
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str | None]] = set()
    for word in paths:
        try:
            rel = repo.relative_path(root, word)
        except CodeAnchorError:
            continue
        if (rel, None) not in seen and (root / rel).is_file():
            seen.add((rel, None))
            out.append({"path": rel})
    for word in named:
        entity = mem.store.get_entity(word, mem.scope(client))
        if entity is None or entity.entity_type != "code_symbol" or "::" not in word:
            continue
        path, symbol = word.split("::", 1)
        try:  # an entity name is not a checked path: refuse `..`, outside symlinks and .git as for paths
            path = repo.relative_path(root, path)
        except CodeAnchorError:
            continue
        if (path, symbol) not in seen and (root / path).is_file():
            seen.add((path, symbol))
            out.append({"path": path, "symbol": symbol})
    return out[:MAX_PROPOSALS]


# -- reading --------------------------------------------------------------------------------
def _cache(mem: Memory) -> FreshnessCache:
    cache = mem.caches.get("code_freshness")
    if cache is None:
        cache = mem.caches["code_freshness"] = FreshnessCache()
    return cache


def as_anchor(row: AnchorRow) -> Anchor:
    return Anchor(row["path"], row["symbol"], row["line_start"], row["line_end"], row["span_hash"],
                  row["commit_sha"])


def check_rows(mem: Memory, rows: list[AnchorRow], unlimited: bool = False,
               budget: float | None = None) -> list[Freshness]:
    """Each anchor's freshness; past ``budget`` seconds (default BUDGET_SECONDS; none when
    ``unlimited``), unverifiable.

    The status is cheap once the files are cached (no git per row), so every row's status is
    taken first. ``changed_since`` is not: a changed row takes it from its stored anchor when a
    check recorded it, else it is computed while the budget lasts (always when ``unlimited``)
    and stored after the answer, so the next read of that row is free; past the budget a changed
    row says ``changed`` without it. What the budget left out is checked after the answer (the
    background thread, WARM_SECONDS at most), so the next search finds it cached."""
    stop = None if unlimited else time.perf_counter() + (BUDGET_SECONDS if budget is None else budget)
    out, learned, left = _check(mem, rows, stop)
    if not unlimited and (learned or left):
        mem.after_answer(_after_check, mem, learned, left)
    return out


def _check(mem: Memory, rows: list[AnchorRow],
           stop: float | None) -> tuple[list[Freshness], list[AnchorStatus], list[AnchorRow]]:
    """(each row's freshness, the changed_since found to store, the rows the budget left out)."""
    cache = _cache(mem)
    out = []
    left = []
    for row in rows:  # first every row's status: cheap, cached per file
        if stop is not None and time.perf_counter() > stop:
            cached = known(Path(row["repo_root"]), as_anchor(row), cache)  # past the budget: only the cache
            if cached is None:
                cached = Freshness("unverifiable", row["path"], detail="not checked: time budget")
                left.append(row)
            out.append(cached)
        else:
            out.append(check_anchor(Path(row["repo_root"]), as_anchor(row), cache, history=False))
    learned: list[AnchorStatus] = []
    for n, (row, found) in enumerate(zip(rows, out)):  # then changed_since, while the budget lasts
        if found.status != "changed" or not row["commit_sha"]:
            continue
        if row["changed_since"] and row["status"] == "changed" and stop is not None:
            out[n] = replace(found, changed_since=row["changed_since"])
        elif stop is None or time.perf_counter() < stop:
            out[n] = with_history(Path(row["repo_root"]), as_anchor(row), found, cache)
            if out[n].changed_since:
                learned.append({"id": row["id"], "status": "changed", "changed_since": out[n].changed_since,
                                "checked_at": iso(utc_now())})
        else:
            left.append(row)
    return out, learned, left


def _after_check(mem: Memory, learned: list[AnchorStatus], left: list[AnchorRow]) -> None:
    """After the answer: store the changed_since found, and check what the budget left out
    (within WARM_SECONDS), storing its changed_since too, so the next read is cheap."""
    if left:
        learned = learned + _check(mem, left, time.perf_counter() + WARM_SECONDS)[1]
    if learned and not mem.store.read_only:
        with mem.store.transaction():
            mem.store.record_anchor_statuses(learned)


def current_spans(mem: Memory, rows: list[AnchorRow], budget: float | None = None) -> dict[str, tuple[str, int, int]]:
    """anchor id -> (path, first line, last line) where its code is now: the symbol's current
    span (or the same text's) when the check finds it, else the stored place (a missing symbol,
    an unreachable repository, rows past the budget). No git history is read."""
    cache = _cache(mem)
    stop = time.perf_counter() + (BUDGET_SECONDS if budget is None else budget)
    out = {}
    for row in rows:
        place = (row["path"], row["line_start"], row["line_end"])
        if time.perf_counter() < stop:
            found = check_anchor(Path(row["repo_root"]), as_anchor(row), cache, history=False)
            if found.status in ("fresh", "moved", "changed") and found.line_start is not None:
                place = (found.path, found.line_start, found.line_end or found.line_start)
        out[row["id"]] = place
    return out


def anchor_view(row: AnchorRow, found: Freshness) -> dict[str, Any]:
    lines = ([found.line_start, found.line_end] if found.line_start is not None and found.status != "missing"
             else [row["line_start"], row["line_end"]])
    view: dict[str, Any] = {"path": found.path, "symbol": row["symbol"], "lines": lines, "status": found.status}
    if found.changed_since:
        view["changed_since"] = found.changed_since
    if found.detail and found.status != "fresh":
        view["detail"] = found.detail
    return view


def worst(statuses: list[str]) -> str:
    return min(statuses, key=SEVERITY.index) if statuses else "fresh"


def annotate(mem: Memory, client: str | None, observation_ids: list[str],
             budget: float | None = None) -> dict[str, dict[str, Any]]:
    """observation id -> {freshness, anchors, stale?} for the anchored ones among ``observation_ids``
    (the others are absent: their rows carry nothing new). Moved anchors are re-anchored after
    the answer."""
    found = mem.store.anchors_of(observation_ids) if observation_ids else {}
    if not found:
        return {}
    rows = [a for obs_id in observation_ids for a in found.get(obs_id, [])]
    checked = dict(zip((a["id"] for a in rows), check_rows(mem, rows, budget=budget)))
    out: dict[str, dict[str, Any]] = {}
    moves = []
    for obs_id, anchors in found.items():
        views = [anchor_view(a, checked[a["id"]]) for a in anchors]
        status = worst([v["status"] for v in views])
        out[obs_id] = {"freshness": status, "anchors": views, **({"stale": True} if status in STALE else {})}
        moves += [(a, checked[a["id"]]) for a in anchors if checked[a["id"]].status == "moved"]
    if moves and not mem.store.read_only:
        mem.after_answer(record_moves, mem, client, moves)
    return out


def record_moves(mem: Memory, client: str | None, moves: list[tuple[AnchorRow, Freshness]]) -> int:
    """Bring moved anchors to where their text is now (path, lines, HEAD), one audit event each
    with the old place, so the move can be put back by hand."""
    now = iso(utc_now())
    moved = 0
    with mem.store.transaction():
        for row, found in moves:
            if found.line_start is None or found.line_end is None:
                continue
            values = {"path": found.path, "line_start": found.line_start, "line_end": found.line_end,
                      "commit_sha": found.current_commit or row["commit_sha"],
                      "span_hash": found.span_hash or row["span_hash"], "updated_at": now,
                      "status": "fresh", "status_checked_at": now, "changed_since": None}
            if mem.store.move_anchor(row["id"], values):
                moved += 1
                audit.record(mem, client, "memory.reanchor", {
                    "anchor_id": row["id"], "observation_id": row["observation_id"], "reason": "moved",
                    "from": {"path": row["path"], "lines": [row["line_start"], row["line_end"]],
                             "commit": row["commit_sha"], "span_hash": row["span_hash"]},
                    "to": {"path": found.path, "lines": [found.line_start, found.line_end],
                           "commit": values["commit_sha"]}})
    return moved


def reanchor_at_head(mem: Memory, observation_id: str) -> list[dict[str, Any]]:
    """`cuba_eco correct` of an anchored row: each anchor that is not fresh is set to what its
    code is at HEAD (inside the caller's transaction, whose audit event lists them); an anchor
    whose file or symbol is gone stays as it is. Returns {anchor_id, from, to} per change."""
    found = mem.store.anchors_of([observation_id]).get(observation_id, [])
    if not found:
        return []
    now = iso(utc_now())
    changes = []
    for row, checked in zip(found, check_rows(mem, found, unlimited=True)):
        if checked.status in ("fresh", "missing", "unverifiable") or checked.line_start is None:
            continue
        root = Path(row["repo_root"])
        head = checked.current_commit or repo.head_commit(root)
        values = {"path": checked.path, "line_start": checked.line_start, "line_end": checked.line_end or
                  checked.line_start, "commit_sha": head, "span_hash": checked.span_hash or row["span_hash"],
                  "updated_at": now, "status": "fresh", "status_checked_at": now, "changed_since": None}
        if mem.store.move_anchor(row["id"], values):
            changes.append({"anchor_id": row["id"],
                            "from": {"path": row["path"], "lines": [row["line_start"], row["line_end"]],
                                     "commit": row["commit_sha"], "span_hash": row["span_hash"]},
                            "to": {"path": checked.path, "lines": [values["line_start"], values["line_end"]],
                                   "commit": head}})
    return changes


def with_freshness(mem: Memory, client: str | None, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Observation views ({id, ...}) with ``freshness``/``anchors``/``stale`` on the anchored
    ones, in place; the others are left as they are."""
    found = annotate(mem, client, [v["id"] for v in views if "id" in v])
    for view in views:
        note = found.get(view.get("id", ""))
        if note is not None:
            view.update(note)
    return views
