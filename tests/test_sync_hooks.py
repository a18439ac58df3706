"""`cuba-memorys hook install | uninstall` (issue 17 item 5; services/sync/hooks.py): the four
hook blocks and what they pin, the user's own hook lines kept, a re-install replacing only our
blocks, uninstall restoring the files, core.hooksPath and linked worktrees, the merge driver's
config and .gitattributes line (quoted), a sync folder outside the repository, the refusals
(not a repository, a non-shell hook, a broken block), --with-codegraph's build after each commit, and
the hooks run by real git commits: what each one runs, and that a failure never stops git.

Real git throughout (its global config isolated), the real CLI in subprocesses where it matters.
The helpers at the top are shared with tests/test_sync_git.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.services.sync import hooks

EXE = Path(sys.executable).with_name("cuba-memorys")
EXPORT = "sync export --scope all --unless-pending"  # what post-commit runs (and announces in the log)
IMPORT_PENDING = "sync import --conflict merge --if-pending"  # post-commit's import, before EXPORT
USER_HOOK = "#!/bin/sh\n# the user's own post-commit\necho 'user hook ran' >> user-hook.log\n"


# -- helpers (also used by test_sync_git.py) -------------------------------------------------
def git_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for git and the CLI: no CUBA_*, DATABASE_URL or GIT_* of the developer's,
    an isolated git config, a HOME inside the test (so no default store can be the user's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUBA_", "GIT_")) and k != "DATABASE_URL"}
    home.mkdir(parents=True, exist_ok=True)
    env.update(GIT_AUTHOR_NAME="Tester", GIT_AUTHOR_EMAIL="tester@example.com", GIT_COMMITTER_NAME="Tester",
               GIT_COMMITTER_EMAIL="tester@example.com", GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
               GIT_CONFIG_NOSYSTEM="1", HOME=str(home), XDG_DATA_HOME=str(home / "share"),
               CUBA_EMBED_MODEL="none", CUBA_JUEZ_CLI="none")
    env.update(extra)
    return env


def git(cwd: Path, *args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done


def cli(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def new_repo(path: Path, env: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "-c", "init.defaultBranch=main", "init", "-q", env=env)
    return path


def log_sections(repo: Path) -> list[tuple[str, list[str]]]:
    """The hooks' log as (hook, lines) per run, oldest first."""
    path = repo / ".git" / hooks.LOG_NAME
    sections: list[tuple[str, list[str]]] = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        if line.startswith("== "):
            sections.append((line.split()[1], []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def ran(section: tuple[str, list[str]], command: str) -> bool:
    return f"> {command}" in section[1]


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return git_env(tmp_path / "home", CUBA_DATA_DIR=str(tmp_path / "data"))


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    return new_repo(tmp_path / "repo", env)


def isolated(monkeypatch, env: dict[str, str]) -> None:
    """In-process service calls run git too: give them the test's git environment."""
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("GIT_") or key == "HOME":
            monkeypatch.setenv(key, value)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}


# -- install / uninstall (the service) ---------------------------------------------------------
def test_install_writes_four_pinned_hooks_keeps_user_lines_and_uninstall_restores(repo, env, monkeypatch,
                                                                                 tmp_path):
    isolated(monkeypatch, env)
    hooks_dir = repo / ".git" / "hooks"
    (hooks_dir / "post-commit").write_text(USER_HOOK)
    (hooks_dir / "post-commit").chmod(0o755)
    (hooks_dir / "post-merge").write_text("#!/bin/bash\necho merged\n")  # not executable: git ignores it
    (repo / ".gitattributes").write_text("*.png binary\nold/** merge=cuba-memorys\n")
    before = files(hooks_dir)
    sub = repo / "src" / "deep"
    sub.mkdir(parents=True)

    out = hooks.install(sub, EXE, dir="mem/sync", data_dir=tmp_path / "data")
    assert out["repository"] == str(repo) and out["sync_dir"] == str(repo / "mem/sync")
    assert out["sync_dir_in_hooks"] == '"$cmh_top"/mem/sync' and out["hooks_dir"] == str(hooks_dir)
    assert [h["hook"] for h in out["hooks"]] == list(hooks.HOOKS)
    assert [h["created"] for h in out["hooks"]] == [False, True, False, True]
    assert [h["made_executable"] for h in out["hooks"]] == [False, False, True, False]
    assert out["notes"] == [f"{hooks_dir / 'post-merge'} was not executable, so git ignored it; it is now, and its"
                            " own lines run too"]
    for name in hooks.HOOKS:
        path = hooks_dir / name
        text = path.read_text()
        assert os.access(path, os.X_OK), name
        assert text.startswith("#!/bin/") and text.count(hooks.MARKER) == 1
        assert text.endswith(hooks.END_MARKER + "\n")
        assert f"cmh_exe={EXE}" in text and 'CUBA_SYNC_DIR="$cmh_top"/mem/sync' in text
        assert f"cmh_data={tmp_path / 'data'}" in text and "cuba-memorys.database-url" in text
        assert "codegraph" not in text
        assert subprocess.run(["sh", "-n", str(path)], capture_output=True).returncode == 0, name
    post_commit = (hooks_dir / "post-commit").read_text()
    assert post_commit.startswith(USER_HOOK) and "sync export --scope all" in post_commit
    assert "HEAD^2" not in post_commit and IMPORT_PENDING in post_commit  # not only on a merge commit
    assert '"${3:-}" = 1' in (hooks_dir / "post-checkout").read_text()
    assert '"${1:-}" = rebase' in (hooks_dir / "post-rewrite").read_text()
    # the merge driver: local config and one .gitattributes line; the stale line gone, the user's kept
    assert (repo / ".gitattributes").read_text() == "*.png binary\nmem/sync/** merge=cuba-memorys\n"
    config = git(repo, "config", "--local", "--get-regexp", "^merge\\.cuba-memorys\\.", env=env).stdout
    assert f'merge.cuba-memorys.driver "{EXE}" hook merge-driver %O %A %B %P' in config
    assert "merge.cuba-memorys.name cuba-memorys structural merge (three-way, by id)" in config
    attr = git(repo, "check-attr", "merge", "--", "mem/sync/entities/a.json", env=env).stdout
    assert attr.strip().endswith("merge: cuba-memorys")

    # installing again changes no byte; another folder replaces only our blocks
    first = files(hooks_dir)
    again = hooks.install(repo, EXE, dir="mem/sync", data_dir=tmp_path / "data")
    assert files(hooks_dir) == first and all(h["replaced"] for h in again["hooks"])
    hooks.install(repo, EXE, dir="other")
    post_commit = (hooks_dir / "post-commit").read_text()
    assert post_commit.count(hooks.MARKER) == 1 and post_commit.startswith(USER_HOOK)
    assert "/other" in post_commit and "mem/sync" not in post_commit and "cmh_data=" not in post_commit
    # where the hooks' store is: git config, else $DATABASE_URL (not pinned: the note says how), else SQLite
    with_url = hooks.install(repo, EXE, dir="other", database_url_set=True)
    assert "$DATABASE_URL" in with_url["store"]
    assert "git config --local cuba-memorys.database-url" in with_url["notes"][0]
    git(repo, "config", "--local", "cuba-memorys.database-url", "postgresql://u@h/db", env=env)
    pinned = hooks.install(repo, EXE, dir="other", database_url_set=True)
    assert "git config cuba-memorys.database-url" in pinned["store"] and pinned["notes"] == []
    git(repo, "config", "--local", "--unset", "cuba-memorys.database-url", env=env)
    assert (repo / ".gitattributes").read_text() == "*.png binary\nother/** merge=cuba-memorys\n"

    out = hooks.uninstall(repo)
    assert files(hooks_dir) == before  # the user's hook byte for byte; the files we made are gone
    assert [(h["hook"], h["block_removed"], h["file_removed"]) for h in out["hooks"]] == [
        ("post-commit", True, False), ("post-checkout", True, True), ("post-merge", True, False),
        ("post-rewrite", True, True)]
    assert sorted(out["config_removed"]) == sorted(hooks.DRIVER_KEYS)
    assert git(repo, "config", "--local", "--get-regexp", "cuba-memorys", env=env, check=False).stdout == ""
    assert "cuba-memorys" not in (repo / ".git" / "config").read_text()  # no empty section left
    assert (repo / ".gitattributes").read_text() == "*.png binary\n"
    assert out["attributes_removed"] == ["other/** merge=cuba-memorys"] and not out["attributes_file_removed"]
    second = hooks.uninstall(repo)  # nothing left to remove
    assert not any(h["block_removed"] for h in second["hooks"]) and second["config_removed"] == []


def test_hooks_path_worktree_quoting_and_a_folder_outside(repo, env, monkeypatch, tmp_path):
    isolated(monkeypatch, env)
    git(repo, "commit", "-q", "--allow-empty", "-m", "init", env=env)
    # core.hooksPath, relative to the work tree's top, wins over .git/hooks
    git(repo, "config", "core.hooksPath", "tools/githooks", env=env)
    weird = 'my "mem" dir'
    out = hooks.install(repo, EXE, dir=weird)
    assert out["hooks_dir"] == str(repo / "tools/githooks")
    assert sorted(p.name for p in (repo / "tools/githooks").iterdir()) == sorted(hooks.HOOKS)
    assert not (repo / ".git/hooks/post-merge").exists()
    assert out["sync_dir_in_hooks"] == '"$cmh_top"/\'my "mem" dir\''
    line = out["merge_driver"]["line"]
    assert line == '"my \\"mem\\" dir/**" merge=cuba-memorys'
    attr = git(repo, "check-attr", "merge", "--", f"{weird}/entities/x.json", env=env).stdout
    assert attr.strip().endswith("merge: cuba-memorys"), attr
    assert git(repo, "check-attr", "merge", "--", "elsewhere/x.json", env=env).stdout.strip().endswith("unspecified")
    hooks.uninstall(repo)
    assert not (repo / ".gitattributes").exists() and not any((repo / "tools/githooks").iterdir())
    git(repo, "config", "--unset", "core.hooksPath", env=env)

    # from a linked worktree: the shared hooks folder; the folder pinned relative to the running tree
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked), env=env)
    out = hooks.install(linked, EXE)
    assert out["hooks_dir"] == str(repo / ".git" / "hooks") and out["repository"] == str(linked)
    assert out["sync_dir_in_hooks"] == '"$cmh_top"/.cuba-memorys'
    assert (linked / ".gitattributes").read_text() == ".cuba-memorys/** merge=cuba-memorys\n"
    hooks.uninstall(linked)

    # a folder outside the repository: hooks pin it absolutely, no driver, and the report says why
    git(repo, "config", "--local", "merge.cuba-memorys.driver", "stale", env=env)
    (repo / ".gitattributes").write_text("old/** merge=cuba-memorys\n*.md text\n")
    outside = tmp_path / "shared bundle"
    out = hooks.install(repo, EXE, dir=str(outside))
    assert out["sync_dir_in_hooks"] == f"'{outside}'"
    assert f"CUBA_SYNC_DIR='{outside}'" in (repo / ".git/hooks/post-commit").read_text()
    driver = out["merge_driver"]
    assert driver["installed"] is False and "outside the repository" in driver["reason"]
    assert driver["reason"] in out["notes"]
    assert (repo / ".gitattributes").read_text() == "*.md text\n"
    assert git(repo, "config", "--local", "--get", "merge.cuba-memorys.driver", env=env, check=False).returncode == 1


