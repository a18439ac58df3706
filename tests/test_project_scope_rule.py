"""One project-scoping rule in every tool (issue 32 item 7), the newest original's (original-0.27.md:
"Scoping across the board: faro, vigia, alma, sync, recall, zafra, forget and the rest no longer
count `project_id IS NULL` as in scope"): with project A active, no read shows a row of project B
or a row of no project; only cuba_faro's ``include_unscoped=true`` adds the rows of no project
back. Entities are unique per (name, project), so creating a name that exists only in B or only
with no project makes A's own entity. cuba_proyecto stats and cuba_vigia count A alike.

Rows are written in A, in B and with no project active, each text carrying its origin's marker;
then every read path is walked with A active and its whole answer searched for the markers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import settings_for
from cuba_memorys.errors import NotFound
from cuba_memorys.services.exports import dashboard, mcp_jsonl, obsidian
from cuba_memorys.services.graph import projects
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sessions import recall
from cuba_memorys.services.sync import conflicts, export, importer
from mcp_helpers import ToolFailed, embeddings_settled, run_stdio

MINE, B, NONE = "Zephyrine", "Quillback", "Marrowind"  # the markers of project A, project B, no project
FOREIGN = (B, NONE)
SHARED = "SharedCache"  # an entity name all three use, each for its own entity


async def _write_rows(agent, marker: str) -> None:
    """One row of each kind in the active project (or none), every text naming ``marker``."""
    own = f"{marker}Service"
    await agent.call("cuba_jornada", action="start", name=f"{marker} release work", goals=["ship the release"])
    await agent.call("cuba_cronica", action="batch_add", observations=[
        {"entity_name": own, "content": f"{marker}: the deploy pipeline signs release tarballs with minisign"},
        {"entity_name": SHARED, "content": f"{marker}: the shared cache keeps release build artifacts a week"}])
    await agent.call("cuba_cronica", action="add", entity_name=own, observation_type="lesson",
                     content=f"{marker}: a release deploy without signed tarballs was rolled back")
    await agent.call("cuba_cronica", action="episode_add", entity_name=own,
                     content=f"{marker}: the release deploy pipeline stalled on Tuesday")
    await agent.call("cuba_puente", action="create", from_entity=own, to_entity=SHARED, relation_type="depends_on")
    await agent.call("cuba_decreto", action="record", title=f"{marker} release signing", chosen="minisign",
                     rationale="the release deploy pipeline needs signed tarballs")
    await agent.call("cuba_alarma", error_type="DeployError",
                     error_message=f"{marker}: release deploy pipeline failed to sign the tarball")
    await agent.call("cuba_pizarra", action="write", content=f"{marker}: halfway through the release checklist")
    await agent.call("cuba_receta", action="add", name=f"{marker} release", steps=[{"do": f"{marker}: sign it"}])
    await agent.call("cuba_jornada", action="end", outcome="success", summary=f"{marker} release shipped")


async def _seed(agent) -> None:
    await _write_rows(agent, NONE)  # no project is active yet
    await agent.call("cuba_proyecto", action="switch", name="beta")
    await _write_rows(agent, B)
    await agent.call("cuba_proyecto", action="switch", name="alpha")
    await _write_rows(agent, MINE)
    await agent.call("cuba_jornada", action="start", name=f"{MINE} follow-up", goals=["release notes"])
    await agent.call("cuba_pizarra", action="write", content=f"{MINE}: write the release notes next")
    await embeddings_settled(agent)


QUERY = "release deploy pipeline signed tarballs minisign"
FARO = {f"faro {scope}": {"query": QUERY, "scope": scope, "limit": 50, "track_access": False}
        for scope in ("all", "entities", "observations", "errors")}
READS = [  # (label, tool, arguments): every read an agent has, with A active
    *[(label, "cuba_faro", args) for label, args in FARO.items()],
    ("faro verbose", "cuba_faro", {"query": QUERY, "format": "verbose", "associative": True, "track_access": False}),
    ("faro verify", "cuba_faro", {"query": "the deploy pipeline signs release tarballs with minisign",
                                  "mode": "verify"}),
    ("faro entity factoid", "cuba_faro", {"query": f"what does {SHARED} keep", "track_access": False}),
    ("alma get shared", "cuba_alma", {"action": "get", "name": SHARED}),
    ("alma get own", "cuba_alma", {"action": "get", "name": f"{MINE}Service"}),
    ("cronica list", "cuba_cronica", {"action": "list", "entity_name": SHARED}),
    ("episode list", "cuba_cronica", {"action": "episode_list", "entity_name": f"{MINE}Service"}),
    ("timeline", "cuba_cronica", {"action": "timeline", "entity_name": f"{MINE}Service"}),
    ("traverse", "cuba_puente", {"action": "traverse", "start_entity": SHARED}),
    ("decreto list", "cuba_decreto", {"action": "list"}),
    ("decreto query", "cuba_decreto", {"action": "query", "query": "release signing minisign"}),
    ("expediente", "cuba_expediente", {"query": "release deploy pipeline failed to sign"}),
    ("pizarra", "cuba_pizarra", {"action": "read"}),
    ("receta list", "cuba_receta", {"action": "list"}),
    ("receta search", "cuba_receta", {"action": "search", "query": "release"}),
    ("jornada list", "cuba_jornada", {"action": "list"}),
    ("contexto", "cuba_contexto", {}),
    ("snapshot", "cuba_pre_compact", {"action": "snapshot"}),
    ("reflexion", "cuba_reflexion", {"action": "analyze"}),
    ("zafra stats", "cuba_zafra", {"action": "stats"}),
    ("zafra export", "cuba_zafra", {"action": "export"}),
    ("pending", "cuba_eco", {"action": "pending"}),
    *[(f"vigia {metric}", "cuba_vigia", {"metric": metric})
      for metric in ("summary", "health", "drift", "communities", "bridges", "structural")],
    ("proyecto stats", "cuba_proyecto", {"action": "stats"}),
]
HIPOCAMPO = [{"query": "release deploy pipeline", "format": "json"},
             {"query": "release", "nivel": "episodica", "format": "full"},
             {"query": "", "memory_type": "decision", "format": "json"},
             {"query": "signed tarballs", "code": SHARED, "format": "json"}]


async def _reads(agent, bundle_dir: Path) -> dict:
    out = {label: await agent.call(tool, **args) for label, tool, args in READS}
    for n, args in enumerate(HIPOCAMPO):
        result = await agent.session.call_tool("search_hipocampo", args)
        assert not result.is_error, result.content[0].text
        out[f"hipocampo {n}"] = result.content[0].text
    out["sync export"] = await agent.call("cuba_sync", action="export", dir=str(bundle_dir))
    out["faro with unscoped"] = await agent.call("cuba_faro", query=QUERY, limit=50, include_unscoped=True,
                                                 track_access=False)
    out["missing"] = {}
    for name in (f"{NONE}Service", f"{B}Service"):  # another project's entity, and one of no project
        try:
            out["missing"][name] = await agent.call("cuba_alma", action="get", name=name)
        except ToolFailed as exc:
            out["missing"][name] = str(exc)
        try:
            out["missing"][f"list {name}"] = await agent.call("cuba_cronica", action="list", entity_name=name)
        except ToolFailed as exc:
            out["missing"][f"list {name}"] = str(exc)
    # creating a name of no project, or of project B, makes A's own; A's own name already exists
    out["create"] = {name: await agent.call("cuba_alma", action="create", name=name)
                     for name in (f"{NONE}Service", f"{B}Service", f"{MINE}Service")}
    out["created get"] = await agent.call("cuba_alma", action="get", name=f"{NONE}Service")
    return out


def _leaks(payload: object) -> list[str]:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return [marker for marker in FOREIGN if marker in text]


def _bundle_texts(root: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.json")))


def test_with_a_project_active_no_read_shows_another_projects_rows_or_rows_of_no_project(location, tmp_path):
    bundle_dir = tmp_path / "bundle"

    async def body(agent):
        await _seed(agent)
        return await _reads(agent, bundle_dir)

    out = run_stdio(location, body)
    walked = [label for label, _, _ in READS] + [f"hipocampo {n}" for n in range(len(HIPOCAMPO))]
    for label in walked:
        assert not _leaks(out[label]), (label, _leaks(out[label]), out[label])
    # and each read did find A's rows (a read that finds nothing would pass the check above)
    for label in ("faro all", "faro observations", "faro errors", "alma get shared", "cronica list", "decreto list",
                  "expediente", "pizarra", "receta list", "jornada list", "episode list"):
        assert MINE in json.dumps(out[label], ensure_ascii=False), (label, out[label])
    assert [o["content"][:len(MINE)] for o in out["alma get shared"]["observations"]] == [MINE]
    assert {r["entity"] for r in out["alma get shared"]["relations"]} == {f"{MINE}Service"}
    assert out["decreto list"]["count"] == 1 and out["cronica list"]["count"] == 1

    # the one way to see rows of no project: faro's include_unscoped (never another project's)
    unscoped = json.dumps(out["faro with unscoped"], ensure_ascii=False)
    assert NONE in unscoped and MINE in unscoped and B not in unscoped

    # another project's entity and one of no project are not found from A
    for name, answer in out["missing"].items():
        assert isinstance(answer, str) and "not found" in answer.lower(), (name, answer)
    assert out["create"][f"{NONE}Service"]["already_existed"] is False
    assert out["create"][f"{B}Service"]["already_existed"] is False
    assert out["create"][f"{MINE}Service"]["already_existed"] is True
    assert out["created get"]["observation_count"] == 0  # A's own new entity, not the unscoped one

    # the bundle of project scope: A's rows only
    exported = _bundle_texts(bundle_dir)
    assert MINE in exported and not _leaks(exported)

    # cuba_proyecto stats and cuba_vigia count A the same
    stats, summary = out["proyecto stats"], out["vigia summary"]
    for kind in ("entities", "observations", "episodes", "relations", "errors", "sessions"):
        assert stats[kind] == summary[kind], (kind, stats[kind], summary[kind])
    assert summary["observations"] == 4 and summary["sessions"] == 2 and summary["entities"] == 3
    assert out["zafra stats"]["entities"] == summary["entities"]
    assert out["zafra stats"]["active"] == summary["observations"]


def test_the_offline_exports_of_a_project_hold_none_of_the_others_rows(location, tmp_path):
    """The offline reads (cuba-memorys export, dashboard, recall) read as the client they run
    for, or the project they are given: A's rows only."""

    async def body(agent):
        await _seed(agent)

    run_stdio(location, body)
    mem = Memory.open(settings_for(location))
    try:
        projects.switch(mem, None, "alpha")
        vault = tmp_path / "vault"
        obsidian.export(mem, None, directory=str(vault))
        jsonl = tmp_path / "memory.jsonl"
        mcp_jsonl.export(mem, None, path=str(jsonl))
        page = Path(dashboard.write(mem, None, out=str(tmp_path / "dash.html"))["path"])
        recalled = recall.gather(mem, None, project="alpha")  # `cuba-memorys recall --project alpha`
    finally:
        mem.close()
    texts = {"vault": "\n".join(p.read_text() for p in sorted(vault.rglob("*.md"))),
             "jsonl": jsonl.read_text(), "dashboard": page.read_text(),
             "recall": json.dumps(recalled, ensure_ascii=False)}
    for label, text in texts.items():
        assert MINE in text and not _leaks(text), (label, _leaks(text))


