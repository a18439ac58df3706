"""The git repository a memory's code lives in, read through the ``git`` command.

Nothing here reads outside the repository root: every path goes through :func:`safe_path`,
which refuses absolute paths elsewhere, ``..`` that climbs out and symlinks that lead out,
and anything inside git's own folder (``.git``: its config, hooks and objects are not code).
A missing repository, a missing ``git`` or a git that does not answer in time is not an
error here: the functions return None / empty, and the caller reports ``unverifiable``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

from cuba_memorys.errors import CodeAnchorError

GIT_TIMEOUT = 10.0
MAX_SOURCE_BYTES = 2_000_000
# Git's own heuristic for "binary": a NUL byte in the first 8000 bytes.
BINARY_PROBE = 8000
# Variables a git hook exports that would point our `git -C root` at the hook's repository.
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_COMMON_DIR")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def _run_git(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """``git args`` in ``cwd`` without a hook's GIT_* variables; OSError / TimeoutExpired propagate."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=timeout, check=False, env=env)


def _git(args: list[str], cwd: Path, timeout: float = GIT_TIMEOUT) -> str | None:
    """stdout of ``git args`` run in ``cwd``, or None when it failed, is missing or hung."""
    try:
        done = _run_git(args, cwd, timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", errors="replace")


def git_bytes(root: Path, *args: str, timeout: float = GIT_TIMEOUT) -> bytes:
    """Raw stdout of ``git args`` in ``root`` (file names need not be UTF-8); a failure, a missing
    git or a timeout raises CodeAnchorError with git's own message."""
    try:
        done = _run_git(list(args), root, timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CodeAnchorError(f"git {args[0]} in {root} failed: {exc}") from None
    if done.returncode != 0:
        raise CodeAnchorError(f"git {args[0]} in {root} failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout


def git_output(root: Path, *args: str, timeout: float = GIT_TIMEOUT) -> str | None:
    """stdout of ``git args`` in ``root`` (None when it failed, is missing or took ``timeout``)."""
    return _git(list(args), root, timeout)


def repo_root(start: Path) -> Path | None:
    """The top of the working tree containing ``start`` (a file or folder), None outside one."""
    start = Path(start)
    folder = start if start.is_dir() else start.parent
    if not folder.is_dir():
        return None
    out = _git(["rev-parse", "--show-toplevel"], folder)
    return Path(out.strip()).resolve() if out and out.strip() else None


def head_commit(root: Path) -> str | None:
    """The full sha of HEAD, None on an unborn branch (or outside a repository)."""
    out = _git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], root)
    return out.strip() or None if out else None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


PRIVATE_PARTS = frozenset({".git"})


def is_private(rel: str | Path) -> bool:
    """Whether a path (relative to the repository root) is in git's own folder: any component
    named ``.git``, in any case (``.GIT`` is the same folder on a case-insensitive disk). A
    submodule's ``.git`` file counts too. Such a path is never anchored, proposed or read."""
    parts = Path(str(rel).replace("\\", "/")).parts
    return any(part.casefold() in PRIVATE_PARTS for part in parts)


def safe_path(root: Path, rel: str) -> Path:
    """``rel`` (relative to ``root``, or absolute inside it) as a path inside ``root``.

    Raises CodeAnchorError for an empty path, a NUL byte, an absolute path elsewhere, a
    ``..`` that climbs out of the root, a symlink (anywhere on the way) that leads out, or a
    path in git's own folder (:func:`is_private`, also when a symlink leads there).
    The path need not exist; the returned path keeps the name asked for (not the link target).
    """
    if not rel or "\0" in rel:
        raise CodeAnchorError(f"not a usable path: {rel!r}")
    real_root = Path(root).resolve()
    asked = Path(rel)
    lexical = Path(os.path.normpath(asked if asked.is_absolute() else real_root / asked))
    if not _inside(lexical, real_root):
        where = "an absolute path outside" if asked.is_absolute() else "a path that climbs out of"
        raise CodeAnchorError(f"{rel!r} is {where} the repository {real_root}",
                              hint="Give a path inside the repository, relative to its root.")
    resolved = lexical.resolve()
    if not _inside(resolved, real_root):
        raise CodeAnchorError(f"{rel!r} is a symlink (or under one) that leads outside the repository {real_root}")
    if is_private(lexical.relative_to(real_root)) or is_private(resolved.relative_to(real_root)):
        raise CodeAnchorError(f"{rel!r} is inside git's own folder (.git), not the repository's code",
                              hint="Anchor a file of the working tree.")
    return lexical


def relative_path(root: Path, path: str) -> str:
    """``path`` (absolute or relative to ``root``) as a posix path relative to the root."""
    return safe_path(root, path).relative_to(Path(root).resolve()).as_posix()


def _decode(data: bytes, rel: str, max_bytes: int) -> str:
    if len(data) > max_bytes:
        raise CodeAnchorError(f"{rel} is {len(data)} bytes, over the {max_bytes}-byte limit for source files")
    if b"\0" in data[:BINARY_PROBE]:
        raise CodeAnchorError(f"{rel} is a binary file, not source text")
    return data.decode("utf-8", errors="replace")


def read_source(root: Path, rel: str, max_bytes: int = MAX_SOURCE_BYTES) -> str | None:
    """The text of ``rel`` in the working tree; None if it does not exist.

    Raises CodeAnchorError for a path outside the root, a binary file or one over ``max_bytes``.
    """
    path = safe_path(root, rel)
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > max_bytes:
            raise CodeAnchorError(f"{rel} is over the {max_bytes}-byte limit for source files")
        data = path.read_bytes()
    except OSError:
        return None
    return _decode(data, rel, max_bytes)


def tracked_files(root: Path) -> list[str]:
    """Files git knows of (tracked, plus untracked ones not ignored) that exist, sorted, posix."""
    out = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], root)
    if out is None:
        return []
    names = {name for name in out.split("\0") if name}
    return sorted(name for name in names if os.path.lexists(Path(root) / name))


