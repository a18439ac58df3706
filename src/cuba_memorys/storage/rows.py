"""The rows a store returns, by table, as both backends build them.

Entities and observations are frozen dataclasses (``models.Entity``, ``models.Observation``);
every other row kind is a ``TypedDict`` keyed by its columns, with JSON columns decoded and 0/1
flags as booleans where the mapper in ``storage/sql/common.py`` says so. Index material
(``embedding``, ``lex_*``, ``tsv_*``) never appears in a row.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ProjectRow(TypedDict):
    id: str
    name: str
    created_at: str
    last_active_at: str


class ProjectListRow(ProjectRow):
    entity_count: int
    observation_count: int


class RelationRow(TypedDict):
    id: str
    from_entity_id: str
    to_entity_id: str
    relation_type: str
    strength: float
    bidirectional: int
    last_traversed: str | None
    provenance: str
    project_id: str | None
    created_at: str


class RelationEndsRow(RelationRow):
    """``relations_of``: an edge with the names, importances and types of both ends."""

    from_name: str
    to_name: str
    from_importance: float
    to_importance: float
    from_type: str
    to_type: str


class EpisodeRow(TypedDict):
    seq: int
    id: str
    entity_id: str
    content: str
    started_at: str
    ended_at: str | None
    actors: list[str]
    artifacts: list[str]
    importance: float
    embedding_model: str | None
    embedding_rev: int
    session_id: str | None
    project_id: str | None
    trust: str
    origin_node: str | None
    created_at: str


class ErrorRow(TypedDict):
    seq: int
    id: str
    error_type: str
    error_message: str
    context: dict[str, Any]
    project: str
    project_id: str | None
    solution: str | None
    resolved: bool
    synapse_weight: float
    resolved_at: str | None
    trust: str
    session_id: str | None
    created_at: str


class ProjectMerge(TypedDict):
    moved: dict[str, int]
    entities_merged: int
    relations_merged: int
    procedures_merged: int


class VerifyJudgmentRow(TypedDict):
    id: str
    observation_a: str
    observation_b: str
    verdict: str
    confidence: float
    reason: str | None
    backend: str
    model: str | None
    created_at: str


class TypedObservationRow(TypedDict):
    """``observations_of_type``: a current, trusted observation of one type."""

    id: str
    content: str
    entity_name: str
    importance: float
    created_at: str


class WorkingMemoryRow(TypedDict):
    id: str
    client_id: str
    session_id: str | None
    project_id: str | None
    content: str
    tag: str | None
    ttl_seconds: int
    created_at: str
    expires_at: str


class ProcedureStep(TypedDict, total=False):
    do: str
    run: str
    expect: str


class ProcedureFields(TypedDict):
    trigger_context: str | None
    steps: list[ProcedureStep]
    preconditions: str | None
    verification: str | None


class ProcedureRow(ProcedureFields):
    id: str
    name: str
    success_count: int
    failure_count: int
    last_outcome: str | None
    last_used_at: str | None
    project_id: str | None
    origin_node: str | None
    created_at: str
    updated_at: str


class SessionRow(TypedDict):
    id: str
    name: str
    goals: list[str]
    summary: str | None
    outcome: str | None
    client_id: str | None
    project_id: str | None
    started_at: str
    ended_at: str | None


class SessionListRow(SessionRow):
    project_name: str | None


class SessionObservationRow(TypedDict):
    id: str
    entity: str
    type: str
    content: str


class DecisionBriefRow(TypedDict):
    id: str
    entity: str
    content: str


class UnresolvedErrorRow(TypedDict):
    id: str
    error_type: str
    message: str


class PendingRow(TypedDict):
    id: str
    content: str


class SnapshotParts(TypedDict):
    key_observations: list[SessionObservationRow]
    decisions: list[DecisionBriefRow]
    unresolved_errors: list[UnresolvedErrorRow]
    pending_embeddings: list[dict[str, str]]
    active_goals: list[str]


class SnapshotRow(SnapshotParts):
    id: str
    session_id: str
    project_id: str | None
    summary_md: str
    obs_count: int
    created_at: str


class TriggerRow(TypedDict):
    id: str
    entity_pattern: str
    condition_type: str
    message: str
    active: bool
    fire_count: int
    max_fires: int
    expires_at: str | None
    last_fired_at: str | None
    from_agent: str
    project_id: str | None
    created_at: str


class GrantRow(TypedDict):
    principal: str
    project_id: str | None  # None: every project ('*')
    project: str | None  # the project's name; None for '*'
    role: str
    created_at: str


class IndexBuilds(TypedDict):
    missing: list[str]
    building: list[str]
    failed: dict[str, str]


class RuntimeRole(TypedDict):
    role: str
    superuser: bool
    bypass_rls: bool


# A search result row (``fetch_rows``): the table's columns, JSON decoded, plus ``entity_name``
# (and ``entity_id``) for observations and episodes. Kinds differ, so it stays a mapping.
SearchRow = dict[str, Any]


# -- lifecycle (issue 13) ------------------------------------------------------------------
class AuditRow(TypedDict):
    """One link of the audit chain. ``payload`` is the JSON text exactly as hashed."""

    id: int
    prev_hash: str
    action: str
    payload: str
    current_hash: str
    project_id: str | None
    created_at: str


class FactRow(TypedDict):
    fact_id: str
    subject_entity_id: str
    observation_id: str | None
    project_id: str | None
    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None
    observed_at: str
    confidence: float
    is_current: bool
    created_at: str


class DecayRow(TypedDict):
    """An observation the decay formula reads."""

    id: str
    entity_id: str
    observation_type: str
    importance: float
    access_count: int
    last_accessed: str | None
    last_decayed_at: str | None
    created_at: str


class EpisodeAgeRow(TypedDict):
    id: str
    importance: float
    created_at: str


class LowImportanceRow(TypedDict):
    """A prune candidate: an observation below the threshold, with its project's name."""

    id: str
    entity_name: str
    observation_type: str
    content: str
    importance: float
    project: str | None


