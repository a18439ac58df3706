"""cuba_sync export and status (issue 17, first slice), on both backends: the bundle's layout and
fields (schema version 2), determinism, only-changed-files, tombstones recorded by the delete
triggers and removed by an undo, project vs all scope, paths escaping the sync directory, and the
manifest hash recomputed here from the files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import BACKENDS
from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services import incidents
from cuba_memorys.services.agents import artifacts
from cuba_memorys.services.graph import episodes, projects, relations
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.observations import write
from cuba_memorys.services.sync import bundle, conflicts, export, importer
from cuba_memorys.services.workflow import procedures

ENTITY_KEYS = ["id", "name", "entity_type", "importance", "access_count", "project_id", "created_at",
               "observations"]
OBSERVATION_KEYS = ["id", "content", "observation_type", "source", "importance", "tags", "project_id",
                    "session_id", "created_at", "embedding_model", "updated_at", "version", "previous_versions",
                    "origin_node", "evidence", "verification", "verified_at", "trust", "crdt_actor", "crdt_counter"]
# every other file's row keys, in the order of original-0.27.md §4e
EPISODE_KEYS = ["id", "entity_id", "content", "actors", "artifacts", "importance", "project_id", "started_at",
                "ended_at"]
ERROR_KEYS = ["id", "error_type", "error_message", "solution", "resolved", "project", "project_id", "created_at"]
LIST_KEYS = {
    "relations.json": ["id", "from_entity", "to_entity", "relation_type", "strength", "bidirectional", "project_id",
                       "created_at", "provenance"],
    "facts.json": ["fact_id", "subject", "predicate", "object", "valid_from", "observed_at", "valid_to",
                   "subject_entity_id", "project_id", "confidence", "is_current", "created_at", "layer_name"],
    "procedures.json": ["id", "name", "steps", "created_at", "updated_at", "trigger_context", "preconditions",
                        "verification", "success_count", "failure_count", "last_outcome", "last_used_at",
                        "project_id", "embedding_model"],
    "source_trust.json": ["source", "alpha", "beta", "updated_at"],
    "projects.json": ["id", "name", "created_at"],
    "tombstones.json": ["table_name", "row_id", "deleted_at", "origin_node"],
    "artifacts.json": ["id", "path", "content", "content_hash", "version", "project_id", "origin_node", "crdt_actor",
                       "crdt_counter", "updated_at"],
}
MANIFEST_KEYS = {"schema_version", "manifest_hash", "project_id", "project_name", "exported_at", "counts",
                 "with_embeddings", "embedding_dim", "node_id", "embedding_model"}
COUNT_KEYS = {"entities", "observations", "episodes", "decisions", "errors", "relations", "artifacts"}


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def recomputed_hash(root: Path) -> str:
    """The manifest hash as §4e defines it, from the files themselves."""
    manifest = json.loads((root / "manifest.json").read_text())
    lines = f"{manifest['schema_version']}\n{manifest['project_id'] or ''}\n"
    for rel, data in snapshot(root).items():
        if rel != "manifest.json":
            lines += f"{rel} {hashlib.sha256(data).hexdigest()}\n"
    return hashlib.sha256(lines.encode()).hexdigest()


def seed(mem) -> dict[str, str]:
    projects.switch(mem, None, name="alpha")
    a = write.add(mem, None, entity_name="Auth Service", content="tokens expire after 15 minutes")["id"]
    b = write.add(mem, None, entity_name="Auth Service", content="decided: rotate keys monthly",
                  observation_type="decision")["id"]
    c = write.add(mem, None, entity_name="Billing", content="invoices are issued on the 1st")["id"]
    relations.create(mem, None, from_entity="Billing", to_entity="Auth Service", relation_type="depends_on")
    projects.switch(mem, None, name="beta")
    d = write.add(mem, None, entity_name="Beta Thing", content="beta runs on port 8081")["id"]
    projects.switch(mem, None, name="alpha")
    return {"a": a, "b": b, "c": c, "d": d}


def seed_every_file(mem) -> None:
    """One row for each list file and row folder seed() leaves empty (in project alpha), and a
    tombstone; the counts seed() gives stay as they are."""
    episodes.add(mem, None, entity_name="Billing", content="migrated the invoice job to the new queue")
    incidents.report(mem, None, error_type="TypeError", error_message="the invoice job got None")
    procedures.add(mem, None, name="release", steps=[{"do": "tag the release", "run": "git tag v1"}])
    artifacts.put(mem, None, path="docs/plan.md", content="step one")
    with mem.store.transaction():
        mem.store.credit_source("agent", True, iso(utc_now()))
    gone = write.add(mem, None, entity_name="Billing", content="a row written and deleted again")["id"]
    write.delete(mem, None, observation_id=gone)


def test_layout_fields_and_manifest(memory, tmp_path):
    ids = seed(memory)
    seed_every_file(memory)
    root = tmp_path / "bundle"
    out = export.export(memory, None, dir=str(root))
    assert out["action"] == "export" and out["scope"] == "project" and out["dir"] == str(root)
    files = snapshot(root)
    entity_files = sorted(p for p in files if p.startswith("entities/"))
    auth = next(p for p in entity_files if p.startswith("entities/auth-service-"))
    assert len(entity_files) == 2 and all(p.endswith(".json") for p in entity_files)
    entity = json.loads(files[auth])
    assert list(entity) == ENTITY_KEYS and auth == f"entities/auth-service-{entity['id'][:8]}.json"
    assert {o["id"] for o in entity["observations"]} == {ids["a"], ids["b"]}
    for obs in entity["observations"]:
        assert list(obs) == OBSERVATION_KEYS
        assert obs["crdt_counter"] == obs["version"] == 1 and obs["crdt_actor"] == out["node_id"]
    assert set(bundle.LIST_FILES) == set(LIST_KEYS)
    for name, keys in LIST_KEYS.items():  # every file has rows, each with exactly the spec's keys in order
        rows = json.loads(files[name])
        assert isinstance(rows, list) and rows, name
        assert all(list(row) == keys for row in rows), (name, [list(row) for row in rows])
    for folder, keys in (("episodes/", EPISODE_KEYS), ("errors/", ERROR_KEYS)):
        rows = [json.loads(data) for path, data in files.items() if path.startswith(folder)]
        assert len(rows) == 1 and list(rows[0]) == keys, folder
    (episode_path,) = [p for p in files if p.startswith("episodes/")]
    assert episode_path.startswith(f"episodes/{json.loads(files[episode_path])['started_at'][:7]}/")
    rel = json.loads(files["relations.json"])
    assert len(rel) == 1 and rel[0]["bidirectional"] is False and rel[0]["provenance"] == "extracted"
    facts = json.loads(files["facts.json"])
    assert facts[0]["layer_name"] is None and isinstance(facts[0]["is_current"], bool)
    assert {t["table_name"] for t in json.loads(files["tombstones.json"])} == {"observations", "facts"}
    assert [p["name"] for p in json.loads(files["projects.json"])] == ["alpha"]
    manifest = json.loads(files["manifest.json"])
    assert set(manifest) == MANIFEST_KEYS and set(manifest["counts"]) == COUNT_KEYS
    assert manifest["schema_version"] == 2 and manifest["project_name"] == "alpha"
    assert manifest["counts"]["entities"] == 2 and manifest["counts"]["observations"] == 3
    assert manifest["counts"]["decisions"] == 1 and manifest["counts"]["relations"] == 1
    assert manifest["counts"]["episodes"] == manifest["counts"]["errors"] == manifest["counts"]["artifacts"] == 1
    assert manifest["node_id"] == out["node_id"] == memory.store.node_id() and len(out["node_id"]) == 36
    assert manifest["manifest_hash"] == out["manifest_hash"] == recomputed_hash(root)
    assert manifest["with_embeddings"] is False and "embeddings.bin.zst" not in files
    assert not any("Beta Thing" in data.decode() for data in files.values())  # project scope
    assert not [p for p in files if ".tmp" in p]


ORIGINAL_NODE = "7f1c2b3a-0000-4000-8000-0000000000aa"
P, AUTH, BILLING = (f"0a000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))
OBS, EPISODE, ERROR, REL, DECISION = (f"0b000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3, 4, 5))
AT = "2026-01-02T03:04:05.123Z"  # the original writes RFC 3339 with Z


def write_bundle_files(root: Path, files: dict[str, Any]) -> dict[str, str]:
    """Write each file of a bundle as the original does (JSON, two-space indent) under ``root``;
    their sha256 by relative path, for the manifest's hash."""
    hashes = {}
    for rel, value in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(value, indent=2).encode()
        (root / rel).write_bytes(data)
        hashes[rel] = hashlib.sha256(data).hexdigest()
    return hashes


