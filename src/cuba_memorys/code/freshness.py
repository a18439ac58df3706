"""Whether an anchored span of code still says what it said when the memory was written.

:func:`check_anchor` compares an anchor (path, symbol, lines, the hash of the span's normalised
text, the commit it was written at) with the working tree:

- ``fresh``: the span at the stored lines (or the symbol's span) hashes the same;
- ``moved``: the same text is elsewhere — the symbol at other lines, the same lines' text at
  another place in the file, or the file was renamed (git's rename detection) and holds it;
- ``changed``: the symbol (or, without one, the file) is there but the text differs;
  ``changed_since`` is the first commit after the anchored one that touched the file;
- ``missing``: the file is gone, or the symbol is and its text is nowhere in the file;
- ``unverifiable``: no repository to look at (a vanished folder, no git), or a file that can
  no longer be read as source.

Reading runs no git per row: :class:`FreshnessCache` keeps, per repository, HEAD (asked again
only when HEAD's reflog moves), each file's text, symbols and window hashes under (path, mtime,
size, inode), the rename map from each anchored commit to HEAD (one ``git log`` per distinct
anchored commit, renames followed commit by commit), and each anchor's last status under HEAD
and the stamps of the files it read — so a search that meets the same anchors again pays a
dict lookup and a ``stat`` per file. ``changed_since`` (a ``git log`` and a ``git show`` per
commit) is the one costly part: :func:`check_anchor` computes it only when asked
(``history=True``); the read path asks within its time budget and stores it on the anchor row.
Nothing here raises for a missing repository or file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cuba_memorys.code import repo, spans
from cuba_memorys.code.languages import language_for
from cuba_memorys.code.symbols import Symbol, find_symbol, parse_file
from cuba_memorys.errors import CodeAnchorError

STATUSES = ("fresh", "moved", "changed", "missing", "unverifiable")
STALE = ("changed", "missing")  # what ranks lower and is flagged
HEAD_TTL_SECONDS = 2.0  # HEAD is asked of git at most this often per repository
RENAME_TIMEOUT = 5.0
MAX_WINDOW_SCAN_LINES = 20_000  # files longer than this are not searched for moved text
MAX_WINDOW_WORK = 400_000  # lines x span length: beyond it the moved-text scan is skipped (tens of ms)
AMBIGUOUS = -1  # a window text found at more than one place
GIT_INDEX = ".git/index"
MAX_HISTORY = 50  # commits read to find the one that changed a span


Stamp = tuple[int, int, int]  # (mtime_ns, size, inode): a file's content as far as stat can tell


@dataclass(frozen=True)
class Anchor:
    """What a check needs of a stored anchor."""

    path: str
    symbol: str | None
    line_start: int
    line_end: int
    span_hash: str
    commit: str | None


@dataclass(frozen=True)
class Freshness:
    status: str
    path: str  # where the span is now (a renamed file's new path when moved)
    line_start: int | None = None  # where it is now (fresh/moved), or the symbol's lines (changed)
    line_end: int | None = None
    current_commit: str | None = None  # HEAD when it was checked (moved/changed), for re-anchoring
    changed_since: str | None = None
    detail: str | None = None
    span_hash: str | None = None  # the hash of the span now (moved/changed)

    @property
    def stale(self) -> bool:
        return self.status in STALE


@dataclass
class _File:
    source: str
    lines: list[str]
    symbols: list[Symbol] | None = None  # parsed on first need
    windows: dict[int, dict[str, int]] = field(default_factory=dict)  # window length -> hash -> first line


class FreshnessCache:
    """Per-file parse results and per-repository HEAD, reused across requests (thread-unsafe
    writes only replace whole entries, so a race costs a recomputation, never a wrong answer)."""

    def __init__(self, max_files: int = 512) -> None:
        self.max_files = max_files
        self._files: dict[tuple[str, str], tuple[Stamp, _File]] = {}
        self._heads: dict[str, tuple[tuple[int, int] | None, str | None, float]] = {}
        self._history: dict[tuple[str, str, str, str | None, str, str | None], tuple[str | None, bool]] = {}
        self._parsed: dict[tuple[str, str], list[Symbol]] = {}
        self._bases: dict[tuple[str, str, str | None], str] = {}
        self._touching: dict[tuple[str, str, str, str | None], list[str]] = {}
        self._old_files: dict[tuple[str, str, str], str | None] = {}
        self._renames: dict[tuple[str, str, str | None], list[tuple[str, str]] | None] = {}
        self._worktree_renames: dict[tuple[str, str | None, Stamp | None], dict[str, str]] = {}
        self._status: dict[tuple[str, Anchor], tuple[str | None, tuple[tuple[str, Stamp | None], ...], Freshness]] = {}

    def stamp(self, root: Path, rel: str) -> Stamp | None:
        """(mtime_ns, size, inode) of the file, None when it is not there (or outside the root)."""
        try:  # a plain stat: every path here went through repo.safe_path when it was first read
            st = os.stat(os.path.join(root, rel))
        except (OSError, ValueError):
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def has_status(self, root: Path, anchor: Anchor) -> bool:
        return (str(root), anchor) in self._status

    def remembered(self, root: Path, anchor: Anchor, head: str | None) -> Freshness | None:
        """The anchor's last status, while HEAD and every file it read are as they were."""
        seen = self._status.get((str(root), anchor))
        if seen is None or seen[0] != head:
            return None
        if any(self.stamp(root, rel) != stamp for rel, stamp in seen[1]):
            return None
        return seen[2]

    def remember(self, root: Path, anchor: Anchor, head: str | None, paths: tuple[str, ...],
                 found: Freshness) -> None:
        _bounded_put(self._status, (str(root), anchor), (head, tuple((p, self.stamp(root, p)) for p in paths), found),
                     self.max_files * 64)

    def renamed(self, root: Path, commit: str | None, rel: str, head: str | None) -> str | None:
        """Where ``rel`` (at ``commit``) is now, renames followed commit by commit up to HEAD and
        then into the working tree (staged or not); None when it was not renamed."""
        path = rel
        if commit and not commit.startswith("-"):
            key = (str(root), commit, head)
            if key not in self._renames:
                _bounded_put(self._renames, key, _renames_since(root, commit), self.max_files)
            for old, new in self._renames[key] or ():
                if path == old:
                    path = new
        if self.stamp(root, path) is None:
            path = self.worktree_renames(root, head).get(path, path)
        return path if path != rel else None

    def worktree_renames(self, root: Path, head: str | None) -> dict[str, str]:
        """Renames between HEAD and the working tree (``git diff -M HEAD``), per HEAD and index."""
        key = (str(root), head, self.stamp(root, GIT_INDEX))
        if key not in self._worktree_renames:
            if len(self._worktree_renames) > 16:
                self._worktree_renames.clear()
            out = (repo.git_output(root, "diff", "--name-status", "-M", "--diff-filter=R", "HEAD", "--",
                                   timeout=RENAME_TIMEOUT) if head else None)
            self._worktree_renames[key] = dict(_rename_pairs(out or ""))
        return self._worktree_renames[key]

    def file(self, root: Path, rel: str) -> _File | None:
        """The file's text (cached by mtime and size); None if it does not exist.
        Raises CodeAnchorError for a path outside the root or a binary / oversized file."""
        path = repo.safe_path(root, rel)
        try:
            st = path.stat()
        except OSError:
            return None
        key, stamp = (str(root), rel), (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._files.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        source = repo.read_source(root, rel)
        if source is None:
            return None
        entry = _File(source=source, lines=source.replace("\r\n", "\n").split("\n"))
        _bounded_put(self._files, key, (stamp, entry), self.max_files)
        return entry

    def symbols(self, rel: str, entry: _File) -> list[Symbol]:
        if entry.symbols is None:
            entry.symbols = self.parse(rel, entry.source)
        return entry.symbols

    def parse(self, rel: str, source: str) -> list[Symbol]:
        """The symbols of ``source`` as file ``rel``, cached by (path, content hash): the same
        text read again — a checkout that restored it, the file at an old commit that many
        anchors of one memory share — is parsed once."""
        key = (rel, hashlib.sha1(source.encode("utf-8", errors="replace")).hexdigest())
        found = self._parsed.get(key)
        if found is None:
            language = language_for(rel)
            try:
                found = parse_file(rel, source, language)[0] if language else []
            except CodeAnchorError:  # a grammar not installed: no symbols rather than a crash
                found = []
            _bounded_put(self._parsed, key, found, self.max_files * 4)
        return found

    def head(self, root: Path) -> str | None:
        """HEAD's sha, asked of git again when HEAD's reflog moved (every commit, checkout,
        rebase and reset appends to it), else at most every HEAD_TTL_SECONDS."""
        marker = _head_marker(root)
        seen = self._heads.get(str(root))
        if seen is not None and seen[0] == marker and (marker is not None
                                                       or time.monotonic() - seen[2] < HEAD_TTL_SECONDS):
            return seen[1]
        sha = repo.head_commit(root)
        self._heads[str(root)] = (marker, sha, time.monotonic())
        return sha

    def first_change(self, root: Path, anchor: Anchor, path: str, head: str | None) -> tuple[str | None, bool]:
        """(the first commit after the anchored one, up to HEAD, whose ``path`` no longer has the
        anchored text; whether the anchored commit was rewritten (not an ancestor of HEAD: a
        rebase, an amend)). The commit is None when no commit changed it (the change is not
        committed) or the history cannot say."""
        key = (str(root), path, anchor.commit or "", anchor.symbol, anchor.span_hash, head)
        if key not in self._history:
            _bounded_put(self._history, key, self._first_change(root, anchor, path, head), self.max_files * 64)
        return self._history[key]

    def _first_change(self, root: Path, anchor: Anchor, path: str, head: str | None) -> tuple[str | None, bool]:
        if not anchor.commit or anchor.commit.startswith("-"):
            return None, False
        # the git answers below are shared by every anchor of one commit and file (a memory's
        # anchors usually are), so each is asked once per HEAD
        base_key = (str(root), anchor.commit, head)
        if base_key not in self._bases:
            base = repo.git_output(root, "merge-base", anchor.commit, "HEAD", timeout=RENAME_TIMEOUT)
            _bounded_put(self._bases, base_key, (base or "").strip(), self.max_files)
        base = self._bases[base_key]
        if not base:
            return None, True
        try:
            log_key = (str(root), path, base, head)
            if log_key not in self._touching:
                _bounded_put(self._touching, log_key, repo.commits_touching(root, path, base)[::-1][:MAX_HISTORY],
                             self.max_files)
            for commit in self._touching[log_key]:
                if self._span_hash_at(root, commit, path, anchor) != anchor.span_hash:
                    return commit, base != anchor.commit
        except CodeAnchorError:
            pass
        return None, base != anchor.commit

    def _span_hash_at(self, root: Path, commit: str, path: str, anchor: Anchor) -> str | None:
        """The anchored span's hash in ``path`` at ``commit`` (the symbol's when it has one;
        None: gone). A commit's file never changes: cached without a stamp."""
        key = (str(root), commit, path)
        if key not in self._old_files:
            _bounded_put(self._old_files, key, repo.file_at(root, commit, path), 64)
        then = self._old_files[key]
        if then is None:
            return None
        if anchor.symbol:
            found = find_symbol(self.parse(path, then), anchor.symbol)
            return found.span_hash if found is not None else None
        return spans.span_hash(spans.lines_of(then, anchor.line_start, anchor.line_end))


def _bounded_put(table: dict[Any, Any], key: object, value: object, cap: int) -> None:
    """``table[key] = value``, dropping the oldest entry first when the table holds ``cap``."""
    if len(table) >= cap and key not in table:
        # the background check may be trimming the same table: losing that race costs nothing
        with contextlib.suppress(RuntimeError, StopIteration):
            table.pop(next(iter(table)), None)
    table[key] = value


def _head_marker(root: Path) -> tuple[int, int] | None:
    """(mtime, size) of .git/logs/HEAD, None where there is none (a linked worktree, no reflog)."""
    try:
        st = (Path(root) / ".git" / "logs" / "HEAD").stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def symbol_name(symbol: Symbol) -> str:
    """The name an anchor stores: the qualified name without its file (``Class::method``), so
    the anchor still finds it after the file is renamed."""
    return symbol.qualified.split("::", 1)[1] if "::" in symbol.qualified else symbol.simple


def window_hash(entry: _File, start: int, end: int) -> str:
    return spans.span_hash("\n".join(entry.lines[max(start, 1) - 1:max(end, 0)]))


def find_text(entry: _File, span_hash: str, length: int) -> int | None:
    """The first line of the one ``length``-line window of the file whose text hashes to
    ``span_hash``. None when there is none, when there are several (a copy is not the original),
    when the text has fewer than MIN_FIND_LINES non-blank lines (``return None`` or ``}`` match
    by chance anywhere), or when the scan would cost more than MAX_WINDOW_WORK line joins (a long
    span in a long file: the search must stay within the request's budget)."""
    lines = len(entry.lines)
    if length <= 0 or lines > MAX_WINDOW_SCAN_LINES or lines * length > MAX_WINDOW_WORK:
        return None
    table = entry.windows.get(length)
    if table is None:
        table = {}
        for line_no in range(1, lines - length + 2):
            key = window_hash(entry, line_no, line_no + length - 1)
            table[key] = AMBIGUOUS if key in table else line_no
        entry.windows[length] = table
    first = table.get(span_hash, AMBIGUOUS)
    if first == AMBIGUOUS:
        return None
    window = entry.lines[first - 1:first - 1 + length]
    return first if sum(1 for line in window if line.strip()) >= spans.MIN_FIND_LINES else None


def _rename_pairs(out: str) -> list[tuple[str, str]]:
    """(old, new) of each ``R<score>\told\tnew`` line of git's --name-status output, in order."""
    pairs = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].startswith("R"):
            pairs.append((parts[1], parts[2]))
    return pairs


