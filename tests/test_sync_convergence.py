"""Sync between two machines over many rounds (issue 17; cases found in review): what one
machine wrote, imported by the other and exported back, gives the same bytes (no file swaps in
git), facts keep their observation, a write landing during an import is planned against (never
overwritten), tombstones travel on (a row deleted on A does not come back through C), a relation
written after a delete withholds the entity's tombstone, keep=ours stays decided, credentials in
history arrive quarantined, a project admin cannot import a whole-store bundle, and a row edited
on one side only merges through git without a conflict even when it was written in a session."""

from __future__ import annotations

import difflib
import json

import pytest

from conftest import StoreLocation, settings_for
from cuba_memorys.errors import AccessDenied
from cuba_memorys.server import catalog
from cuba_memorys.server.runtime import guarded
from cuba_memorys.services import access
from cuba_memorys.services.graph import entities, episodes, projects, relations
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sessions import sessions
from cuba_memorys.services.sync import conflicts, export, import_rows, importer, merge
from test_sync_git import make_clones


# -- from the review: test_entity_tombstone_relation.py --------------------
def test_a_relation_written_after_the_delete_withholds_the_entity_tombstone(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Cache", content="entries expire after an hour")
    write.add(other, None, entity_name="Queue", content="the queue retries five times")
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    entities.delete(other, None, name="Cache")
    export.export(other, None, dir=str(tmp_path / "a2"), scope="all")
    projects.switch(memory, None, name="alpha")
    relations.create(memory, None, from_entity="Queue", to_entity="Cache", relation_type="depends_on")
    got = importer.import_bundle(memory, None, dir=str(tmp_path / "a2"))
    left = memory.store.sync_relations(None, True)
    assert left, "B's relation, written after A's delete, was deleted by the cascade"
    assert got["tombstones_withheld"] >= 1


# -- from the review: test_facts.py --------------------
def current(mem):
    return sorted((f["object"], bool(f["is_current"])) for f in mem.store.sync_facts(None, True))


def test_facts_of_two_observations_stay_open_after_import(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Auth Service", content="tokens expire after 15 minutes")
    write.add(other, None, entity_name="Auth Service", content="the signing key rotates monthly")
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    got = importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    assert current(memory) == current(other) and got["facts_superseded"] == 0


def test_imported_facts_keep_their_observation(memory, other, tmp_path):
    """The observation link is what cuba_faro as_of and a later correction's close_facts use."""
    projects.switch(other, None, name="alpha")
    row = write.add(other, None, entity_name="Auth Service", content="tokens expire after 15 minutes")["id"]
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    a = [f["observation_id"] for f in other.store.facts_of(row)]
    b = [f["observation_id"] for f in memory.store.facts_of(row)]
    assert b == a


def test_a_correction_of_an_imported_row_closes_its_old_fact(memory, other, tmp_path):
    """B writes X; A imports it and corrects it; B takes A's later edit. On both machines exactly one
    fact of X's content should stay current (the corrected text's)."""
    projects.switch(memory, None, name="alpha")
    row = write.add(memory, None, entity_name="Runbook", content="deploy with make release")["id"]
    export.export(memory, None, dir=str(tmp_path / "b1"), scope="all")
    importer.import_bundle(other, None, dir=str(tmp_path / "b1"))
    feedback.correct(other, None, observation_id=row, correction="deploy with make release-prod")
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    assert current(other) == [("deploy with make release", False), ("deploy with make release-prod", True)]
    assert current(memory) == current(other)


# -- from the review: test_git_pingpong.py --------------------
def test_rows_written_on_one_side_do_not_flip_between_machines(tmp_path):
    a, b = make_clones(tmp_path)
    a.save("Auth Service", "tokens expire after 15 minutes")
    a.commit("a: auth")
    a.push()
    b.pull()
    (b.path / "notes.txt").write_text("unrelated work\n")
    b.git("add", "-A")
    b.git("commit", "-q", "-m", "b: unrelated")  # post-commit: sync export --scope all
    flips = []
    changed = b.git("status", "--porcelain")
    if changed:
        flips.append(("B", changed, b.git("diff")))
        b.git("add", "-A")
        b.git("-c", "core.hooksPath=/nonexistent", "commit", "-q", "-m", "b: memory")
    b.push()
    a.pull()
    (a.path / "notes.txt").write_text("more unrelated work\n")
    a.git("add", "-A")
    a.git("commit", "-q", "-m", "a: unrelated")
    changed = a.git("status", "--porcelain")
    if changed:
        flips.append(("A", changed, a.git("diff")))
    assert not flips, flips


# -- from the review: test_import_race.py --------------------
def test_a_correction_during_the_import_is_not_lost(memory, other, tmp_path, monkeypatch):
    projects.switch(other, None, name="alpha")
    row = write.add(other, None, entity_name="Runbook", content="deploy with make release")["id"]
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    feedback.correct(other, None, observation_id=row, correction="deploy with make release-prod")
    export.export(other, None, dir=str(tmp_path / "a2"), scope="all")

    embed = import_rows.Job.embed

    calls = []

    def embed_while_someone_writes(job):
        embed(job)
        calls.append(job)
        if len(calls) == 1:
            # the import's first embed, before its transaction: another agent corrects the row now
            # (once the transaction has begun, a second agent waits for it to commit)
            projects.switch(memory, "agent-2", name="alpha")
            feedback.correct(memory, "agent-2", observation_id=row, correction="deploy with ./release.sh")

    monkeypatch.setattr(import_rows.Job, "embed", embed_while_someone_writes)
    importer.import_bundle(memory, None, dir=str(tmp_path / "a2"))
    obs = memory.store.sync_local_rows("observations", [row])[row]
    texts = [obs["content"], *[v.get("content") for v in obs["previous_versions"]]]
    assert "deploy with ./release.sh" in texts


# -- from the review: test_merge_session.py --------------------
def test_untouched_row_takes_the_other_sides_edit(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    sessions.start(other, None, name="work")
    row = write.add(other, None, entity_name="Runbook", content="deploy with make release")["id"]
    export.export(other, None, dir=str(tmp_path / "base"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "base"))
    export.export(memory, None, dir=str(tmp_path / "ours"), scope="all")
    feedback.correct(other, None, observation_id=row, correction="deploy with make release-prod")
    export.export(other, None, dir=str(tmp_path / "theirs"), scope="all")
    (name,) = [p.name for p in (tmp_path / "base" / "entities").glob("*.json")]
    read = lambda side: (tmp_path / side / "entities" / name).read_bytes()  # noqa: E731
    merged, conflicts = merge.merge_bytes("entity", read("base"), read("ours"), read("theirs"))
    obs = json.loads(merged)["observations"][0]
    assert conflicts == 0 and obs["content"] == "deploy with make release-prod"


# -- from the review: test_pingpong.py --------------------
def test_imported_rows_export_to_the_same_bytes(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Auth Service", content="tokens expire after 15 minutes")
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    assert memory.wait_for_embeddings(120)  # the row's embedding_model is exported: the queue's vector first
    export.export(memory, None, dir=str(tmp_path / "b1"), scope="all")
    diffs = []
    for path in sorted((tmp_path / "a1").rglob("*.json")):
        rel = path.relative_to(tmp_path / "a1")
        if rel.name == "manifest.json":
            continue
        theirs = (tmp_path / "b1" / rel)
        a_text = path.read_text().splitlines()
        b_text = theirs.read_text().splitlines() if theirs.exists() else ["<missing>"]
        if a_text != b_text:
            diffs.append(f"--- {rel}\n" + "\n".join(difflib.unified_diff(a_text, b_text, lineterm="", n=0)))
    assert not diffs, "\n".join(diffs)


# -- from the review: test_principal_scope.py --------------------
def test_a_project_admin_cannot_import_into_or_delete_from_other_projects(memory, other, tmp_path):
    projects.switch(other, None, name="p1")
    write.add(other, None, entity_name="Mine", content="p1 knows this")
    projects.switch(other, None, name="p2")
    theirs = write.add(other, None, entity_name="Theirs", content="p2 knows this")["id"]
    export.export(other, None, dir=str(tmp_path / "one"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "one"))  # the operator: both projects here
    other.store.delete_observation(theirs)
    write.add(other, None, entity_name="Theirs", content="p2 planted this")
    export.export(other, None, dir=str(tmp_path / "two"), scope="all")

    p1 = memory.store.get_project("p1")["id"]
    pat = access.Principal("pat", {p1: "admin"})
    projects.switch(memory, "pat/default", name="p1")
    tool = catalog.tool("cuba_sync")
    run = guarded(pat, tool, tool.action("import"))
    before = {o["id"] for o in memory.store.sync_observations(memory.store.get_project("p2")["id"], False)}
    with pytest.raises(AccessDenied, match="needs a '\\*' grant of admin"):
        run(memory, "pat/default", dir=str(tmp_path / "two"))
    after = {o["id"] for o in memory.store.sync_observations(memory.store.get_project("p2")["id"], False)}
    assert after == before, "a p1 admin changed project p2"


# -- from the review: test_resolve_ours_reopens.py --------------------
def test_keep_ours_stays_resolved(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    row = write.add(other, None, entity_name="Runbook", content="deploy with make release")["id"]
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    feedback.correct(other, None, observation_id=row, correction="deploy with make release-prod")
    feedback.correct(memory, None, observation_id=row, correction="deploy with ./release.sh")
    export.export(other, None, dir=str(tmp_path / "a2"), scope="all")
    assert importer.import_bundle(memory, None, dir=str(tmp_path / "a2"))["conflicts_opened"] == 1
    (open_one,) = conflicts.conflicts(memory, None)["conflicts"]
    conflicts.resolve(memory, None, id=open_one["id"], keep="ours")
    # A writes something else and exports again: a new bundle, same text for the row
    write.add(other, None, entity_name="Runbook", content="releases happen on Tuesdays")
    export.export(other, None, dir=str(tmp_path / "a2"), scope="all")
    again = importer.import_bundle(memory, None, dir=str(tmp_path / "a2"))
    listed = conflicts.conflicts(memory, None)
    assert listed["total_open"] == 0 and again["conflicts_opened"] == 0 and again["rows_inserted"] >= 1


# -- from the review: test_secret_history.py --------------------
SECRET = "the deploy password = Hunter2Hunter2Hunter2 for the billing box"


def test_a_credential_in_history_arrives_quarantined(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Billing", content="invoices are issued on the first day")
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    path = next((tmp_path / "a1" / "entities").glob("billing-*.json"))
    entity = json.loads(path.read_text())
    entity["observations"][0]["version"] = 2
    entity["observations"][0]["previous_versions"] = [{"content": SECRET, "version": 1}]
    path.write_text(json.dumps(entity, indent=2))
    got = importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    projects.switch(memory, None, name="alpha")
    shown = json.dumps(episodes.timeline(memory, None, entity_name="Billing"))
    assert got["quarantined"] == 1 and "Hunter2" not in shown


# -- from the review: test_tombstones.py --------------------
def tomb(folder):
    return json.loads((folder / "tombstones.json").read_text())


def test_applied_tombstone_exports_the_same(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Auth", content="tokens expire after 15 minutes")
    gone = write.add(other, None, entity_name="Auth", content="refresh tokens live 30 days")["id"]
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))
    other.store.delete_observation(gone)
    export.export(other, None, dir=str(tmp_path / "a2"), scope="all")
    got = importer.import_bundle(memory, None, dir=str(tmp_path / "a2"))
    assert got["tombstones_applied"] >= 1
    export.export(memory, None, dir=str(tmp_path / "b2"), scope="all")
    assert tomb(tmp_path / "a2") == tomb(tmp_path / "b2")


def test_tombstone_of_a_row_b_never_had_survives_b_export(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Auth", content="tokens expire after 15 minutes")
    gone = write.add(other, None, entity_name="Auth", content="refresh tokens live 30 days")["id"]
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")  # pushed, B has not pulled yet
    other.store.delete_observation(gone)
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all")  # pushed again
    importer.import_bundle(memory, None, dir=str(tmp_path / "a1"))  # B pulls both at once
    export.export(memory, None, dir=str(tmp_path / "a1"), scope="all")  # B's post-commit, same folder
    assert any(t["row_id"] == gone for t in tomb(tmp_path / "a1"))


def test_a_deleted_row_does_not_come_back_through_a_third_machine(memory, other, tmp_path):
    """A team of three sharing one bundle folder (git fast-forwards): A made X, C pulled it, A
    deleted X, B pulled (it never had X) and committed its export, C pulled B's commit and
    committed. X must not come back anywhere."""
    c = Memory.open(settings_for(StoreLocation("sqlite", tmp_path / "c")))
    try:
        shared = str(tmp_path / "shared")
        projects.switch(other, None, name="alpha")
        write.add(other, None, entity_name="Auth", content="tokens expire after 15 minutes")
        x = write.add(other, None, entity_name="Auth", content="refresh tokens live 30 days")["id"]
        export.export(other, None, dir=shared, scope="all")
        importer.import_bundle(c, None, dir=shared)  # C pulls: C has X
        other.store.delete_observation(x)
        export.export(other, None, dir=shared, scope="all")  # A commits the delete
        importer.import_bundle(memory, None, dir=shared)  # B pulls (never had X)
        export.export(memory, None, dir=shared, scope="all")  # B commits: its export rewrites tombstones.json
        importer.import_bundle(c, None, dir=shared)  # C pulls B's commit
        export.export(c, None, dir=shared, scope="all")  # C commits
        importer.import_bundle(memory, None, dir=shared)  # B pulls C's commit
        where = {name: x in {o["id"] for o in m.store.sync_observations(None, True)}
                 for name, m in (("A", other), ("B", memory), ("C", c))}
        assert not any(where.values())
    finally:
        c.close()