def write_original_bundle(root: Path, schema: int) -> dict:
    """A bundle as the original writes it: schema 1 (0.24: no evidence, trust, version, crdt or
    provenance fields, no facts, procedures or artifacts) or 2 (0.27: every field, crdt included),
    with a decisions/ file as the original wrote, and the manifest hash over every file written."""
    old = schema == 1
    obs = {"id": OBS, "content": "tokens expire after 15 minutes", "observation_type": "fact", "source": "agent",
           "importance": 0.6, "tags": ["auth"], "project_id": P, "session_id": None, "created_at": AT,
           "embedding_model": "multilingual-e5-small"}
    if not old:
        obs |= {"updated_at": "2026-01-03T00:00:00Z", "version": 2,
                "previous_versions": [{"content": "tokens expire after 10 minutes", "version": 1}],
                "origin_node": ORIGINAL_NODE, "evidence": "observed", "verification": "read the config",
                "verified_at": "2026-01-03T00:00:00Z", "trust": "trusted", "crdt_actor": ORIGINAL_NODE,
                "crdt_counter": 2}

    def entity(entity_id: str, name: str, observations: list) -> dict:
        return {"id": entity_id, "name": name, "entity_type": "concept", "importance": 0.5, "access_count": 3,
                "project_id": P, "created_at": AT, "observations": observations}

    relation = {"id": REL, "from_entity": BILLING, "to_entity": AUTH, "relation_type": "depends_on",
                "strength": 0.7, "bidirectional": False, "project_id": P, "created_at": AT}
    files = {
        f"entities/auth-{AUTH[:8]}.json": entity(AUTH, "Auth", [obs]),
        f"entities/billing-{BILLING[:8]}.json": entity(BILLING, "Billing", []),
        f"episodes/2026-01/{EPISODE}.json": {"id": EPISODE, "entity_id": BILLING, "content": "moved the invoice job",
                                             "actors": ["ci"], "artifacts": [], "importance": 0.5, "project_id": P,
                                             "started_at": AT, "ended_at": None},
        f"errors/{ERROR}.json": {"id": ERROR, "error_type": "TypeError", "error_message": "the job got None",
                                 "solution": None, "resolved": False, "project": "alpha", "project_id": P,
                                 "created_at": AT},
        f"decisions/{DECISION}.json": {"id": DECISION, "title": "Session store", "content": "use Redis",
                                       "project_id": P, "created_at": AT},
        "relations.json": [relation if old else relation | {"provenance": "inferred"}],
        "projects.json": [{"id": P, "name": "alpha", "created_at": AT}],
        "tombstones.json": [],
    }
    if not old:
        files["facts.json"] = [{"fact_id": "0c000000-0000-4000-8000-000000000001", "subject": "Auth",
                                "predicate": "listens_on", "object": "port 8443", "valid_from": AT, "observed_at": AT,
                                "valid_to": None, "subject_entity_id": AUTH, "project_id": P, "confidence": 0.9,
                                "is_current": True, "created_at": AT, "layer_name": "default"}]
        files["artifacts.json"] = [{"id": "0d000000-0000-4000-8000-000000000001", "path": "docs/plan.md",
                                    "content": "step one", "content_hash": hashlib.sha256(b"step one").hexdigest(),
                                    "version": 2, "project_id": P, "origin_node": ORIGINAL_NODE,
                                    "crdt_actor": ORIGINAL_NODE, "crdt_counter": 2, "updated_at": AT}]
    hashes = write_bundle_files(root, files)
    project = None if old else P  # 0.24 exported every project; 0.27 one

    def digest(paths) -> str:  # §4e: schema, project, then "relpath sha256" per file by path
        lines = f"{schema}\n{project or ''}\n" + "".join(f"{p} {hashes[p]}\n" for p in sorted(paths))
        return hashlib.sha256(lines.encode()).hexdigest()

    counts = {"entities": 2, "observations": 1, "episodes": 1, "decisions": 1, "errors": 1, "relations": 1}
    manifest = {"schema_version": schema, "manifest_hash": digest(hashes), "project_id": project,
                "project_name": None if old else "alpha", "exported_at": AT,
                "counts": counts if old else counts | {"artifacts": 1}, "with_embeddings": False,
                "embedding_dim": 384, "node_id": ORIGINAL_NODE, "embedding_model": "multilingual-e5-small"}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return {"claimed": manifest["manifest_hash"], "read": digest(p for p in hashes if not p.startswith("decisions/"))}


