"""A scripted month (issue 13): a store aged with an injected clock through 30 simulated days of
writes, accesses and consolidation cycles, on both backends. Afterwards decisions and lessons are
untouched, unaccessed context rows have decayed exactly as the formula says, accessed rows kept
their importance, prune's dry run lists exactly the rows below its threshold, an undone delete
restores the row byte for byte, and the audit chain verifies over every event of the month."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from cuba_memorys.models import iso, utc_now
from cuba_memorys.services import audit
from cuba_memorys.services.lifecycle import feedback, rem, undo, zafra
from cuba_memorys.services.observations import write as observations

DAYS = 30
H_CONTEXT = 7.0


def _row(mem, obs_id):
    return mem.store.fetch_rows("observation", [obs_id])[obs_id]


def _snapshot(mem, obs_id):
    """Every stored column of one observation, embedding included."""
    return mem.store.snapshot_rows("observations", "id", [obs_id])[0]


@pytest.fixture
def month(memory, tmp_path, monkeypatch):
    from dataclasses import replace

    memory.settings = replace(memory.settings, undo_dir=tmp_path / "undo")
    start = utc_now().replace(microsecond=0) - timedelta(days=DAYS)
    ids: dict[str, str] = {}

    def add(key, content, kind, day):
        ids[key] = observations.add(memory, None, entity_name=f"topic-{key}", content=content, observation_type=kind,
                                    created_at=iso(start + timedelta(days=day)))["id"]

    add("decision", "We release from the main branch only, tagged by CI", "decision", 0)
    add("lesson", "Never run migrations by hand on the primary database", "lesson", 0)
    add("used", "The staging deploy script lives in ops/deploy.sh", "context", 0)
    for day in range(DAYS):
        add(f"day{day}", f"Daily standup note {day}: the build queue held {day * 7 + 3} jobs at noon", "context", day)
        moment = start + timedelta(days=day, hours=9)
        used = _row(memory, ids["used"])  # the agent reads this row every morning
        memory.store.set_importance("observation", ids["used"], used["importance"], iso(moment), used["importance"])
        rem.run_cycle(memory, trigger="schedule", now=start + timedelta(days=day, hours=12))
    return memory, start, ids


def test_a_month_of_decay_keeps_what_matters_and_fades_the_rest(month):
    memory, start, ids = month
    first = {k: memory.store.facts_of(i)[0]["confidence"] for k, i in ids.items()}  # the importance written
    assert _row(memory, ids["decision"])["importance"] == first["decision"]
    assert _row(memory, ids["lesson"])["importance"] == first["lesson"]
    assert _row(memory, ids["used"])["importance"] == pytest.approx(first["used"])  # accessed daily: kept
    last_cycle = start + timedelta(days=DAYS - 1, hours=12)
    for day in range(DAYS - 1):  # day 29's row was written half a day before the last cycle
        key = f"day{day}"
        age = (last_cycle - (start + timedelta(days=day))).total_seconds() / 86400
        expected = max(0.01, first[key] * math.exp(-0.693 * age / H_CONTEXT))
        assert _row(memory, ids[key])["importance"] == pytest.approx(expected, rel=1e-6), key
    cycles = memory.store.rem_cycles(100)
    assert len(cycles) == DAYS and all(c["error"] is None for c in cycles)


def test_prune_lists_exactly_the_rows_below_threshold_and_undo_restores_a_deleted_one(month):
    memory, _, ids = month
    below = {i for i in ids.values() if _row(memory, i)["importance"] < 0.1}
    assert below and ids["decision"] not in below
    dry = zafra.prune(memory, None, threshold=0.1)
    assert dry["dry_run"] is True and {r["id"] for r in dry["rows"]} == below and dry["would_prune"] == len(below)
    assert all(_row(memory, i) for i in below)  # a dry run deletes nothing

    target = ids["day3"]
    feedback.correct(memory, None, observation_id=target, correction="Standup 3: the build queue held 24 jobs")
    before = _snapshot(memory, target)
    deleted = undo.delete_observation(memory, None, observation_id=target, apply=True)
    assert not memory.store.fetch_rows("observation", [target])
    undo.apply(memory, deleted["undo_file"])
    assert _snapshot(memory, target) == before  # every column, byte for byte
    assert [f["object"] for f in memory.store.facts_of(target)][-1] == "Standup 3: the build queue held 24 jobs"

    pruned = zafra.prune(memory, None, threshold=0.1, confirm=True)
    assert pruned["pruned"] == len(below) and not memory.store.fetch_rows("observation", list(below))
    undo.apply(memory, pruned["undo_file"])
    assert set(memory.store.fetch_rows("observation", list(below))) == below

    verified = audit.verify(memory, None)
    actions = [e["action"] for e in audit.tail(memory, None, limit=200)["entries"]]
    assert verified["ok"] is True and verified["rows_checked"] == len(actions)
    assert {"memory.correct", "memory.delete", "memory.undo", "memory.prune"} <= set(actions)
