"""Sync through git, end to end (issue 17, "Tests"): a bare "origin" and two clones, each with
its own store and `cuba-memorys hook install` in both; writes on both sides, commits, pushes
and pulls; the hooks export and import, and the merge driver merges the bundle's files.

- both stores converge to the same rows after a merge through the driver, and a deletion
  propagates (clone A on SQLite, clone B on PostgreSQL pinned with `git config
  cuba-memorys.database-url`, as a user would, so the hooks reach it without DATABASE_URL);
- the same observation edited differently on both sides: one open conflict on the side that
  merged, both texts kept, `sync resolve` works, and the other side then takes the result;
- `git pull --rebase` imports through post-rewrite; an entity deleted on one side while the
  other wrote a child of it that the first never saw: the child's entity is withheld;
- a pull that would wipe most of the store: the hook's import is refused, git succeeds, nothing
  is deleted, the reason is in the hooks' log and in `sync status`; a commit meanwhile does not
  overwrite the waiting bundle; `sync import --confirm` applies it;
- a bundle no hook imported (`git reset --hard origin/main`, `git checkout REF -- <folder>`):
  the next commit's post-commit imports it, then exports; nothing waits.

Every git command runs the real hooks, which run the real CLI (CUBA_EMBED_MODEL=none: nothing
here needs vectors, so no model is loaded). Helpers: tests/test_sync_hooks.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from conftest import BACKENDS, NO_OFFLINE_RERANKER
from cuba_memorys.config import Settings
from cuba_memorys.services.graph import entities
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.memory import Memory
from test_sync_hooks import cli, git, git_env, log_sections, ran

IMPORT = "sync import --conflict merge"


@dataclass
class Clone:
    """One machine: a clone of origin, its own store, the hooks installed."""

    path: Path
    env: dict[str, str]  # what git (and so the hooks) runs with: no DATABASE_URL
    database_url: str = ""

    @property
    def cli_env(self) -> dict[str, str]:
        return {**self.env, "DATABASE_URL": self.database_url} if self.database_url else self.env

    def cli(self, *args: str) -> dict:
        done = cli(self.path, *args, "--json", env=self.cli_env)
        assert done.returncode == 0, f"cuba-memorys {' '.join(args)}: {done.stderr}"
        return json.loads(done.stdout)

    def git(self, *args: str) -> str:
        return git(self.path, *args, env=self.env).stdout

    def save(self, entity: str, content: str) -> str:
        return self.cli("save", entity, content)["id"]

    def commit(self, message: str, check_export: bool = False) -> None:
        """Commit, as the workflow says: the commit's post-commit hook exports the memory, then
        the bundle is committed. That second commit's own export would change nothing (nothing
        was written in between); ``check_export`` runs it and checks the tree stays clean, else
        it is skipped (one process less per commit)."""
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        self.git("add", "-A")
        if self.git("status", "--porcelain"):
            hooks = () if check_export else ("-c", "core.hooksPath=/nonexistent")
            self.git(*hooks, "commit", "-q", "-m", f"memory: {message}")
        assert self.git("status", "--porcelain") == "", "an export after no writes must change nothing"

    def push(self) -> None:
        self.git("push", "-q", "origin", "main")

    def pull(self, *how: str) -> None:
        self.git("pull", "-q", "--no-edit", *how, "origin", "main")

    def memory(self) -> Memory:
        settings = replace(Settings.from_env(), data_dir=Path(self.env["CUBA_DATA_DIR"]),
                           database_url=self.database_url, embed_model="none", reranker_kind=NO_OFFLINE_RERANKER,
                           undo_dir=Path(self.env["CUBA_DATA_DIR"]) / "undo", juez_cli="none")
        return Memory.open(settings, check_model=False)

    def rows(self) -> dict[str, object]:
        """What must converge: entities (id, name) and observations (id -> content)."""
        mem = self.memory()
        try:
            store = mem.store
            return {"entities": sorted((e["id"], e["name"]) for e in store.sync_entities(None, True)),
                    "observations": {o["id"]: o["content"] for o in store.sync_observations(None, True)}}
        finally:
            mem.close()

    def imports(self) -> list[tuple[str, list[str]]]:
        """The hook runs that imported, oldest first."""
        return [s for s in log_sections(self.path) if ran(s, IMPORT)]


def make_clones(tmp_path: Path, database_url: str = "") -> tuple[Clone, Clone]:
    """origin.git and two clones, A on SQLite and B on ``database_url`` (else SQLite)."""
    setup = git_env(tmp_path / "home-setup")
    origin = tmp_path / "origin.git"
    git(tmp_path, "-c", "init.defaultBranch=main", "init", "--bare", "-q", str(origin), env=setup)
    clones = []
    for name in ("a", "b"):
        env = git_env(tmp_path / f"home-{name}", CUBA_DATA_DIR=str(tmp_path / f"data-{name}"))
        git(tmp_path, "clone", "-q", str(origin), name, env=env)
        clone = Clone(tmp_path / name, env, database_url if name == "b" else "")
        if clone.database_url:  # pinned where the hooks read it; git itself runs without DATABASE_URL
            clone.git("config", "--local", "cuba-memorys.database-url", clone.database_url)
        if name == "b":
            clone.pull()  # A's first commit: README, .gitattributes and the (empty) bundle
        installed = cli(clone.path, "hook", "install", "--json", env=clone.env)
        assert installed.returncode == 0, installed.stderr
        assert json.loads(installed.stdout)["merge_driver"]["installed"]
        if name == "a":
            (clone.path / "README.md").write_text("a project whose memory travels with it\n")
            clone.commit("init", check_export=True)
            clone.push()
        else:  # the same .gitattributes line as A's: nothing to commit
            assert clone.git("status", "--porcelain") == ""
        clones.append(clone)
    return clones[0], clones[1]


@pytest.fixture
def b_url(request) -> Iterator[str]:
    """Clone B's store: a fresh PostgreSQL database (A's is SQLite, so one run covers both
    backends), or SQLite when the run has no PostgreSQL (CUBA_TEST_BACKENDS=sqlite)."""
    if "postgresql" not in BACKENDS:
        yield ""
        return
    pg = request.getfixturevalue("postgres")
    url = pg.new_database()
    yield url
    pg.drop(url)


def merge_parents(clone: Clone) -> int:
    return len(clone.git("log", "-1", "--format=%P").split())


def test_two_clones_converge_through_the_merge_driver_and_a_deletion_propagates(tmp_path, b_url):
    a, b = make_clones(tmp_path, b_url)
    first = a.save("Auth Service", "tokens expire after 15 minutes")
    a.commit("a: auth")
    a.push()
    b.pull()  # a fast-forward: post-merge imports
    assert b.rows()["observations"] == {first: "tokens expire after 15 minutes"}

    # both sides write, to the same entity (so its file changes on both) and to others
    from_a = a.save("Auth Service", "refresh tokens live 30 days")
    from_b = b.save("Auth Service", "the signing key rotates monthly")
    only_b = b.save("Billing", "invoices are issued on the 1st")
    a.commit("a: refresh tokens")
    a.push()
    b.commit("b: keys and billing")
    b.pull("--no-rebase")  # a real merge: the driver merges entities/auth-service-*.json, manifest.json…
    assert merge_parents(b) == 2 and b.git("status", "--porcelain") == ""
    assert b.git("ls-files", "--unmerged") == ""
    assert set(b.rows()["observations"]) == {first, from_a, from_b, only_b}
    b.commit("b: after the merge", check_export=True)
    b.push()
    a.pull()
    assert a.rows() == b.rows()
    assert len(a.rows()["entities"]) == 2
    if b_url:  # B's hooks reached PostgreSQL through git config, never an SQLite file of their own
        assert not (Path(b.env["CUBA_DATA_DIR"]) / "memory.db").exists()

    # a deletion propagates: the tombstone travels, the other store deletes that row only
    gone = a.cli("delete", from_a, "--apply")
    assert gone["deleted"]["id"] == from_a
    a.commit("a: drop the refresh-token note")
    a.push()
    b.pull()
    assert from_a not in b.rows()["observations"] and first in b.rows()["observations"]
    assert a.rows() == b.rows()


def test_the_same_row_edited_on_both_sides_is_one_conflict_and_resolve_keeps_both(tmp_path):
    a, b = make_clones(tmp_path)
    row = a.save("Runbook", "deploy with make release")
    a.commit("a: runbook")
    a.push()
    b.pull()
    for clone, text in ((a, "deploy with make release-prod"), (b, "deploy with ./release.sh")):
        mem = clone.memory()
        try:
            feedback.correct(mem, None, observation_id=row, correction=text)
        finally:
            mem.close()
    a.commit("a: prod target")
    a.push()
    b.commit("b: script")
    b.pull("--no-rebase")  # the driver keeps ours and records theirs; post-merge opens the conflict
    assert merge_parents(b) == 2 and b.git("ls-files", "--unmerged") == ""
    listed = b.cli("sync", "conflicts")
    assert listed["open"] == 1 and len(listed["conflicts"]) == 1
    conflict = listed["conflicts"][0]
    assert conflict["observation_id"] == row
    assert "./release.sh" in json.dumps(conflict["ours"]) and "release-prod" in json.dumps(conflict["theirs"])
    assert b.rows()["observations"][row] == "deploy with ./release.sh"  # ours, until resolved

    again = b.cli("sync", "import")  # the same bundle again: skipped, nothing reopened
    assert again["skipped"] is True and b.cli("sync", "conflicts")["open"] == 1

    resolved = b.cli("sync", "resolve", str(conflict["id"]), "--keep", "both")
    assert resolved["observation_id"] == row and resolved["kept"] == "both"
    assert b.cli("sync", "conflicts")["open"] == 0
    mem = b.memory()
    try:
        obs = mem.store.get_observation(row, mem.scope(None))
        assert obs is not None and obs.content == "deploy with ./release.sh"
        assert "deploy with make release-prod" in [v.get("content") for v in obs.previous_versions]
    finally:
        mem.close()

    # A takes the resolution: its text is among the incoming row's previous versions
    b.commit("b: resolved")
    b.push()
    a.pull()
    assert a.rows() == b.rows() and a.cli("sync", "conflicts")["open"] == 0


def test_pull_rebase_imports_and_an_entity_with_unknown_children_is_withheld(tmp_path):
    a, b = make_clones(tmp_path)
    cache = a.save("Cache", "entries expire after an hour")
    a.commit("a: cache")
    a.push()
    b.pull()
    later = a.save("Cache", "the cache is warmed at startup")
    a.commit("a: warm-up")
    a.push()
    queue = b.save("Queue", "the queue retries five times")
    b.commit("b: queue")
    before = len(b.imports())
    b.pull("--rebase")  # B's commits replayed on A's; post-rewrite "rebase" imports the result
    runs = b.imports()[before:]
    assert [s[0] for s in runs] == ["post-rewrite"]
    assert merge_parents(b) == 1 and "a: warm-up" in b.git("log", "--format=%s")  # rebased, no merge commit
    assert {cache, later, queue} <= set(b.rows()["observations"])
    b.commit("b: after the rebase")
    b.push()
    a.pull()
    assert a.rows() == b.rows()

    # A deletes the entity; B, meanwhile, wrote a child A never saw
    mem = a.memory()
    try:
        entities.delete(mem, None, name="Cache")
    finally:
        mem.close()
    a.commit("a: drop the cache entity")
    a.push()
    unknown = b.save("Cache", "B's note about the cache, written before it knew")
    b.pull()
    kept = b.rows()
    assert cache not in kept["observations"] and later not in kept["observations"]  # named: deleted
    assert kept["observations"][unknown].startswith("B's note")  # and so its entity stays
    assert "Cache" in [name for _, name in kept["entities"]]
    report = " ".join(b.imports()[-1][1])  # what the post-merge import said
    assert re.search(r"\b[2-9]\d* deletions applied, 1 withheld\b", report), report


def test_a_pull_that_would_wipe_the_store_is_refused_by_the_hook_and_confirm_applies_it(tmp_path):
    from cuba_memorys.services.observations import write

    a, b = make_clones(tmp_path)
    mem = a.memory()
    try:
        ids = write.batch_add(mem, None, [{"entity_name": f"Service {n % 3}", "content": f"service note number {n}"
                                           f" about port {8000 + n}"} for n in range(30)])["ids"]
    finally:
        mem.close()
    a.commit("a: thirty notes")
    a.push()
    b.pull()
    assert len(b.rows()["observations"]) == 30
    mem = a.memory()
    try:  # A drops 28 of the 30 (56 rows with their facts): more than the guard lets through
        for row in ids[:28]:
            write.delete(mem, None, observation_id=row)
    finally:
        mem.close()
    a.commit("a: drop most notes")
    a.push()

    b.pull()  # git succeeds (git() checks its exit status): the hook's refusal never fails it
    assert set(b.rows()["observations"]) == set(ids)  # nothing deleted
    hook, lines = b.imports()[-1]
    logged = " ".join(lines)
    assert hook == "post-merge" and "error: the bundle would delete 56 rows here, 28 of the 30 observations" \
        in logged and "--confirm" in logged, logged
    status = b.cli("sync", "status")
    refused = status["last_refused_import"]
    assert status["pending_import"] is True and refused["still_pending"] is True
    assert "would delete 56 rows" in refused["reason"] and refused["dir"] == status["dir"]
    said = cli(b.path, "sync", "status", env=b.cli_env).stdout
    assert "The last import of this bundle was refused" in said and "--confirm" in said
    # B goes on working: its commit's export leaves the refused bundle as it is, for the confirm
    bundle_before = b.git("rev-parse", "HEAD:.cuba-memorys")
    later = b.save("Service 0", "B's note written while the import waited")
    b.commit("b: unrelated work")
    assert b.git("rev-parse", "HEAD:.cuba-memorys") == bundle_before
    waited = " ".join(log_sections(b.path)[-1][1])
    assert "Nothing imported: the import of this bundle was refused already" in waited  # not tried again
    assert "Not exported: the import of the bundle in the folder was refused" in waited and "--confirm" in waited

    done = b.cli("sync", "import", "--confirm")
    assert done["tombstones_applied"] >= 28 and done["skipped"] is False
    assert set(b.rows()["observations"]) == {*ids[28:], later}
    after = b.cli("sync", "status")
    assert after["pending_import"] is False and after["last_refused_import"]["still_pending"] is False
    assert "refused" not in cli(b.path, "sync", "status", env=b.cli_env).stdout
    b.commit("b: after the confirmed import")  # exports again now
    b.push()
    a.pull()
    assert a.rows() == b.rows() and later in a.rows()["observations"]


def test_a_bundle_no_hook_imported_is_imported_by_the_next_commit_then_exported(tmp_path):
    """`git reset --hard` and `git checkout REF -- <folder>` run no import hook: the next commit's
    post-commit imports the other machine's bundle first, then exports (it used to wait for an
    import forever, every commit exporting nothing)."""
    a, b = make_clones(tmp_path)
    a.save("Service", "A's note one")
    a.commit("a: one")
    a.push()
    b.git("fetch", "-q", "origin")
    b.git("reset", "-q", "--hard", "origin/main")  # runs no hook
    status = b.cli("sync", "status")
    assert status["pending_import"] is True and status["last_refused_import"] is None
    b.save("B Service", "B's note after the reset")  # (another entity: no re-key race in this test)
    b.commit("b: after the reset")
    lines = log_sections(b.path)[-1][1]  # the commit's post-commit (the bundle's own commit runs none)
    assert lines.index("> sync import --conflict merge --if-pending") < lines.index(
        "> sync export --scope all --unless-pending")
    assert any(line.startswith("Imported ") for line in lines), lines
    assert any(line.startswith("Exported to ") for line in lines), lines
    assert "A's note one" in b.rows()["observations"].values()
    committed = {p.name: b.git("show", f"HEAD:.cuba-memorys/entities/{p.name}")
                 for p in (b.path / ".cuba-memorys" / "entities").glob("*.json")}  # B's next commit took it
    assert len(committed) == 2 and "B's note after the reset" in "".join(committed.values())
    assert "A's note one" in "".join(committed.values())
    assert b.cli("sync", "status")["pending_import"] is False

    a.save("Service", "A's note two")
    a.commit("a: two")
    a.push()
    b.git("fetch", "-q", "origin")
    b.git("checkout", "origin/main", "--", ".cuba-memorys")  # a file checkout: no import hook either
    b.save("B Service", "B's note after the folder checkout")
    b.commit("b: after the folder checkout")
    lines = log_sections(b.path)[-1][1]
    assert any(line.startswith("Imported ") for line in lines) and any(
        line.startswith("Exported to ") for line in lines), lines
    assert "A's note two" in b.rows()["observations"].values()
    b.pull("--no-rebase")  # (A's commits themselves: git wants them before B's push)
    b.push()
    a.pull()
    notes = set(a.rows()["observations"].values())
    assert {"A's note two", "B's note after the reset", "B's note after the folder checkout"} <= notes
    assert a.rows() == b.rows()