@pytest.mark.parametrize("schema", [1, 2])
def test_a_bundle_written_by_the_original_imports(memory, tmp_path, schema):
    root = tmp_path / "original"
    hashes = write_original_bundle(root, schema)
    got = importer.import_bundle(memory, None, dir=str(root))
    assert not got["skipped"] and got["rows_skipped"] == 0 and got["rows_out_of_scope"] == 0
    assert got["from_node"] == ORIGINAL_NODE and got["scope_enforced"] is (schema == 2)
    # the decisions/ file is named, not dropped silently, and counts in no hash
    (unread,) = got["files_not_read"]
    assert unread["path"] == f"decisions/{DECISION}.json" and "observations of type decision" in unread["reason"]
    assert "not read" in got["note"]
    assert got["manifest_hash"] == hashes["read"] != hashes["claimed"]
    store = memory.store
    obs = store.sync_local_rows("observations", [OBS])[OBS]
    assert (obs["content"], obs["tags"], obs["importance"], obs["origin_node"]) == \
        ("tokens expire after 15 minutes", ["auth"], 0.6, ORIGINAL_NODE)
    if schema == 1:  # the fields version 2 added, at their defaults
        assert (obs["evidence"], obs["trust"], obs["version"], obs["previous_versions"]) == \
            ("asserted", "trusted", 1, [])
        assert obs["updated_at"] == AT and obs["verification"] is None
        assert store.sync_local_rows("relations", [REL])[REL]["provenance"] == "extracted"
    else:
        assert (obs["evidence"], obs["trust"], obs["version"], obs["verification"]) == \
            ("observed", "trusted", 2, "read the config")
        assert [v["content"] for v in obs["previous_versions"]] == ["tokens expire after 10 minutes"]
        assert store.sync_local_rows("relations", [REL])[REL]["provenance"] == "inferred"
        facts = {f["object"]: f for f in store.sync_facts(None, True)}
        assert facts["port 8443"]["is_current"] and facts["port 8443"]["layer_name"] is None
        (artifact,) = store.sync_artifacts(None, True)
        assert (artifact["content"], artifact["crdt_counter"]) == ("step one", 2)
    entity = store.sync_local_rows("entities", [AUTH])[AUTH]
    assert (entity["name"], entity["access_count"], entity["project_id"]) == ("Auth", 3, P)
    assert store.sync_local_rows("episodes", [EPISODE])[EPISODE]["actors"] == ["ci"]
    assert store.sync_local_rows("errors", [ERROR])[ERROR]["resolved"] in (False, 0)
    assert [p["name"] for p in store.sync_projects(None, True)] == ["alpha"]
    # imported once; a change to the unread file is no new bundle
    decision = root / "decisions" / f"{DECISION}.json"
    decision.write_text(decision.read_text().replace("use Redis", "use Memcached"))
    again = importer.import_bundle(memory, None, dir=str(root))
    assert again["skipped"] and again["files_not_read"] == got["files_not_read"]
    assert conflicts.diff(memory, None, dir=str(root))["files_not_read"] == got["files_not_read"]


