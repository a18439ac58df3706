"""cuba_sync import, diff, conflicts and resolve (issue 17): a bundle exported by one store
(SQLite, "A") imported into another (``memory``: each backend, "B"), and back. Once per bundle,
the conflict modes, counters by max, the same name made on both machines becoming one row,
deletes that propagate (withheld while unknown children exist, never resurrected; the wipe
guard and a project bundle's deletes are in test_sync_wipe.py), quarantine, facts by (subject,
predicate), the undo file, and bad bundles refused with nothing half-imported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services import incidents
from cuba_memorys.services.graph import episodes, projects, relations
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.observations import write
from cuba_memorys.services.sync import conflicts, export, importer, peers
from cuba_memorys.services.workflow import procedures

CLI = Path(sys.executable).with_name("cuba-memorys")


def out(mem, folder: Path) -> dict:
    return export.export(mem, None, dir=str(folder), scope="all")


def take(mem, folder: Path, **kw) -> dict:
    return importer.import_bundle(mem, None, dir=str(folder), **kw)


def texts(mem) -> dict[str, str]:
    """Every observation here: id -> content."""
    return {o["id"]: o["content"] for o in mem.store.sync_observations(None, True)}


def entity_files(folder: Path) -> set[str]:
    return {p.name for p in (folder / "entities").glob("*.json")}


def edit(folder: Path, obs_id: str, content: str) -> None:
    """Give one observation of the bundle another text (another machine's edit)."""
    for path in (folder / "entities").glob("*.json"):
        entity = json.loads(path.read_text())
        for obs in entity["observations"]:
            if obs["id"] == obs_id:
                obs["content"] = content
                path.write_text(json.dumps(entity, indent=2))
                return
    raise AssertionError(f"no observation {obs_id} in {folder}")


def touch(folder: Path) -> None:
    """Make the folder another bundle holding the same rows (a file's bytes change, not its data)."""
    path = folder / "projects.json"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4) + "\n")


def text_vector(mem, entity: str, content: str):
    """The vector this memory's model gives the text of an observation of ``entity`` (a concept)."""
    (vector,) = mem.embed_passages([(entity, "concept", content)])
    assert vector is not None, "these tests need the embedding model"
    return vector


def same_vector(a, b) -> bool:
    """The same direction, up to the float noise of batching (vectors are unit length)."""
    return a is not None and b is not None and float(a @ b) > 0.9999


def counters(mem) -> dict[str, tuple]:
    """Every counter an import merges by max, by table and row id."""
    store = mem.store
    rows = {f"entity {e['id']}": (e["importance"], e["access_count"]) for e in store.sync_entities(None, True)}
    rows |= {f"observation {o['id']}": (o["importance"],) for o in store.sync_observations(None, True)}
    rows |= {f"relation {r['id']}": (r["strength"],) for r in store.sync_relations(None, True)}
    rows |= {f"procedure {p['id']}": (p["success_count"], p["failure_count"])
             for p in store.sync_procedures(None, True)}
    return rows


def seed(mem) -> dict[str, str]:
    projects.switch(mem, None, name="alpha")
    ids = {"x": write.add(mem, None, entity_name="Auth Service", content="tokens expire after 15 minutes")["id"],
           "y": write.add(mem, None, entity_name="Billing", content="invoices are issued on the first day")["id"]}
    relations.create(mem, None, from_entity="Billing", to_entity="Auth Service", relation_type="depends_on")
    episodes.add(mem, None, entity_name="Billing", content="migrated the invoice job to the new queue")
    return ids


