"""Undo files and `cuba-memorys delete` / `undo`: a deleted row comes back byte for byte, found
by search again; bad input is refused with a clear error and changes nothing."""

from __future__ import annotations

import json
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import SERVER_BIN, StoreLocation, settings_for
from cuba_memorys.errors import CubaError, InvalidInput, NotFound, StorageError
from cuba_memorys.services import audit
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import faro
from cuba_memorys.storage.sql.undo import UNDO_TABLES

DEPLOY = "Deploys go out with blue-green switching behind the HAProxy load balancer."


@pytest.fixture
def mem(memory: Memory, tmp_path: Path) -> Memory:
    memory.settings = replace(memory.settings, undo_dir=tmp_path / "undo")
    return memory


def found_ids(mem: Memory, query: str) -> list[str]:
    return [r["id"] for r in faro.faro(mem, None, query=query, limit=10, track_access=False)["results"]]


def audit_actions(mem: Memory) -> list[str]:
    return [row["action"] for row in mem.store.audit_rows(0, 100)]


def test_the_service_and_the_store_list_the_same_tables_in_the_same_order():
    assert undo.PRIMARY_KEYS == UNDO_TABLES


def test_a_deleted_observation_comes_back_byte_for_byte(mem: Memory):
    written = write.add(mem, None, entity_name="deploy", content=DEPLOY, observation_type="decision")
    write.add(mem, None, entity_name="deploy", content="Rollbacks switch the router back to the previous colour.")
    before = mem.store.snapshot_rows("observations", "id", [written["id"]])
    facts_before = mem.store.snapshot_rows("facts", "observation_id", [written["id"]])
    assert before[0]["embedding"] and before[0]["version"] == 1 and facts_before
    assert written["id"] in found_ids(mem, "blue-green HAProxy deploys")

    plan = undo.delete_observation(mem, None, observation_id=written["id"])
    assert plan["dry_run"] and plan["would_delete"]["entity"] == "deploy"
    assert plan["would_delete"]["content"] == DEPLOY and plan["would_delete"]["type"] == "decision"
    assert mem.store.snapshot_rows("observations", "id", [written["id"]]) == before  # a plan deletes nothing

    done = undo.delete_observation(mem, None, observation_id=written["id"], apply=True)
    path = Path(done["undo_file"])
    assert path.name == f"obs-{written['id']}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert mem.store.snapshot_rows("observations", "id", [written["id"]]) == []
    assert mem.store.snapshot_rows("facts", "observation_id", [written["id"]]) == []  # gone by cascade
    assert written["id"] not in found_ids(mem, "blue-green HAProxy deploys")

    back = undo.apply(mem, path)
    assert back["restored"]["observations"] == 1 and back["undone"] == "delete"
    assert mem.store.snapshot_rows("observations", "id", [written["id"]]) == before
    assert mem.store.snapshot_rows("facts", "observation_id", [written["id"]]) == facts_before
    assert written["id"] in found_ids(mem, "blue-green HAProxy deploys")  # text and vector branches again
    assert audit_actions(mem)[-2:] == ["memory.delete", "memory.undo"]

    # The undo wrote its own way back: applying that deletes the row again.
    again = undo.apply(mem, back["undo_file"])
    assert again["removed"] == {"observations": 1, "facts": len(facts_before)}
    assert mem.store.snapshot_rows("observations", "id", [written["id"]]) == []


def test_restore_puts_back_a_row_that_was_changed_since(mem: Memory):
    written = write.add(mem, None, entity_name="db", content="Nightly backups of PostgreSQL are kept for 30 days.")
    before = mem.store.snapshot_rows("observations", "id", [written["id"]])
    path = undo.save(mem, "test", [("observations", "id", [written["id"]])])
    mem.store.set_importance("observation", written["id"], 0.01, "2030-01-01T00:00:00+00:00",
                             before[0]["importance"])
    assert mem.store.snapshot_rows("observations", "id", [written["id"]]) != before
    undo.apply(mem, path)
    assert mem.store.snapshot_rows("observations", "id", [written["id"]]) == before


def test_a_failing_delete_keeps_the_row_and_leaves_no_undo_file(mem: Memory, monkeypatch):
    written = write.add(mem, None, entity_name="deploy", content=DEPLOY)

    def broken(*_a, **_k):
        raise StorageError("the audit log is full")

    monkeypatch.setattr(audit, "record", broken)
    with pytest.raises(StorageError):
        undo.delete_observation(mem, None, observation_id=written["id"], apply=True)
    assert mem.store.get_observation(written["id"], mem.scope(None)) is not None
    assert not list(mem.settings.undo_dir.glob("*.json"))