def test_export_twice_is_byte_identical(memory, tmp_path):
    seed(memory)
    root = tmp_path / "b"
    export.export(memory, None, dir=str(root))
    before = snapshot(root)
    mtimes = {p: (root / p).stat().st_mtime_ns for p in before}
    again = export.export(memory, None, dir=str(root))
    assert again["unchanged"] is True and again["files_written"] == [] and again["files_removed"] == []
    assert snapshot(root) == before
    assert {p: (root / p).stat().st_mtime_ns for p in before} == mtimes  # not even rewritten


def test_a_write_changes_only_its_entity_file_and_the_manifest(memory, tmp_path):
    seed(memory)
    root = tmp_path / "b"
    export.export(memory, None, dir=str(root))
    before = snapshot(root)
    write.add(memory, None, entity_name="Billing", content="refunds take five working days")
    out = export.export(memory, None, dir=str(root))
    after = snapshot(root)
    changed = sorted(p for p in after if before.get(p) != after[p])
    billing = next(p for p in after if p.startswith("entities/billing-"))
    # the new observation also writes its fact (the bitemporal log)
    assert changed == sorted([billing, "facts.json", "manifest.json"])
    assert sorted(out["files_written"]) == changed and not out["unchanged"]
    assert json.loads(after["manifest.json"])["manifest_hash"] == recomputed_hash(root)
    assert json.loads(after["manifest.json"])["manifest_hash"] != json.loads(before["manifest.json"])["manifest_hash"]


