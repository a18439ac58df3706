"""cuba_forget: an entity and everything that names it gone, everywhere, on both backends.

The main test writes a unique marker into every kind of row an agent can write about an
entity, forgets the entity over stdio with the official MCP client, and then looks for the
marker where a copy could hide: every byte of every file in the data folder (SQLite: the
database, its WAL and shared memory, the HNSW accelerator's files, the embedding cache), and
every row of every table (PostgreSQL, read as the superuser so no policy hides a row).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreLocation
from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import NewObservation
from cuba_memorys.services import audit, incidents
from cuba_memorys.services.graph import episodes, projects
from cuba_memorys.services.lifecycle import forget
from cuba_memorys.services.observations import write
from cuba_memorys.services.workflow import working_memory
from mcp_helpers import Agent, run_stdio

OTHER = "Lighthouse"


def files_holding(folder: Path, needles: list[str]) -> dict[str, list[str]]:
    """Each file under ``folder`` (recursively) whose bytes contain one of ``needles``."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [n for n in needles if n.encode() in data]
        if hits:
            found[str(path.relative_to(folder))] = hits
    return found


def tables_holding(url: str, marker: str) -> dict[str, int]:
    """PostgreSQL: rows of every table of the schema whose text (every column, cast) holds the
    marker in any case; read as the superuser login, which row-level security does not bind."""
    import psycopg
    from psycopg import sql

    found = {}
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables"
                                             " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
        assert {"entities", "observations", "errors", "audit_log", "facts"} <= set(tables)
        for table in tables:
            query = sql.SQL("SELECT count(*) FROM {} x WHERE x::text ILIKE %s").format(sql.Identifier(table))
            count = conn.execute(query, (f"%{marker}%",)).fetchone()[0]
            if count:
                found[table] = count
    return found


def cache_rows(where: StoreLocation) -> int:
    with sqlite3.connect(where.data_dir / "embed-cache.sqlite") as conn:
        return conn.execute("SELECT count(*) FROM vectors").fetchone()[0]