def _diff_name(raw: str) -> str | None:
    """The path of a ``--- a/x`` / ``+++ b/x`` line's value, None for /dev/null."""
    raw = raw.split("\t", 1)[0].strip()
    if raw.startswith('"'):  # git quotes names with unusual bytes, C-style with octal escapes
        try:
            raw = ast.literal_eval("b" + raw).decode("utf-8", errors="replace")
        except (ValueError, SyntaxError):
            raw = raw.strip('"')
    if raw == "/dev/null":
        return None
    return raw[2:] if raw[:2] in ("a/", "b/") else raw


def _spans(lines: list[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for line in sorted(set(lines)):
        if spans and line <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], line)
        else:
            spans.append((line, line))
    return spans


def diff_paths(diff_text: str) -> dict[str, list[tuple[int, int]]]:
    """Path (new side) -> the line spans a unified diff changes on the new side.

    Added lines count as changed; a deletion marks the new-side line where it happened (so a
    symbol that lost lines is still touched). A deleted file is keyed by its old path with no
    spans, as are renames without edits and binary files.
    """
    touched: dict[str, list[int]] = {}
    old: str | None = None
    current: str | None = None
    line = 0
    in_hunk = False
    for text in diff_text.splitlines():
        if text.startswith("diff --git "):
            old = current = None
            in_hunk = False
        elif not in_hunk and text.startswith("--- "):
            old = _diff_name(text[4:])
        elif not in_hunk and text.startswith("+++ "):
            new_name = _diff_name(text[4:])
            current = new_name or old
            if current is not None:
                touched.setdefault(current, [])
            if new_name is None:  # a deleted file: no new side to mark
                current = None
        elif text.startswith("rename to "):
            touched.setdefault(text[len("rename to "):].strip(), [])
        elif text.startswith("Binary files ") and " and " in text:
            name = _diff_name(text[len("Binary files "):].rsplit(" and ", 1)[1].removesuffix(" differ"))
            if name:
                touched.setdefault(name, [])
        elif (match := _HUNK.match(text)) is not None:
            line = int(match.group(1)) or 1  # +0,0: the file is empty on the new side
            in_hunk = current is not None
        elif in_hunk and current is not None:
            if text.startswith("+"):
                touched[current].append(line)
                line += 1
            elif text.startswith("-"):
                touched[current].append(max(line, 1))
            elif text.startswith(" "):
                line += 1
    return {path: _spans(lines) for path, lines in touched.items()}


def working_diff(root: Path) -> str:
    """What the working tree changes against HEAD, staged and not (``git diff HEAD``); on an
    unborn branch, the staged diff plus the unstaged one. Empty outside a repository."""
    fixed = ["--no-color", "--no-ext-diff", "--src-prefix=a/", "--dst-prefix=b/"]
    if head_commit(root) is not None:
        return _git(["diff", *fixed, "HEAD"], root) or ""
    return (_git(["diff", *fixed, "--cached"], root) or "") + (_git(["diff", *fixed], root) or "")


def _check_commit(commit: str) -> None:
    if not commit or commit.startswith("-") or any(c.isspace() for c in commit):
        raise CodeAnchorError(f"not a commit name: {commit!r}")


def file_at(root: Path, commit: str, rel: str) -> str | None:
    """The text of ``rel`` at ``commit``; None if the file or commit does not exist there.

    Raises CodeAnchorError for a path outside the root or a binary file."""
    _check_commit(commit)
    name = relative_path(root, rel)
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV}
    try:
        done = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=root, capture_output=True,
                              timeout=GIT_TIMEOUT, check=False, env=env)
    except (FileNotFoundError, NotADirectoryError, subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode != 0:
        return None
    return _decode(done.stdout, name, MAX_SOURCE_BYTES)


def commits_touching(root: Path, rel: str, since: str) -> list[str]:
    """Commits after ``since`` up to HEAD that changed ``rel``, newest first ([] if unknown)."""
    _check_commit(since)
    name = relative_path(root, rel)
    out = _git(["log", "--format=%H", f"{since}..HEAD", "--", name], root)
    return [sha for sha in (out or "").split() if sha]