def test_round_trip_once_and_counters_by_max(memory, other, tmp_path):
    ids = seed(other)
    out(other, tmp_path / "b1")
    got = take(memory, tmp_path / "b1")
    # two observations and an episode without vectors: handed to the background embedding queue
    assert not got["skipped"] and got["rows_inserted"] >= 6 and got["embeddings_queued"] == 3
    assert texts(memory) == texts(other)
    rel = memory.store.sync_relations(None, True)
    assert [(r["relation_type"], r["id"]) for r in rel] == [(r["relation_type"], r["id"])
                                                             for r in other.store.sync_relations(None, True)]
    assert len(memory.store.sync_episodes(None, True)) == 1
    # found by meaning once the queue has embedded them
    assert memory.wait_for_embeddings(120)
    found = memory.store.observation_vectors([ids["x"], ids["y"]])
    assert set(found) == {ids["x"], ids["y"]}
    # the same files again: skipped, nothing inflated
    before = counters(memory)
    again = take(memory, tmp_path / "b1")
    assert again["skipped"] and "imported here already" in again["reason"]
    assert counters(memory) == before
    # the same rows in another bundle (B's own export re-imported by A): counters by max, no growth
    # in the store that import writes (A's)
    out(memory, tmp_path / "b2")
    before = counters(other)
    back = take(other, tmp_path / "b2")
    assert back["rows_inserted"] == 0 and back["conflicts_opened"] == 0
    assert len(texts(other)) == 2
    assert counters(other) == before
    # an audit event and an undo file for the import
    assert Path(got["undo_file"]).is_file()


def set_counters(folder: Path, importance: float, access: int, strength: float, runs: tuple[int, int]) -> None:
    """Hand-set the counters of Billing, its observation, the relation and the procedure."""
    path = next((folder / "entities").glob("billing-*.json"))
    entity = json.loads(path.read_text())
    entity["importance"], entity["access_count"] = importance, access
    entity["observations"][0]["importance"] = importance
    path.write_text(json.dumps(entity, indent=2))
    for name, field_values in (("relations.json", {"strength": strength}),
                               ("procedures.json", {"success_count": runs[0], "failure_count": runs[1]})):
        rows = [dict(r, **field_values) for r in json.loads((folder / name).read_text())]
        (folder / name).write_text(json.dumps(rows, indent=2))


def test_higher_incoming_counters_are_taken_and_lower_ones_ignored(memory, other, tmp_path):
    ids = seed(other)
    procedures.add(other, None, name="release", steps=[{"do": "tag the release", "run": "git tag v1"}])
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    start = counters(memory)
    assert start == counters(other)
    billing = other.store.sync_entity_named("Billing", other.scope(None).project_id)["id"]
    (rel,) = [k for k in start if k.startswith("relation ")]
    (proc,) = [k for k in start if k.startswith("procedure ")]
    raised = {f"entity {billing}": (0.9, 7), f"observation {ids['y']}": (0.9,), rel: (0.99,), proc: (5, 2)}
    assert all(start[k] < v for k, v in raised.items())
    set_counters(tmp_path / "a1", 0.9, 7, 0.99, (5, 2))
    got = take(memory, tmp_path / "a1")
    assert not got["skipped"] and got["rows_inserted"] == 0 and got["conflicts_opened"] == 0
    assert counters(memory) == start | raised
    # lower values in a later bundle: the max stays
    set_counters(tmp_path / "a1", 0.1, 1, 0.1, (0, 0))
    assert not take(memory, tmp_path / "a1")["skipped"]
    assert counters(memory) == start | raised


def test_same_names_made_on_both_machines_become_one_row(memory, other, tmp_path):
    seed(other)
    projects.switch(memory, None, name="alpha")
    mine = write.add(memory, None, entity_name="Auth Service", content="B wrote this about the auth service")["id"]
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    out(memory, tmp_path / "b1")
    take(other, tmp_path / "b1")
    # both now hold every observation, under one project id and one entity id per name
    assert texts(memory) == texts(other) and mine in texts(other)
    out(other, tmp_path / "a2")
    out(memory, tmp_path / "b2")
    assert entity_files(tmp_path / "a2") == entity_files(tmp_path / "b2")
    assert len(entity_files(tmp_path / "a2")) == 2  # Auth Service, Billing — not one file per machine
    assert [p["id"] for p in memory.store.sync_projects(None, True)] == \
        [p["id"] for p in other.store.sync_projects(None, True)]


