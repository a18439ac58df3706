"""A refusal inside a git hook shows on the terminal (issue 30 item 5): the hooks' output goes to
their log, but when the memory import (or export) is refused, the person running `git pull` or
`git commit` sees one line on git's stderr saying what was refused, why, and the command that is
the way out, and the git command still succeeds.

Real git, the real hooks installed by `cuba-memorys hook install` and the real CLI they run
(tests/test_sync_git.py's clones, each with its own SQLite store).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cuba_memorys.services.observations import write
from test_sync_git import Clone, make_clones
from test_sync_hooks import git


def ours(stderr: str) -> list[str]:
    """The lines of git's stderr that our hooks wrote."""
    return [line for line in stderr.splitlines() if line.startswith("cuba-memorys:")]


def add_notes(clone: Clone, entity: str, count: int) -> list[str]:
    mem = clone.memory()
    try:
        return write.batch_add(mem, None, [{"entity_name": entity, "content": f"note number {n} about port {8000 + n}"}
                                           for n in range(count)])["ids"]
    finally:
        mem.close()


def commit(clone: Clone, message: str) -> str:
    """`git commit` of everything, as a person would run it: git's stderr (the commit succeeded)."""
    clone.git("add", "-A")
    done = git(clone.path, "commit", "-q", "--allow-empty", "-m", message, env=clone.env)
    return done.stderr


def test_a_pull_whose_import_is_refused_says_so_on_the_terminal(tmp_path):
    a, b = make_clones(tmp_path)
    ids = add_notes(a, "Service", 30)
    a.commit("a: thirty notes")
    a.push()
    quiet = git(b.path, "pull", "-q", "--no-edit", "origin", "main", env=b.env)
    assert ours(quiet.stderr) == []  # an import that went through says nothing on the terminal
    mem = a.memory()
    try:  # A drops 28 of the 30: B's import of that is refused by the wipe guard
        for row in ids[:28]:
            write.delete(mem, None, observation_id=row)
    finally:
        mem.close()
    a.commit("a: drop most notes")
    a.push()

    pulled = git(b.path, "pull", "-q", "--no-edit", "origin", "main", env=b.env)  # (checks git succeeded)
    assert pulled.stderr.strip().splitlines() == ours(pulled.stderr), pulled.stderr  # nothing else of ours
    (line,) = ours(pulled.stderr)
    assert line.startswith("cuba-memorys: the memory import was refused: the bundle would delete 56 rows here,"
                           " 28 of the 30 observations (93%). Way out: "), line
    assert "`cuba-memorys sync import --confirm`" in line and "--withhold-deletes" in line
    assert set(b.rows()["observations"]) == set(ids)  # nothing was deleted
    assert "error: the bundle would delete 56 rows" in (b.path / ".git" / "cuba-memorys-hooks.log").read_text()

    # B's next commit: the export is held back while that bundle waits, and says so too
    said = commit(b, "b: unrelated work")
    (held,) = ours(said)
    assert held.startswith("cuba-memorys: the memory was not exported: the import of the bundle waiting in the"
                           " folder was refused (the bundle would delete 56 rows here"), held
    assert "`cuba-memorys sync import --confirm`" in held
    assert b.cli("sync", "import", "--confirm")["tombstones_applied"] >= 28
    assert ours(commit(b, "b: after the confirmed import")) == []  # nothing refused: nothing shown


def test_a_commit_whose_export_is_refused_says_so_on_the_terminal(tmp_path):
    """B's store is put back to an older copy that lacks the 30 notes it had imported (a restored
    backup: the rows are gone with no tombstone, and the bundle is recorded as imported). The
    post-commit export would drop those 30 observations from the bundle, so the export's wipe
    guard refuses it; the commit says so, and succeeds."""
    a, b = make_clones(tmp_path)
    add_notes(a, "Parser Module", 30)
    a.commit("a: thirty notes")
    a.push()
    pulled = git(b.path, "pull", "-q", "--no-edit", "origin", "main", env=b.env)
    assert ours(pulled.stderr) == []  # imported: nothing refused
    with sqlite3.connect(Path(b.env["CUBA_DATA_DIR"]) / "memory.db") as db:  # the older copy, restored:
        db.execute("DELETE FROM observations WHERE entity_id IN (SELECT id FROM entities WHERE name = 'Parser Module')")
        db.execute("DELETE FROM tombstones")  # (the delete triggers record tombstones; an old copy has none)

    b.save("Billing", "invoices are issued on the 1st")
    said = commit(b, "b: billing")  # (git's exit status checked: the refusal never fails the commit)
    assert said.strip().splitlines() == ours(said), said
    (line,) = ours(said)
    assert line.startswith("cuba-memorys: the memory export was refused: this export would remove 30 of the 30"
                           " observations in the bundle"), line
    assert "`cuba-memorys sync export --scope all --force`" in line
    assert b.git("status", "--porcelain") == ""  # nothing was written over the bundle
