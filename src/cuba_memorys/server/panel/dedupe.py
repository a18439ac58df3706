"""The review page's near-duplicate entities: the pairs `cuba-memorys dedupe` finds (exact
groups and probable pairs, services/graph/aliases.py), within what the caller may read, and
their merge through the very function `dedupe --merge A --into B --apply` runs (an undo file
first, the audit event ``memory.dedupe_merge``, the old name kept as an alias). The merge's
undo file can be applied from the page by the caller who made it (services/lifecycle/undo).
Finding the pairs compares every entity name: the answer is reused while the entities are the same
(cache.Fresh)."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from cuba_memorys import locks
from cuba_memorys.errors import CubaError, InvalidInput, NotFound
from cuba_memorys.server.events_http import Caller
from cuba_memorys.server.panel.cache import Fresh
from cuba_memorys.server.panel.calls import act_as, read_as
from cuba_memorys.server.runtime import announced
from cuba_memorys.services.graph import aliases
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import EntityNameRow

PAIRS_TTL_SECS = 60.0  # the pairs are reused this long (then refreshed in the background)
_caches: weakref.WeakKeyDictionary[Memory, Fresh] = weakref.WeakKeyDictionary()  # one per open memory
_caches_lock = locks.lock("panel dedupe caches", "cache")
SHOWN_PAIRS = 100  # the page lists this many; `cuba-memorys dedupe` lists them all
UNDO_PREFIX = "dedupe_merge-"


def _pairs(mem: Memory, client: str | None) -> list[dict[str, Any]]:
    rows = mem.store.entity_names(mem.scope(client))
    names: dict[str | None, str] = {p["id"]: p["name"] for p in mem.store.list_projects()}
    groups = aliases.exact_groups(rows)
    found = [_pair(winner, loser, 1.0, "same name", names) for g in groups for winner, loser in
             ((g[0], other) for other in g[1:])]
    for a, b, similarity in aliases.probable_pairs(rows, groups):
        winner, loser = (a, b) if a["observation_count"] >= b["observation_count"] else (b, a)
        found.append(_pair(winner, loser, similarity, "similar name", names))
    return found[:SHOWN_PAIRS]


def _pair(winner: EntityNameRow, loser: EntityNameRow, similarity: float, why: str,
          projects: dict[str | None, str]) -> dict[str, Any]:
    return {"winner": winner["name"], "winner_observations": winner["observation_count"],
            "loser": loser["name"], "loser_observations": loser["observation_count"],
            "project": projects.get(winner["project_id"]), "project_id": winner["project_id"],
            "similarity": round(similarity, 3), "why": why}


def _cache_of(memory: Memory) -> Fresh:
    with _caches_lock:
        found = _caches.get(memory)
        if found is None:
            found = _caches[memory] = Fresh(PAIRS_TTL_SECS, max_keys=16)
        return found


def candidates(memory: Memory, caller: Caller) -> tuple[list[dict[str, Any]], str | None, float]:
    """The pairs the caller may read (a refusal is shown on the page) and their age in seconds:
    the grant is checked at every request; the pairs are reused while the entities are unchanged,
    refreshed in the background after PAIRS_TTL_SECS (observation counts move the winner)."""
    try:
        # the reader grant, at every request; the key changes with any entity added, renamed or merged
        scope, version = read_as(memory, caller, lambda mem, client: (
            mem.scope(client), mem.store.panel_entities_version(mem.scope(client))))
        key = (None if caller.principal is None else caller.principal.name, scope.project_id, scope.include_unscoped,
               version)
        pairs, age = _cache_of(memory).get(key, lambda: read_as(memory, caller, _pairs))
        return pairs, None, age
    except CubaError as exc:
        return [], str(exc), 0.0


def merge(memory: Memory, caller: Caller, loser: str, winner: str) -> dict[str, Any]:
    """Merge ``loser`` into ``winner``: both must be entities of one project the caller reads,
    and the caller needs admin there (the CLI's dedupe is the operator's)."""
    if not loser or not winner:
        raise InvalidInput("merge", "the form names no pair (loser and winner are both needed)")
    ends = read_as(memory, caller, _ends, loser, winner)
    project_id, project_name = ends
    service = announced("dedupe", "merge", aliases.dedupe)
    answer = act_as(memory, caller, service, "admin", project_id, merge=loser, into=winner, apply=True,
                    project=project_name)
    _cache_of(memory).forget()
    return {**answer["merged"][0], "project_id": project_id}


def _ends(mem: Memory, client: str | None, loser: str, winner: str) -> tuple[str | None, str | None]:
    rows = {r["name"]: r for r in mem.store.entity_names(mem.scope(client)) if r["name"] in (loser, winner)}
    for param, name in (("loser", loser), ("winner", winner)):
        if name not in rows:
            raise NotFound(f"Entity '{name}' is not one you can see here ({param}).",
                           hint="Reload the review page: the pair may be merged already.")
    if rows[loser]["project_id"] != rows[winner]["project_id"]:
        raise InvalidInput("winner", f"'{winner}' is in another project than '{loser}'")
    project_id = rows[loser]["project_id"]
    names = {p["id"]: p["name"] for p in mem.store.list_projects()}
    return project_id, names.get(project_id) if project_id else None


def undo_merge(memory: Memory, caller: Caller, name: str, project_id: str | None) -> dict[str, Any]:
    """Apply the undo file of a merge this caller made from the panel (``name`` only, never a path)."""
    if not name.startswith(UNDO_PREFIX) or Path(name).name != name or not name.endswith(".json"):
        raise InvalidInput("undo_file", f"{name!r} is not the name of a dedupe merge's undo file")
    path = Path(memory.settings.undo_dir) / name
    service = announced("undo", "apply", lambda mem, client: undo.apply(mem, path, client))
    done = dict(act_as(memory, caller, service, "admin", project_id))
    _cache_of(memory).forget()
    return done