def test_forget_leaves_no_copy_of_the_entity_anywhere(location, tmp_path):
    marker = uuid.uuid4().hex
    name = f"Zelda-{marker}"
    env = {"HOME": str(tmp_path), "CUBA_EMBED_CACHE": str(location.data_dir / "embed-cache.sqlite"),
           "CUBA_ANN_MIN_ROWS": "3"}  # the HNSW accelerator is built (and saved) from the third vector

    async def write_everything(agent: Agent) -> None:
        await agent.call("cuba_jornada", action="start", name=f"Interview {name}", goals=[f"learn what {name} likes"])
        for content in (f"{marker} prefers green tea in the morning", f"{marker.upper()} SHOUTS IN ALL CAPS",
                        f"decided: {marker} gets the window seat"):
            await agent.call("cuba_cronica", action="add", entity_name=name, content=content)
        # a deleted row leaves an undo file (a full copy) that forgetting must remove too
        doomed = await agent.call("cuba_cronica", action="add", entity_name=name, content=f"{marker} owns a red kayak")
        deleted = await agent.call("cuba_cronica", action="delete", observation_id=doomed["id"])
        assert marker in Path(deleted["undo_file"]).read_text()
        await agent.call("cuba_cronica", action="episode_add", entity_name=name,
                         content=f"Met {name} at the harbour, talked about {marker}")
        await agent.call("cuba_cronica", action="add", entity_name=OTHER, content="The lighthouse lamp turns at night")
        await agent.call("cuba_cronica", action="add", entity_name=OTHER, content="Its keeper logs every ship")
        await agent.call("cuba_puente", action="create", from_entity=name, to_entity=OTHER)
        await agent.call("cuba_alarma", error_type="VisitFailed", error_message=f"{name} missed the ferry",
                         context={"who": name, "note": marker})
        await agent.call("cuba_alarma", error_type="LampFailed", error_message="the lamp bulb burnt out")
        await agent.call("cuba_pizarra", action="write", content=f"call {name} back about {marker}")
        await agent.call("cuba_centinela", action="create", entity_pattern=name, condition_type="on_access",
                         message=f"ask {name} about {marker}")
        await agent.call("cuba_faro", query=f"does {name} prefer tea?", mode="verify")
        await agent.call("cuba_pre_compact", action="snapshot")

    async def refuse_then_forget(agent: Agent) -> dict:
        refused = {
            "false": await agent.error("cuba_forget", entity_name=name, confirm=False),
            "missing": await agent.error("cuba_forget", entity_name=name),
            "unknown": await agent.error("cuba_forget", entity_name="Nobody-we-know", confirm=True),
        }
        still = await agent.call("cuba_alma", action="get", name=name)
        gone = await agent.call("cuba_forget", entity_name=name, confirm=True)
        live_files = files_holding(location.data_dir, [marker, marker.upper()])  # the server still runs
        after = {
            "get": await agent.error("cuba_alma", action="get", name=name),
            "search": await agent.call("cuba_faro", query=marker),
            "other": await agent.call("cuba_alma", action="get", name=OTHER),
            "errors": await agent.call("cuba_expediente", query="lamp bulb"),
            "session": await agent.call("cuba_jornada", action="current"),
            # The purged session is still this client's open one: writing goes on in it.
            "write": await agent.call("cuba_cronica", action="add", entity_name=OTHER,
                                      content="A new keeper arrived in spring"),
            "tail": await agent.call("cuba_archivo", action="tail"),
            "verify": await agent.call("cuba_archivo", action="verify"),
        }
        return {"refused": refused, "still": still, "gone": gone, "live_files": live_files, "after": after}

    run_stdio(location, write_everything, **env)
    passages_before = cache_rows(location)
    got = run_stdio(location, refuse_then_forget, **env)

    refused = got["refused"]
    assert "confirm" in refused["false"] and "cannot be undone" in refused["false"]
    assert "Nothing was deleted" in refused["false"]
    assert "confirm" in refused["missing"]
    assert "not found" in refused["unknown"] and "nothing was forgotten" in refused["unknown"]
    assert got["still"]["entity"]["name"] == name  # the refusals deleted nothing

    gone = got["gone"]
    assert gone["action"] == "forget" and gone["entity_name"] == name and gone["entity_deleted"] is True
    assert gone["cascaded"] == {"observations": 3, "episodes": 1, "relations": "via FK CASCADE",
                                "errors_purged": 1, "sessions_purged": 1}
    also = gone["also_purged"]
    assert also["relations"] == 1 and also["facts"] == 3 and also["notes"] == 1 and also["triggers"] == 1
    assert also["verify_log"] == 1 and also["snapshots"] == 1
    assert also["embedding_cache"] == 5  # three observations, the episode, and the deleted row of the undo file
    assert also["undo_files"] == 1
    assert "GDPR" in gone["gdpr_compliance"] and isinstance(gone["audit_id"], int)
    assert not gone["freed_space"].startswith("not scrubbed"), gone["freed_space"]
    assert got["live_files"] == {}

    after = got["after"]
    assert "not found" in after["get"]
    assert marker not in json.dumps(after["search"]["results"]).lower()  # other rows may still come back
    assert {o["content"] for o in after["other"]["observations"]} >= {"The lighthouse lamp turns at night",
                                                                        "Its keeper logs every ship"}
    assert after["other"]["relations"] == [] and marker not in json.dumps(after["other"])
    assert "the lamp bulb burnt out" in json.dumps(after["errors"])  # an error that does not name it stays
    # the open session that named it stays (its notes and links are about other things too),
    # purged of the name: it goes on, and the new write lands in it
    session = after["session"]["session"]
    assert (session["name"], session["goals"]) == ("(forgotten)", []) and marker not in json.dumps(session)
    assert after["write"]["id"]
    (event,) = [e for e in after["tail"]["entries"] if e["action"] == "memory.forget"]
    assert set(event["payload"]) == {"entity_id", "counts"} and event["payload"]["counts"]["observations"] == 3
    assert event["id"] == gone["audit_id"] and marker not in json.dumps(after["tail"]).lower()
    assert after["verify"]["ok"] is True

    # After the server stopped: not in any file, not in any row, not in the embedding cache.
    assert files_holding(location.data_dir, [marker, marker.upper()]) == {}
    assert cache_rows(location) == passages_before - 5 + 1  # the other entity's passages stay (+ the new one)
    if location.backend == "postgresql":
        assert tables_holding(location.database_url, marker) == {}
    else:
        assert list(location.data_dir.glob("memory.ann-*.usearch")), "the accelerator was built and saved"


def test_forget_drops_the_vectors_from_the_index_and_its_accelerator(open_memory, backend):
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps no vectors outside its rows: deleted rows take theirs (test above)")
    mem = open_memory(ann_min_rows=2)
    store: Any = mem.store
    for i in range(3):
        write.add(mem, None, entity_name="Ada", content=f"Ada fact {i} about compilers and {i * 7} bugs")
        write.add(mem, None, entity_name="Brian", content=f"Brian fact {i} about gardens and {i * 5} roses")
    episodes.add(mem, None, entity_name="Ada", content="Ada gave a talk on compilers")
    ada = {r[0] for r in store._q("SELECT o.seq FROM observations o JOIN entities e ON e.id = o.entity_id"
                                  " WHERE e.name = 'Ada'")}
    index = store.vectors["observation"]
    assert index.accelerator.wait(60) and ada <= set(index.revisions())
    forget.forget(mem, None, entity_name="Ada", confirm=True)
    assert not ada & set(index.revisions()) and len(index) == 3
    assert len(store.vectors["episode"]) == 0
    assert index.accelerator.wait(60), index.accelerator.last_error  # rebuilt without them
    assert set(index.accelerator._revs) == set(index.revisions())


