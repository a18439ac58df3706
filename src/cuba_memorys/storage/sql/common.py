"""The leaf every shared-SQL module builds on: scope conditions, row mappers, the columns
that are index material, and :class:`SqlBase`, the hooks a backend provides.

It imports nothing from its siblings, so the family modules (graph, observations, search,
grounding, workflow, sessions, incidents, reminders) import it and never each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, cast, get_args

import numpy as np

from cuba_memorys.models import Entity, Observation, Scope
from cuba_memorys.storage.rows import (
    EpisodeRow,
    ErrorRow,
    ProcedureRow,
    SessionRow,
    SnapshotRow,
    TriggerRow,
)
from cuba_memorys.text import analyze, words

OBS_COLUMNS = (
    "o.seq, o.id, o.entity_id, e.name AS entity_name, o.content, o.observation_type, o.importance,"
    " o.access_count, o.source, o.version, o.previous_versions, o.tags, o.trust, o.evidence,"
    " o.session_id, o.project_id, o.origin_node, o.created_at, o.updated_at"
)

EMBEDDED_TABLES = {"observation": "observations", "episode": "episodes"}
COUNTED_TABLES = ("entities", "observations", "relations", "episodes", "errors", "sessions", "projects")

# Each lexically indexed table and the SQL of the text its index holds.
LEXICAL_SOURCES = {
    "observations": "content",
    "entities": "name || ' ' || entity_type",
    "episodes": "content",
    "errors": "error_type || ' ' || error_message",
}

# Columns of a stored row that are index material, never part of an answer (PostgreSQL keeps
# the lexical ones on the row itself).
INTERNAL_COLUMNS = ("embedding", "token_vectors", "lex_raw", "lex_stem", "tsv_raw", "tsv_stem")
ACTIVE_PROJECT_KEYS = "active_project:%"  # meta keys naming each client's active project
# The list columns of a snapshot, as literal keys of SnapshotParts (so indexing a row by them checks).
SnapshotList = Literal["key_observations", "decisions", "unresolved_errors", "pending_embeddings", "active_goals"]
SNAPSHOT_LISTS: tuple[SnapshotList, ...] = get_args(SnapshotList)


def scope_sql(scope: Scope, column: str) -> tuple[str, list[Any]]:
    """SQL condition and parameters for 'visible in this scope' on ``column``."""
    if scope.unrestricted:
        return "1 = 1", []
    if scope.include_unscoped:
        return f"({column} IS NULL OR {column} = ?)", [scope.project_id]
    return f"{column} = ?", [scope.project_id]


def marks(values: Sequence[Any]) -> str:
    """``?, ?, …`` for an IN list of ``values``."""
    return ",".join("?" * len(values))


def json_value(value: Any) -> Any:
    """A JSON column's value as Python (both backends store JSON text)."""
    return json.loads(value) if isinstance(value, str) else value


def lexical_texts(text: str) -> tuple[str, str]:
    """The two lexical forms: folded words (text branch), analyzed terms (BM25 branch)."""
    return " ".join(words(text)), " ".join(analyze(text))


def without_internal(row: Any) -> dict[str, Any]:
    """A row as a dict, without its index material."""
    return {k: v for k, v in dict(row).items() if k not in INTERNAL_COLUMNS}


# -- row mappers ---------------------------------------------------------------------------
def entity_from(row: Any) -> Entity:
    return Entity(row["id"], row["name"], row["entity_type"], row["importance"],
                  row["access_count"], row["project_id"], row["created_at"])


