"""`cuba-memorys anchors check`: every anchor of the scope checked against the working tree.

Lists each stale memory (its code ``changed`` or ``missing``) with the unified diff of its span:
the old text from ``git show <anchored commit>:<path>``, the new from the working tree. Moved
anchors are brought to where their text is (audited, as at read time). ``record`` stores each
anchor's status (the post-commit hook runs ``anchors check --record --quiet``; the
consolidation cycle does the same), so the panel and the next reads see it without checking.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from cuba_memorys.code import repo, spans
from cuba_memorys.code.freshness import STALE, STATUSES, Freshness
from cuba_memorys.errors import CodeAnchorError
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.code.anchors import check_rows, record_moves
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.anchor_rows import AnchorRow, AnchorStatus

MAX_ANCHORS = 100_000
CONTENT_CHARS = 200
DIFF_CONTEXT = 2


def span_diff(row: AnchorRow, found: Freshness) -> str:
    """The unified diff of the anchored span, as written (at its commit) → as it is now."""
    root = Path(row["repo_root"])
    old = ""
    if row["commit_sha"]:
        try:
            then = repo.file_at(root, row["commit_sha"], row["path"])
        except CodeAnchorError:
            then = None
        if then is not None:
            old = spans.lines_of(then, row["line_start"], row["line_end"])
    new = ""
    if found.status == "changed" and found.line_start is not None:
        try:
            now = repo.read_source(root, found.path)
        except CodeAnchorError:
            now = None
        if now is not None:
            new = spans.lines_of(now, found.line_start, found.line_end or found.line_start)
    before = f"a/{row['path']}" + (f"@{row['commit_sha'][:12]}" if row["commit_sha"] else "")
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), before, f"b/{found.path}",
                                 n=DIFF_CONTEXT, lineterm="")
    return "\n".join(lines)


def stale_summary(mem: Memory, client: str | None) -> dict[str, Any]:
    """The stale memories the last recorded check found in the client's scope (the panel's
    Problems line): a count and when it was checked, read from the store, never from git."""
    return mem.store.recorded_stale_anchors(mem.scope(client))


def check_all(mem: Memory, client: str | None, *, record: bool = False, with_diff: bool = True) -> dict[str, Any]:
    """Check every anchor the client's scope sees; the stale ones with their diff."""
    rows = mem.store.anchors_in_scope(mem.scope(client), MAX_ANCHORS)
    results = check_rows(mem, rows, unlimited=True)
    counts = dict.fromkeys(STATUSES, 0)
    for found in results:
        counts[found.status] += 1
    stale_pairs = [(r, f) for r, f in zip(rows, results) if f.status in STALE]
    texts = mem.store.fetch_rows("observation", list({r["observation_id"] for r, _ in stale_pairs}))
    stale = [_entry(row, found, texts.get(row["observation_id"], {}), with_diff) for row, found in stale_pairs]
    moves = [(r, f) for r, f in zip(rows, results) if f.status == "moved"]
    moved = 0
    if not mem.store.read_only:
        if moves:
            moved = record_moves(mem, client, moves)
        if record:
            now = iso(utc_now())
            statuses: list[AnchorStatus] = [{"id": r["id"], "status": f.status, "changed_since": f.changed_since,
                                             "checked_at": now} for r, f in zip(rows, results) if f.status != "moved"]
            with mem.store.transaction():
                mem.store.record_anchor_statuses(statuses)
    return {"action": "anchors_check", "checked": len(rows), "counts": counts, "stale_count": len(stale),
            "stale": stale, "reanchored": moved, "recorded": bool(record and not mem.store.read_only)}


def _entry(row: AnchorRow, found: Freshness, obs: dict[str, Any], with_diff: bool) -> dict[str, Any]:
    content = str(obs.get("content", ""))
    entry: dict[str, Any] = {
        "observation_id": row["observation_id"], "entity": obs.get("entity_name"),
        "content": content if len(content) <= CONTENT_CHARS else content[:CONTENT_CHARS - 1] + "…",
        "anchor_id": row["id"], "path": row["path"], "symbol": row["symbol"],
        "lines": [row["line_start"], row["line_end"]], "commit": row["commit_sha"], "status": found.status,
        "changed_since": found.changed_since, "detail": found.detail,
    }
    if found.status == "changed" and found.line_start is not None:
        entry["lines_now"] = [found.line_start, found.line_end]
    if with_diff:
        entry["diff"] = span_diff(row, found)
    return entry
