"""cuba_memorys.code.repo and .spans (issue 19): the repository the code lives in, read through
real git in repositories made here. No read may leave the root: `..`, an absolute path elsewhere
and a symlink out are refused; a binary file is refused; a missing repository is None / empty.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuba_memorys.code import repo
from cuba_memorys.code.spans import find_span, line_keys, lines_of, normalise, span_hash
from cuba_memorys.errors import CodeAnchorError
from test_sync_hooks import git, git_env, isolated, new_repo


@pytest.fixture
def env(tmp_path: Path, monkeypatch) -> dict[str, str]:
    env = git_env(tmp_path / "home")
    isolated(monkeypatch, env)  # in-process calls run git too: the test's environment
    return env


@pytest.fixture
def root(tmp_path: Path, env: dict[str, str]) -> Path:
    path = new_repo(tmp_path / "repo", env)
    (path / "pkg").mkdir()
    (path / "pkg" / "a.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    git(path, "add", ".", env=env)
    git(path, "commit", "-q", "-m", "first", env=env)
    return path.resolve()


def test_root_head_and_a_place_that_is_no_repository(root, tmp_path, env):
    assert repo.repo_root(root / "pkg") == root
    assert repo.repo_root(root / "pkg" / "a.py") == root
    outside = tmp_path / "plain"
    outside.mkdir()
    assert repo.repo_root(outside) is None
    assert repo.repo_root(tmp_path / "vanished" / "deeper") is None
    head = repo.head_commit(root)
    assert head is not None and len(head) == 40
    assert head == git(root, "rev-parse", "HEAD", env=env).stdout.strip()
    unborn = new_repo(tmp_path / "unborn", env)
    assert repo.head_commit(unborn) is None
    assert repo.head_commit(outside) is None
    assert repo.working_diff(outside) == "" and repo.tracked_files(outside) == []


def test_safe_path_refuses_every_way_out(root, tmp_path):
    assert repo.safe_path(root, "pkg/a.py") == root / "pkg" / "a.py"
    assert repo.safe_path(root, "pkg/../pkg/a.py") == root / "pkg" / "a.py"  # stays inside: fine
    assert repo.safe_path(root, str(root / "pkg" / "a.py")) == root / "pkg" / "a.py"
    assert repo.relative_path(root, str(root / "pkg" / "a.py")) == "pkg/a.py"
    assert repo.relative_path(root, "./pkg//a.py") == "pkg/a.py"
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    with pytest.raises(CodeAnchorError, match="climbs out"):
        repo.safe_path(root, "../secret.txt")
    with pytest.raises(CodeAnchorError, match="climbs out"):
        repo.read_source(root, "pkg/../../secret.txt")
    with pytest.raises(CodeAnchorError, match="absolute path outside"):
        repo.read_source(root, str(secret))
    (root / "link").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(CodeAnchorError, match="symlink"):
        repo.read_source(root, "link")
    with pytest.raises(CodeAnchorError, match="symlink"):
        repo.read_source(root, "dirlink/secret.txt")
    for bad in ("", "a\0b"):
        with pytest.raises(CodeAnchorError):
            repo.safe_path(root, bad)
    # a link that stays inside is followed, and keeps the name asked for
    (root / "inner").symlink_to(root / "pkg" / "a.py")
    assert repo.relative_path(root, "inner") == "inner"
    assert repo.read_source(root, "inner") == (root / "pkg" / "a.py").read_text()


@pytest.mark.parametrize("rel", [".git/config", ".git", ".git/hooks/pre-commit", "./.git/HEAD", ".GIT/config",
                                 "pkg/../.git/config", "vendor/sub/.git", "vendor/sub/.git/config"])
def test_safe_path_refuses_git_s_own_folder(root, rel):
    assert repo.is_private(os.path.normpath(rel))
    with pytest.raises(CodeAnchorError, match=r"git's own folder \(\.git\)"):
        repo.safe_path(root, rel)
    with pytest.raises(CodeAnchorError, match="git's own folder"):
        repo.read_source(root, rel)
    with pytest.raises(CodeAnchorError, match="git's own folder"):
        repo.file_at(root, "HEAD", rel)


def test_a_symlink_into_git_s_folder_and_an_absolute_path_there_are_refused(root):
    (root / "cfg").symlink_to(root / ".git" / "config")
    with pytest.raises(CodeAnchorError, match="git's own folder"):
        repo.read_source(root, "cfg")
    with pytest.raises(CodeAnchorError, match="git's own folder"):
        repo.relative_path(root, str(root / ".git" / "config"))
    # names that only look alike are ordinary files
    for fine in (".gitignore", "pkg/.github/ci.yml", "git/config", ".git.py"):
        assert not repo.is_private(fine)
        assert repo.relative_path(root, fine) == fine


def test_read_source_missing_binary_and_too_large(root):
    assert repo.read_source(root, "pkg/a.py").startswith("def f():")
    assert repo.read_source(root, "pkg/nope.py") is None
    assert repo.read_source(root, "pkg") is None  # a folder is not a source file
    (root / "blob.bin").write_bytes(b"\x89PNG\r\n\x00\x00binary")
    with pytest.raises(CodeAnchorError, match="binary"):
        repo.read_source(root, "blob.bin")
    (root / "big.py").write_text("x = 1\n" * 100)
    with pytest.raises(CodeAnchorError, match="limit"):
        repo.read_source(root, "big.py", max_bytes=50)
    (root / "latin.py").write_bytes(b"s = '\xe9'\n")  # not UTF-8: read, not refused
    assert repo.read_source(root, "latin.py") == "s = '\ufffd'\n"


def test_tracked_files_include_untracked_but_not_ignored_or_deleted(root, env):
    (root / ".gitignore").write_text("*.log\n")
    (root / "new.py").write_text("x = 1\n")
    (root / "noise.log").write_text("ignored\n")
    assert repo.tracked_files(root) == [".gitignore", "new.py", "pkg/a.py"]
    (root / "pkg" / "a.py").unlink()
    assert repo.tracked_files(root) == [".gitignore", "new.py"]


def test_diff_paths_on_a_real_git_diff(root, env):
    a = root / "pkg" / "a.py"
    a.write_text("def f():\n    return 10\n\n\ndef g():\n    return 2\n\n\ndef h():\n    return 3\n")
    (root / "pkg" / "b.py").write_text("b = 1\n")
    git(root, "add", "pkg/b.py", env=env)  # staged only: still in the working diff
    diff = repo.working_diff(root)
    assert "+    return 10" in diff
    spans = repo.diff_paths(diff)
    assert spans == {"pkg/a.py": [(2, 2), (7, 10)], "pkg/b.py": [(1, 1)]}
    git(root, "add", ".", env=env)
    git(root, "commit", "-q", "-m", "second", env=env)
    first = git(root, "rev-parse", "HEAD~1", env=env).stdout.strip()
    # a deletion marks where it happened; a deleted file is named with no spans; a rename too
    a.write_text("def f():\n    return 10\n\n\ndef h():\n    return 3\n")
    git(root, "mv", "pkg/b.py", "pkg/c.py", env=env)
    spans = repo.diff_paths(repo.working_diff(root))
    assert spans["pkg/a.py"] == [(5, 5)]
    assert "pkg/c.py" in spans
    deleted = repo.diff_paths(git(root, "diff", "HEAD", "--", "pkg/b.py", env=env).stdout)
    assert deleted == {"pkg/b.py": []}
    # history: the file at a commit, the commits that touched it since one
    assert repo.file_at(root, first, "pkg/a.py").startswith("def f():\n    return 1\n")
    assert repo.file_at(root, first, "pkg/b.py") is None
    assert repo.file_at(root, "0" * 40, "pkg/a.py") is None
    head = repo.head_commit(root)
    assert repo.commits_touching(root, "pkg/a.py", first) == [head]
    assert repo.commits_touching(root, "pkg/a.py", head) == []
    assert repo.commits_touching(root, "pkg/a.py", "0" * 40) == []
    with pytest.raises(CodeAnchorError):
        repo.file_at(root, "--output=/tmp/x", "pkg/a.py")
    with pytest.raises(CodeAnchorError):
        repo.file_at(root, first, "../outside.py")


def test_diff_paths_of_text_without_headers_and_quoted_names():
    assert repo.diff_paths("") == {}
    text = ('diff --git "a/sp ace\\303\\251.py" "b/sp ace\\303\\251.py"\n'
            '--- "a/sp ace\\303\\251.py"\n+++ "b/sp ace\\303\\251.py"\n@@ -0,0 +1,2 @@\n+x\n+y\n')
    assert repo.diff_paths(text) == {"sp ace\u00e9.py": [(1, 2)]}


def test_span_hash_ignores_whitespace_that_means_nothing():
    body = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    same = [body.replace("\n", "   \n"), "\n\n" + body + "\n\n", body.replace("\n", "\r\n"),
            "".join("    " + line + "\n" for line in body.splitlines())]
    assert {span_hash(text) for text in same} == {span_hash(body)}
    assert len(span_hash(body)) == 32
    assert span_hash(body.replace("return 1", "return 3")) != span_hash(body)
    assert span_hash(body.replace("    return 2", "return 2")) != span_hash(body)  # inner indent counts
    assert normalise("  a\n    b  \n\n") == "a\n  b"
    assert lines_of("one\ntwo\nthree\n", 2, 3) == "two\nthree"
    assert lines_of("one\ntwo\n", 5, 9) == "" and lines_of("one\ntwo", 0, 1) == "one"


# -- find_span: a span located again by its lines' keys (unique, >= 3 non-blank lines) -------
FILE = """import os


