"""Typed answers: the keys of every tool's response, action by action.

Keyed as ``shared/spec/interface.md`` lists them (the drop-in contract), plus what this build
adds (marked ``NotRequired`` when an answer carries it only sometimes). Each service function
returns one of these; the catalog (server/catalog.py) names the type of every action, and
``tests/test_answers.py`` calls every tool and action over MCP and checks the keys it got
against the type: a key a type does not declare, or a required key missing, fails there.

Nested rows are plain mappings where their shape is a row of the store (``storage/rows.py``).
(No ``from __future__ import annotations`` here: Python 3.11 reads ``NotRequired`` only from
evaluated annotations.)
"""


from typing import Any, NotRequired, TypedDict

Row = dict[str, Any]


class Clamped(TypedDict):
    given: Any
    used: Any


class Fired(TypedDict):
    """A reminder that fired: in ``triggered_reminders`` and in cuba_centinela check."""

    trigger_id: str
    entity_pattern: str
    message: str
    from_agent: str
    fire_count: int
    deactivated: bool


# -- graph: cuba_alma ------------------------------------------------------------------------
class EntityCreated(TypedDict):
    action: str
    already_existed: bool
    entity: Row
    message: NotRequired[str]


class EntityRenamed(TypedDict):
    action: str
    old_name: str
    new_name: str


class EntityDeleted(TypedDict):
    action: str
    name: str
    cascade: bool
    removed: dict[str, int]


class EntityRead(TypedDict):
    action: str
    entity: Row
    observations: list[Row]
    observation_count: int
    relations: list[Row]
    triggered_reminders: NotRequired[list[Fired]]


# -- graph: cuba_puente ----------------------------------------------------------------------
# "from" is a Python keyword, so the answers that carry it use the functional syntax.
RelationCreated = TypedDict("RelationCreated", {
    "action": str, "from": str, "to": str, "relation_type": str, "bidirectional": bool, "strength": float})


class RelationDeleted(TypedDict):
    action: str
    deleted: bool


class Traversal(TypedDict):
    action: str
    start: str
    max_depth: int
    nodes: list[Row]
    count: int
    clamped: NotRequired[dict[str, Clamped]]


class Inference(TypedDict):
    action: str
    start: str
    inferred_connections: list[Row]
    count: int
    clamped: NotRequired[dict[str, Clamped]]


# -- graph: cuba_proyecto --------------------------------------------------------------------
class ProjectList(TypedDict):
    action: str
    projects: list[Row]
    count: int


class ProjectCurrent(TypedDict):
    action: str
    project: Row | None


class ProjectSwitched(TypedDict):
    action: str
    project: Row | None
    bound_to_session: bool
    note: NotRequired[str]


class ProjectStats(TypedDict, total=False):
    # every table with a project_id column is a key too (entities, observations, …): open-ended
    action: str
    project_id: str
    project: str | None
    note: str
    unresolved_errors: int
    created_at: str | None
    last_active_at: str | None


ProjectRenamed = TypedDict("ProjectRenamed", {
    "action": str, "from": str, "to": str, "renamed": bool, "project_id": str})
ProjectMerged = TypedDict("ProjectMerged", {
    "action": str, "from": str, "to": str, "from_id": str, "to_id": str, "rows_moved": int,
    "moved": dict[str, int], "entities_merged": int, "relations_merged": int, "procedures_merged": int})


class ProjectBackfill(TypedDict):
    action: str
    project: str
    project_id: str
    dry_run: bool
    would_move: NotRequired[dict[str, int]]  # dry run: rows of no project, per table
    rows: NotRequired[int]
    entities_to_merge: NotRequired[list[str]]  # entities of no project whose name the project uses
    hint: NotRequired[str]
    moved: NotRequired[dict[str, int]]  # confirmed: rows moved, per table
    rows_moved: NotRequired[int]
    entities_merged: NotRequired[list[str]]
    undo_file: NotRequired[str]  # `cuba-memorys undo FILE` moves them back
    audit_id: NotRequired[int]


# -- observations: cuba_cronica ------------------------------------------------------------
class ObservationAdded(TypedDict):
    action: str
    id: str
    entity_name: NotRequired[str]
    observation_type: NotRequired[str]
    information_density: NotRequired[float]
    importance: NotRequired[float]
    tags: NotRequired[list[str]]
    overload_warning: NotRequired[str | None]
    superseded: NotRequired[int]
    embedded: NotRequired[bool]
    # a near-duplicate: nothing written, or the existing row reinforced
    deduplicated: NotRequired[bool]
    existing_content: NotRequired[str]
    prediction_error: NotRequired[str]
    reinforced_id: NotRequired[str]
    message: NotRequired[str]
    trust: NotRequired[str]
    # ready: the model is loaded and the row's vector is stored; pending: no model, or no vector yet
    embedding: str
    write_to_searchable_ms: float  # receiving the write → committed: in the lexical and vector indexes
    anchors: NotRequired[list[Row]]  # the code it was anchored to: path, symbol, lines, commit
    proposed_anchors: NotRequired[list[Row]]  # files / symbols the content names (not stored)
    triggered_reminders: NotRequired[list[Fired]]


