"""Sync and the code features (issue 19 review), on both backends: a bundle exported after a
codegraph build leaves the codegraph out and imports into a fresh store; an older bundle that
carries code entities imports the rest and says what it left out; undoing an import that
deleted an anchored observation puts its anchors back too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import StoreLocation, settings_for
from cuba_memorys.models import CODE_ENTITY_TYPES, iso, new_id, utc_now
from cuba_memorys.services.code import codegraph
from cuba_memorys.services.graph import projects
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sync import conflicts, export, importer
from cuba_memorys.storage.anchor_rows import AnchorRow
from test_sync_hooks import git, git_env, isolated, new_repo

CODE = "def load(path):\n    return parse(path)\n\n\ndef parse(text):\n    return text.strip()\n"


@pytest.fixture
def fresh(tmp_path):
    """Another SQLite memory (its own node id): the machine the bundle goes to."""
    mem = Memory.open(settings_for(StoreLocation("sqlite", tmp_path / "fresh")))
    yield mem
    mem.close()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    env = git_env(tmp_path / "home")
    isolated(monkeypatch, env)  # in-process calls run git too: the test's environment
    root = new_repo(tmp_path / "alpha", env)
    (root / "app.py").write_text(CODE)
    git(root, "add", ".", env=env)
    git(root, "commit", "-q", "-m", "code", env=env)
    return root.resolve()


def texts(mem) -> dict[str, str]:
    return {o["id"]: o["content"] for o in mem.store.sync_observations(None, True)}


def test_a_bundle_exported_after_a_codegraph_build_imports_into_a_fresh_store(memory, fresh, repo, tmp_path):
    projects.switch(memory, None, name="alpha")
    note = write.add(memory, None, entity_name="Loader", content="load must stay idempotent for retries")["id"]
    built = codegraph.build(memory, path=str(repo), cwd=repo, project="alpha")
    assert built["symbols_written"] == 2
    done = export.export(memory, None, dir=str(tmp_path / "b"), scope="all")
    assert done["counts"]["entities"] == 1  # the codegraph stays out of the bundle
    for path in (tmp_path / "b" / "entities").glob("*.json"):
        assert json.loads(path.read_text())["entity_type"] not in CODE_ENTITY_TYPES
    relations = json.loads((tmp_path / "b" / "relations.json").read_text())
    assert relations == []  # the `uses` edge between the two symbols is not exported
    compared = conflicts.diff(memory, None, dir=str(tmp_path / "b"))  # nor does diff count the codegraph
    assert compared["only_in_db_count"] == 0 and compared["only_in_disk_count"] == 0
    got = importer.import_bundle(fresh, None, dir=str(tmp_path / "b"))
    assert not got["skipped"] and got["code_rows_skipped"] == 0
    assert set(texts(fresh)) == {note}


def test_an_older_bundle_with_code_entities_imports_the_rest_and_reports_them(memory, fresh, repo, tmp_path):
    projects.switch(fresh, None, name="alpha")
    note = write.add(fresh, None, entity_name="Loader", content="load must stay idempotent for retries")["id"]
    export.export(fresh, None, dir=str(tmp_path / "b"), scope="all")
    # what an export before the fix wrote: a code_symbol entity with its observation and an edge
    (plain,) = (tmp_path / "b" / "entities").glob("*.json")
    entity = json.loads(plain.read_text())
    code_id = new_id()
    code = dict(entity, id=code_id, name="app.py::load", entity_type="code_symbol",
                observations=[dict(entity["observations"][0], id=new_id(), content="function `load` in app.py:1-2")])
    (tmp_path / "b" / "entities" / f"app-py-load-{code_id[:8]}.json").write_text(json.dumps(code))
    rel = {"id": new_id(), "from_entity": entity["id"], "to_entity": code_id, "relation_type": "uses",
           "strength": 0.5, "bidirectional": False, "project_id": entity["project_id"],
           "created_at": iso(utc_now()), "provenance": "extracted"}
    (tmp_path / "b" / "relations.json").write_text(json.dumps([rel]))
    got = importer.import_bundle(memory, None, dir=str(tmp_path / "b"))
    assert not got["skipped"] and got["code_rows_skipped"] == 3  # the entity, its observation, the edge
    assert "codegraph build" in got["note"]
    assert set(texts(memory)) == {note}
    assert memory.store.sync_relations(None, True) == []


def _anchor(mem, obs_id: str, repo: Path) -> AnchorRow:
    now = iso(utc_now())
    row = AnchorRow(id=new_id(), observation_id=obs_id, project_id=None, repo_root=str(repo), commit_sha=None,
                    path="app.py", symbol="load", line_start=1, line_end=2, span_hash="0" * 64, created_at=now,
                    updated_at=now, status=None, status_checked_at=None, changed_since=None)
    mem.store.add_anchors([row])
    return row


def test_undoing_an_import_that_deleted_an_anchored_observation_restores_its_anchors(memory, fresh, repo,
                                                                                      tmp_path):
    projects.switch(fresh, None, name="alpha")
    ids = [write.add(fresh, None, entity_name="Loader", content=text)["id"]
           for text in ("load must stay idempotent for retries", "parse strips whitespace only")]
    export.export(fresh, None, dir=str(tmp_path / "b1"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "b1"))
    anchor = _anchor(memory, ids[0], repo)
    write.delete(fresh, None, observation_id=ids[0])
    export.export(fresh, None, dir=str(tmp_path / "b2"), scope="all")
    done = importer.import_bundle(memory, None, dir=str(tmp_path / "b2"))
    assert done["tombstones_applied"] >= 1 and ids[0] not in texts(memory)
    assert memory.store.anchors_of([ids[0]]) == {}  # gone with the observation (cascade)
    undo.apply(memory, done["undo_file"])
    assert ids[0] in texts(memory)
    (back,) = memory.store.anchors_of([ids[0]])[ids[0]]
    assert (back["id"], back["path"], back["symbol"], back["repo_root"]) == (
        anchor["id"], "app.py", "load", str(repo))