def _renames_since(root: Path, commit: str) -> list[tuple[str, str]] | None:
    """The renames of each commit after ``commit`` up to HEAD, oldest first (one git call):
    followed one commit at a time, a file renamed and then much edited is still found, where
    one diff from ``commit`` to now would no longer see 50% similarity. None: git cannot say."""
    out = repo.git_output(root, "log", "--reverse", "--name-status", "-M", "--diff-filter=R", "--format=%H",
                          f"{commit}..HEAD", "--", timeout=RENAME_TIMEOUT)
    return None if out is None else _rename_pairs(out)


def check_anchor(root: Path | None, anchor: Anchor, cache: FreshnessCache, history: bool = True) -> Freshness:
    """The anchor's freshness against the working tree of ``root`` (see the module's docstring).
    ``history``: find ``changed_since`` for a changed anchor (git log and show; else None)."""
    if root is None or not Path(root).is_dir() or not (Path(root) / ".git").exists():
        return Freshness("unverifiable", anchor.path, detail="no repository reachable")
    root = Path(root)
    head = cache.head(root)
    found = cache.remembered(root, anchor, head)
    if found is None:
        try:
            found, paths = _status(root, anchor, cache, head)
        except CodeAnchorError as exc:
            found, paths = Freshness("unverifiable", anchor.path, detail=str(exc)), (anchor.path,)
        cache.remember(root, anchor, head, paths, found)
    if history and found.status == "changed":
        return with_history(root, anchor, found, cache)
    return found