class BatchAdded(TypedDict):
    action: str
    added: int
    deduplicated: int
    reinforced: int
    total_processed: int
    ids: list[str]
    # ready when every id's row has its vector stored; pending: no model, or rows the background
    # embedding queue has not embedded yet (the lexical branches find them already)
    embedding: str
    write_to_searchable_ms: float  # receiving the write → committed: in the lexical indexes (vector too if ready)
    triggered_reminders: NotRequired[list[Fired]]
    anchors_stored: NotRequired[int]  # anchors the items carried (docs/code-anchors.md)


class ObservationDeleted(TypedDict):
    action: str
    deleted_id: str
    undo_file: NotRequired[str]  # `cuba-memorys undo FILE` restores the row
    audit_id: NotRequired[int]


class ObservationList(TypedDict):
    action: str
    entity_name: str
    count: int
    observations: list[Row]
    triggered_reminders: NotRequired[list[Fired]]


class EpisodeAdded(TypedDict):
    action: str
    id: str
    entity_name: str
    actors: list[str]
    artifacts: list[str]
    importance: float


class EpisodeList(TypedDict):
    action: str
    entity_name: str
    count: int
    episodes: list[Row]


class Timeline(TypedDict):
    action: str
    entity_name: str
    items: list[Row]
    count: int


# -- observations: cuba_ingesta --------------------------------------------------------------
class Ingested(TypedDict):
    action: str
    added: int
    deduplicated: int
    reinforced: int
    total_processed: int
    ids: list[str | None]
    skipped_invalid: int
    invalid: list[Row]
    total_items: int
    embedding: str  # as BatchAdded's: pending until the background queue has embedded the rows
    trust: NotRequired[str]
    note: NotRequired[str]
    triggered_reminders: NotRequired[list[Fired]]


class Parsed(Ingested, total=False):
    entity_name: str
    parsed_count: int
    parsed: list[Row]


class ParsedNothing(TypedDict):
    action: str
    entity_name: str
    parsed_count: int
    note: str


class Extracted(Ingested, total=False):
    extracted: int
    relations_linked: int
    relations_skipped: list[Row]
    backend: str
    model: str | None
    facts_beyond_limit: int
    superseded: int
    supersessions: list[Row]
    supersede_note: str


class ExtractDegraded(TypedDict):
    action: str
    extracted: int
    added: int
    degraded: bool
    reason: str
    note: str


# -- search: cuba_faro -----------------------------------------------------------------------
class SearchAnswer(TypedDict):
    mode: str
    query: str
    results: list[Row]
    count: int
    graphrag_context: list[Row]
    degraded: NotRequired[bool]
    degraded_reason: NotRequired[str]
    unembedded_share: NotRequired[float]
    # rows the background embedding queue has yet to embed: found by keyword now, by meaning later
    embedding_pending: NotRequired[int]
    eta_s: NotRequired[float]
    reranker_degraded: NotRequired[bool]
    reranker_degraded_reason: NotRequired[str]
    new_since_you_started: NotRequired[list[int]]
    new_since_you_started_note: NotRequired[str]
    ood: NotRequired[bool]
    mahalanobis_distance: NotRequired[float]
    ood_threshold: NotRequired[float]
    ood_threshold_source: NotRequired[str]
    ood_skipped_reason: NotRequired[str]
    abstain_reason: NotRequired[str]
    query_syntax: NotRequired[Row]
    query_class: str  # factoid | multi_hop | global (search/query_class.py)
    context_matches: NotRequired[int]  # with context: results that came from the files / diff given
    tags_ignored_reason: NotRequired[str]  # a tag filter with a scope that holds no observations
    clamped: NotRequired[dict[str, Clamped]]


class VerifyAnswer(TypedDict):
    mode: str
    claim: str
    confidence: float
    grounding: str
    interpretation: str
    evidence: list[Row]
    evidence_count: int
    judged_by: str
    verdicts_reached: int
    calibrated_accuracy: NotRequired[float]
    # beyond the original: judged evidence from a source whose trust fell below 0.5, weighed less
    trust_adjusted: NotRequired[list[Row]]


# -- grounding: cuba_juez, cuba_contradiccion -----------------------------------------------
class PairJudged(TypedDict):
    action: str
    cached: bool
    observation_a: str
    observation_b: str
    judgment: Row


class EntityScanned(TypedDict):
    action: str
    entity_name: str
    backend: str
    ambiguous_band: list[float]
    llm_calls: int
    cache_hits: int
    results: list[Row]
    clamped: NotRequired[dict[str, Clamped]]


class ContradictionScan(TypedDict):
    action: str
    entity_name: str | None
    contradictions: list[Row]
    count: int