def test_refusals_change_nothing(repo, env, monkeypatch, tmp_path):
    isolated(monkeypatch, env)
    with pytest.raises(NotFound, match="not inside a git work tree"):
        hooks.install(tmp_path, EXE)
    hooks_dir = repo / ".git" / "hooks"
    (hooks_dir / "post-merge").write_text("#!/usr/bin/env python3\nprint('mine')\n")
    with pytest.raises(InvalidInput, match="python3 script"):
        hooks.install(repo, EXE)
    assert not (hooks_dir / "post-commit").exists() and not (repo / ".gitattributes").exists()
    (hooks_dir / "post-merge").unlink()
    broken = f"#!/bin/sh\n{hooks.MARKER}\necho half a block\n"
    (hooks_dir / "post-rewrite").write_text(broken)
    with pytest.raises(InvalidInput, match="no end marker"):
        hooks.install(repo, EXE)
    with pytest.raises(InvalidInput, match="no end marker"):
        hooks.uninstall(repo)
    assert (hooks_dir / "post-rewrite").read_text() == broken and not (hooks_dir / "post-commit").exists()
    with pytest.raises(InvalidInput, match="dir"):
        hooks.install(repo, EXE, dir="   ")


def test_with_codegraph_writes_the_build_line_into_post_commit_only(repo, env, monkeypatch):
    """The service side of --with-codegraph: the build of the repository, then the anchors check
    (guarded: its failure, or a program without the verb, changes nothing)."""
    isolated(monkeypatch, env)
    hooks.install(repo, EXE, with_codegraph=True)
    texts = {name: (repo / ".git/hooks" / name).read_text() for name in hooks.HOOKS}
    assert '"$cmh_exe" codegraph build --path "$cmh_top"' in texts["post-commit"]
    assert '"$cmh_exe" anchors check --record --quiet || true' in texts["post-commit"]
    assert not any("codegraph" in texts[name] for name in hooks.HOOKS if name != "post-commit")
    assert subprocess.run(["sh", "-n", str(repo / ".git/hooks/post-commit")], capture_output=True).returncode == 0
    # in the background, without git's stderr (fd 3): git would wait for the build to close it
    assert '  ) >>"$cmh_log" 2>&1 </dev/null 3>&- &' in texts["post-commit"]
    # a project given at install time is pinned in the build line
    done = hooks.install(repo, EXE, with_codegraph=True, project="my app")
    text = (repo / ".git/hooks/post-commit").read_text()
    assert done["codegraph_project"] == "my app"
    assert '"$cmh_exe" codegraph build --path "$cmh_top" --project \'my app\'' in text
    with pytest.raises(InvalidInput):
        hooks.install(repo, EXE, with_codegraph=True, project="   ")