def test_changed_on_both_sides_opens_one_conflict_and_resolve(memory, other, tmp_path):
    ids = seed(other)
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    feedback.correct(other, None, observation_id=ids["x"], correction="tokens expire after 30 minutes")
    projects.switch(memory, None, name="alpha")
    feedback.correct(memory, None, observation_id=ids["x"], correction="tokens expire after 60 minutes")
    out(other, tmp_path / "a2")
    got = take(memory, tmp_path / "a2")
    assert got["diverged"] == 1 and got["conflicts_opened"] == 1 and got["edited_since_export"] in (0, 1)
    assert texts(memory)[ids["x"]] == "tokens expire after 60 minutes"  # ours kept
    listed = conflicts.conflicts(memory, None)
    assert listed["total_open"] == 1
    (c,) = listed["conflicts"]
    assert (c["ours"], c["theirs"]) == ("tokens expire after 60 minutes", "tokens expire after 30 minutes")
    # the same divergence in another bundle does not open a second conflict
    (tmp_path / "a2" / "README").write_text("not a bundle file")
    shutil.copytree(tmp_path / "a2", tmp_path / "a3")
    touch(tmp_path / "a3")
    assert take(memory, tmp_path / "a3")["conflicts_opened"] == 0
    done = conflicts.resolve(memory, None, id=c["id"], keep="both")
    assert done["kept"] == "both"
    row = memory.store.sync_local_rows("observations", [ids["x"]])[ids["x"]]
    assert row["content"] == "tokens expire after 60 minutes"
    assert "tokens expire after 30 minutes" in [v["content"] for v in row["previous_versions"]]
    assert conflicts.conflicts(memory, None)["total_open"] == 0
    with pytest.raises(InvalidInput, match="resolved already"):
        conflicts.resolve(memory, None, id=c["id"], keep="theirs")
    with pytest.raises(NotFound):
        conflicts.resolve(memory, None, id="00000000-0000-4000-8000-000000000000")


def test_resolve_theirs_and_a_later_edit_is_taken(memory, other, tmp_path):
    ids = seed(other)
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    # one side edits: the other takes it (no conflict)
    feedback.correct(other, None, observation_id=ids["y"], correction="invoices are issued on the second day")
    out(other, tmp_path / "a2")
    got = take(memory, tmp_path / "a2")
    assert got["rows_updated"] == 1 and got["conflicts_opened"] == 0
    assert texts(memory)[ids["y"]] == "invoices are issued on the second day"
    assert memory.wait_for_embeddings(120)  # the new text's vector comes from the background queue
    vec_after = memory.store.observation_vectors([ids["y"]])[ids["y"]]
    assert same_vector(vec_after, text_vector(memory, "Billing", "invoices are issued on the second day"))
    assert not same_vector(vec_after, text_vector(memory, "Billing", "invoices are issued on the first day"))
    # both edit: theirs kept by resolve keep=theirs
    feedback.correct(other, None, observation_id=ids["x"], correction="tokens expire after 30 minutes")
    projects.switch(memory, None, name="alpha")
    feedback.correct(memory, None, observation_id=ids["x"], correction="tokens expire after 60 minutes")
    out(other, tmp_path / "a3")
    take(memory, tmp_path / "a3")
    (c,) = conflicts.conflicts(memory, None)["conflicts"]
    conflicts.resolve(memory, None, id=c["id"], keep="theirs")
    row = memory.store.sync_local_rows("observations", [ids["x"]])[ids["x"]]
    assert row["content"] == "tokens expire after 30 minutes"
    assert "tokens expire after 60 minutes" in [v["content"] for v in row["previous_versions"]]


def test_overwrite_and_skip_modes(memory, other, tmp_path):
    ids = seed(other)
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    feedback.correct(other, None, observation_id=ids["x"], correction="tokens expire after 30 minutes")
    projects.switch(memory, None, name="alpha")
    feedback.correct(memory, None, observation_id=ids["x"], correction="tokens expire after 60 minutes")
    feedback.correct(other, None, observation_id=ids["y"], correction="invoices are issued on the second day")
    out(other, tmp_path / "a2")
    skipped = take(memory, tmp_path / "a2", conflict="skip")
    # skip: the later edit of y is not taken either; both differing rows are conflicts
    assert skipped["rows_updated"] == 0 and skipped["diverged"] == 2
    assert texts(memory)[ids["y"]] == "invoices are issued on the first day"
    shutil.copytree(tmp_path / "a2", tmp_path / "a3")
    touch(tmp_path / "a3")
    assert memory.wait_for_embeddings(120)
    old = memory.store.observation_vectors([ids["x"]])[ids["x"]]
    assert same_vector(old, text_vector(memory, "Auth Service", "tokens expire after 60 minutes"))
    over = take(memory, tmp_path / "a3", conflict="overwrite")
    assert over["rows_updated"] == 2
    row = memory.store.sync_local_rows("observations", [ids["x"]])[ids["x"]]
    assert row["content"] == "tokens expire after 30 minutes"
    assert "tokens expire after 60 minutes" in [v["content"] for v in row["previous_versions"]]
    # the embedding is recomputed: the stored vector is the new text's, not the old one's
    assert memory.wait_for_embeddings(120)
    new = memory.store.observation_vectors([ids["x"]])[ids["x"]]
    assert same_vector(new, text_vector(memory, "Auth Service", "tokens expire after 30 minutes"))
    assert not same_vector(new, old)
    with pytest.raises(InvalidInput, match="conflict"):
        take(memory, tmp_path / "a3", conflict="theirs")


