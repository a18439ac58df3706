"""cuba_eco: the agent tells the memory what was right or wrong.

positive / negative move importance by the bounded rule of services/lifecycle/decay.py;
correct rewrites an observation's text keeping the old one in ``previous_versions`` (newest
20) and in the fact log; promote / quarantine change a row's trust (audited); pending lists
what waits in quarantine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuba_memorys.errors import CubaError, InvalidInput, NotFound
from cuba_memorys.models import MAX_NAME_CHARS, MAX_PREVIOUS_VERSIONS, Entity, Observation, iso, utc_now
from cuba_memorys.services import audit, validate
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.graph.entities import find_entity
from cuba_memorys.services.lifecycle import decay, facts
from cuba_memorys.services.memory import Memory

KINDS = ("observation", "episode", "error")
ATTEMPTS = 5  # reads of a row whose importance concurrent writers keep changing
PENDING_NOTE = ("Quarantined rows are never searched. Promote one with cuba_eco action=promote (kind, id) once"
                " you have checked it; leave the rest, or delete them.")


def _observation(mem: Memory, client: str | None, observation_id: object) -> Observation:
    obs_id = validate.text("observation_id", observation_id, high=64)
    found = mem.store.get_observation(obs_id, mem.scope(client))
    if found is None:
        raise NotFound(f"Observation '{obs_id}' not found.",
                       hint="List an entity's observations with cuba_cronica action=list.")
    return found


def _targets(entity_name: object, observation_id: object) -> None:
    if entity_name in (None, "") and observation_id in (None, ""):
        raise InvalidInput("observation_id", "give an observation_id or an entity_name to give feedback on")


def _feedback(mem: Memory, client: str | None, entity_name: object, observation_id: object, up: bool) -> int:
    _targets(entity_name, observation_id)
    rule = decay.positive_update if up else decay.negative_update
    changed = 0
    with mem.store.transaction():
        if observation_id not in (None, ""):
            obs_id = _observation(mem, client, observation_id).id
            touched = iso(utc_now()) if up else None  # a confirmed row also counts as used
            changed += _update(lambda: _observation(mem, client, obs_id), "observation", rule, touched, mem)
        if entity_name not in (None, ""):
            name = validate.text("entity_name", entity_name, high=MAX_NAME_CHARS)
            changed += _update(lambda: find_entity(mem, client, name), "entity", rule, None, mem)
    return changed


def _update(read: Callable[[], Observation | Entity], kind: str, rule: Callable[[float, int], float],
            touched: str | None, mem: Memory) -> int:
    """Apply ``rule`` to the row as it is now: written only if nobody changed its importance
    since it was read (PostgreSQL runs concurrent writers side by side), else read again."""
    for _ in range(ATTEMPTS):
        row = read()
        if mem.store.set_importance(kind, row.id, rule(row.importance, row.access_count), touched, row.importance):
            return 1
    raise CubaError(f"the {kind}'s importance kept changing under concurrent writes; nothing was changed.",
                    hint="Try again.")


def positive(mem: Memory, client: str | None, *, entity_name: object = None, observation_id: object = None) -> dict:
    count = _feedback(mem, client, entity_name, observation_id, up=True)
    return {"action": "positive", "boosted_count": count, "rule": "oja_positive_robbins_monro"}


def negative(mem: Memory, client: str | None, *, entity_name: object = None, observation_id: object = None) -> dict:
    count = _feedback(mem, client, entity_name, observation_id, up=False)
    return {"action": "negative", "decreased_count": count, "rule": "oja_negative_robbins_monro"}


def correct(mem: Memory, client: str | None, *, observation_id: object, correction: object,
            allow_secret: bool = False) -> dict:
    obs = _observation(mem, client, observation_id)
    text = validate.text("correction", correction)
    validate.no_secret("correction", text, allow_secret)
    if obs.observation_type == "superseded":
        raise InvalidInput("observation_id", "is superseded; correct the observation that replaced it")
    entity = mem.store.get_entity_by_id(obs.entity_id)
    assert entity is not None  # an observation's entity exists (foreign key)
    (vector,) = mem.embed_passages([(entity.name, entity.entity_type, text)])  # before the write lock
    now = iso(utc_now())
    with mem.store.transaction():
        obs = _observation(mem, client, obs.id)  # as it is now: the history is built from this version
        history = [*obs.previous_versions, {"content": obs.content, "version": obs.version,
                                            "origin_node": mem.settings.origin_node, "corrected_at": now}]
        if not mem.store.correct_observation(obs.id, text, history[-MAX_PREVIOUS_VERSIONS:], now, obs.version):
            raise CubaError(f"observation '{obs.id}' was corrected by someone else at the same moment; nothing"
                            " was changed.", hint="Read it again (cuba_cronica action=list) and retry.")
        if vector is not None:
            seq = mem.store.fetch_rows("observation", [obs.id])[obs.id]["seq"]
            mem.store.set_embeddings("observation", [(seq, vector)], mem.loaded_embedder().name)
        new_fact = facts.opened(mem, obs.id, entity, obs.observation_type, text, obs.importance, obs.project_id, now)
        if new_fact is not None:  # with CUBA_BITEMPORAL off the old fact stays open (nothing replaces it)
            mem.store.close_facts([obs.id], now, "corrected", new_fact)
        # the corrected text is about the code as it is now: its stale anchors move to HEAD
        reanchored = code_anchors.reanchor_at_head(mem, obs.id)
        audit_id = audit.record(mem, client, "memory.correct", {
            "observation_id": obs.id, "version": obs.version + 1, **({"reanchored": reanchored} if reanchored else {})})
    mem.queue_tokens([obs.id])  # the new text's token vectors (the old ones went with the old text)
    return {"action": "correct", "observation_id": obs.id, "new_content": text, "versioned": True,
            "version": obs.version + 1, "audit_id": audit_id, **({"reanchored": reanchored} if reanchored else {})}


def _trust_target(kind: object, observation_id: object, row_id: object) -> tuple[str, str]:
    kind = validate.choice("kind", kind, KINDS, default="observation")
    if kind == "observation":
        target = observation_id if observation_id not in (None, "") else row_id
        return kind, validate.text("observation_id", target, high=64)
    return kind, validate.text("id", row_id if row_id not in (None, "") else observation_id, high=64)


def _visible(mem: Memory, client: str | None, kind: str, row_id: str) -> dict[str, Any]:
    """The row, when it exists in the client's scope (else NotFound)."""
    scope = mem.scope(client)
    row = mem.store.fetch_rows(kind, [row_id]).get(row_id)
    # A project's client changes the trust of its own rows only: a shared row (no project) is
    # every project's, so one of them must not hide it from the rest.
    if row is None or not (scope.unrestricted or row.get("project_id") == scope.project_id):
        raise NotFound(f"No {kind} with id '{row_id}' in this project.",
                       hint="cuba_eco action=pending lists quarantined rows with their ids.")
    return row


