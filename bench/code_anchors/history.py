"""The git history the set is built from: commits, their messages and diffs, and the Python
symbols each diff touches (parsed with the code layer at that commit)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from cuba_memorys.code import repo
from cuba_memorys.code.languages import language_for
from cuba_memorys.code.symbols import Symbol, find_symbol, parse_file

DEFAULT_PATHSPEC = ":(glob)src/**/*.py"
DIFF_FLAGS = ["--no-color", "--no-ext-diff", "--src-prefix=a/", "--dst-prefix=b/", "-M"]


def git(root: Path, *args: str) -> str:
    """stdout of ``git args`` in ``root``; a failure is an error here (the bench needs git)."""
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, check=True, timeout=120)
    return done.stdout.decode("utf-8", errors="replace")


def commits(root: Path, pathspec: str = DEFAULT_PATHSPEC) -> list[str]:
    """Non-merge commits reachable from HEAD that touch ``pathspec``, oldest first."""
    return git(root, "log", "--reverse", "--no-merges", "--format=%H", "--", pathspec).split()


def message(root: Path, sha: str) -> str:
    return git(root, "show", "-s", "--format=%B", sha)


def diff_of(root: Path, sha: str, pathspec: str = DEFAULT_PATHSPEC) -> str:
    """What ``sha`` changed under ``pathspec`` (against its first parent; the root commit
    against the empty tree), as a unified diff."""
    return git(root, "show", "--format=", "--first-parent", *DIFF_FLAGS, sha, "--", pathspec)


def symbol_name(symbol: Symbol) -> str:
    """The name an anchor carries: the qualified name without the file (``Class::method``)."""
    return symbol.qualified.split("::", 1)[1]


@dataclass(frozen=True)
class Touched:
    """A symbol a commit's diff touches, at that commit."""

    path: str
    symbol: str  # Class::method
    simple: str
    line_start: int
    line_end: int
    span_hash: str
    innermost: bool  # no other touched symbol lies inside it

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.symbol)


def _overlaps(symbol: Symbol, spans: list[tuple[int, int]]) -> bool:
    return any(a <= symbol.line_end and symbol.line_start <= b for a, b in spans)


def _inside(inner: Symbol, outer: Symbol) -> bool:
    return (inner is not outer and outer.line_start <= inner.line_start and inner.line_end <= outer.line_end
            and (inner.line_start, inner.line_end) != (outer.line_start, outer.line_end))


def symbols_at(root: Path, sha: str, path: str) -> list[Symbol] | None:
    """The symbols of ``path`` at ``sha``; None when the file is not there or not Python-parseable."""
    language = language_for(path)
    if language is None:
        return None
    source = repo.file_at(root, sha, path)
    if source is None:
        return None
    return parse_file(path, source, language)[0]


def touched_symbols(root: Path, sha: str, diff: str) -> tuple[list[Touched], int]:
    """The symbols (at ``sha``) whose lines the diff changes, sorted; and how many were left
    out because the anchor's name would not find them again (find_symbol ambiguity)."""
    out: list[Touched] = []
    unresolvable = 0
    for path, spans in sorted(repo.diff_paths(diff).items()):
        if not spans or language_for(path) != "python":
            continue
        symbols = symbols_at(root, sha, path)
        if not symbols:
            continue
        hit = [s for s in symbols if _overlaps(s, spans)]
        for s in hit:
            if find_symbol(symbols, symbol_name(s)) != s:
                unresolvable += 1
                continue
            innermost = not any(_inside(other, s) for other in hit)
            out.append(Touched(path, symbol_name(s), s.simple, s.line_start, s.line_end, s.span_hash, innermost))
    return out, unresolvable


def renames(root: Path, since: str, head: str) -> dict[str, str]:
    """old path -> path at ``head`` for the files renamed after ``since``, followed commit by
    commit (each commit's own rename detection), so a file renamed and edited over several
    commits is still followed; a file renamed twice maps to its last name."""
    out: dict[str, str] = {}
    log = git(root, "log", "--reverse", "--first-parent", "--format=", "--name-status", "-M", "--diff-filter=R",
              f"{since}..{head}")
    for line in log.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].startswith("R"):
            old, new = parts[1], parts[2]
            for first, now in list(out.items()):
                if now == old:
                    out[first] = new
            out.setdefault(old, new)
    return out