def test_deletes_propagate_withheld_and_never_resurrected(memory, other, tmp_path):
    ids = seed(other)
    extra = write.add(other, None, entity_name="Billing", content="refunds go through the ledger service")["id"]
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    # A deletes an observation: B deletes it too
    write.delete(other, None, observation_id=extra)
    out(other, tmp_path / "a2")
    got = take(memory, tmp_path / "a2")
    assert got["tombstones_applied"] == 2 and extra not in texts(memory)  # the observation and its fact
    # A deletes the whole Auth Service entity; B wrote to it meanwhile: entity withheld, A's child deleted
    projects.switch(memory, None, name="alpha")
    kept = write.add(memory, None, entity_name="Auth Service", content="B added: refresh tokens rotate")["id"]
    auth = other.store.sync_entity_named("Auth Service", other.scope(None).project_id)
    other.store.delete_entity(auth["id"])
    out(other, tmp_path / "a3")
    got = take(memory, tmp_path / "a3")
    assert got["tombstones_withheld"] >= 1
    assert ids["x"] not in texts(memory) and kept in texts(memory)
    assert memory.store.sync_local_rows("entities", [auth["id"]])
    # B deletes y; an older bundle of A that still has y does not bring it back
    write.delete(memory, None, observation_id=ids["y"])
    shutil.copytree(tmp_path / "a3", tmp_path / "a4")
    (tmp_path / "a4" / "README.md").write_text("x")
    touch(tmp_path / "a4")
    again = take(memory, tmp_path / "a4")
    assert ids["y"] not in texts(memory) and again["deleted_here_kept_deleted"] >= 1
    assert again["files_not_read"] == [] and "not read" not in again.get("note", "")


def test_files_that_are_not_the_bundles_are_not_named_as_unread(memory, other, tmp_path):
    """A README, a peer's inbox (a whole bundle, in .peer-inbox/), hidden temporary files and a
    merge's *.orig leftovers are not bundle files: the import and diff name none of them; a
    decisions/ file (an older original's) is named."""
    seed(other)
    folder = tmp_path / "a1"
    out(other, folder)
    (folder / "README.md").write_text("this folder is the memory's bundle\n")
    shutil.copytree(folder, tmp_path / "inbox-copy")
    shutil.move(str(tmp_path / "inbox-copy"), str(folder / ".peer-inbox" / "laptop"))
    (folder / ".manifest.json.x1y2.tmp").write_text("{}")
    (folder / "entities" / ".billing.json.tmp").write_text("{}")
    (folder / "facts.json.orig").write_text("[]")
    assert conflicts.diff(memory, None, dir=str(folder))["files_not_read"] == []
    got = take(memory, folder)
    assert got["rows_inserted"] > 0 and got["files_not_read"] == [] and "not read" not in got.get("note", "")
    (folder / "decisions").mkdir()
    (folder / "decisions" / "d1.json").write_text("{}")
    named = take(memory, folder)["files_not_read"]
    assert [f["path"] for f in named] == ["decisions/d1.json"]


