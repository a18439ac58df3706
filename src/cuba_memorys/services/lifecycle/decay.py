"""The memory model's formulas: stratified decay of observations, power-law decay of
episodes, the bounded feedback update (docs/memory-model.md explains each).

Every function that changes rows takes ``now`` so a test can age a store with its own clock.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from cuba_memorys.models import PERMANENT_TYPES, iso, utc_now
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import DecayRow

# Half-life in days by observation type; types not listed use DEFAULT_HALFLIFE.
HALFLIFE_DAYS = {"fact": 30.0, "preference": 30.0, "error": 14.0, "solution": 14.0, "context": 7.0,
                 "tool_usage": 7.0}
DEFAULT_HALFLIFE = 30.0
FLOOR = 0.01  # importance never decays below this (a row decayed to nothing is a prune candidate)
IDLE = timedelta(days=1)  # rows accessed within the last day are not decayed
PROTECT_WINDOW = timedelta(hours=8)  # entities written this recently, while a session is open
EPISODE_MIN_AGE = timedelta(hours=1)
LN2 = 0.693  # the original's constant (ln 2 rounded): kept so the numbers match it
FEEDBACK_RATE = 0.05
NEGLIGIBLE = 1e-6
FORMULA = "importance × exp(−0.693 × days / (H × (1 + ln(1 + access_count)))), floor 0.01"
TESTING_EFFECT = ("each access raises access_count, which lengthens the half-life (1 + ln(1 + access_count)"
                  " times H); rows accessed within the last day are not decayed")


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def days_between(earlier: str, now: datetime) -> float:
    return max(0.0, (now - parse(earlier)).total_seconds() / 86400.0)


def decayed_importance(importance: float, days: float, halflife: float, access_count: int) -> float:
    """The stratified decay formula (FORMULA)."""
    effective = halflife * (1.0 + math.log(1.0 + max(0, access_count)))
    return max(FLOOR, importance * math.exp(-LN2 * days / effective))


def episode_importance(days: float, c: float = 0.1, beta: float = 0.5) -> float:
    """Power-law forgetting of an episode ``days`` old: max(0.01, 0.5 / (1 + c·days)^β)."""
    return max(FLOOR, 0.5 / (1.0 + c * days) ** beta)


def positive_update(importance: float, access_count: int) -> float:
    """Oja-style bounded reinforcement with a Robbins–Monro rate that shrinks with use."""
    rate = FEEDBACK_RATE / math.sqrt(1.0 + access_count / 100.0)
    return min(1.0, importance + rate * (1.0 - importance))


def negative_update(importance: float, access_count: int) -> float:
    rate = FEEDBACK_RATE / math.sqrt(1.0 + access_count / 100.0)
    return max(0.0, importance - rate * importance)


def _since(row: DecayRow) -> str:
    """Decay counts from the later of the last access and the last decay (else the write)."""
    marks = [m for m in (row["last_accessed"], row["last_decayed_at"]) if m]
    return max(marks) if marks else row["created_at"]


def protected_entities(mem: Memory, now: datetime) -> list[str]:
    """Entities written in the last 8 h while a work session is open: decay leaves them alone."""
    if mem.store.open_session_count() == 0:
        return []
    return mem.store.entities_written_since(iso(now - PROTECT_WINDOW))


def decay_observations(mem: Memory, client: str | None, *, now: datetime | None = None,
                       halflife_days: float | None = None, protect: bool = False) -> dict:
    """One decay pass over the client's scope; returns counts by type."""
    now = now or utc_now()
    protected = protected_entities(mem, now) if protect else []
    # a client with a project active ages that project's rows, not the shared ones (no project)
    rows = mem.store.decay_rows(mem.scope(client, include_unscoped=False), iso(now - IDLE), protected)
    updates: list[tuple[str, float, float]] = []
    by_type: dict[str, int] = {}
    for row in rows:
        if row["observation_type"] in PERMANENT_TYPES:
            continue
        halflife = halflife_days or HALFLIFE_DAYS.get(row["observation_type"], DEFAULT_HALFLIFE)
        new = decayed_importance(row["importance"], days_between(_since(row), now), halflife, row["access_count"])
        # A change too small to matter is not written: the time it covers is counted by the
        # next pass (which measures from the last decay that was written).
        if new < row["importance"] - NEGLIGIBLE:
            updates.append((row["id"], row["importance"], new))
            by_type[row["observation_type"]] = by_type.get(row["observation_type"], 0) + 1
    written = mem.store.set_decayed("observation", updates, iso(now))
    return {"decayed": written, "by_type": by_type, "protected_entities": len(protected)}


def decay_episodes(mem: Memory, client: str | None, *, now: datetime | None = None, c: float = 0.1,
                   beta: float = 0.5) -> dict:
    """Episodes older than an hour take the power law's importance for their age."""
    now = now or utc_now()
    rows = mem.store.episode_ages(mem.scope(client, include_unscoped=False), iso(now - EPISODE_MIN_AGE))
    updates = [(r["id"], r["importance"], episode_importance(days_between(r["created_at"], now), c, beta))
               for r in rows]
    changed = [u for u in updates if abs(u[2] - u[1]) > 1e-9]
    return {"decayed": mem.store.set_decayed("episode", changed, iso(now))}