def test_delete_leaves_a_tombstone_and_undo_removes_it(memory, tmp_path):
    ids = seed(memory)
    root = tmp_path / "b"
    deleted = write.delete(memory, None, observation_id=ids["c"])
    stones = memory.store.tombstone_rows("observations", [ids["c"]])
    assert len(stones) == 1 and stones[0]["origin_node"] == memory.store.node_id()
    assert stones[0]["project_id"] == memory.scope(None).project_id
    facts = [t for t in memory.store.sync_tombstones(None, True) if t["table_name"] == "facts"]
    assert facts, "the observation's fact went with it (cascade) and left its own tombstone"
    out = export.export(memory, None, dir=str(root))
    listed = json.loads((root / "tombstones.json").read_text())
    assert {"table_name": "observations", "row_id": ids["c"], "deleted_at": stones[0]["deleted_at"],
            "origin_node": stones[0]["origin_node"]} in listed
    assert all(list(t) == ["table_name", "row_id", "deleted_at", "origin_node"] for t in listed)
    assert out["tombstones"] == len(listed)
    billing = json.loads(next(root.glob("entities/billing-*.json")).read_text())
    assert billing["observations"] == []
    undo.apply(memory, deleted["undo_file"], None)
    assert memory.store.tombstone_rows("observations", [ids["c"]]) == []
    export.export(memory, None, dir=str(root))
    assert ids["c"] not in (root / "tombstones.json").read_text()
    assert [o["id"] for o in json.loads(next(root.glob("entities/billing-*.json")).read_text())["observations"]] \
        == [ids["c"]]


def test_entity_delete_tombstones_entity_and_children(memory, tmp_path):
    ids = seed(memory)
    from cuba_memorys.services.graph import entities

    entity_id = memory.store.get_entity("Auth Service", memory.scope(None)).id
    relation_ids = [r["id"] for r in memory.store.sync_relations(None, True)]
    assert len(relation_ids) == 1 and memory.store.tombstone_rows("entities", [entity_id]) == []
    entities.delete(memory, None, name="Auth Service")
    assert len(memory.store.tombstone_rows("entities", [entity_id])) == 1
    assert len(memory.store.tombstone_rows("observations", [ids["a"], ids["b"]])) == 2
    assert len(memory.store.tombstone_rows("relations", relation_ids)) == 1  # cascaded, recorded too
    root = tmp_path / "b"
    export.export(memory, None, dir=str(root))
    assert not list(root.glob("entities/auth-service-*.json"))