def test_the_open_client_follows_a_re_keyed_project_and_a_vanished_one_is_a_clear_error(memory, other, tmp_path):
    """The import that re-keys the active project (both machines made "alpha") moves this
    process's client to the new id: its next project export works (it raised IndexError). A
    project that really went leaves a clear error, not an IndexError."""
    mine = projects.switch(memory, None, name="alpha")["project"]["id"]
    theirs = "00000000-0000-4000-8000-000000000001"  # smaller than any other: B's alpha is the one re-keyed
    at = iso(utc_now())
    other.store.sync_insert("projects", {"id": theirs, "name": "alpha", "created_at": at, "last_active_at": at})
    assert projects.switch(other, None, name="alpha")["project"]["id"] == theirs
    write.add(other, None, entity_name="Thing", content="a note about alpha from A")
    write.add(memory, None, entity_name="Mine", content="a note about alpha from B")
    export.export(other, None, dir=str(tmp_path / "a1"))
    with memory.acting_for(None):  # as over MCP: PostgreSQL's row-level security binds the active project
        got = take(memory, tmp_path / "a1")
    assert got["projects_rekeyed"] == 1 and memory.scope(None).project_id == theirs
    assert not memory.store.sync_projects(mine, False)  # B's old alpha is gone
    done = export.export(memory, None, dir=str(tmp_path / "b1"))
    assert done["project_id"] == theirs and done["counts"]["observations"] == 2
    gone = projects.switch(memory, None, name="gamma")["project"]["id"]
    memory.store.sync_delete("projects", "id", gone)  # (another process deleted it)
    with pytest.raises(InvalidInput, match="no longer exists"):
        export.export(memory, None, dir=str(tmp_path / "b2"))


def test_episode_error_procedure_and_project_deletes_travel(memory, other, tmp_path):
    seed(other)
    error = incidents.report(other, None, error_type="TypeError", error_message="the invoice job got None")
    procedures.add(other, None, name="release", steps=[{"do": "tag the release", "run": "git tag v1"}])
    gamma = projects.switch(other, None, name="gamma")["project"]["id"]
    projects.switch(other, None, name="alpha")
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    doomed = {"episodes": other.store.sync_episodes(None, True)[0]["id"], "errors": error["error_id"],
              "procedures": other.store.sync_procedures(None, True)[0]["id"], "projects": gamma}
    assert all(memory.store.sync_local_rows(t, [i]) for t, i in doomed.items())
    with other.store.transaction():  # no tool deletes a single episode or error: the store's own delete
        other.store.sync_delete("episodes", "id", doomed["episodes"])
        other.store.sync_delete("errors", "id", doomed["errors"])
    procedures.delete(other, None, name="release")
    projects.merge(other, None, name="gamma", to="alpha")  # the merged project's row goes
    for table, row_id in doomed.items():  # each delete recorded by its trigger
        assert [t["origin_node"] for t in other.store.tombstone_rows(table, [row_id])] == [other.store.node_id()]
    out(other, tmp_path / "a2")
    listed = {(t["table_name"], t["row_id"]) for t in json.loads((tmp_path / "a2" / "tombstones.json").read_text())}
    assert set(doomed.items()) <= listed
    got = take(memory, tmp_path / "a2")
    assert got["tombstones_applied"] == 4 and got["tombstones_withheld"] == 0
    for table, row_id in doomed.items():  # applied here, and kept to travel on
        assert memory.store.sync_local_rows(table, [row_id]) == {}, table
        assert [t["origin_node"] for t in memory.store.tombstone_rows(table, [row_id])] == [other.store.node_id()]
    assert len(texts(memory)) == 2


def test_a_plain_import_closes_the_notice_of_its_bundle(memory, other, tmp_path):
    seed(other)
    bundle = out(other, tmp_path / "a1")
    peers.notify(memory, None, summary="A wrote about billing", node_id=bundle["node_id"],
                 manifest_hash=bundle["manifest_hash"])
    peers.notify(memory, None, summary="A's next bundle", node_id=bundle["node_id"], manifest_hash="f" * 64)
    assert len(memory.store.open_peer_notices(20)) == 2
    got = take(memory, tmp_path / "a1")
    assert got["peer_notices_closed"] == 1
    assert [n["manifest_hash"] for n in memory.store.open_peer_notices(20)] == ["f" * 64]