def observation_from(row: Any) -> Observation:
    return Observation(
        id=row["id"], entity_id=row["entity_id"], entity_name=row["entity_name"],
        content=row["content"], observation_type=row["observation_type"],
        importance=row["importance"], access_count=row["access_count"], source=row["source"],
        version=row["version"], previous_versions=json_value(row["previous_versions"]),
        tags=json_value(row["tags"]), trust=row["trust"], evidence=row["evidence"],
        session_id=row["session_id"], project_id=row["project_id"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )


def episode_from(row: Any) -> EpisodeRow:
    data = without_internal(row)
    data["actors"], data["artifacts"] = json_value(data["actors"]), json_value(data["artifacts"])
    return cast(EpisodeRow, data)


def error_from(row: Any) -> ErrorRow:
    data = without_internal(row)
    data["context"] = json_value(data.get("context"))
    data["resolved"] = bool(data["resolved"])  # 0/1 on both backends
    return cast(ErrorRow, data)


def trigger_from(row: Any) -> TriggerRow:
    data = dict(row)
    data["active"] = bool(data["active"])  # 0/1 on both backends
    return cast(TriggerRow, data)


def procedure_from(row: Any) -> ProcedureRow:
    data = dict(row)
    data["steps"] = json_value(data["steps"])
    return cast(ProcedureRow, data)


def session_from(row: Any) -> SessionRow:
    data = dict(row)
    data["goals"] = json_value(data["goals"])
    return cast(SessionRow, data)


def snapshot_from(row: Any) -> SnapshotRow:
    data = dict(row)
    for key in SNAPSHOT_LISTS:
        data[key] = json_value(data[key])
    return cast(SnapshotRow, data)


class SqlBase:
    """The connection and index hooks every shared-SQL family uses; a backend (SqliteStore,
    PgStore) provides them. The family mixins inherit this, so none restates them."""

    backend = "sql"
    origin_node: str | None = None
    read_only = False  # a PostgreSQL standby: searches only, every write refused
    location = ""

    # -- the connection -----------------------------------------------------------------
    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _after_commit(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    # -- the lexical index --------------------------------------------------------------
    def _index_text(self, table: str, seq: int, text: str) -> None:
        raise NotImplementedError

    def _lexical_columns(self, table: str, text: str) -> dict[str, tuple[str, Any]]:
        """Lexical index columns a backend keeps in the row itself: {column: (SQL, parameter)}."""
        return {}

    def _index_inserted(self, table: str, seq: int, text: str) -> None:
        """After an INSERT through :meth:`_insert_indexed`: index what the row did not carry."""
        self._index_text(table, seq, text)

    def _insert_indexed(self, table: str, values: dict[str, Any], text: str, returning: str = "seq") -> Any:
        """INSERT one row of a lexically indexed table and index ``text`` for it, in one write
        where the backend keeps the index in the row (PostgreSQL), else just after (FTS5)."""
        extra = self._lexical_columns(table, text)
        columns = [*values, *extra]
        placeholders = ["?"] * len(values) + [sql for sql, _ in extra.values()]
        row = self._one(f"INSERT INTO {table}({', '.join(columns)}) VALUES ({', '.join(placeholders)})"
                        f" RETURNING {returning}", (*values.values(), *(p for _, p in extra.values())))
        self._index_inserted(table, row["seq"], text)
        return row

    # -- embeddings and the vector index --------------------------------------------------
    def _vector_param(self, blob: bytes | None) -> Any:
        raise NotImplementedError

    def _vector_value(self, value: Any) -> np.ndarray:
        raise NotImplementedError

    def _vector_added(self, kind: str, seq: int, blob: bytes) -> None:
        """After commit: a row got its first embedding."""

    def _vectors_dropped(self, kind: str, seqs: list[int]) -> None:
        """After commit: rows left."""

    def _vectors_reloaded(self) -> None:
        """After commit: embeddings were changed in bulk."""

    def _vectors_learned(self, kind: str, rows: list[tuple[int, bytes, int]]) -> None:
        """After commit: these rows (seq, vector, embedding_rev) took a new embedding."""

    def _vectors_cleared(self) -> None:
        """After commit: every embedding was removed."""

    def _seqs_of(self, table: str, where: str, params: list[Any]) -> list[int]:
        return [r[0] for r in self._q(f"SELECT seq FROM {table} WHERE {where}", params)]
