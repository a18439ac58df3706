"""Real git repositories for the anchor tests (tests/test_anchors.py, test_anchor_freshness.py,
test_recall_context.py): made in the test's tmp dir, committed with a fixed identity and an
isolated git config."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

JOBS = '''import os


def parse_config(text):
    """Read key=value lines."""
    keys = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        keys[name.strip()] = value.strip()
    return keys


def retry(job, times=3):
    for _ in range(times):
        if job():
            return True
    return False
'''


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        home = root.parent / f"{root.name}-home"
        home.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env.update(GIT_AUTHOR_NAME="Tester", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="Tester",
                        GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
                        GIT_CONFIG_NOSYSTEM="1")
        self.git("-c", "init.defaultBranch=main", "init", "-q")

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.root, env=self.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()


def jobs_repo(root: Path) -> Repo:
    repo = Repo(root)
    repo.write("jobs.py", JOBS)
    repo.write("README.md", "# jobs\n")
    repo.commit("jobs: parse_config and retry")
    return repo