def test_hand_edited_file_is_imported_and_credentials_quarantined(memory, other, tmp_path):
    seed(other)
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    path = next((tmp_path / "a1" / "entities").glob("billing-*.json"))
    entity = json.loads(path.read_text())
    new = dict(entity["observations"][0], id="11111111-2222-4333-8444-555555555555",
               content="the deploy password = Hunter2Hunter2Hunter2 for the billing box")
    entity["observations"].append(new)
    path.write_text(json.dumps(entity, indent=2))
    got = take(memory, tmp_path / "a1")
    assert not got["skipped"] and got["rows_inserted"] == 1 and got["quarantined"] == 1
    assert got["quarantine_reasons"]
    row = memory.store.sync_local_rows("observations", [new["id"]])[new["id"]]
    assert row["trust"] == "quarantined"


@pytest.mark.parametrize("breakage", ["truncated", "wrong type", "bad enum", "no manifest"])
def test_broken_bundles_are_refused_and_nothing_is_imported(memory, other, tmp_path, breakage):
    seed(other)
    out(other, tmp_path / "a1")
    path = next((tmp_path / "a1" / "entities").glob("billing-*.json"))
    if breakage == "truncated":
        path.write_bytes(path.read_bytes()[:-40])
    elif breakage == "wrong type":
        data = json.loads(path.read_text())
        data["observations"][0]["importance"] = "high"
        path.write_text(json.dumps(data))
    elif breakage == "bad enum":
        data = json.loads(path.read_text())
        data["observations"][0]["observation_type"] = "rumour"
        path.write_text(json.dumps(data))
    else:
        (tmp_path / "a1" / "manifest.json").unlink()
    with pytest.raises(InvalidInput) as caught:
        take(memory, tmp_path / "a1")
    message = str(caught.value)
    assert ("manifest.json" in message) if breakage == "no manifest" else (path.name in message)
    assert texts(memory) == {} and memory.store.sync_imports(5) == []


def test_embeddings_restored_and_another_model_refused(memory, other, tmp_path):
    ids = seed(other)
    export.export(other, None, dir=str(tmp_path / "a1"), scope="all", with_embeddings=True)
    got = take(memory, tmp_path / "a1")
    assert got["embeddings_restored"] == 2 and got["embeddings_computed"] == 0
    ours = memory.store.observation_vectors([ids["x"]])[ids["x"]]
    theirs = other.store.observation_vectors([ids["x"]])[ids["x"]]
    assert float(ours @ theirs) > 0.9999
    before, imports = texts(memory), memory.store.sync_imports(5)
    manifest_path = tmp_path / "a1" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps(dict(manifest, embedding_model="some-other-model")))
    edit(tmp_path / "a1", ids["y"], "invoices are issued on the third day, says the other machine")
    with pytest.raises(InvalidInput, match="some-other-model"):
        take(memory, tmp_path / "a1")
    assert texts(memory) == before and memory.store.sync_imports(5) == imports
    # the same model, vectors of another dimension: refused too, nothing changed
    import numpy as np

    from cuba_memorys.services.sync import bundle

    manifest_path.write_text(json.dumps(dict(manifest, embedding_dim=8)))
    vectors = [(ids["x"], np.ones(8, dtype=np.float32) / np.sqrt(8))]
    (tmp_path / "a1" / bundle.EMBEDDINGS).write_bytes(bundle.encode_embeddings(vectors, 8))
    with pytest.raises(InvalidInput, match="8 dimensions"):
        take(memory, tmp_path / "a1")
    assert texts(memory) == before and memory.store.sync_imports(5) == imports
    assert float(memory.store.observation_vectors([ids["x"]])[ids["x"]] @ theirs) > 0.9999


def test_a_path_leading_out_of_the_folder_is_refused(memory, other, tmp_path):
    seed(other)
    out(other, tmp_path / "a1")
    outside = tmp_path / "elsewhere.json"
    outside.write_text("[]")
    target = tmp_path / "a1" / "relations.json"
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(InvalidInput, match="outside the sync directory"):
        take(memory, tmp_path / "a1")
    assert texts(memory) == {}


