"""Plain data shared by every layer: vocabularies, rows and small value objects.

Nothing here touches storage or models; it is the bottom layer with :mod:`errors`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, overload

ENTITY_TYPES = ("concept", "project", "technology", "person", "pattern", "config")
# Written by `codegraph build` only (services/code/codegraph.py), never by cuba_alma create.
CODE_ENTITY_TYPES = ("code_symbol", "module", "external_dependency")
OBSERVATION_TYPES = (
    "fact", "decision", "lesson", "preference", "context", "tool_usage", "error", "solution",
)
# "superseded" is a state a row can be moved into, accepted on add as the original does.
WRITABLE_OBSERVATION_TYPES = OBSERVATION_TYPES + ("superseded",)
# Observation types that never decay and are never pruned (the original's rule).
PERMANENT_TYPES = ("decision", "lesson")
SOURCES = ("agent", "user", "error_detection", "consolidation", "inference")
TRUST_LEVELS = ("trusted", "quarantined")
EVIDENCE_LEVELS = ("asserted", "observed", "verified")
RELATION_TYPES = ("uses", "causes", "implements", "depends_on", "related_to")
SESSION_OUTCOMES = ("success", "partial", "failed", "abandoned")

MAX_CONTENT_CHARS = 10_000
MAX_NAME_CHARS = 200
MAX_BATCH = 100
MAX_PREVIOUS_VERSIONS = 20


def new_id() -> str:
    return str(uuid.uuid4())


# An id new_id() makes, as it appears in text (snapshots, undo files quote rows by id).
ID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def utc_now() -> datetime:
    return datetime.now(UTC)


@overload
def iso(dt: datetime) -> str: ...
@overload
def iso(dt: datetime | None) -> str | None: ...
def iso(dt: datetime | None) -> str | None:
    """Timestamps are stored and returned as ISO 8601 UTC strings with a 'Z'-free offset."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Entity:
    id: str
    name: str
    entity_type: str
    importance: float
    access_count: int
    project_id: str | None
    created_at: str


@dataclass(frozen=True)
class Observation:
    id: str
    entity_id: str
    entity_name: str
    content: str
    observation_type: str
    importance: float
    access_count: int
    source: str
    version: int
    previous_versions: list[dict[str, Any]]
    tags: list[str]
    trust: str
    evidence: str
    session_id: str | None
    project_id: str | None
    created_at: str
    updated_at: str


@dataclass
class NewObservation:
    """An observation ready to be stored (validated, tagged and scored by the service)."""

    entity_id: str
    content: str
    observation_type: str = "fact"
    source: str = "agent"
    importance: float = 0.5
    tags: list[str] = field(default_factory=list)
    trust: str = "trusted"
    evidence: str = "asserted"
    session_id: str | None = None
    project_id: str | None = None
    created_at: str | None = None
    embedding: bytes | None = None
    embedding_model: str | None = None
    id: str = field(default_factory=new_id)


@dataclass(frozen=True)
class Scope:
    """Which rows a reader may see: the active project's rows only (the original's rule since
    0.26: with a project active, rows of no project are out of scope). ``include_unscoped``
    adds the rows of no project back, for the one read that asks for them (cuba_faro's
    parameter of that name).

    ``project_id`` None means no project is active, and every row is visible (as the
    original's row-level security rule: visible when the session's project is unset).
    """

    project_id: str | None = None
    include_unscoped: bool = False

    @property
    def unrestricted(self) -> bool:
        return self.project_id is None


@dataclass(frozen=True)
class SearchFilter:
    """What a search may return. Every backend applies each field the same way, per row kind
    (entity, observation, episode, error); the defaults narrow nothing.

    A field that only means something for some kinds excludes the other kinds when it is set
    (asking for ``observation_types`` cannot be answered by an entity), so a filter never
    matches a row merely because the row lacks the filtered column.
    """

    scope: Scope = Scope()
    after: str | None = None  # created_at > after (ISO 8601 UTC), every kind
    before: str | None = None  # created_at < before, every kind
    # Not a constraint: the text branch also brings in observations carrying any of these tags.
    tags: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()  # only these row kinds; () = every kind
    # Exact entity names: entities of that name, observations/episodes of such an entity; errors excluded.
    entity_names: tuple[str, ...] = ()
    observation_types: tuple[str, ...] = ()  # observations of these types; other kinds excluded
    any_tags: tuple[str, ...] = ()  # observations carrying at least one of these tags; other kinds excluded
    # Rows named by UUID (ids) or by integer seq (seqs), any kind; a row matches if either list
    # names it. A seq is unique only within its kind, so combine seqs with kinds to be precise.
    ids: tuple[str, ...] = ()
    seqs: tuple[int, ...] = ()
    session_id: str | None = None  # observations, episodes and errors of that session; entities excluded
    include_pending: bool = True  # False: hide observations/episodes whose embedding is not stored yet
    # Each phrase's words occur consecutively in the row's text, compared folded (case, accents
    # and punctuation ignored: "Port 5432" matches "port: 5432"). Whole words only.
    phrases: tuple[str, ...] = ()
    # What the memory held at this moment (ISO 8601 UTC): rows written by then; observations
    # whose fact was valid then (superseded or corrected later included), by the fact log.
    as_of: str | None = None


@dataclass(frozen=True)
class Hit:
    """One candidate from one search branch: a row kind, its id and the branch's score."""

    kind: str  # entity | observation | episode | error
    id: str
    score: float