def codegraph_run(repo: Path, count: int, timeout: float = 120.0) -> tuple[str, list[str]]:
    """The ``count``-th background codegraph section of the hooks' log, once it has finished."""
    give_up = time.monotonic() + timeout
    while True:
        runs = [s for s in log_sections(repo) if s[0] == "post-commit-codegraph"]
        if len(runs) >= count and ran(runs[count - 1], "codegraph done"):
            return runs[count - 1]
        assert time.monotonic() < give_up, log_sections(repo)
        time.sleep(0.2)


def test_the_post_commit_hook_builds_the_codegraph_of_each_commit(repo, env, tmp_path):
    """--with-codegraph through the real CLI and real commits: each commit's post-commit parses
    the changed files (unchanged ones skipped), a removed function's observation is retired."""
    done = cli(repo, "hook", "install", "--with-codegraph", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["codegraph"] is True
    (repo / "app.py").write_text("def alpha():\n    return beta()\n\n\ndef beta():\n    return 1\n")
    (repo / "lib.py").write_text("def gamma():\n    return 2\n")
    git(repo, "add", ".", env=env)
    git(repo, "commit", "-q", "-m", "code", env=env)
    first = codegraph_run(repo, 1)
    assert ran(first, "codegraph build") and ran(first, "anchors check --record --quiet")
    assert any("2 file(s) parsed, 0 unchanged" in line for line in first[1]), first[1]
    (repo / "app.py").write_text("def beta():\n    return 1\n")
    git(repo, "commit", "-q", "-am", "alpha goes", env=env)
    second = codegraph_run(repo, 2)
    assert any("1 file(s) parsed, 1 unchanged" in line for line in second[1]), second[1]
    assert any("1 retired" in line for line in second[1]), second[1]


# -- the CLI ----------------------------------------------------------------------------------------
def test_cli_install_uninstall_and_errors(repo, env, tmp_path):
    hooks_dir = repo / ".git" / "hooks"
    outside = cli(tmp_path, "hook", "install", env=env)
    assert outside.returncode == 2 and "not inside a git work tree" in outside.stderr
    assert cli(tmp_path, "hook", "uninstall", env=env).returncode == 2

    done = cli(repo, "hook", "install", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["executable"] == str(EXE) and report["data_dir_pinned"] == env["CUBA_DATA_DIR"]
    assert report["merge_driver"]["installed"] and report["log"] == str(repo / ".git" / hooks.LOG_NAME)
    assert "embedded SQLite" in report["store"]
    plain = cli(repo, "hook", "install", "--dir", "mem", env=env)
    assert plain.returncode == 0 and "post-rewrite: block replaced" in plain.stdout
    assert "mem/** merge=cuba-memorys" in plain.stdout
    gone = cli(repo, "hook", "uninstall", env=env)
    assert gone.returncode == 0 and "merge.cuba-memorys.driver removed" in gone.stdout
    assert not any((hooks_dir / name).exists() for name in hooks.HOOKS) and not (repo / ".gitattributes").exists()


# -- the hooks, run by git ------------------------------------------------------------------------
def test_hooks_run_what_they_should_and_never_stop_git(repo, env, tmp_path):
    hooks_dir = repo / ".git" / "hooks"
    (hooks_dir / "post-commit").write_text(USER_HOOK)
    (hooks_dir / "post-commit").chmod(0o755)
    assert cli(repo, "hook", "install", env=env).returncode == 0
    assert cli(repo, "save", "Hook Test", "the hooks export this", env=env).returncode == 0
    # the hook runs without CUBA_DATA_DIR (a GUI's environment): the pinned one is used
    bare = {k: v for k, v in env.items() if k != "CUBA_DATA_DIR"}
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt", env=bare)
    git(repo, "commit", "-q", "-m", "one", env=bare)
    assert (repo / "user-hook.log").read_text() == "user hook ran\n"  # the user's lines still run
    entity_files = list((repo / ".cuba-memorys" / "entities").glob("hook-test-*.json"))
    assert len(entity_files) == 1 and "the hooks export this" in entity_files[0].read_text()
    sections = log_sections(repo)
    assert [s[0] for s in sections] == ["post-commit"] and ran(sections[0], EXPORT)
    assert ran(sections[0], IMPORT_PENDING) and "Nothing imported: no bundle waits to be imported." in sections[0][1]
    assert sections[0][1].index(f"> {IMPORT_PENDING}") < sections[0][1].index(f"> {EXPORT}")

    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "--amend", "--no-edit", env=env)  # post-commit, then post-rewrite "amend"
    git(repo, "checkout", "-q", "-b", "topic", env=env)  # a branch checkout
    (repo / "a.txt").write_text("changed\n")
    git(repo, "checkout", "--", "a.txt", env=env)  # a file checkout
    git(repo, "commit", "-q", "--allow-empty", "-m", "on topic", env=env)
    git(repo, "checkout", "-q", "main", env=env)
    git(repo, "merge", "-q", "--ff-only", "topic", env=env)  # post-merge
    runs = log_sections(repo)[1:]
    assert [s[0] for s in runs] == ["post-commit", "post-rewrite", "post-checkout", "post-checkout", "post-commit",
                                    "post-checkout", "post-merge"]
    assert [ran(s, "sync import --conflict merge") for s in runs] == [False, False, True, False, False, True, True]
    assert [ran(s, EXPORT) for s in runs] == [True, False, False, False, True, False, False]

    # a merge concluded by hand: post-commit imports the merged bundle before exporting
    no_hooks = ("-c", "core.hooksPath=/nonexistent")  # the setup's own commits run no hook
    git(repo, *no_hooks, "checkout", "-q", "-b", "side", env=env)
    (repo / "c.txt").write_text("side\n")
    git(repo, "add", "c.txt", env=env)
    git(repo, *no_hooks, "commit", "-q", "-m", "side", env=env)
    git(repo, *no_hooks, "checkout", "-q", "main", env=env)
    (repo / "c.txt").write_text("main\n")
    git(repo, "add", "c.txt", env=env)
    git(repo, *no_hooks, "commit", "-q", "-m", "main", env=env)
    assert git(repo, *no_hooks, "merge", "-q", "side", env=env, check=False).returncode == 1  # c.txt conflicts
    (repo / "c.txt").write_text("both\n")
    git(repo, "add", "c.txt", env=env)
    log = repo / ".git" / hooks.LOG_NAME
    with log.open("a") as out:  # a log grown large is cut to its end before the hook writes
        out.write("x" * hooks.LOG_MAX_BYTES + "\nlast old line\n")
    git(repo, "commit", "-q", "--no-edit", env=env)
    assert log.stat().st_size < hooks.LOG_KEEP_BYTES + 4096 and "last old line" in log.read_text()
    last = log_sections(repo)[-1]
    assert last[0] == "post-commit" and ran(last, IMPORT_PENDING)
    assert last[1].index(f"> {IMPORT_PENDING}") < last[1].index(f"> {EXPORT}")

    # a broken program (moved, uninstalled) fails in the log, never in git
    for name in hooks.HOOKS:
        path = hooks_dir / name
        path.write_text(path.read_text().replace(f"cmh_exe={EXE}", f"cmh_exe={tmp_path / 'gone'}"))
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt", env=env)
    assert git(repo, "commit", "-q", "-m", "two", env=env).returncode == 0
    assert git(repo, "checkout", "-q", "-b", "other", env=env).returncode == 0
    assert log.read_text().count(str(tmp_path / "gone")) >= 2


@pytest.mark.parametrize("import_status", [0, 1])
def test_post_commit_exports_only_after_its_import_succeeded(repo, env, tmp_path, import_status):
    """An import that fails in a way no refusal records (the store locked past its timeout, the
    process killed) must not be followed by the export, which would write this store over the
    bundle still waiting in the folder. Those failures cannot be produced quickly for real, so
    the generated post-commit block runs here with a stand-in program (a shell script that logs
    its arguments and fails or succeeds the import); the block's shell logic is what is tested."""
    stand_in = tmp_path / "cuba-memorys-stand-in"
    stand_in.write_text("#!/bin/sh\n"
                        f'echo "called: $*" >> {tmp_path / "calls.txt"}\n'
                        f'case "$*" in "sync import"*) exit {import_status};; esac\nexit 0\n')
    stand_in.chmod(0o755)
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text("#!/bin/sh\n" + hooks.block("post-commit", stand_in, '"$cmh_top/.cuba-memorys"', None, False)
                    + "\n")
    hook.chmod(0o755)
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt", env=env)
    git(repo, "commit", "-q", "-m", "one", env=env)  # git goes on whatever the block does
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0] == "called: sync import --conflict merge --if-pending --notice-fd 3"
    (section,) = log_sections(repo)
    if import_status == 0:
        assert calls[1:] == ["called: sync export --scope all --unless-pending --notice-fd 3"] and ran(section, EXPORT)
    else:
        assert calls[1:] == [] and not ran(section, EXPORT) and hooks.IMPORT_FAILED in section[1]