def known(root: Path | None, anchor: Anchor, cache: FreshnessCache) -> Freshness | None:
    """The anchor's cached status if nothing it read has changed since (a few ``stat`` calls and
    a dict lookup, no reading, no git); None when it would have to be checked."""
    if root is None or not cache.has_status(Path(root), anchor):
        return None
    return cache.remembered(Path(root), anchor, cache.head(Path(root)))


def with_history(root: Path, anchor: Anchor, found: Freshness, cache: FreshnessCache) -> Freshness:
    """A ``changed`` result with ``changed_since``: the first commit after the anchored one that
    changed the span (cached per HEAD), and a note when the anchored commit was rewritten."""
    if not anchor.commit:
        return found
    since, rewritten = cache.first_change(root, anchor, found.path, found.current_commit)
    detail = found.detail or ""
    if rewritten:
        detail += "; the anchored commit is not in the history any more (rewritten by a rebase or amend)"
    elif since is None:
        detail += "; no commit changed it yet (the change is in the working tree)"
    return replace(found, changed_since=since, detail=detail)


def _status(root: Path, anchor: Anchor, cache: FreshnessCache, head: str | None) -> tuple[Freshness, tuple[str, ...]]:
    """The anchor's status without its history, and the files it read (the cache's key)."""
    entry = cache.file(root, anchor.path)
    if entry is not None:
        return _in_file(anchor, anchor.path, entry, cache, head), (anchor.path,)
    new_path = cache.renamed(root, anchor.commit, anchor.path, head)
    if new_path is not None:
        entry = cache.file(root, new_path)
        if entry is not None:
            found = _in_file(anchor, new_path, entry, cache, head)
            if found.status in ("fresh", "moved"):
                found = Freshness("moved", new_path, found.line_start, found.line_end, head,
                                  detail=f"the file was renamed to {new_path}", span_hash=found.span_hash)
            return found, (anchor.path, new_path, GIT_INDEX)
    # the index is a key too: a `git mv` not committed yet shows there first
    return Freshness("missing", anchor.path, detail=f"{anchor.path} no longer exists"), (anchor.path, GIT_INDEX)