# -- workflow: cuba_decreto, cuba_receta, cuba_pizarra -------------------------------------
class DecisionRecorded(TypedDict):
    action: str
    id: str
    title: str
    entity_name: str
    deduplicated: NotRequired[bool]
    message: NotRequired[str]
    triggered_reminders: NotRequired[list[Fired]]


class DecisionQuery(TypedDict):
    action: str
    query: str
    results: list[Row]
    count: int
    similarity_method: str
    degraded: NotRequired[bool]
    degraded_reason: NotRequired[str]


class DecisionList(TypedDict):
    action: str
    decisions: list[Row]
    count: int


class Recipe(TypedDict):
    action: str
    id: str
    name: str
    trigger: str | None
    steps: list[Row]
    preconditions: str | None
    verification: str | None
    successes: int
    failures: int
    reliability: float
    last_outcome: str | None
    last_used_at: str | None
    created_at: str
    updated_at: str
    updated: NotRequired[bool]  # add: the name existed and was replaced
    markdown: NotRequired[str]  # get
    hint: NotRequired[str]  # outcome


class RecipeSearch(TypedDict):
    action: str
    query: str
    count: int
    procedures: list[Row]
    clamped: NotRequired[dict[str, Clamped]]


class RecipeList(TypedDict):
    action: str
    count: int
    procedures: list[Row]
    clamped: NotRequired[dict[str, Clamped]]


class RecipeDeleted(TypedDict):
    action: str
    name: str
    deleted: bool


class NoteWritten(TypedDict):
    action: str
    id: str
    session_id: str | None
    tag: str | None
    ttl_seconds: int
    created_at: str
    expires_at: str
    clamped: NotRequired[dict[str, Clamped]]


class NotesRead(TypedDict):
    action: str
    entries: list[Row]
    count: int
    session_id: str | None


class NotesCleared(TypedDict):
    action: str
    deleted: int
    tag: str | None
    session_id: str | None


# -- sessions: cuba_jornada, cuba_pre_compact ------------------------------------------------
class SessionStarted(TypedDict):
    action: str
    session: Row
    previous_session: NotRequired[Row]
    peer_notices: NotRequired[list[Row]]  # open notices of sync peers (cuba_sync notify), newest first
    triggered_reminders: NotRequired[list[Fired]]


class SessionEnded(TypedDict):
    action: str
    updated: bool
    outcome: NotRequired[str]
    session_diff: NotRequired[dict[str, int]]
    reason: NotRequired[str]


class SessionList(TypedDict):
    action: str
    sessions: list[Row]
    count: int


class SessionCurrent(TypedDict):
    action: str
    session: Row | None
    compaction_hint: bool
    last_snapshot: Row | None


class Snapshot(TypedDict):
    action: str
    session_id: str | None
    summary_md: str
    snapshot_id: NotRequired[str]
    key_observations: NotRequired[list[Row]]
    decisions: NotRequired[list[Row]]
    unresolved_errors: NotRequired[list[Row]]
    pending_embeddings: NotRequired[list[Row]]
    active_goals: NotRequired[list[str]]
    obs_count: NotRequired[int]
    note: NotRequired[str]


class Restored(TypedDict):
    action: str
    session_id: str | None
    snapshot: Row | None
    note: NotRequired[str]


# -- incidents: cuba_alarma, cuba_remedio, cuba_expediente -----------------------------------
class ErrorReported(TypedDict):
    error_id: str
    error_type: str
    project: str
    similar_errors: int
    pattern_warning: NotRequired[str]
    known_solutions: NotRequired[list[Row]]
    message_truncated: NotRequired[bool]
    triggered_reminders: NotRequired[list[Fired]]


class ErrorResolved(TypedDict):
    error_id: str
    resolved: bool
    solution: str
    similar_unresolved: list[Row]
    similar_count: int
    previous_solution: NotRequired[str]
    hint: NotRequired[str]


class ErrorSearch(TypedDict):
    query: str
    results: list[Row]
    count: int
    anti_repetition_warning: NotRequired[str]
    failed_attempts: NotRequired[list[Row]]


# -- reminders: cuba_centinela -----------------------------------------------------------------
class TriggerCreated(TypedDict):
    action: str
    trigger_id: str
    entity_pattern: str
    condition_type: str
    message: str
    max_fires: int
    expires_at: str | None
    from_agent: str
    clamped: NotRequired[dict[str, Clamped]]


class TriggerList(TypedDict):
    action: str
    triggers: list[Row]
    count: int


class TriggerDeleted(TypedDict):
    action: str
    trigger_id: str


class TriggerCheck(TypedDict):
    action: str
    condition_type: str
    subject: str
    triggered: list[Fired]
    count: int


# -- meta: cuba_tools --------------------------------------------------------------------------
class ToolCatalogue(TypedDict):
    count: int
    total_tools: int
    detail: str
    profile: str
    tools: list[Any]
    hint: str
