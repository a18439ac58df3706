"""Sync settles after a conflict (issue 30 item 3): two machines edit one observation, the merge
opens a conflict, `sync resolve` keeps both, and the result travels back and forth through git
with the merge driver. Once every machine has what the other wrote, an export changes no file:
both stores hold the replaced version the same way (one closing time of its fact, one entry in
previous_versions), and no merge carries a version twice.

Real git and the real hooks and CLI (tests/test_sync_git.py's clones): A on SQLite, B on the
test's backend (PostgreSQL pinned with `git config cuba-memorys.database-url`, as a user would).
"""

from __future__ import annotations

import json
from collections import Counter

from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.sync import bundle, merge
from test_sync_git import Clone, make_clones

FIRST, OURS, THEIRS = "deploy with make release", "deploy with ./release.sh", "deploy with make release-prod"


def correct(clone: Clone, row: str, text: str) -> None:
    mem = clone.memory()
    try:
        feedback.correct(mem, None, observation_id=row, correction=text)
    finally:
        mem.close()


def stored(clone: Clone, row: str) -> tuple[str, list[dict], list[tuple[str, str | None, bool]]]:
    """The row as the store holds it: its text and previous_versions, and every fact's (text,
    valid_to, is_current)."""
    mem = clone.memory()
    try:
        obs = mem.store.sync_local_rows("observations", [row])[row]
        facts = sorted((f["object"], f["valid_to"], bool(f["is_current"])) for f in mem.store.sync_facts(None, True))
        return obs["content"], obs["previous_versions"], facts
    finally:
        mem.close()


def committed_versions(clone: Clone) -> list[str]:
    """The previous_versions' texts of the Runbook entity file at HEAD (with repeats)."""
    name = next(p.name for p in (clone.path / ".cuba-memorys" / "entities").glob("runbook-*.json"))
    entity = json.loads(clone.git("show", f"HEAD:.cuba-memorys/entities/{name}"))
    return [v["content"] for o in entity["observations"] for v in o["previous_versions"]]


def conflict_resolved_with_both(tmp_path, database_url: str) -> tuple[Clone, Clone, str]:
    """A and B both correct one row; B merges (the driver records A's text as a conflict, the
    post-merge import opens it) and resolves it keeping both."""
    a, b = make_clones(tmp_path, database_url)
    row = a.save("Runbook", FIRST)
    a.commit("a: runbook")
    a.push()
    b.pull()
    correct(a, row, THEIRS)
    correct(b, row, OURS)
    a.commit("a: prod target")
    a.push()
    b.commit("b: script")
    b.pull("--no-rebase")
    listed = b.cli("sync", "conflicts")
    assert listed["open"] == 1, listed
    assert b.cli("sync", "resolve", listed["conflicts"][0]["id"], "--keep", "both")["kept"] == "both"
    return a, b, row


def test_a_conflict_resolved_with_both_settles_on_both_machines(tmp_path, location):
    a, b, row = conflict_resolved_with_both(tmp_path, location.database_url)
    b.commit("b: resolved")
    b.push()
    a.pull()  # a fast-forward: A takes B's result (its own text is in the row's previous_versions)
    a.commit("a: took the resolution")
    a.push()
    b.pull()
    b.commit("b: after A's round")
    b.push()
    a.pull()
    for clone in (a, b):
        again = clone.cli("sync", "export", "--scope", "all")
        assert again["unchanged"] is True, (clone.path.name, again["files_written"], clone.git("diff"))
        assert clone.git("status", "--porcelain") == ""
    assert stored(a, row) == stored(b, row)
    content, versions, _ = stored(a, row)
    assert content == OURS
    assert Counter(v["content"] for v in versions) == {FIRST: 1, THEIRS: 1}
    assert Counter(committed_versions(a)) == {FIRST: 1, THEIRS: 1}


def test_both_machines_writing_after_the_resolution_merge_and_settle(tmp_path, location):
    """After the resolution each machine writes and commits before it pulls: both pulls are real
    merges of the Runbook file through the driver, in both directions."""
    a, b, row = conflict_resolved_with_both(tmp_path, location.database_url)
    b.save("Runbook", "B's note after the resolution")
    b.commit("b: resolved, and a note")
    b.push()
    a.save("Runbook", "A's note written before it pulled")
    a.commit("a: a note")
    a.pull("--no-rebase")  # A merges B's result into its own Runbook file
    assert a.git("ls-files", "--unmerged") == ""
    assert Counter(versions for versions in committed_versions(a)) == {FIRST: 1, THEIRS: 1}
    a.commit("a: after the merge")
    a.push()
    b.save("Runbook", "B's second note, before it pulled")
    b.commit("b: second note")
    b.pull("--no-rebase")  # and B merges A's back
    b.commit("b: after the merge")
    b.push()
    a.pull()
    for clone in (a, b):
        again = clone.cli("sync", "export", "--scope", "all")
        assert again["unchanged"] is True, (clone.path.name, again["files_written"], clone.git("diff"))
    assert stored(a, row) == stored(b, row) and stored(a, row)[0] == OURS
    assert a.rows() == b.rows() and len(a.rows()["observations"]) == 4
    assert Counter(committed_versions(b)) == {FIRST: 1, THEIRS: 1}


def test_the_driver_keeps_a_version_once_when_the_sides_recorded_it_differently(tmp_path):
    """The same replaced version, kept by each machine with its own time and node: one entry."""
    def side(node: str, at: str) -> dict:
        return {"id": "e1", "name": "Runbook", "observations": [{
            "id": "o1", "content": OURS, "version": 2, "updated_at": at,
            "previous_versions": [{"content": FIRST, "version": 1, "origin_node": node, "corrected_at": at}]}]}

    base = {"id": "e1", "name": "Runbook", "observations": [{"id": "o1", "content": FIRST, "version": 1,
                                                             "updated_at": "2026-01-01T00:00:00+00:00",
                                                             "previous_versions": []}]}
    ours, theirs = side("node-a", "2026-01-02T10:00:00+00:00"), side("node-b", "2026-01-02T11:00:00+00:00")
    one, _ = merge.merge_bytes("entity", bundle.encode(base), bundle.encode(ours), bundle.encode(theirs))
    other, _ = merge.merge_bytes("entity", bundle.encode(base), bundle.encode(theirs), bundle.encode(ours))
    versions = json.loads(one)["observations"][0]["previous_versions"]
    assert versions == [theirs["observations"][0]["previous_versions"][0]]  # the later one, whichever side
    assert one == other
