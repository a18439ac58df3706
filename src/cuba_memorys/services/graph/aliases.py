"""`cuba-memorys dedupe`: entities that are one thing under two names, merged into one
(spec §4h), the loser's name kept as an alias every tool still resolves.

- **Exact groups**: names equal once only letters and digits are kept, lower-cased
  ("Auth-Service", "auth service"). The winner holds the most live observations; on a tie the
  older entity wins (ids are UUIDs here, so "the smaller id" of the original means nothing).
  Merged with ``apply``.
- **Probable pairs**: trigram similarity of the names above 0.70, not already an exact group,
  and not names that differ only in their numbers ("conv-26:session_1" and "conv-26:session_2",
  "ipv4" and "ipv6", "Redis" and "Redis 7"): a number in a name is what tells numbered things apart,
  so such names are similar by construction and almost never one entity (100 false pairs on a
  5,000-entity conversation store, where one merge would fuse two sessions).
  Listed; merged only on the judge's word (``judge`` and ``apply``). The verify judge chain
  reads each entity's description (its name and up to 6 most important observations, 300
  characters each) and judges the two as a pair: ``complementary`` (each entails the other's
  account) with confidence ≥ 0.7 means the same entity; ``contradicts`` or ``unrelated`` means
  different ones; anything else (``unknown``: no NLI model and no client model to ask, as from
  the command line) leaves the pair listed. Pairs judged the same are grouped (union-find); a
  group holding any pair judged different is rejected whole.
- Entities are unique per project and projects are kept apart, so groups and pairs never span
  projects (the original compares names store-wide); `cuba_proyecto merge` joins projects.

Each merge is one transaction: an undo file first (undo.save), then ``store.merge_entity`` and
the audit event ``memory.dedupe_merge``; `cuba-memorys undo FILE` brings both entities back.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.judge.base import Verdict
from cuba_memorys.judge.chain import JudgeChain
from cuba_memorys.models import MAX_NAME_CHARS, Scope
from cuba_memorys.services import audit, validate
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import EntityNameRow
from cuba_memorys.storage.sql.aliases import alias_id
from cuba_memorys.text import trigrams

NAME_SIMILARITY = 0.70  # probable pairs: trigram similarity of the names above this
SAME_CONFIDENCE = 0.70  # a judged pair merges at this confidence or more
DESCRIPTION_OBSERVATIONS, DESCRIPTION_CHARS = 6, 300


def normalized(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def without_numbers(name: str) -> str:
    """The normalised name with its digits taken out: equal for names that differ only in numbers."""
    return "".join(ch for ch in normalized(name) if not ch.isdigit())


def differ_only_in_numbers(first: str, second: str) -> bool:
    """True for "session_1" / "session_2" (or "Redis" / "Redis 7"): never a probable pair."""
    return normalized(first) != normalized(second) and without_numbers(first) == without_numbers(second)


# -- finding them ----------------------------------------------------------------------------
def exact_groups(rows: Sequence[EntityNameRow]) -> list[list[EntityNameRow]]:
    """Entities of one project whose normalised names are equal, winner first (most
    observations, then the older: ``rows`` come oldest first)."""
    by_name: dict[tuple[str | None, str], list[int]] = defaultdict(list)
    for position, row in enumerate(rows):
        by_name[(row["project_id"], normalized(row["name"]))].append(position)
    groups = []
    for positions in by_name.values():
        if len(positions) > 1:
            positions.sort(key=lambda p: (-rows[p]["observation_count"], p))
            groups.append([rows[p] for p in positions])
    return groups


def similar_name_pairs(rows: Sequence[EntityNameRow], threshold: float = NAME_SIMILARITY
                       ) -> list[tuple[int, int, float]]:
    """(i, j, similarity) of same-project names whose trigram similarity exceeds ``threshold``,
    except names that differ only in their numbers (``differ_only_in_numbers``).

    Prefix filtering instead of comparing every pair: with the trigrams of each name sorted
    rarest first, two sets with Jaccard ≥ t must share one of the first |x| − ⌈t·|x|⌉ + 1 of
    either, so only names sharing such a trigram are compared (exactly)."""
    grams = [frozenset(trigrams(r["name"])) for r in rows]
    plain = [normalized(r["name"]) for r in rows]
    numberless = [without_numbers(r["name"]) for r in rows]  # read once, not once per compared pair
    frequency = Counter(g for gs in grams for g in gs)
    index: dict[tuple[str | None, str], list[int]] = defaultdict(list)
    pairs = []
    for i, gs in enumerate(grams):
        ordered = sorted(gs, key=lambda g: (frequency[g], g))
        prefix = len(ordered) - math.ceil(threshold * len(ordered)) + 1
        candidates: set[int] = set()
        for gram in ordered[:max(0, prefix)]:
            slot = index[(rows[i]["project_id"], gram)]
            candidates.update(slot)
            slot.append(i)
        for j in sorted(candidates):
            if numberless[i] == numberless[j] and plain[i] != plain[j]:
                continue  # they differ only in their numbers (see differ_only_in_numbers)
            similarity = len(gs & grams[j]) / len(gs | grams[j])
            if similarity > threshold:
                pairs.append((j, i, similarity))
    return pairs


def duplicate_candidates(mem: Memory) -> int:
    """How many entity pairs look alike (the consolidation cycle's count), every project."""
    return len(similar_name_pairs(mem.store.entity_names(Scope())))


def probable_pairs(rows: Sequence[EntityNameRow], groups: Sequence[Sequence[EntityNameRow]]
                   ) -> list[tuple[EntityNameRow, EntityNameRow, float]]:
    """Similar names that are not one exact group, between entities an exact merge keeps."""
    merged_away = {row["id"] for group in groups for row in group[1:]}
    found = []
    for i, j, similarity in similar_name_pairs(rows):
        a, b = rows[i], rows[j]
        if normalized(a["name"]) != normalized(b["name"]) and not {a["id"], b["id"]} & merged_away:
            found.append((a, b, similarity))
    return found


# -- the command -----------------------------------------------------------------------------
def dedupe(mem: Memory, client: str | None, *, apply: bool = False, judge: bool = False,
           merge: object = None, into: object = None, project: object = None) -> dict[str, Any]:
    """The plan (default), or with ``apply`` the merges: exact groups, and judged pairs with
    ``judge``; ``merge`` + ``into`` is one manual merge instead."""
    scope, project_name = _scope(mem, project)
    if merge is not None or into is not None:
        return _manual(mem, client, scope, merge, into, apply)
    rows = mem.store.entity_names(scope)
    names = _project_names(mem)
    groups = exact_groups(rows)
    pairs = probable_pairs(rows, groups)
    judged = _judge(mem, pairs) if judge else None
    answer: dict[str, Any] = {
        "action": "dedupe", "dry_run": not apply, "project": project_name,
        "exact_groups": [_group_view(g, names) for g in groups],
        "probable_pairs": [_pair_view(a, b, s, names, judged[n] if judged else None)
                           for n, (a, b, s) in enumerate(pairs)],
        "judge": mem.judge_chain().backend if judge else None,
        "merged": [],
    }
    plan = [(g[0], loser) for g in groups for loser in g[1:]]
    if judged is not None:
        plan += judged_merges(pairs, judged, rows)
    answer["would_merge"] = len(plan)
    if apply:
        answer["merged"] = [merge_entities(mem, client, loser, winner) for winner, loser in plan]
    elif plan:
        answer["hint"] = "Run again with --apply to merge them; each merge writes an undo file first."
    return answer


def merge_entities(mem: Memory, client: str | None, loser: EntityNameRow, winner: EntityNameRow,
                   action: str = "dedupe_merge") -> dict[str, Any]:
    """Merge ``loser`` into ``winner`` in one transaction, undo file first, audited as
    ``memory.<action>`` (another caller than dedupe names why it merged)."""
    with mem.store.transaction():
        created = [] if loser["name"] in mem.store.aliases_of(winner["id"]) else \
            [("entity_aliases", "alias_id", [alias_id(winner["id"], loser["name"])])]
        path = undo.save(mem, action, [
            ("entities", "id", [loser["id"]]), ("observations", "entity_id", [loser["id"]]),
            ("episodes", "entity_id", [loser["id"]]), ("facts", "subject_entity_id", [loser["id"]]),
            ("relations", "from_entity_id", [loser["id"]]), ("relations", "to_entity_id", [loser["id"]]),
            ("entity_aliases", "entity_id", [loser["id"]])], created)
        try:
            counts = mem.store.merge_entity(loser["id"], winner["id"])
            audit_id = audit.record(mem, client, f"memory.{action}", {
                "loser_id": loser["id"], "winner_id": winner["id"], "counts": dict(counts),
                "undo_file": path.name})
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    return {"loser": loser["name"], "winner": winner["name"], "loser_id": loser["id"], "winner_id": winner["id"],
            "moved": dict(counts), "alias": loser["name"], "undo_file": str(path), "audit_id": audit_id}


def judged_merges(pairs: Sequence[tuple[EntityNameRow, EntityNameRow, float]], judged: Sequence[dict[str, Any]],
                  rows: Sequence[EntityNameRow]) -> list[tuple[EntityNameRow, EntityNameRow]]:
    """(winner, loser) merges of the groups the judge's "same" verdicts join, leaving out any
    group in which some pair was judged different."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    joined: set[str] = set()
    for (a, b, _), verdict in zip(pairs, judged):
        if verdict["same"] is True:
            parent[root(a["id"])] = root(b["id"])
            joined.update((a["id"], b["id"]))
    rejected = {root(a["id"]) for (a, b, _), verdict in zip(pairs, judged)
                if verdict["same"] is False and root(a["id"]) == root(b["id"])}
    members: dict[str, list[int]] = defaultdict(list)
    for position, row in enumerate(rows):
        if row["id"] in joined and root(row["id"]) not in rejected:
            members[root(row["id"])].append(position)
    plan = []
    for positions in members.values():
        positions.sort(key=lambda p: (-rows[p]["observation_count"], p))
        plan += [(rows[positions[0]], rows[p]) for p in positions[1:]]
    return plan


def _judge(mem: Memory, pairs: Sequence[tuple[EntityNameRow, EntityNameRow, float]]) -> list[dict[str, Any]]:
    chain = mem.judge_chain()
    return [_same(chain, _description(mem, a), _description(mem, b)) for a, b, _ in pairs]


def _same(chain: JudgeChain, first: str, second: str) -> dict[str, Any]:
    verdict: Verdict = chain.judge_pair(first, second)
    if verdict.verdict == "complementary" and verdict.confidence >= SAME_CONFIDENCE:
        same: bool | None = True
    elif verdict.verdict in ("contradicts", "unrelated"):
        same = False
    else:
        same = None
    return {"same": same, "verdict": verdict.verdict, "confidence": round(verdict.confidence, 4),
            "reason": verdict.reason, "backend": verdict.backend}


def _description(mem: Memory, row: EntityNameRow) -> str:
    observations = mem.store.observations_of(row["id"], Scope(), limit=DESCRIPTION_OBSERVATIONS)
    return f"{row['name']}: " + " ".join(o.content[:DESCRIPTION_CHARS] for o in observations)


# -- manual merge ----------------------------------------------------------------------------
def _manual(mem: Memory, client: str | None, scope: Scope, merge: object, into: object, apply: bool) -> dict:
    if merge is None:
        raise InvalidInput("merge", "--into needs --merge A (the entity that goes)")
    if into is None:
        raise InvalidInput("into", "--merge needs --into B (the entity that stays)")
    loser = _named(mem, scope, "merge", validate.text("merge", merge, high=MAX_NAME_CHARS))
    winner = _named(mem, scope, "into", validate.text("into", into, high=MAX_NAME_CHARS))
    if loser["id"] == winner["id"]:
        raise InvalidInput("into", "is the entity --merge names: nothing to merge")
    if loser["project_id"] != winner["project_id"]:
        raise InvalidInput("into", f"'{winner['name']}' is in another project than '{loser['name']}'",
                           "two entities of one project (cuba_proyecto merge joins projects)")
    names = _project_names(mem)
    plan = {"loser": _entity_view(loser, names), "winner": _entity_view(winner, names)}
    answer: dict[str, Any] = {"action": "dedupe", "dry_run": not apply, "manual": True, "would_merge": plan}
    if apply:
        answer["merged"] = [merge_entities(mem, client, loser, winner)]
    else:
        answer["hint"] = "Run again with --apply to merge; an undo file is written first."
    return answer


def _named(mem: Memory, scope: Scope, param: str, name: str) -> EntityNameRow:
    found = [r for r in mem.store.entity_names(scope) if r["name"] == name]
    if not found:
        raise NotFound(f"Entity '{name}' not found (--{param}).", hint="Names are matched exactly.")
    if len(found) > 1:
        raise InvalidInput(param, f"'{name}' names entities in {len(found)} projects", "--project NAME to pick one")
    return found[0]


def _scope(mem: Memory, project: object) -> tuple[Scope, str | None]:
    if project is None:
        return Scope(), None
    name = validate.text("project", project, high=MAX_NAME_CHARS)
    row = mem.store.get_project(name)
    if row is None:
        raise NotFound(f"Project '{name}' not found.", hint="`cuba_proyecto list` names them.")
    return Scope(row["id"], include_unscoped=False), name


def _project_names(mem: Memory) -> dict[str | None, str]:
    return {p["id"]: p["name"] for p in mem.store.list_projects()}


def _entity_view(row: EntityNameRow, projects: dict[str | None, str]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "observations": row["observation_count"],
            "project": projects.get(row["project_id"])}


def _group_view(group: Sequence[EntityNameRow], projects: dict[str | None, str]) -> dict[str, Any]:
    return {"normalized": normalized(group[0]["name"]), "winner": _entity_view(group[0], projects),
            "losers": [_entity_view(r, projects) for r in group[1:]]}


def _pair_view(a: EntityNameRow, b: EntityNameRow, similarity: float, projects: dict[str | None, str],
               judged: dict[str, Any] | None) -> dict[str, Any]:
    view: dict[str, Any] = {"a": _entity_view(a, projects), "b": _entity_view(b, projects),
                            "similarity": round(similarity, 4)}
    if judged is not None:
        view["judgment"] = judged
    return view
