"""The merge driver's rules below the entity file (services/sync/merge.py has the driver and the
entity files): three-way merges of one value, of a list used as a set, of a one-row object
(episodes, errors, decisions) and of the bundle's row lists (relations.json … source_trust.json).

The rules are the original's per-file rules (original-0.27.md §4e, ``sync_file_kind``), made
three-way with the common ancestor git hands the driver:

- a value changed on one side only takes that side; changed on both, the file's rule decides
  (else ours); with no ancestor (add/add) every value counts as changed on both sides, which is
  the original's two-way union;
- a row of a list present in the ancestor and missing on one side was deleted there: it stays
  deleted when the other side left it unchanged, and is kept when the other side edited it (an
  edit beats a delete, so nothing is lost); tombstones.json is a pure union (a deletion record is
  never itself deleted by a merge);
- counters (a relation's strength, a procedure's success and failure counts, source trust's
  alpha, beta and updated_at) are always the larger of both sides, as import merges them, and a
  change of a counter alone is not an edit (it neither wins over a delete nor picks the row);
- a field a row of a list does not know makes the merge refuse: this version could not say how
  to merge it, so git keeps its conflict rather than drop one side's value.

Nothing here reads or writes files, or opens the memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Row = dict[str, Any]
MISSING: Any = object()  # a field (or row) one version does not have; never written out
BASE, OURS, THEIRS = "base (%O)", "ours (%A)", "theirs (%B)"
BOTH = "ours (%A) and theirs (%B)"


class MergeRefused(Exception):
    """A side the driver cannot merge: git must keep its conflict. ``side`` names the side."""

    def __init__(self, side: str, problem: str) -> None:
        super().__init__(f"{side}: {problem}")
        self.side = side
        self.problem = problem


# -- comparing values ----------------------------------------------------------------------
def _instant(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def greater(a: Any, b: Any, what: str) -> bool:
    """Whether ``a`` is larger (a number) or later (a timestamp) than ``b``; a present value is
    larger than a missing or null one. Timestamps are compared as instants when both parse, so
    "…Z" and "…+00:00" agree. Values of different kinds cannot be ordered: the merge refuses."""
    if a is MISSING or a is None:
        return False
    if b is MISSING or b is None:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) and not bool(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a > b
    if isinstance(a, str) and isinstance(b, str):
        first, second = _instant(a), _instant(b)
        if first is not None and second is not None:
            return first > second
        return a > b
    raise MergeRefused(BOTH, f"{what} is {json.dumps(a)} on one side and {json.dumps(b)} on the other,"
                             " which cannot be ordered")


def largest(ours: Any, theirs: Any, what: str) -> Any:
    """The larger of two values (ours on a tie), MISSING only when both are."""
    return theirs if greater(theirs, ours, what) or ours is MISSING else ours


def pick(base: Any, ours: Any, theirs: Any, has_base: bool) -> Any:
    """Three-way choice of one value: changed on one side only -> that side; on both -> ours
    (theirs when ours deleted it: an edit beats a delete). Without an ancestor: ours, else theirs."""
    if ours == theirs:
        return ours
    if not has_base:
        return theirs if ours is MISSING else ours
    if ours == base:
        return theirs
    if theirs == base:
        return ours
    return theirs if ours is MISSING else ours


def _identity(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def merge_set(base: Any, ours: Any, theirs: Any, has_base: bool, what: str) -> Any:
    """A list merged as a set: what one side added is added, what one side removed (and the other
    kept) is removed. Ours' order, then theirs' additions. A side that is not a list is a value."""
    lists = [v for v in (ours, theirs) if v is not MISSING and v is not None]
    if not all(isinstance(v, list) for v in lists):
        raise MergeRefused(BOTH, f"{what} must be a list on both sides")
    if not lists:
        return pick(base, ours, theirs, has_base)
    mine = ours if isinstance(ours, list) else []
    other = theirs if isinstance(theirs, list) else []
    before = {_identity(v) for v in base} if has_base and isinstance(base, list) else set()
    other_ids = {_identity(v) for v in other}
    kept = [v for v in mine if _identity(v) in other_ids or _identity(v) not in before]
    seen = {_identity(v) for v in mine}
    added = [v for v in other if _identity(v) not in seen and _identity(v) not in before]
    return kept + added


# -- previous_versions ---------------------------------------------------------------------
# A replaced version is one (content, version); each machine that replaced it recorded it with
# its own time and node, so two records of one version differ in those fields only. Both the
# merge driver and the import keep one record per version, the same one everywhere (the later
# time, the greater record on a tie), so the machines' bundles stop differing over it.
VERSION_TIMES = ("corrected_at", "replaced_at", "kept_from_conflict_at")


def _version_id(record: Any) -> str:
    if not isinstance(record, dict):
        return _identity(record)
    return _identity([record.get("content"), record.get("version")])


def _recorded_at(record: Any) -> Any:
    if not isinstance(record, dict):
        return MISSING
    return next((record[k] for k in VERSION_TIMES if isinstance(record.get(k), str)), MISSING)


def preferred_version(a: Any, b: Any) -> Any:
    """Of two records of one version, the one every machine keeps: the later recorded time,
    then the greater record (so the choice never depends on which side is ours)."""
    first, second = _recorded_at(a), _recorded_at(b)
    with_times = first is not MISSING and second is not MISSING
    if with_times and greater(first, second, "previous_versions time"):
        return a
    if with_times and greater(second, first, "previous_versions time"):
        return b
    if first is MISSING and second is not MISSING:
        return b
    if second is MISSING and first is not MISSING:
        return a
    return a if _identity(a) >= _identity(b) else b


def _version_order(record: Any) -> tuple[Any, str]:
    version = record.get("version") if isinstance(record, dict) else None
    content = record.get("content") if isinstance(record, dict) else None
    return (version if isinstance(version, int | float) and not isinstance(version, bool) else 0, str(content))


def versions_once(*lists: Iterable[Any]) -> list[Any]:
    """Every record of these lists, one per version (:func:`preferred_version`), oldest first."""
    chosen: dict[str, Any] = {}
    for records in lists:
        for record in records:
            key = _version_id(record)
            chosen[key] = preferred_version(chosen[key], record) if key in chosen else record
    return sorted(chosen.values(), key=_version_order)


def merge_versions(base: Any, ours: Any, theirs: Any, has_base: bool) -> Any:
    """previous_versions three-way, by version: a version one side added is added, one a side
    dropped (and the other kept) is dropped; each version once, oldest first, as the import
    keeps them (so the merged file is what both machines export next). Equal sides: ours."""
    lists = [v for v in (ours, theirs) if v is not MISSING and v is not None]
    if not all(isinstance(v, list) for v in lists):
        raise MergeRefused(BOTH, "previous_versions must be a list on both sides")
    if not lists or ours == theirs:
        return pick(base, ours, theirs, has_base)
    mine = ours if isinstance(ours, list) else []
    other = theirs if isinstance(theirs, list) else []
    before = {_version_id(v) for v in base} if has_base and isinstance(base, list) else set()
    mine_ids, other_ids = {_version_id(v) for v in mine}, {_version_id(v) for v in other}
    wanted = {i for i in mine_ids if i in other_ids or i not in before}
    wanted |= {i for i in other_ids if i not in mine_ids and i not in before}
    return [v for v in versions_once(mine, other) if _version_id(v) in wanted]


def merge_object(base: Row | None, ours: Row, theirs: Row,
                 rules: dict[str, Callable[[Any, Any, Any, bool], Any]] | None = None,
                 skip: Iterable[str] = ()) -> Row:
    """Field by field: a rule for the fields named in ``rules``, :func:`pick` for the others.
    Ours' field order, then theirs' new fields; a field deleted on both sides stays deleted."""
    rules = rules or {}
    has_base = base is not None
    before = base or {}
    out: Row = {}
    for key in [*ours, *(k for k in theirs if k not in ours)]:
        if key in skip:
            continue
        b, o, t = before.get(key, MISSING), ours.get(key, MISSING), theirs.get(key, MISSING)
        value = rules[key](b, o, t, has_base) if key in rules else pick(b, o, t, has_base)
        if value is not MISSING:
            out[key] = value
    return out


def max_rule(what: str) -> Callable[[Any, Any, Any, bool], Any]:
    return lambda b, o, t, has_base: largest(o, t, what)


def _set_rule(what: str) -> Callable[[Any, Any, Any, bool], Any]:
    return lambda b, o, t, has_base: merge_set(b, o, t, has_base, what)


# -- one-row files: episodes, errors, decisions --------------------------------------------
def _same_row(base: Row | None, ours: Row, theirs: Row, key: str = "id") -> None:
    if key in ours and key in theirs and ours[key] != theirs[key]:
        raise MergeRefused(BOTH, f"the file holds {key} {json.dumps(ours[key])} on one side and"
                                 f" {json.dumps(theirs[key])} on the other: two different rows")


def merge_episode(base: Row | None, ours: Row, theirs: Row) -> Row:
    """episodes/**: actors and artifacts merged as sets, importance the max, ended_at the later;
    the other fields three-way."""
    _same_row(base, ours, theirs)
    return merge_object(base, ours, theirs, {
        "actors": _set_rule("actors"), "artifacts": _set_rule("artifacts"),
        "importance": max_rule("importance"), "ended_at": max_rule("ended_at")})


def _resolved(b: Any, o: Any, t: Any, has_base: bool) -> Any:
    if o is MISSING and t is MISSING:
        return MISSING
    return bool(o is not MISSING and o) or bool(t is not MISSING and t)


def _solution(b: Any, o: Any, t: Any, has_base: bool) -> Any:
    if has_base and o == b:
        return t
    return o if o not in (MISSING, None, "") else t


def merge_error(base: Row | None, ours: Row, theirs: Row) -> Row:
    """errors/*: resolved is the OR of both sides; the solution ours unless ours left it as it
    was or empty (then theirs); the other fields three-way."""
    _same_row(base, ours, theirs)
    return merge_object(base, ours, theirs, {"resolved": _resolved, "solution": _solution})


def merge_decision(base: Row | None, ours: Row, theirs: Row) -> Row:
    """decisions/*: the whole row, ours unless its content is empty; three-way, so a side that
    left it as it was takes the other side's."""
    _same_row(base, ours, theirs)
    if base is not None and ours == base:
        return theirs
    if base is not None and theirs == base:
        return ours
    return theirs if ours.get("content") in (None, "") and theirs.get("content") not in (None, "") else ours


# -- row lists -------------------------------------------------------------------------------
def _text(row: Row, name: str) -> str:
    value = row.get(name)
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class RowRule:
    """How one row list merges (see the module docstring)."""

    fields: tuple[str, ...]  # every field a row may have; any other is refused
    key: tuple[str, ...]  # rows are the same row when these are equal
    order: tuple[str, ...]  # the export's sort order (storage/sql/sync.py)
    counters: tuple[str, ...] = ()  # always the max of both sides; not an edit
    theirs_wins: Callable[[Row, Row], bool] = field(default=lambda ours, theirs: False)  # both changed
    deletes: bool = True  # False: a pure union, a row missing on one side is never a deletion


def _stronger(ours: Row, theirs: Row) -> bool:
    return greater(theirs.get("strength"), ours.get("strength"), "strength")


def _later_deletion(ours: Row, theirs: Row) -> bool:
    if greater(theirs.get("deleted_at"), ours.get("deleted_at"), "deleted_at"):
        return True
    if greater(ours.get("deleted_at"), theirs.get("deleted_at"), "deleted_at"):
        return False
    return _text(theirs, "origin_node") > _text(ours, "origin_node")


def _closed_or_later(ours: Row, theirs: Row) -> bool:
    ours_closed, theirs_closed = ours.get("is_current") is False, theirs.get("is_current") is False
    if ours_closed != theirs_closed:
        return theirs_closed
    return greater(theirs.get("valid_to"), ours.get("valid_to"), "valid_to")


def _later_update(ours: Row, theirs: Row) -> bool:
    return greater(theirs.get("updated_at"), ours.get("updated_at"), "updated_at")


def _later_clock(ours: Row, theirs: Row) -> bool:
    for name in ("crdt_counter", "crdt_actor", "version"):
        if greater(theirs.get(name), ours.get(name), name):
            return True
        if greater(ours.get(name), theirs.get(name), name):
            return False
    return False


ROW_RULES: dict[str, RowRule] = {
    "relations.json": RowRule(
        ("id", "from_entity", "to_entity", "relation_type", "strength", "bidirectional", "project_id",
         "created_at", "provenance"),
        key=("from_entity", "to_entity", "relation_type"), order=("created_at", "id"),
        counters=("strength",), theirs_wins=_stronger),
    "projects.json": RowRule(("id", "name", "created_at"), key=("id",), order=("id",)),  # first seen: ours
    "tombstones.json": RowRule(
        ("table_name", "row_id", "deleted_at", "origin_node"), key=("table_name", "row_id"),
        order=("deleted_at", "table_name", "row_id"), theirs_wins=_later_deletion, deletes=False),
    "facts.json": RowRule(
        ("fact_id", "subject", "predicate", "object", "valid_from", "observed_at", "valid_to",
         "subject_entity_id", "project_id", "confidence", "is_current", "created_at", "layer_name"),
        key=("fact_id",), order=("fact_id",), theirs_wins=_closed_or_later),
    "procedures.json": RowRule(
        ("id", "name", "steps", "created_at", "updated_at", "trigger_context", "preconditions",
         "verification", "success_count", "failure_count", "last_outcome", "last_used_at", "project_id",
         "embedding_model"),
        key=("id",), order=("id",), counters=("success_count", "failure_count"), theirs_wins=_later_update),
    "artifacts.json": RowRule(
        ("id", "path", "content", "content_hash", "version", "project_id", "origin_node", "crdt_actor",
         "crdt_counter", "updated_at"),
        key=("path", "project_id"), order=("path", "id"), theirs_wins=_later_clock),
    "source_trust.json": RowRule(("source", "alpha", "beta", "updated_at"), key=("source",), order=("source",),
                                 counters=("alpha", "beta", "updated_at")),
}


def _rows(name: str, rule: RowRule, side: str, value: Any) -> dict[str, Row]:
    """One side's rows by key, after checking each is an object of known fields with its key."""
    if not isinstance(value, list):
        raise MergeRefused(side, f"{name} must be a JSON list of rows, not {type(value).__name__}")
    known = set(rule.fields)
    out: dict[str, Row] = {}
    for number, row in enumerate(value, 1):
        if not isinstance(row, dict):
            raise MergeRefused(side, f"row {number} of {name} is not a JSON object")
        unknown = sorted(set(row) - known)
        if unknown:
            raise MergeRefused(side, f"row {number} of {name} has fields this version does not know"
                                     f" ({', '.join(unknown)}), so it cannot say how to merge them;"
                                     " upgrade cuba-memorys on this machine")
        absent = [k for k in rule.key if k not in row]
        if absent:
            raise MergeRefused(side, f"row {number} of {name} lacks {', '.join(absent)}")
        key = _identity([row[k] for k in rule.key])
        if key in out:
            raise MergeRefused(side, f"{name} holds two rows for {', '.join(rule.key)} = {key}")
        out[key] = row
    return out


def _edited(rule: RowRule, row: Row, before: Row) -> bool:
    """Whether a row differs from the ancestor's in anything but its counters."""
    ignore = set(rule.counters)
    return {k: v for k, v in row.items() if k not in ignore} != {k: v for k, v in before.items() if k not in ignore}


def _both(rule: RowRule, before: Row | None, ours: Row, theirs: Row) -> Row:
    """A row on both sides: the side that edited it, the rule when both did (or with no ancestor),
    then every counter the max of both sides."""
    if before is not None and rule.deletes and not _edited(rule, theirs, before):
        winner = ours
    elif before is not None and rule.deletes and not _edited(rule, ours, before):
        winner = theirs
    else:
        winner = theirs if rule.theirs_wins(ours, theirs) else ours
    out = dict(winner)
    for name in rule.counters:
        value = largest(ours.get(name, MISSING), theirs.get(name, MISSING), name)
        if value is not MISSING:
            out[name] = value
    return out


def merge_rows(name: str, base: Any, ours: Any, theirs: Any) -> list[Row]:
    """A row list merged by its rule (ROW_RULES), sorted as export sorts it."""
    rule = ROW_RULES[name]
    before = _rows(name, rule, BASE, base) if base is not None else None
    mine, other = _rows(name, rule, OURS, ours), _rows(name, rule, THEIRS, theirs)
    merged: list[Row] = []
    for key in dict.fromkeys([*mine, *other]):
        o, t = mine.get(key), other.get(key)
        b = before.get(key) if before is not None else None
        if o is not None and t is not None:
            merged.append(_both(rule, b, o, t))
            continue
        present = o if o is not None else t
        assert present is not None
        if before is None or b is None or not rule.deletes or _edited(rule, present, b):
            merged.append(present)  # added on one side, a union, or an edit beating a delete
    merged.sort(key=lambda row: tuple(_text(row, k) for k in rule.order))
    return merged
