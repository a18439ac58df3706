"""The bitemporal fact log: every observation version is a fact (subject = its entity,
predicate = its type, object = its text) valid from when it was written until something
replaced it. Corrections, merges, summaries and supersessions close facts; nothing deletes
them but forgetting the entity. ``cuba_faro as_of`` reads them (storage/sql/search.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from cuba_memorys.models import Entity, iso, new_id, utc_now
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import FactRow


def opened(mem: Memory, observation_id: str, entity: Entity, predicate: str, content: str, confidence: float,
           project_id: str | None, valid_from: str | None = None) -> str | None:
    """Record the fact a new observation version asserts; its id (None with CUBA_BITEMPORAL off)."""
    if not mem.settings.bitemporal:
        return None
    now = iso(utc_now())
    fact_id = new_id()
    mem.store.open_fact(FactRow(
        fact_id=fact_id, subject_entity_id=entity.id, observation_id=observation_id, project_id=project_id,
        subject=entity.name, predicate=predicate, object=content, valid_from=valid_from or now, valid_to=None,
        observed_at=now, confidence=max(0.0, min(1.0, confidence)), is_current=True, created_at=now))
    return fact_id


def current_fact(mem: Memory, observation_id: str) -> str | None:
    facts = [f for f in mem.store.facts_of(observation_id) if f["is_current"]]
    return facts[-1]["fact_id"] if facts else None


def supersede(mem: Memory, ids: Sequence[str], by_id: str | None, reason: str, at: str | None = None) -> int:
    """Retire observations (merge, summarize, a conflict judged by auto_extract): out of search,
    their facts closed and linked to the replacing observation's fact."""
    at = at or iso(utc_now())
    with mem.store.transaction():
        moved = mem.store.supersede_observations(ids, by_id, at)
        mem.store.close_facts(ids, at, reason, current_fact(mem, by_id) if by_id else None)
    return moved
