"""The deletes a bundle carries, where they must stop (issue 17): the wipe guard (an import that
would delete >= 25 rows and > 10 % of the observations is refused without confirm; withhold takes
the rest), and a project bundle's tombstones, which delete only rows of its project, here and
further on: one of a row this node never had is kept for that project's bundles only, never
passed on in a bundle of every project (where a third node would apply it to another project's
row). Store A is its own SQLite memory; ``memory`` (each backend) is B; C another SQLite one.
(Moved out of test_sync_import.py, which had grown past its size.)"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from conftest import StoreLocation, settings_for
from cuba_memorys.errors import Conflict
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services import memory as memory_module
from cuba_memorys.services.graph import projects, relations
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sync import export, importer
from test_sync_import import out, take, texts, touch

QUIET = {"embed_model": "none"}  # no vectors needed: these tests count and name rows


@pytest.fixture
def third(tmp_path):
    """Store C: a third SQLite memory."""
    mem = Memory.open(replace(settings_for(StoreLocation("sqlite", tmp_path / "c")), **QUIET), check_model=False)
    yield mem
    mem.close()


def test_a_project_bundle_deletes_only_rows_of_its_project(memory, other, tmp_path):
    projects.switch(other, None, name="beta")
    victim = write.add(other, None, entity_name="Beta Thing", content="beta runs on port 8081")["id"]
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Alpha Thing", content="alpha runs on port 8080")
    gone = write.add(other, None, entity_name="Alpha Thing", content="alpha had a staging box")["id"]
    out(other, tmp_path / "all")
    take(memory, tmp_path / "all")
    projects.switch(other, None, name="beta")
    write.delete(other, None, observation_id=victim)
    projects.switch(other, None, name="alpha")
    write.delete(other, None, observation_id=gone)
    alpha = export.export(other, None, dir=str(tmp_path / "alpha"))  # project scope: alpha's tombstones only
    assert alpha["project_id"] is not None and alpha["tombstones"] == 2
    # a hand edit (or a merge) puts beta's tombstones into alpha's bundle too
    out(other, tmp_path / "all")
    shutil.copy(tmp_path / "all" / "tombstones.json", tmp_path / "alpha" / "tombstones.json")
    got = take(memory, tmp_path / "alpha")
    assert got["scope_enforced"] and got["tombstones_applied"] == 2 and got["tombstones_out_of_scope"] == 2
    assert "another project" in got["note"]
    assert gone not in texts(memory) and victim in texts(memory)
    assert memory.store.tombstone_rows("observations", [victim]) == []  # not kept either: it was not applied
    # the bundle of every project deletes it
    got = take(memory, tmp_path / "all")
    assert got["tombstones_applied"] == 2 and got["tombstones_out_of_scope"] == 0 and victim not in texts(memory)


def test_wipe_guard_refuses_then_confirm_or_withhold(memory, other, tmp_path):
    projects.switch(other, None, name="alpha")
    made = write.batch_add(other, None, observations=[
        {"entity_name": "Bulk", "content": f"bulk fact number {i} about the importer, item {i * 7919}"}
        for i in range(30)])["ids"]
    out(other, tmp_path / "a1")
    take(memory, tmp_path / "a1")
    for obs_id in made[:28]:
        write.delete(other, None, observation_id=obs_id)
    out(other, tmp_path / "a2")
    before = texts(memory)
    with pytest.raises(Conflict, match="would delete 56 rows here, 28 of the 30 observations"):  # + their facts
        take(memory, tmp_path / "a2")
    assert texts(memory) == before and not memory.store.sync_imported(
        importer.reader.read(tmp_path / "a2").manifest_hash)
    held = take(memory, tmp_path / "a2", deletes="withhold")
    assert held["tombstones_withheld"] == 56 and texts(memory) == before
    shutil.copytree(tmp_path / "a2", tmp_path / "a3")
    touch(tmp_path / "a3")
    done = take(memory, tmp_path / "a3", confirm=True)
    assert done["tombstones_applied"] == 56 and len(texts(memory)) == 2
    # and the undo file brings them back
    undo.apply(memory, done["undo_file"])
    assert len(texts(memory)) == 30


@pytest.mark.parametrize(("local", "deleted", "relation", "refused"), [
    (200, 13, False, False),  # 26 rows (each observation's fact counts) but 6.5% of the observations
    (100, 11, False, False),  # 11% of the observations but 22 rows
    (100, 13, False, True),  # 26 rows and 13%: refused
    (130, 13, False, False),  # exactly 10% is not more than 10%
    (96, 12, False, False),  # 12.5% but 24 rows, one short
    (96, 12, True, True),  # the same and a relation: exactly 25 rows, refused
])
def test_wipe_guard_at_its_edges(location, tmp_path, local, deleted, relation, refused):
    """≥ 25 rows (cascades and facts counted) and > 10% of the local observations, both."""
    a = Memory.open(replace(settings_for(StoreLocation("sqlite", tmp_path / "a")), **QUIET), check_model=False)
    b = Memory.open(replace(settings_for(location), **QUIET), check_model=False)
    try:
        projects.switch(a, None, name="alpha")
        made = [i for start in range(0, local, 50) for i in write.batch_add(a, None, observations=[
            {"entity_name": f"Bulk {i % 5}", "content": f"bulk fact number {i}, item {i * 7919}"}
            for i in range(start, min(local, start + 50))])["ids"]]
        relations.create(a, None, from_entity="Bulk 0", to_entity="Bulk 1", relation_type="uses")
        out(a, tmp_path / "a1")
        take(b, tmp_path / "a1")
        assert len(texts(b)) == local
        for obs_id in made[:deleted]:
            write.delete(a, None, observation_id=obs_id)
        if relation:
            relations.delete(a, None, from_entity="Bulk 0", to_entity="Bulk 1")
        rows = 2 * deleted + relation
        out(a, tmp_path / "a2")
        if refused:
            with pytest.raises(Conflict, match=f"would delete {rows} rows here, {deleted} of the {local}"):
                take(b, tmp_path / "a2")
            assert len(texts(b)) == local and len(b.store.sync_imports(5)) == 1
        else:
            assert take(b, tmp_path / "a2")["tombstones_applied"] == rows
            assert len(texts(b)) == local - deleted
    finally:
        a.close()
        b.close()

def bundle_tombstones(folder) -> set[str]:
    return {t["row_id"] for t in json.loads((folder / "tombstones.json").read_text())}


def test_a_project_bundles_tombstone_of_a_row_absent_here_goes_on_in_that_projects_bundles_only(
        memory, other, third, tmp_path):
    """B never had the rows: it keeps both tombstones of alpha's bundle (one really alpha's, one
    beta's put in by a hand edit or a merge), passes them on in alpha's bundles, and never in
    its bundle of every project (what its post-commit hook writes), so C's beta row survives."""
    projects.switch(other, None, name="beta")
    victim = write.add(other, None, entity_name="Beta Thing", content="beta runs on port 8081")["id"]
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Alpha Thing", content="alpha runs on port 8080")
    out(other, tmp_path / "all1")
    take(third, tmp_path / "all1")  # C has both projects
    export.export(other, None, dir=str(tmp_path / "alpha"))
    take(memory, tmp_path / "alpha")  # B has alpha only
    never = write.add(other, None, entity_name="Alpha Thing", content="alpha had a staging box")["id"]
    write.delete(other, None, observation_id=never)  # a row of alpha no other node ever saw
    projects.switch(other, None, name="beta")
    write.delete(other, None, observation_id=victim)
    projects.switch(other, None, name="alpha")
    export.export(other, None, dir=str(tmp_path / "alpha"))
    out(other, tmp_path / "all2")
    shutil.copy(tmp_path / "all2" / "tombstones.json", tmp_path / "alpha" / "tombstones.json")  # the hand edit
    got = take(memory, tmp_path / "alpha")
    assert got["scope_enforced"] and got["tombstones_applied"] == 0 and got["tombstones_out_of_scope"] == 0
    kept = memory.store.tombstone_rows("observations", [never, victim])
    assert [bool(t["project_only"]) for t in kept] == [True, True]  # kept, under alpha, for alpha only
    assert {t["project_id"] for t in kept} == {got_alpha(memory)}
    projects.switch(memory, None, name="alpha")
    alpha_again = export.export(memory, None, dir=str(tmp_path / "b-alpha"))  # B's project bundle passes them on
    assert {never, victim} <= bundle_tombstones(tmp_path / "b-alpha") and alpha_again["tombstones"] >= 2
    out(memory, tmp_path / "b-all")  # B's bundle of every project does not
    assert not {never, victim} & bundle_tombstones(tmp_path / "b-all")
    assert take(third, tmp_path / "b-all")["tombstones_applied"] == 0 and victim in texts(third)
    got = take(third, tmp_path / "b-alpha")  # alpha's bundle reaches C: beta's row is still out of its reach
    assert got["tombstones_out_of_scope"] == 2 and victim in texts(third)  # the observation and its fact
    # the same deletes in A's bundle of every project: proven, they now go on everywhere
    take(memory, tmp_path / "all2")
    assert [bool(t["project_only"]) for t in memory.store.tombstone_rows("observations", [never, victim])] == \
        [False, False]
    out(memory, tmp_path / "b-all")
    assert {never, victim} <= bundle_tombstones(tmp_path / "b-all")