def retry(job, times=3):
    for _ in range(times):
        if job():
            return True
    return False


def other():
    pass
"""


def test_find_span_finds_a_moved_and_reindented_span_once():
    span = line_keys(lines_of(FILE, 4, 8))
    assert find_span(line_keys(FILE), span, near_line=4) == 4
    moved = "# a header\n\n\nclass Jobs:\n" + "\n".join("    " + line for line in lines_of(FILE, 4, 8).split("\n"))
    assert find_span(line_keys(moved), span, near_line=4) == 5
    # blank lines around the span are not part of it: the first non-blank line is returned
    assert find_span(line_keys(FILE), line_keys("\n\n" + lines_of(FILE, 4, 8) + "\n\n"), 4) == 4
    # a blank line inside the span must be there in the file too
    assert find_span(line_keys(FILE), line_keys(lines_of(FILE, 8, 11)), 8) is None  # 2 non-blank lines
    assert find_span(line_keys(FILE), line_keys(lines_of(FILE, 6, 11)), 6) == 6
    gapless = FILE.replace("    return False\n\n\n", "    return False\n")
    assert find_span(line_keys(gapless), line_keys(lines_of(FILE, 6, 11)), 6) is None


def test_find_span_refuses_ambiguous_short_and_absent_spans():
    span = line_keys(lines_of(FILE, 4, 8))
    twice = FILE + "\n\n" + lines_of(FILE, 4, 8) + "\n"
    assert find_span(line_keys(twice), span, near_line=4) is None  # ambiguous, even at the old place
    assert find_span(line_keys(FILE), line_keys("if job():\n    return True\n"), 6) is None  # 2 lines
    assert find_span(line_keys(FILE), line_keys("\n\n\n"), 1) is None
    assert find_span(line_keys(FILE), [], 1) is None
    edited = FILE.replace("return True", "return job")
    assert find_span(line_keys(edited), span, near_line=4) is None
    assert find_span(line_keys("x\ny\n"), span, near_line=1) is None  # longer than the file
    # a span at the very start and the very end of the file
    assert find_span(line_keys(FILE), line_keys(lines_of(FILE, 1, 5)), 1) == 1
    assert find_span(line_keys(FILE), line_keys(lines_of(FILE, 8, 13)), 8) == 8


def test_find_span_on_repetitive_lines_is_linear_and_exact():
    """The rarest line of the span is the anchor: a file of 20 000 identical braces is one
    pass, and two copies of a 3-brace span are ambiguous, not the first."""
    braces = ["}"] * 20_000
    keys = line_keys("\n".join(braces))
    assert find_span(keys, line_keys("}\n}\n}"), 10) is None
    marked = braces[:15_000] + ["return unique_value", "}"] + braces[15_000:]
    assert find_span(line_keys("\n".join(marked)), line_keys("}\nreturn unique_value\n}"), 1) == 15_000