def test_episode_error_procedure_and_project_deletes_leave_tombstones(memory):
    seed(memory)
    seed_every_file(memory)
    gamma = projects.switch(memory, None, name="gamma")["project"]["id"]
    projects.switch(memory, None, name="alpha")
    doomed = {"episodes": memory.store.sync_episodes(None, True)[0]["id"],
              "errors": memory.store.sync_errors(None, True)[0]["id"],
              "procedures": memory.store.sync_procedures(None, True)[0]["id"], "projects": gamma}
    assert all(memory.store.tombstone_rows(t, [i]) == [] for t, i in doomed.items())
    with memory.store.transaction():  # no tool deletes a single episode or error: the store's own delete
        memory.store.sync_delete("episodes", "id", doomed["episodes"])
        memory.store.sync_delete("errors", "id", doomed["errors"])
    procedures.delete(memory, None, name="release")
    projects.merge(memory, None, name="gamma", to="alpha")
    for table, row_id in doomed.items():
        (stone,) = memory.store.tombstone_rows(table, [row_id])
        assert stone["origin_node"] == memory.store.node_id(), table
    listed = {(t["table_name"], t["row_id"]) for t in memory.store.sync_tombstones(None, True)}
    assert set(doomed.items()) <= listed


def test_project_and_all_scope_and_pruning(memory, tmp_path):
    seed(memory)
    root = tmp_path / "b"
    alpha = export.export(memory, None, dir=str(root))
    everything = export.export(memory, None, dir=str(root), scope="all")
    names = {json.loads(p.read_text())["name"] for p in root.glob("entities/*.json")}
    assert names == {"Auth Service", "Billing", "Beta Thing"}
    assert everything["counts"]["entities"] == 3 and alpha["counts"]["entities"] == 2
    assert json.loads((root / "manifest.json").read_text())["project_id"] is None
    assert {p["name"] for p in json.loads((root / "projects.json").read_text())} == {"alpha", "beta"}
    # project scope again: beta's entity file stays (not this project's), and the hash covers it
    again = export.export(memory, None, dir=str(root))
    assert list(root.glob("entities/beta-thing-*.json"))
    assert again["manifest_hash"] == recomputed_hash(root) != alpha["manifest_hash"]
    # a row gone from the exported project: its file is pruned
    projects.switch(memory, None, name="alpha")
    from cuba_memorys.services.graph import entities

    entities.delete(memory, None, name="Billing")
    pruned = export.export(memory, None, dir=str(root))
    assert [p for p in pruned["files_removed"] if p.startswith("entities/billing-")]
    assert not list(root.glob("entities/billing-*.json")) and list(root.glob("entities/beta-thing-*.json"))
    with pytest.raises(InvalidInput, match="scope"):
        export.export(memory, None, dir=str(root), scope="everything")


def test_paths_escaping_the_directory_are_refused(memory, tmp_path):
    seed(memory)
    root = tmp_path / "b"
    outside = tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    (root / "entities").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidInput, match="outside the sync directory"):
        export.export(memory, None, dir=str(root))
    assert list(outside.iterdir()) == [] and not (root / "manifest.json").exists()  # nothing written
    for bad in ("../x.json", "/etc/passwd", "entities/../../x.json"):
        with pytest.raises(InvalidInput):
            bundle.write_atomic(root, bad, b"{}")
    assert not (tmp_path / "x.json").exists()


def test_embeddings_round_trip(memory, tmp_path):
    pytest.importorskip("zstandard")
    seed(memory)
    root = tmp_path / "b"
    model, dim = memory.stored_model()
    if not model:
        with pytest.raises(InvalidInput, match="with_embeddings"):
            export.export(memory, None, dir=str(root), with_embeddings=True)
        return
    out = export.export(memory, None, dir=str(root), with_embeddings=True)
    data = (root / "embeddings.bin.zst").read_bytes()
    records = bundle.decode_embeddings(data, dim)
    assert out["with_embeddings"] and records and all(v.shape == (dim,) for _, v in records)
    assert json.loads((root / "manifest.json").read_text())["embedding_dim"] == dim
    assert export.export(memory, None, dir=str(root), with_embeddings=True)["unchanged"]


