"""The consolidation cycle (spec §4c): its rem_cycles row and counts, one cycle at a time across
processes, nothing half-done when a step fails, the schedule of a real stdio server, doctor."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import replace
from datetime import timedelta

import anyio
import pytest

from conftest import SERVER_BIN, StoreLocation, settings_for
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.admin import doctor
from cuba_memorys.services.graph import aliases, episodes
from cuba_memorys.services.lifecycle import decay, rem
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sessions import sessions
from mcp_helpers import run_stdio

NOW = utc_now()
MONTH_AGO = iso(NOW - timedelta(days=30))


def seed(mem: Memory) -> dict[str, str]:
    """Old rows that decay, a decision that never does, an old episode, near-duplicate names."""
    ids = {
        "context": write.add(mem, None, entity_name="build", content="The CI cache is warmed at 03:00",
                             observation_type="context", created_at=MONTH_AGO)["id"],
        "decision": write.add(mem, None, entity_name="build", content="We chose GitHub Actions over Jenkins",
                              observation_type="decision", created_at=MONTH_AGO)["id"],
    }
    episodes.add(mem, None, entity_name="build", content="The release pipeline broke for a day",
                 created_at=MONTH_AGO)
    write.add(mem, None, entity_name="payments-gateway", content="Stripe webhooks land on the gateway")
    write.add(mem, None, entity_name="payments-gateways", content="Webhooks are retried three times")
    return ids


def importance(mem: Memory, obs_id: str) -> float:
    return mem.store.snapshot_rows("observations", "id", [obs_id])[0]["importance"]


def test_a_cycle_decays_backfills_counts_and_records_itself(memory: Memory, open_memory):
    ids = seed(memory)
    blind = open_memory(embed_model="none")  # writes rows no model embedded
    write.add(blind, None, entity_name="notes", content="Release notes are drafted on Thursdays")
    write.add(blind, None, entity_name="notes", content="The changelog follows keep-a-changelog")
    before = {k: importance(memory, v) for k, v in ids.items()}

    result = rem.run_cycle(memory, trigger="cli", now=NOW)
    assert result["error"] is None and result["skipped"] is False
    assert result["embeddings_missing_before"] == 2 and result["embeddings_missing_after"] == 0
    assert result["embeddings_backfilled"] == 2
    assert result["decayed_count"] == 1  # the context row; the decision never decays
    expected = decay.decayed_importance(before["context"], 30.0, 7.0, 0)
    assert importance(memory, ids["context"]) == pytest.approx(expected, rel=1e-3)
    assert importance(memory, ids["decision"]) == before["decision"]
    assert result["episodes_decayed"] == 1
    assert result["duplicate_candidates"] == 1  # payments-gateway ~ payments-gateways
    assert result["statistics"]["observations"] == 6 and "autolink" not in result["skipped_steps"]

    [row] = memory.store.rem_cycles(5)
    assert row["id"] == result["cycle_id"] and row["trigger"] == "cli" and row["error"] is None
    assert (row["decayed_count"], row["episodes_decayed"], row["embeddings_backfilled"],
            row["duplicate_candidates"]) == (1, 1, 2, 1)
    assert row["started_at"] == iso(NOW) and row["finished_at"] >= row["started_at"] and row["duration_ms"] >= 0


def test_an_entity_written_during_an_open_session_is_protected(memory: Memory):
    old = write.add(memory, None, entity_name="busy", content="Deploys are frozen on Fridays",
                    observation_type="context", created_at=MONTH_AGO)["id"]
    other = write.add(memory, None, entity_name="idle", content="Logs are kept for two weeks",
                      observation_type="context", created_at=MONTH_AGO)["id"]
    sessions.start(memory, None, name="release week")
    write.add(memory, None, entity_name="busy", content="The freeze starts at noon this week")
    kept = importance(memory, old)
    result = rem.run_cycle(memory)
    assert result["protected_entities"] == 1 and result["decayed_count"] == 1
    assert importance(memory, old) == kept and importance(memory, other) < kept


def test_a_failing_step_changes_nothing_and_records_the_error(memory: Memory, open_memory, monkeypatch):
    ids = seed(memory)
    blind = open_memory(embed_model="none")
    write.add(blind, None, entity_name="notes", content="Release notes are drafted on Thursdays")
    rows_before = memory.store.snapshot_rows("observations", "id", list(ids.values()))
    episodes_before = memory.store.snapshot_rows("episodes", "entity_id",
                                                 [memory.store.get_entity("build", memory.scope(None)).id])

    def broken(*_a, **_k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(decay, "decay_episodes", broken)  # after the observations' decay has written
    result = rem.run_cycle(memory, now=NOW)
    assert result["error"] == "RuntimeError: disk on fire"
    assert result["decayed_count"] == 0 and result["embeddings_backfilled"] == 0
    assert memory.store.snapshot_rows("observations", "id", list(ids.values())) == rows_before
    assert memory.store.snapshot_rows("episodes", "entity_id", [episodes_before[0]["entity_id"]]) == episodes_before
    assert result["embeddings_missing_after"] == 1  # the backfill rolled back with the rest
    [row] = memory.store.rem_cycles(5)
    assert row["error"] == "RuntimeError: disk on fire"
    assert all(row[k] == 0 for k in rem.COUNTS)


def test_one_cycle_at_a_time_across_processes(memory: Memory, open_memory, monkeypatch):
    other = open_memory()  # a second process's store on the same data (its own connection)
    with other.store.exclusive("rem") as held:
        assert held
        assert rem.run_cycle(memory)["skipped"] is True
    assert memory.store.rem_cycles(5) == []  # a skipped cycle writes nothing

    # Two cycles started together: one runs, the other finds the lock held and skips.
    entered, release = threading.Event(), threading.Event()
    real = aliases.duplicate_candidates

    def slow(mem):
        entered.set()
        release.wait(30)
        return real(mem)

    monkeypatch.setattr(aliases, "duplicate_candidates", slow)
    results = {}
    worker = threading.Thread(target=lambda: results.setdefault("first", rem.run_cycle(memory)))
    worker.start()
    assert entered.wait(30)
    results["second"] = rem.run_cycle(other)
    release.set()
    worker.join(60)
    assert results["second"]["skipped"] is True and results["first"]["skipped"] is False
    assert len(memory.store.rem_cycles(5)) == 1
    assert rem.run_cycle(other)["skipped"] is False  # released when the first finished


def test_doctor_reports_the_last_cycle_and_warns_when_cycles_are_overdue(memory: Memory):
    report = doctor.doctor(memory)
    assert report["consolidation"]["last_cycle"] is None and not report["consolidation"]["stale"]
    rem.heartbeat(memory, NOW - timedelta(hours=6))
    for minutes in range(0, 6 * 60 + 1, 10):  # a server up for six hours, beating every 10 minutes
        rem.heartbeat(memory, NOW - timedelta(hours=6) + timedelta(minutes=minutes))
    report = doctor.doctor(memory)
    assert report["consolidation"]["stale"] and not report["ok"]
    assert any("no consolidation cycle ran for 5 h" in w and "none has ever run" in w for w in report["warnings"])

    rem.run_cycle(memory)
    report = doctor.doctor(memory)
    last = report["consolidation"]["last_cycle"]
    assert last["trigger"] == "cli" and last["error"] is None and "decayed_count" in last["counts"]
    assert not report["consolidation"]["stale"]
    assert not any("consolidation" in w for w in report["warnings"])


def test_a_gap_between_servers_restarts_the_uptime(memory: Memory):
    rem.heartbeat(memory, NOW - timedelta(hours=10))
    rem.heartbeat(memory, NOW)  # nothing beat for ten hours: no server was up then
    assert memory.store.get_meta(rem.SINCE_KEY) == iso(NOW)
    assert not rem.status(memory)["stale"]


def test_a_failed_cycle_is_a_doctor_warning(memory: Memory, monkeypatch):
    monkeypatch.setattr(decay, "decay_observations", lambda *_a, **_k: 1 / 0)
    rem.run_cycle(memory)
    report = doctor.doctor(memory)
    assert any("last consolidation cycle" in w and "ZeroDivisionError" in w for w in report["warnings"])


def test_a_stdio_server_runs_its_first_cycle_after_the_delay(location: StoreLocation):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="ops", content="Pager duty rotates weekly")
        await anyio.sleep(4)

    run_stdio(location, body, CUBA_REM_FIRST_DELAY_SECS="0.5", CUBA_EMBED_MODEL="none")
    mem = Memory.open(replace(settings_for(location), embed_model="none"))
    try:
        cycles = mem.store.rem_cycles(5)
        assert [c["trigger"] for c in cycles] == ["schedule"] and cycles[0]["error"] is None
        assert mem.store.get_meta(rem.SEEN_KEY) and mem.store.get_meta(rem.SINCE_KEY)
    finally:
        mem.close()


def test_cli_rem(location: StoreLocation):
    def cli(*args: str, check: int = 0) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(SERVER_BIN), *args], env=location.env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == check, proc.stderr
        return proc

    cli("save", "ops", "Pager duty rotates weekly")
    out = json.loads(cli("rem").stdout)
    assert out["action"] == "rem" and out["embeddings_missing_before"] == 0
    assert out["embeddings_missing_after"] == 0 and out["error"] is None
    assert "No such option" in cli("rem", "--now", check=2).stderr
    assert json.loads(cli("doctor", "--json").stdout)["consolidation"]["last_cycle"]["id"] == out["cycle_id"]


def test_the_scheduler_stops_at_once_while_waiting(memory: Memory):
    scheduler = rem.RemScheduler(memory, first_delay=3600)
    scheduler.start()
    started = time.monotonic()
    scheduler.stop()
    assert time.monotonic() - started < 5 and memory.store.rem_cycles(1) == []
    assert memory.store.get_meta(rem.SEEN_KEY)  # it beat once on starting


def test_every_offline_step_runs_and_only_the_llm_steps_are_skipped(open_memory, backend: str):
    """The skip notes name the two steps that need an LLM and nothing else; ANALYZE (step 10)
    runs on the tables whose statistics are stale: never analyzed, or more rows changed since
    than max(50, 5%) (SQLite: read from sqlite_stat1; PostgreSQL: from its own counters)."""
    mem = open_memory(embed_model="none")
    seed(mem)
    first = rem.run_cycle(mem, now=NOW)
    assert first["error"] is None
    assert set(first["skipped_steps"]) == {"relation_scan", "auto_extraction"}
    assert all(why.startswith("needs an LLM") for why in first["skipped_steps"].values())
    assert set(first["not_applicable_steps"]) == {"chunk_backfill", "quantization"}
    assert "graph issue" not in json.dumps(first)
    second = rem.run_cycle(mem, now=NOW)
    assert second["analyzed"] == [] and "nothing analyzed" in second["notes"]["analyze"]
    write.batch_add(mem, None, [{"entity_name": "build", "content": f"Build step {n} caches layer {n * 7}"}
                                for n in range(60)])
    third = rem.run_cycle(mem, now=NOW)
    if backend == "sqlite":  # PostgreSQL's counters reach pg_stat_user_tables within seconds, not at once
        assert first["analyzed"] == ["observations", "entities"]  # relations is empty: nothing to describe
        assert third["analyzed"] == ["observations"]  # 60 rows more: over max(50, 5%)
        stats = {table for table, in mem.store._q("SELECT DISTINCT tbl FROM sqlite_stat1")}
        assert {"observations", "entities"} <= stats
    assert set(first["analyzed"]) | set(third["analyzed"]) <= {"observations", "entities", "relations"}
    assert third["notes"]["analyze"].startswith(("analyzed", "every table"))