def _set_trust(mem: Memory, client: str | None, action: str, trust: str, kind: object, observation_id: object,
               row_id: object) -> dict:
    kind, target = _trust_target(kind, observation_id, row_id)
    with mem.store.transaction():
        row = _visible(mem, client, kind, target)
        mem.store.set_trust(kind, target, trust)
        audit_id = audit.record(mem, client, f"memory.{action}", {"kind": kind, "id": target,
                                                                    "from": row.get("trust"), "to": trust})
    live = kind != "observation" or row.get("observation_type") != "superseded"
    key = "observation_id" if kind == "observation" else "id"
    return {"action": action, "kind": kind, key: target, "trust": trust,
            "retrievable": trust == "trusted" and live, "audit_id": audit_id}


def promote(mem: Memory, client: str | None, *, kind: object = None, observation_id: object = None,
            id: object = None) -> dict:
    return _set_trust(mem, client, "promote", "trusted", kind, observation_id, id)


def quarantine(mem: Memory, client: str | None, *, kind: object = None, observation_id: object = None,
               id: object = None) -> dict:
    return _set_trust(mem, client, "quarantine", "quarantined", kind, observation_id, id)


def pending(mem: Memory, client: str | None, *, limit: object = None) -> dict:
    clamps = validate.Clamps()
    rows = mem.store.quarantined_rows(mem.scope(client), clamps.integer("limit", limit, 1, 200, 20))
    count = len(rows["observations"]) + len(rows["episodes"]) + len(rows["errors"])
    return clamps.note({"action": "pending", "count": count, "quarantined": rows["observations"],
                        "quarantined_episodes": rows["episodes"], "quarantined_errors": rows["errors"],
                        "note": PENDING_NOTE})