def _in_file(anchor: Anchor, path: str, entry: _File, cache: FreshnessCache, head: str | None) -> Freshness:
    length = anchor.line_end - anchor.line_start + 1
    if anchor.symbol:
        symbols = cache.symbols(path, entry)
        # the file's own top-level name first: a method of the same name elsewhere in the file
        # must not make a changed function look missing
        symbol = find_symbol(symbols, f"{path}::{anchor.symbol}") or find_symbol(symbols, anchor.symbol)
        if symbol is not None:
            if symbol.span_hash == anchor.span_hash:
                if (symbol.line_start, symbol.line_end) == (anchor.line_start, anchor.line_end) and path == anchor.path:
                    return Freshness("fresh", path, symbol.line_start, symbol.line_end)
                return Freshness("moved", path, symbol.line_start, symbol.line_end, head,
                                 detail=f"{anchor.symbol} is now at lines {symbol.line_start}-{symbol.line_end}",
                                 span_hash=symbol.span_hash)
            return Freshness("changed", path, symbol.line_start, symbol.line_end, head,
                             detail=f"{anchor.symbol} reads differently", span_hash=symbol.span_hash)
    elif window_hash(entry, anchor.line_start, anchor.line_end) == anchor.span_hash:
        if path == anchor.path:
            return Freshness("fresh", path, anchor.line_start, anchor.line_end)
        return Freshness("moved", path, anchor.line_start, anchor.line_end, head, span_hash=anchor.span_hash)
    first = find_text(entry, anchor.span_hash, length)
    if first is not None:
        return Freshness("moved", path, first, first + length - 1, head,
                         detail=f"the same text is now at lines {first}-{first + length - 1}",
                         span_hash=anchor.span_hash)
    if anchor.symbol:
        return Freshness("missing", path, detail=f"{anchor.symbol} is no longer defined in {path}")
    end = min(anchor.line_end, len(entry.lines))
    return Freshness("changed", path, anchor.line_start, end, head,
                     detail=f"lines {anchor.line_start}-{anchor.line_end} read differently",
                     span_hash=window_hash(entry, anchor.line_start, end))