class QuarantinedRows(TypedDict):
    observations: list[dict[str, Any]]  # {kind, observation_id, entity, content, source, created_at}
    episodes: list[dict[str, Any]]  # {kind, id, entity, content, created_at}
    errors: list[dict[str, Any]]  # {kind, id, error_type, error_message, project, created_at}


class ForgetCounts(TypedDict):
    observations: int
    episodes: int
    relations: int
    facts: int
    aliases: int
    errors_purged: int
    sessions_purged: int
    verify_log_purged: int
    judgments_purged: int
    notes_purged: int
    snapshots_purged: int
    triggers_purged: int


class RemCycleRow(TypedDict, total=False):
    id: int
    started_at: str
    finished_at: str
    duration_ms: int
    decayed_count: int
    episodes_decayed: int
    protected_entities: int
    embeddings_backfilled: int
    duplicate_candidates: int
    autolink_edges: int
    entities_scanned: int
    facts_extracted: int
    communities: int
    relation_scan_failed: int
    extraction_failed: int
    error: str | None
    trigger: str


class EntityNameRow(TypedDict):
    """An entity's name with how much it holds (dedupe)."""

    id: str
    name: str
    entity_type: str
    project_id: str | None
    observation_count: int


class EntityMerge(TypedDict):
    observations: int
    episodes: int
    facts: int
    relations_moved: int
    relations_dropped: int
    aliases: int


class ArtifactSummaryRow(TypedDict):
    """An artifact without its content (cuba_artefacto list, the context window's index)."""

    id: str
    path: str
    content_hash: str
    version: int
    locked_by: str | None
    lock_until: str | None
    updated_at: str
    origin_node: str | None


class ArtifactRow(ArtifactSummaryRow):
    """A row of ``artifacts``: a shared text at a path, unique per project."""

    project_id: str | None
    content: str
    crdt_actor: str
    crdt_counter: int
    created_at: str


class ArtifactVersionRow(TypedDict):
    """A version of an artifact that a later put replaced (``artifact_versions``)."""

    artifact_id: str
    project_id: str | None
    version: int
    content: str
    content_hash: str
    actor: str
    origin_node: str | None
    written_at: str
    replaced_at: str