def test_a_sync_conflict_of_no_project_is_neither_listed_nor_resolved_from_a_project(memory, other, tmp_path):
    """cuba_sync conflicts lists the active project's; resolve takes the same ones only."""
    written = write.add(other, None, entity_name="tokens", content=f"{NONE}: tokens expire after 15 minutes")
    export.export(other, None, dir=str(tmp_path / "one"), scope="all")
    importer.import_bundle(memory, None, dir=str(tmp_path / "one"))
    feedback.correct(other, None, observation_id=written["id"], correction=f"{NONE}: they expire after 30 minutes")
    feedback.correct(memory, None, observation_id=written["id"], correction=f"{NONE}: they expire after 60 minutes")
    export.export(other, None, dir=str(tmp_path / "two"), scope="all")
    assert importer.import_bundle(memory, None, dir=str(tmp_path / "two"))["conflicts_opened"] == 1
    (conflict,) = conflicts.conflicts(memory, None)["conflicts"]  # no project active: every conflict
    projects.switch(memory, None, "alpha")
    assert conflicts.conflicts(memory, None)["total_open"] == 0
    with pytest.raises(NotFound, match="in this project"):
        conflicts.resolve(memory, None, id=conflict["id"], keep="theirs")
    projects.switch(memory, None, "*")
    assert conflicts.resolve(memory, None, id=conflict["id"], keep="both")["kept"] == "both"