def got_alpha(mem) -> str:
    return next(p["id"] for p in mem.store.sync_projects(None, True) if p["name"] == "alpha")


def test_a_project_bundles_tombstones_apply_under_a_re_keyed_project(memory, other, tmp_path):
    """Both machines made "alpha": the import of the one with the smaller id re-keys the other's
    (every row moving to it). That same import's tombstones still reach alpha's rows under the
    new id, one of a row never seen is kept under it, and the importing process's own client,
    whose active project was the old id, exports alpha's bundle next (it failed with IndexError)."""
    ids = {m: projects.switch(m, None, name="alpha")["project"]["id"] for m in (memory, other)}
    small, large = sorted((memory, other), key=lambda m: ids[m])  # ids are random: roles by their order
    shared = write.add(large, None, entity_name="Thing", content="a note about alpha from the larger id")["id"]
    export.export(large, None, dir=str(tmp_path / "l1"))
    assert take(small, tmp_path / "l1")["projects_rekeyed"] == 0  # the smaller id stays
    never = write.add(small, None, entity_name="Other", content="a note the other side never gets")["id"]
    write.delete(small, None, observation_id=never)
    write.delete(small, None, observation_id=shared)
    export.export(small, None, dir=str(tmp_path / "s1"))
    got = take(large, tmp_path / "s1")  # re-keys the larger side's alpha to the smaller id
    assert got["projects_rekeyed"] == 1 and got["tombstones_out_of_scope"] == 0
    assert got["tombstones_applied"] == 2 and shared not in texts(large)  # the observation and its fact
    kept = large.store.tombstone_rows("observations", [never])
    assert [(t["project_id"], bool(t["project_only"])) for t in kept] == [(ids[small], True)]
    assert large.scope(None).project_id == ids[small]  # the open client follows the re-key
    again = export.export(large, None, dir=str(tmp_path / "l2"))
    assert again["project_id"] == ids[small] and never in bundle_tombstones(tmp_path / "l2")