def test_embedding_codec():
    pytest.importorskip("zstandard")
    import numpy as np

    rows = [("00000000-0000-4000-8000-000000000001", np.arange(4, dtype=np.float32))]
    data = bundle.encode_embeddings(rows, 4)
    assert bundle.encode_embeddings(rows, 4) == data  # deterministic
    back = bundle.decode_embeddings(data, 4)
    assert back[0][0] == rows[0][0] and back[0][1].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(InvalidInput):
        bundle.decode_embeddings(data, 3)


def test_status(memory, tmp_path):
    seed(memory)
    root = tmp_path / "b"
    empty = export.status(memory, None, dir=str(root))
    assert empty["current_manifest"] is None and empty["pending_import"] is False
    export.export(memory, None, dir=str(root))
    now = export.status(memory, None, dir=str(root))
    assert now["current_manifest"]["node_id"] == now["node_id"] and now["pending_import"] is False
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["node_id"] = "another-node"
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert export.status(memory, None, dir=str(root))["pending_import"] is True
    assert now["recent_imports"] == [] and now["peer_notices"] == []


@pytest.mark.parametrize("version", [3, "two"])
def test_a_manifest_this_version_cannot_read_is_pending_and_its_refusal_kept(location, memory, tmp_path, version):
    """A schema_version of 3 (newer) or "two" (broken) never crashes status or the hooks' export:
    the bundle waits, the CLI's refused import is kept (the refusal of a newer schema was raised
    before the import's own try and lost), and `export --unless-pending` then writes nothing,
    naming the way out; a plain export overwrites it on purpose."""
    seed(memory)
    root = tmp_path / "bundle"
    export.export(memory, None, dir=str(root), scope="all")
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, "node_id": "another-node",
                                                    "schema_version": version}))
    before = export.status(memory, None, dir=str(root))
    assert before["pending_import"] is True and before["last_refused_import"] is None
    exe = Path(sys.executable).with_name("cuba-memorys")
    env = location.env(CUBA_EMBED_MODEL="none")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), "sync", *args, "--dir", str(root)], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    refused = run("import")
    assert refused.returncode != 0 and "schema_version" in refused.stderr and "Traceback" not in refused.stderr
    status = json.loads(run("status", "--json").stdout)
    kept = status["last_refused_import"]
    assert status["pending_import"] is True and kept is not None and kept["still_pending"] is True
    assert kept["kind"] == ("newer_schema" if version == 3 else "broken_file")
    assert ("upgrade cuba-memorys" in kept["way_out"]) is (version == 3)
    waited = run("export", "--scope", "all", "--unless-pending")
    assert waited.returncode == 0 and waited.stdout.startswith("Not exported: the import of the bundle")
    assert kept["way_out"].split(";")[0] in waited.stdout and "sync export --scope all" in waited.stdout
    assert json.loads((root / "manifest.json").read_text())["schema_version"] == version  # not overwritten
    again = run("import", "--if-pending")
    assert again.returncode == 0 and "refused already" in again.stdout  # a hook does not try again
    assert run("export", "--scope", "all").returncode == 0  # a plain export overwrites it, on purpose
    assert export.status(memory, None, dir=str(root))["pending_import"] is False


def test_default_directory_is_the_repository_top(memory, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo / "sub")
    assert export.sync_dir(memory, None).resolve() == (repo / ".cuba-memorys").resolve()
    monkeypatch.chdir(tmp_path)
    assert export.sync_dir(memory, None) == tmp_path / ".cuba-memorys"
    assert export.sync_dir(memory, "rel/dir") == tmp_path / "rel/dir"