def test_forget_purges_only_what_names_it_as_a_word_in_the_callers_scope(memory):
    projects.switch(memory, None, "harbour")
    incidents.report(memory, None, error_type="Trip", error_message="fatal: Al's boat sank")
    incidents.report(memory, None, error_type="Disk", error_message="fatal disk error, all lost")
    working_memory.write(memory, None, content="AL called twice")
    working_memory.write(memory, None, content="buy salt")
    write.add(memory, None, entity_name="Al", content="Al runs the ferry")
    projects.switch(memory, None, "village")
    incidents.report(memory, None, error_type="Trip", error_message="Al visited the village")
    projects.switch(memory, None, "harbour")

    gone = forget.forget(memory, None, entity_name="Al", confirm=True)

    assert gone["cascaded"]["errors_purged"] == 1 and gone["also_purged"]["notes"] == 1
    left = {e["error_message"] for e in memory.store.recent_errors(memory.scope(None), 10)}
    assert left == {"fatal disk error, all lost"}  # "fatal" and "all" do not name Al
    projects.switch(memory, None, "village")  # another project's rows are not this call's to delete
    village = memory.store.recent_errors(memory.scope(None), 10)
    assert [e["error_message"] for e in village] == ["Al visited the village"]


def test_bad_calls_delete_nothing(memory):
    write.add(memory, None, entity_name="Keep", content="Keep this row")
    with pytest.raises(InvalidInput, match="confirm"):
        forget.forget(memory, None, entity_name="Keep", confirm=False)
    with pytest.raises(InvalidInput, match="confirm: must be true or false"):
        forget.forget(memory, None, entity_name="Keep", confirm="yes")
    with pytest.raises(InvalidInput, match="entity_name"):
        forget.forget(memory, None, entity_name="", confirm=True)
    with pytest.raises(NotFound, match="nothing was forgotten"):
        forget.forget(memory, None, entity_name="keep", confirm=True)  # names are exact
    assert write.list_for(memory, None, entity_name="Keep")["count"] == 1
    assert audit.tail(memory, None)["count"] == 0


def test_an_entity_shared_beyond_the_active_project_is_not_forgotten_from_inside_it(memory):
    """Entities are per project (the newest original's rule: with a project active, neither another
    project's entity nor one of no project is in scope), yet an entity can hold another project's
    rows (a store written before that rule, a hand-edited bundle): forgetting it from inside one
    project is refused, as the cascade would delete the other project's rows too."""
    write.add(memory, None, entity_name="Postgres", content="Postgres is the shared database")  # no project
    projects.switch(memory, None, "search")
    search_id = memory.client(None).project_id
    with pytest.raises(NotFound):  # the entity of no project is out of scope: not forgotten from here
        forget.forget(memory, None, entity_name="Postgres", confirm=True)
    projects.switch(memory, None, "billing")
    write.add(memory, None, entity_name="Postgres", content="billing's database lives at 10.0.0.5")
    own = memory.store.get_entity("Postgres", memory.scope(None))
    assert own is not None and own.project_id == memory.client(None).project_id  # billing's own entity
    memory.store.add_observation(NewObservation(own.id, "search reads the billing database", project_id=search_id))
    with pytest.raises(InvalidInput, match="shared beyond the active project"):
        forget.forget(memory, None, entity_name="Postgres", confirm=True)
    projects.switch(memory, None, "*")  # everything visible: the caller sees what the cascade reaches
    assert len(memory.store.observations_of(own.id, memory.scope(None))) == 2  # nothing was deleted
    assert forget.forget(memory, None, entity_name="Postgres", confirm=True)["cascaded"]["observations"] == 2


def test_forgetting_a_merged_entity_removes_the_merges_undo_file_too(memory):
    from cuba_memorys.services.graph import aliases

    marker = uuid.uuid4().hex
    write.add(memory, None, entity_name="alice-smith", content=f"{marker} prefers the night shift")
    write.add(memory, None, entity_name="Alice Smith", content="Alice Smith leads the ops team")
    aliases.dedupe(memory, None, merge="alice-smith", into="Alice Smith", apply=True)
    copies = [p for p in memory.settings.undo_dir.glob("*.json") if marker in p.read_text()]
    assert copies  # the merge's undo file holds the loser's rows under the loser's id
    gone = forget.forget(memory, None, entity_name="alice-smith", confirm=True)  # by its alias
    assert gone["entity_name"] == "Alice Smith" and gone["also_purged"]["undo_files"] == len(copies)
    assert not [p for p in memory.settings.undo_dir.glob("*.json") if marker in p.read_text()]