def test_a_project_only_tombstone_does_not_keep_another_projects_row_out(memory, other, tmp_path):
    """A beta tombstone slipped into alpha's bundle is kept on B as alpha's, project_only: when
    the beta row itself arrives later (a bundle of every project), B takes it — the tombstone
    binds alpha's rows only, so it cannot keep another project's row out forever."""
    projects.switch(other, None, name="beta")
    victim = write.add(other, None, entity_name="Beta Thing", content="beta runs on port 8081")["id"]
    projects.switch(other, None, name="alpha")
    write.add(other, None, entity_name="Alpha Thing", content="alpha runs on port 8080")
    export.export(other, None, dir=str(tmp_path / "alpha"))
    forged = json.loads((tmp_path / "alpha" / "tombstones.json").read_text())
    forged.append({"table_name": "observations", "row_id": victim, "deleted_at": "2999-01-01T00:00:00+00:00",
                   "origin_node": "someone"})
    (tmp_path / "alpha" / "tombstones.json").write_text(json.dumps(forged))
    take(memory, tmp_path / "alpha")
    (kept,) = memory.store.tombstone_rows("observations", [victim])
    assert kept["project_only"]
    out(other, tmp_path / "all")
    got = take(memory, tmp_path / "all")
    assert got["deleted_here_kept_deleted"] == 0 and victim in texts(memory)


def test_a_running_server_follows_a_project_another_process_re_keyed(location, other, tmp_path, monkeypatch):
    """B's serve has "alpha" active when B's git hook, another process, imports A's alpha with the
    smaller id and re-keys B's: the serve's next write and export find alpha under its new id
    (they failed with a foreign-key error and "no longer exists" until a restart)."""
    monkeypatch.setattr(memory_module, "PROJECT_RECHECK_SECS", 0.0)
    serve = Memory.open(replace(settings_for(location), **QUIET), check_model=False)
    try:
        mine = projects.switch(serve, None, name="alpha")["project"]["id"]
        theirs = "00000000-0000-4000-8000-000000000001"  # smaller than any random id: A's alpha wins
        at = iso(utc_now())
        other.store.sync_insert("projects", {"id": theirs, "name": "alpha", "created_at": at, "last_active_at": at})
        projects.switch(other, None, name="alpha")
        write.add(other, None, entity_name="Thing", content="a note about alpha from A")
        write.add(serve, None, entity_name="Mine", content="a note about alpha from B")
        export.export(other, None, dir=str(tmp_path / "a1"))
        hook = Memory.open(replace(settings_for(location), **QUIET), check_model=False)
        try:
            assert take(hook, tmp_path / "a1")["projects_rekeyed"] == 1
        finally:
            hook.close()
        assert serve.scope(None).project_id == theirs != mine
        later = write.add(serve, None, entity_name="Later", content="written by serve after the hook")
        assert serve.store.sync_local_rows("observations", [later["id"]])[later["id"]]["project_id"] == theirs
        assert export.export(serve, None, dir=str(tmp_path / "b1"))["project_id"] == theirs
    finally:
        serve.close()