def test_bad_undo_files_are_refused_and_change_nothing(mem: Memory, tmp_path: Path):
    written = write.add(mem, None, entity_name="deploy", content=DEPLOY)
    before = mem.store.counts()
    with pytest.raises(NotFound, match="does not exist"):
        undo.apply(mem, tmp_path / "missing.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(InvalidInput, match="not a cuba-memorys undo file"):
        undo.apply(mem, other)
    (tmp_path / "text.json").write_text("not json at all")
    with pytest.raises(InvalidInput, match="not a cuba-memorys undo file"):
        undo.apply(mem, tmp_path / "text.json")
    future = json.loads(undo.save(mem, "test", [("observations", "id", [written["id"]])]).read_text())
    future["version"] = 99
    (tmp_path / "future.json").write_text(json.dumps(future))
    with pytest.raises(InvalidInput, match="version 99"):
        undo.apply(mem, tmp_path / "future.json")
    # A damaged file naming a table undo never writes is refused before anything changes.
    damaged = json.loads(undo.save(mem, "test", [("observations", "id", [written["id"]])]).read_text())
    damaged["created"] = [{"table": "principals", "key": "name", "values": ["ana"]}]
    (tmp_path / "damaged.json").write_text(json.dumps(damaged))
    with pytest.raises(InvalidInput, match="damaged"):
        undo.apply(mem, tmp_path / "damaged.json")
    # A row naming a column the table lacks is refused by the store, and the transaction rolls back.
    bad_column = json.loads(undo.save(mem, "test", [("observations", "id", [written["id"]])]).read_text())
    bad_column["created"] = [{"table": "observations", "key": "id", "values": [written["id"]]}]
    bad_column["snapshots"][0]["rows"][0]["content; DROP TABLE x"] = "x"
    (tmp_path / "column.json").write_text(json.dumps(bad_column))
    with pytest.raises(StorageError, match="no column"):
        undo.apply(mem, tmp_path / "column.json")
    assert mem.store.counts() == before
    assert mem.store.get_observation(written["id"], mem.scope(None)) is not None  # its removal rolled back
    with pytest.raises(CubaError, match="not a table"):
        undo.save(mem, "test", [("principals", "name", ["ana"])])


def test_delete_refuses_an_unknown_id(mem: Memory):
    with pytest.raises(NotFound, match="no-such-id"):
        undo.delete_observation(mem, None, observation_id="no-such-id", apply=True)
    with pytest.raises(InvalidInput, match="observation_id"):
        undo.delete_observation(mem, None, observation_id="", apply=True)
    assert not mem.settings.undo_dir.exists() or not list(mem.settings.undo_dir.iterdir())


# -- the command line ------------------------------------------------------------------------

def cli(where: StoreLocation, undo_dir: Path, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SERVER_BIN), *args], env=where.env(CUBA_UNDO_DIR=str(undo_dir)),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == check, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def snapshot(where: StoreLocation, obs_id: str) -> list[dict]:
    mem = Memory.open(settings_for(where))
    try:
        return mem.store.snapshot_rows("observations", "id", [obs_id])
    finally:
        mem.close()


def test_cli_delete_plan_apply_and_undo(location: StoreLocation, tmp_path: Path):
    undo_dir = tmp_path / "undo"
    obs_id = json.loads(cli(location, undo_dir, "save", "deploy", DEPLOY, "--json").stdout)["id"]
    before = snapshot(location, obs_id)

    plan = cli(location, undo_dir, "delete", obs_id).stdout
    assert "Would delete" in plan and "deploy" in plan and "--apply" in plan
    assert snapshot(location, obs_id) == before and not undo_dir.exists()

    applied = cli(location, undo_dir, "delete", obs_id, "--apply").stdout
    path = undo_dir / f"obs-{obs_id}.json"
    assert f"undo file: {path}" in applied and path.is_file()
    assert snapshot(location, obs_id) == []
    search = json.loads(cli(location, undo_dir, "search", "blue-green HAProxy", "--json").stdout)
    assert obs_id not in [r["id"] for r in search["results"]]

    restored = cli(location, undo_dir, "undo", str(path)).stdout
    assert "restored 1 observations" in restored and "to undo this: cuba-memorys undo" in restored
    assert snapshot(location, obs_id) == before  # every column: embedding, version, timestamps
    search = json.loads(cli(location, undo_dir, "search", "blue-green HAProxy", "--json").stdout)
    assert search["results"][0]["id"] == obs_id


def test_cli_bad_input_is_an_error_and_changes_nothing(location: StoreLocation, tmp_path: Path):
    undo_dir = tmp_path / "undo"
    obs_id = json.loads(cli(location, undo_dir, "save", "deploy", DEPLOY, "--json").stdout)["id"]
    before = snapshot(location, obs_id)
    err = cli(location, undo_dir, "delete", "00000000-0000-0000-0000-000000000000", "--apply", check=2).stderr
    assert err.startswith("error: No observation has id")
    err = cli(location, undo_dir, "undo", str(tmp_path / "nowhere.json"), check=2).stderr
    assert "does not exist" in err
    (tmp_path / "config.json").write_text('{"mcpServers": {}}')
    err = cli(location, undo_dir, "undo", str(tmp_path / "config.json"), check=2).stderr
    assert "not a cuba-memorys undo file" in err
    assert snapshot(location, obs_id) == before and not undo_dir.exists()