def test_the_originals_newer_folder_is_used_when_it_is_the_only_one(memory, tmp_path, monkeypatch):
    """The original 0.27 writes .memory-industry/ (and still reads .cuba-memorys/ when it exists):
    a repository holding only .memory-industry/ syncs there, export and the git hooks alike."""
    from cuba_memorys.services.sync import hooks

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo)
    assert export.sync_dir(memory, None) == repo / ".cuba-memorys"  # neither: this project's folder
    (repo / ".memory-industry").mkdir()
    assert export.sync_dir(memory, None) == repo / ".memory-industry"
    assert hooks.sync_folder(repo, None, None) == repo / ".memory-industry"
    written = export.export(memory, None)
    assert Path(written["dir"]) == repo / ".memory-industry" and (repo / ".memory-industry/manifest.json").is_file()
    (repo / ".cuba-memorys").mkdir()  # both: the older name, as the original reads them
    assert export.sync_dir(memory, None) == repo / ".cuba-memorys"
    assert export.sync_dir(memory, "elsewhere") == repo / "elsewhere"  # a named folder is never second-guessed


def test_cli_export_and_status(location, tmp_path):
    env = location.env(CUBA_SYNC_DIR=str(tmp_path / "cli-bundle"))
    exe = Path(sys.executable).with_name("cuba-memorys")
    done = subprocess.run([str(exe), "sync", "export", "--scope", "all", "--json"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["action"] == "export" and (tmp_path / "cli-bundle" / "manifest.json").is_file()
    status = subprocess.run([str(exe), "sync", "status", "--json"], env=env, capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["current_manifest"]["manifest_hash"] == answer["manifest_hash"]
    bad = subprocess.run([str(exe), "sync", "export", "--scope", "nope"], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode != 0 and "scope" in (bad.stderr + bad.stdout)
    assert os.path.isdir(tmp_path / "cli-bundle")


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="needs the PostgreSQL test server")
def test_migrate_carries_node_id_and_tombstones(tmp_path, postgres):
    """`cuba-memorys migrate` copies every table of the source schema: the tombstones and the node
    id come along, and the triggers keep working on the target."""
    import psycopg

    from cuba_memorys.config import Settings
    from cuba_memorys.services.memory import Memory
    from cuba_memorys.storage import migrate

    settings = replace(Settings.from_env(), data_dir=tmp_path / "src", database_url="", undo_dir=tmp_path / "undo")
    mem = Memory.open(settings, check_model=False)
    try:
        keep = write.add(mem, None, entity_name="Kept", content="kept row stays")["id"]
        gone = write.add(mem, None, entity_name="Kept", content="this row goes away")["id"]
        write.delete(mem, None, observation_id=gone)
        node = mem.store.node_id()
    finally:
        mem.close()
    url = postgres.new_database(empty=True)
    try:
        migrate.copy_to_postgres(settings.sqlite_path, url)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'node_id'").fetchone()[0] == node
            rows = conn.execute("SELECT row_id, origin_node FROM tombstones WHERE table_name = 'observations'"
                                ).fetchall()
            assert rows == [(gone, node)]
            conn.execute("DELETE FROM observations WHERE id = %s", (keep,))
            assert conn.execute("SELECT count(*) FROM tombstones WHERE row_id = %s", (keep,)).fetchone()[0] == 1
    finally:
        postgres.drop(url)


def test_cuba_sync_over_mcp(location, tmp_path):
    """The tool as an agent calls it (the official MCP client over stdio): export then status, and
    bad input refused with a clear error that writes nothing."""
    from mcp_helpers import run_stdio

    folder = tmp_path / "mcp-bundle"

    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="Mcp Thing", content="exported over stdio")
        out = await agent.call("cuba_sync", action="export", dir=str(folder), scope="all")
        again = await agent.call("cuba_sync", action="export", dir=str(folder), scope="all")
        status = await agent.call("cuba_sync", action="status", dir=str(folder))
        bad = await agent.error("cuba_sync", action="export", dir=str(tmp_path / "never"), scope="sideways")
        return out, again, status, bad

    out, again, status, bad = run_stdio(location, body)
    assert out["counts"]["entities"] == 1 and out["manifest_hash"] == recomputed_hash(folder)
    assert again["unchanged"] is True and again["manifest_hash"] == out["manifest_hash"]
    assert status["current_manifest"]["manifest_hash"] == out["manifest_hash"] and not status["pending_import"]
    assert "scope" in bad and not (tmp_path / "never").exists()
