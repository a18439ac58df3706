"""Typed answers of the lifecycle tools (cuba_zafra, cuba_eco, cuba_forget) and cuba_archivo,
keyed as ``shared/spec/interface.md`` lists them plus what this build adds (``NotRequired``
when only sometimes present). See services/answers.py for how tests use them.

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from
evaluated annotations.)
"""

from typing import Any, NotRequired, TypedDict

Row = dict[str, Any]


# -- cuba_zafra ------------------------------------------------------------------------------
class Decayed(TypedDict):
    action: str
    decayed: int
    project_scoped: bool
    stratification: dict[str, Any]
    formula: str
    testing_effect: str
    protected_entities: NotRequired[int]


class Pruned(TypedDict):
    action: str
    dry_run: bool
    threshold: float
    by_project: list[Row]
    project_scoped: bool
    would_prune: NotRequired[int]
    pruned: NotRequired[int]
    rows: NotRequired[list[Row]]
    hint: NotRequired[str]
    undo_file: NotRequired[str]
    audit_id: NotRequired[int]


class Merged(TypedDict):
    action: str
    merged: int
    threshold: float
    project_scoped: bool
    dry_run: NotRequired[bool]
    pairs: NotRequired[list[Row]]
    undo_file: NotRequired[str]
    audit_id: NotRequired[int]


class Summarized(TypedDict):
    action: str
    entity: str
    superseded: int
    project_scoped: bool
    dry_run: NotRequired[bool]
    summary_id: NotRequired[str]
    replaced: NotRequired[list[str]]
    kept_permanent: NotRequired[int]
    undo_file: NotRequired[str]
    audit_id: NotRequired[int]


class MemoryStats(TypedDict):
    action: str
    entities: int
    observations: int
    superseded: int
    active: int
    project_scoped: bool


class Duplicates(TypedDict):
    action: str
    duplicates: list[Row]
    count: int
    project_scoped: bool


class Exported(TypedDict):
    action: str
    entities: list[Row]
    count: int


class Reembedded(TypedDict):
    action: str
    total_fetched: int
    updated: int
    model: str | None
    dim: int | None
    note: NotRequired[str]
    error: NotRequired[str]


class EpisodesDecayed(TypedDict):
    action: str
    decayed: int
    formula: str
    c: float
    beta: float


# -- cuba_eco --------------------------------------------------------------------------------
class Boosted(TypedDict):
    action: str
    boosted_count: int
    rule: str


class Decreased(TypedDict):
    action: str
    decreased_count: int
    rule: str


class Corrected(TypedDict):
    action: str
    observation_id: str
    new_content: str
    versioned: bool
    version: NotRequired[int]
    audit_id: NotRequired[int]
    # an anchored row: the anchors set to what their code is at HEAD (docs/code-anchors.md)
    reanchored: NotRequired[list[Row]]


class TrustChanged(TypedDict):
    action: str
    kind: str
    trust: str
    retrievable: bool
    observation_id: NotRequired[str]
    id: NotRequired[str]
    audit_id: NotRequired[int]


class Pending(TypedDict):
    action: str
    count: int
    quarantined: list[Row]
    quarantined_episodes: list[Row]
    quarantined_errors: list[Row]
    note: str


# -- cuba_forget -----------------------------------------------------------------------------
class Forgotten(TypedDict):
    action: str
    entity_name: str
    entity_deleted: bool
    cascaded: dict[str, Any]  # {observations, episodes, relations: "via FK CASCADE", errors_purged, sessions_purged}
    gdpr_compliance: str
    also_purged: dict[str, int]  # what this build removes beyond the original, counted
    freed_space: str  # what was done about copies in freed space (backend-specific)
    audit_id: int
    note: str


# -- cuba_archivo ----------------------------------------------------------------------------
class AuditAppended(TypedDict):
    action: str
    id: int
    current_hash: str
    retries: int
    note: NotRequired[str]  # this append adopted the chain's head (a store from before it)


class AuditVerified(TypedDict):
    action: str
    ok: bool
    rows_checked: NotRequired[int]
    unprotected_rows: NotRequired[int]
    what_this_does_not_establish: NotRequired[str]
    first_break_id: NotRequired[int]
    reason: NotRequired[str]
    downgraded: NotRequired[bool]  # the key is held and the newest row is plain SHA-256
    tail_cut: NotRequired[bool]  # rows were removed from the end (the head kept in meta is gone)
    head: NotRequired[str]  # this verify adopted the chain's head (a store from before it)
    note: NotRequired[str]  # the limit stopped the check before the newest rows
    clamped: NotRequired[dict[str, Any]]


class AuditTail(TypedDict):
    action: str
    entries: list[Row]
    count: int
    clamped: NotRequired[dict[str, Any]]