def test_facts_close_by_subject_and_predicate(memory, other, tmp_path):
    seed(other)
    out(other, tmp_path / "a1")
    facts = json.loads((tmp_path / "a1" / "facts.json").read_text())
    base = facts[0]
    older = dict(base, fact_id="aaaaaaaa-0000-4000-8000-000000000001", subject="port", predicate="is",
                 object="8080", observed_at="2026-01-01T00:00:00.000000+00:00",
                 valid_from="2026-01-01T00:00:00.000000+00:00")
    newer = dict(older, fact_id="aaaaaaaa-0000-4000-8000-000000000002", object="9090",
                 observed_at="2026-06-01T00:00:00.000000+00:00", valid_from="2026-06-01T00:00:00.000000+00:00")
    (tmp_path / "a1" / "facts.json").write_text(json.dumps([*facts, older, newer]))
    got = take(memory, tmp_path / "a1")
    assert got["facts_superseded"] >= 1
    rows = {f["fact_id"]: f for f in memory.store.sync_facts(None, True)}
    assert rows[newer["fact_id"]]["is_current"] and not rows[older["fact_id"]]["is_current"]
    assert rows[older["fact_id"]]["valid_to"] == newer["observed_at"]
    # facts of our own observations stay open: each observation's fact is its own statement
    own = [f for f in memory.store.sync_facts(None, True) if f["subject"] in ("Auth Service", "Billing")]
    assert own and all(f["is_current"] for f in own)


def test_diff(memory, other, tmp_path):
    ids = seed(other)
    out(other, tmp_path / "a1")
    before = conflicts.diff(memory, None, dir=str(tmp_path / "a1"))
    assert before["common_count"] == 0 and before["only_in_disk_count"] >= 6 and not before["already_imported"]
    take(memory, tmp_path / "a1")
    projects.switch(memory, None, name="alpha")
    mine = write.add(memory, None, entity_name="Billing", content="B only: credit notes are separate")["id"]
    after = conflicts.diff(memory, None, dir=str(tmp_path / "a1"))
    assert after["already_imported"] and after["only_in_disk_count"] == 0
    assert {"table": "observations", "id": mine} in after["only_in_db"]
    assert after["common_count"] >= 6 and ids["x"] not in {r["id"] for r in after["only_in_db"]}
    assert len(texts(memory)) == 3  # diff wrote nothing


def test_cli_diff_import_conflicts_resolve(location, other, tmp_path):
    seed(other)
    folder = tmp_path / "a1"
    out(other, folder)

    def cli(*args: str) -> dict:
        done = subprocess.run([str(CLI), "sync", *args, "--json"], env=location.env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert cli("diff", "--dir", str(folder))["only_in_disk_count"] >= 6
    assert cli("import", "--dir", str(folder))["rows_inserted"] >= 6
    path = next((folder / "entities").glob("billing-*.json"))
    entity = json.loads(path.read_text())
    entity["observations"][0]["content"] = "invoices are issued on the last day, says the other machine"
    path.write_text(json.dumps(entity, indent=2))
    assert cli("import", "--dir", str(folder))["conflicts_opened"] == 1
    (c,) = cli("conflicts")["conflicts"]
    assert cli("resolve", c["id"], "--keep", "theirs")["kept"] == "theirs"
    assert cli("conflicts")["total_open"] == 0
    refused = subprocess.run([str(CLI), "sync", "import", "--dir", str(tmp_path / "none")],
                             env=location.env(), capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "not a directory" in refused.stderr


def test_a_conflict_resolved_on_one_machine_settles_on_the_other(memory, other, tmp_path):
    ids = seed(other)
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    feedback.correct(other, None, observation_id=ids["x"], correction="tokens expire after 30 minutes")
    projects.switch(memory, None, name="alpha")
    feedback.correct(memory, None, observation_id=ids["x"], correction="tokens expire after 60 minutes")
    out(other, tmp_path / "a2")
    out(memory, tmp_path / "b2")
    assert take(memory, tmp_path / "a2")["conflicts_opened"] == 1
    assert take(other, tmp_path / "b2")["conflicts_opened"] == 1
    # A takes B's text; B sees the same text in A's next bundle and its own conflict closes
    (c,) = conflicts.conflicts(other, None)["conflicts"]
    conflicts.resolve(other, None, id=c["id"], keep="theirs")
    out(other, tmp_path / "a3")
    settled = take(memory, tmp_path / "a3")
    assert settled["conflicts_settled"] == 1 and settled["conflicts_opened"] == 0
    assert conflicts.conflicts(memory, None)["total_open"] == 0
    assert texts(memory)[ids["x"]] == texts(other)[ids["x"]] == "tokens expire after 60 minutes"
