"""Decisions live on each project's ``architecture_decisions`` entity, type concept, as the original
keeps them (issue 32 item 8; original-0.27.md: "each project gets its own `architecture_decisions`
entity"). A store of an earlier version, which kept them on an entity named ``decisions``, is moved
there when it opens (renamed in place, or merged into an ``architecture_decisions`` the project
already has), nothing lost, audited, with an undo file, and ``decisions`` kept as an alias; a bundle
from the original lands its decisions where ``cuba_alma get architecture_decisions`` finds them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cuba_memorys.models import Scope
from cuba_memorys.services import audit
from cuba_memorys.services.graph import entities, projects, relations
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.observations import write
from cuba_memorys.services.workflow import decisions
from mcp_helpers import run_stdio
from test_sync_export import write_bundle_files

NEW, OLD = "architecture_decisions", "decisions"


def test_decisions_are_recorded_on_each_projects_architecture_decisions(location):
    async def body(agent):
        out = {}
        for project in ("alpha", "beta"):
            await agent.call("cuba_proyecto", action="switch", name=project)
            out[f"{project} record"] = await agent.call("cuba_decreto", action="record", title=f"{project} queue",
                                                        chosen="NATS", rationale=f"{project} needs replay")
            out[f"{project} get"] = await agent.call("cuba_alma", action="get", name=NEW)
        return out

    out = run_stdio(location, body)
    for project, other in (("alpha", "beta"), ("beta", "alpha")):
        assert out[f"{project} record"]["entity_name"] == NEW
        got = out[f"{project} get"]
        assert got["entity"]["name"] == NEW and got["entity"]["entity_type"] == "concept"
        assert [o["id"] for o in got["observations"]] == [out[f"{project} record"]["id"]]
        assert other not in json.dumps(got)


def _legacy_store(mem) -> dict:
    """Decisions as an earlier version kept them: on an entity named ``decisions`` (with no
    project; in alpha; in beta beside an ``architecture_decisions`` of its own), and a
    ``decisions`` entity of gamma that holds no decision (someone's own: left alone)."""
    ids: dict = {}
    for project in (None, "alpha", "beta", "gamma"):
        projects.switch(mem, None, project or "*")
        kind = "fact" if project == "gamma" else "decision"
        ids[project] = write.add(mem, None, entity_name=OLD, content=f"Decision: {project} keeps Postgres 16",
                                 observation_type=kind)["id"]
    projects.switch(mem, None, "alpha")
    entities.create(mem, None, "Postgres")
    relations.create(mem, None, from_entity=OLD, to_entity="Postgres", relation_type="depends_on")
    ids["alpha entity"] = mem.store.get_entity(OLD, mem.scope(None)).id
    projects.switch(mem, None, "beta")
    ids["beta new"] = decisions.record(mem, None, title="beta caches in Redis", chosen="Redis")["id"]
    return ids


def _entity(mem, project: str | None, name: str):
    """The entity of exactly that project (None: of no project), switched to it."""
    projects.switch(mem, None, project or "*")
    row = mem.store.sync_entity_named(name, mem.client(None).project_id)
    return mem.store.get_entity_by_id(row["id"]) if row else None


def test_a_legacy_decisions_entity_moves_to_architecture_decisions_when_the_memory_opens(memory, open_memory):
    ids = _legacy_store(memory)
    before = memory.store.counts()
    reopened = open_memory()  # an upgraded server opening the earlier version's store
    assert reopened.store.counts()["observations"] == before["observations"]  # nothing lost
    assert reopened.store.counts()["entities"] == before["entities"] - 1  # beta's two became one

    for project in (None, "alpha", "beta"):
        moved = _entity(reopened, project, NEW)
        assert moved is not None and moved.entity_type == "concept", project
        seen = {o.id for o in reopened.store.observations_of(moved.id, Scope())}
        assert ids[project] in seen, project
        assert OLD in reopened.store.aliases_of(moved.id), project
    # the old name is an alias: old calls still find them
    projects.switch(reopened, None, "alpha")
    assert entities.get(reopened, None, OLD)["entity"]["name"] == NEW
    assert [o["id"] for o in write.list_for(reopened, None, entity_name=OLD)["observations"]] == [ids["alpha"]]
    assert _entity(reopened, "alpha", NEW).id == ids["alpha entity"]  # renamed in place: id, rows, edges kept
    assert [r["entity"] for r in entities.get(reopened, None, NEW)["relations"]] == ["Postgres"]
    projects.switch(reopened, None, "beta")
    beta = entities.get(reopened, None, NEW)
    assert {o["id"] for o in beta["observations"]} == {ids["beta"], ids["beta new"]}
    assert _entity(reopened, "beta", OLD) is None  # merged into beta's own
    gamma = _entity(reopened, "gamma", OLD)
    assert gamma is not None and _entity(reopened, "gamma", NEW) is None  # holds no decision: not ours

    # recorded, once each; a new decision lands on the moved entity
    projects.switch(reopened, None, "beta")  # each event is filed under its project: beta's merge
    (merged,) = [e for e in audit.tail(reopened, None, limit=50)["entries"]
                 if e["action"] == "memory.decisions_migrated"]
    assert merged["payload"]["winner_id"] == _entity(reopened, "beta", NEW).id
    projects.switch(reopened, None, "*")
    events = [e for e in audit.tail(reopened, None, limit=50)["entries"] if e["action"] == "memory.decisions_migrated"]
    assert len(events) == 3 and all(e["payload"]["undo_file"] for e in events)
    projects.switch(reopened, None, "alpha")
    recorded = decisions.record(reopened, None, title="alpha pins the driver", chosen="psycopg 3.2")
    assert recorded["entity_name"] == NEW
    assert entities.get(reopened, None, NEW)["observation_count"] == 2
    assert open_memory().store.counts() == reopened.store.counts()  # opening again changes nothing

    # the way back: alpha's undo file gives the old name back (and removes the alias)
    renamed = next(e for e in events if e["payload"].get("entity_id") == ids["alpha entity"])
    undo.apply(reopened, reopened.settings.undo_dir / renamed["payload"]["undo_file"])
    projects.switch(reopened, None, "alpha")
    assert reopened.store.get_entity_by_id(ids["alpha entity"]).name == OLD
    assert OLD not in reopened.store.aliases_of(ids["alpha entity"])


def test_a_server_started_on_an_earlier_versions_store_finds_them_under_the_new_name(location):
    async def earlier(agent):  # as the earlier version's cuba_decreto wrote it
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        return await agent.call("cuba_cronica", action="add", entity_name=OLD, observation_type="decision",
                                content="Decision: the API keeps JSON:API envelopes")

    async def upgraded(agent):  # the next server start
        return (await agent.call("cuba_alma", action="get", name=NEW),
                await agent.call("cuba_cronica", action="list", entity_name=OLD))

    written = run_stdio(location, earlier)
    got, old_name = run_stdio(location, upgraded)
    assert [o["id"] for o in got["observations"]] == [written["id"]]
    assert [o["id"] for o in old_name["observations"]] == [written["id"]]


# -- a bundle from the original ---------------------------------------------------------------
P = "0a000000-0000-4000-8000-000000000001"
DECISIONS_ID, DECISION = "0a000000-0000-4000-8000-000000000002", "0b000000-0000-4000-8000-000000000001"
AT = "2026-01-02T03:04:05.123Z"
NODE = "7f1c2b3a-0000-4000-8000-0000000000aa"


def write_original_bundle(root: Path) -> None:
    """Project alpha as the original (0.27, schema 2) exports it: its decision an observation of
    type decision on alpha's own architecture_decisions entity."""
    obs = {"id": DECISION, "content": "**Message bus**\nContext: replay\nChosen: NATS\nRationale: replay",
           "observation_type": "decision", "source": "agent", "importance": 0.8, "tags": [], "project_id": P,
           "session_id": None, "created_at": AT, "embedding_model": "multilingual-e5-small", "updated_at": AT,
           "version": 1, "previous_versions": [], "origin_node": NODE, "evidence": "asserted", "verification": None,
           "verified_at": None, "trust": "trusted", "crdt_actor": NODE, "crdt_counter": 1}
    files = {
        f"entities/architecture-decisions-{DECISIONS_ID[:8]}.json": {
            "id": DECISIONS_ID, "name": NEW, "entity_type": "concept", "importance": 0.5, "access_count": 0,
            "project_id": P, "created_at": AT, "observations": [obs]},
        "relations.json": [], "projects.json": [{"id": P, "name": "alpha", "created_at": AT}], "tombstones.json": [],
    }
    hashes = write_bundle_files(root, files)
    text = f"2\n{P}\n" + "".join(f"{p} {hashes[p]}\n" for p in sorted(hashes))
    (root / "manifest.json").write_text(json.dumps({
        "schema_version": 2, "manifest_hash": hashlib.sha256(text.encode()).hexdigest(), "project_id": P,
        "project_name": "alpha", "exported_at": AT, "counts": {"entities": 1, "observations": 1, "episodes": 0,
                                                              "decisions": 1, "errors": 0, "relations": 0,
                                                              "artifacts": 0},
        "with_embeddings": False, "embedding_dim": 384, "node_id": NODE, "embedding_model": "multilingual-e5-small"}))


def test_the_originals_bundle_lands_decisions_where_alma_get_finds_them(location, tmp_path):
    fresh, beside = tmp_path / "fresh", tmp_path / "beside"
    write_original_bundle(fresh)
    write_original_bundle(beside)

    async def body(agent):
        out = {}
        # imported as the git hooks and `cuba-memorys sync import` do: with no project active
        out["import"] = await agent.call("cuba_sync", action="import", dir=str(fresh))
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        out["get"] = await agent.call("cuba_alma", action="get", name=NEW)
        out["record"] = await agent.call("cuba_decreto", action="record", title="Cache", chosen="Redis")
        out["after record"] = await agent.call("cuba_alma", action="get", name=NEW)
        out["list"] = await agent.call("cuba_decreto", action="list")
        return out

    out = run_stdio(location, body)
    assert out["import"]["rows_inserted"] >= 2
    assert [o["id"] for o in out["get"]["observations"]] == [DECISION]
    assert {o["id"] for o in out["after record"]["observations"]} == {DECISION, out["record"]["id"]}
    assert {d["id"] for d in out["list"]["decisions"]} == {DECISION, out["record"]["id"]}
    assert {d["entity_name"] for d in out["list"]["decisions"]} == {NEW}


def test_the_originals_bundle_meets_decisions_an_earlier_version_kept_on_decisions(location, tmp_path):
    """A machine still holding the earlier version's ``decisions`` entity imports the original's
    bundle: both end up on alpha's one architecture_decisions entity."""
    root = tmp_path / "bundle"
    write_original_bundle(root)

    async def body(agent):
        out = {}
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        # as the earlier version's cuba_decreto wrote it (cuba_cronica on the old entity's name)
        out["legacy"] = await agent.call("cuba_cronica", action="add", entity_name=OLD, observation_type="decision",
                                         content="Decision: the API keeps JSON:API envelopes")
        await agent.call("cuba_proyecto", action="switch", name="*")  # as the git hooks import
        out["import"] = await agent.call("cuba_sync", action="import", dir=str(root))
        await agent.call("cuba_proyecto", action="switch", name="alpha")
        out["get"] = await agent.call("cuba_alma", action="get", name=NEW)
        out["old name"] = await agent.call("cuba_alma", action="get", name=OLD)
        out["audit"] = await agent.call("cuba_archivo", action="tail", limit=50)
        return out

    out = run_stdio(location, body)
    assert {o["id"] for o in out["get"]["observations"]} == {DECISION, out["legacy"]["id"]}
    assert out["old name"]["entity"]["name"] == NEW  # the old name resolves as an alias
    assert "memory.decisions_migrated" in {e["action"] for e in out["audit"]["entries"]}
