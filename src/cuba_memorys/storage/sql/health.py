"""What cuba_vigia's summary, health and drift read, shared by both backends: counts in a scope,
importance and access aggregates, the type distributions the entropy is computed from, error
resolution times and error types per time window. Aggregates only, so they answer at 100k rows."""

from __future__ import annotations

from cuba_memorys.models import Scope
from cuba_memorys.storage.sql.common import SqlBase, scope_sql

# (answer key, table, extra condition): the summary's counts.
SUMMARY_COUNTS = (
    ("entities", "entities", ""),
    ("observations", "observations", " AND observation_type != 'superseded'"),
    ("episodes", "episodes", ""),
    ("relations", "relations", ""),
    ("errors", "errors", ""),
    ("sessions", "sessions", ""),
)


class SqlHealth(SqlBase):
    """Mixed into SqlStore."""

    def scope_counts(self, scope: Scope) -> dict[str, int]:
        cond, params = scope_sql(scope, "project_id")
        return {key: int(self._one(f"SELECT count(*) FROM {table} WHERE {cond}{extra}", params)[0])
                for key, table, extra in SUMMARY_COUNTS}

    def health_figures(self, scope: Scope, stale_before: str) -> dict[str, float | int]:
        cond, params = scope_sql(scope, "project_id")
        entities = self._one(f"SELECT coalesce(avg(importance), 0), coalesce(sum(CASE WHEN access_count = 0"
                             f" THEN 1 ELSE 0 END), 0) FROM entities WHERE {cond}", params)
        observations = self._one(
            "SELECT coalesce(sum(CASE WHEN coalesce(last_accessed, created_at) < ? THEN 1 ELSE 0 END), 0),"
            " coalesce(sum(CASE WHEN embedding IS NULL THEN 1 ELSE 0 END), 0) FROM observations"
            f" WHERE observation_type != 'superseded' AND {cond}", (stale_before, *params))
        triggers = self._one(f"SELECT count(*) FROM triggers WHERE active = 1 AND {cond}", params)
        return {"avg_importance": float(entities[0]), "unused_entities": int(entities[1]),
                "stale_observations": int(observations[0]), "null_embeddings": int(observations[1]),
                "active_triggers": int(triggers[0])}

    def type_counts(self, scope: Scope) -> dict[str, dict[str, int]]:
        """Rows per entity type and per (live) observation type."""
        cond, params = scope_sql(scope, "project_id")
        entity_types = self._q(f"SELECT entity_type, count(*) FROM entities WHERE {cond} GROUP BY entity_type",
                               params)
        obs_types = self._q("SELECT observation_type, count(*) FROM observations"
                            f" WHERE observation_type != 'superseded' AND {cond} GROUP BY observation_type", params)
        return {"entity_types": {r[0]: int(r[1]) for r in entity_types},
                "observation_types": {r[0]: int(r[1]) for r in obs_types}}

    def error_resolution(self, scope: Scope) -> list[tuple[str, str | None, int]]:
        """(created_at, resolved_at, resolved) of every error in scope."""
        cond, params = scope_sql(scope, "project_id")
        return [(r[0], r[1], int(r[2])) for r in
                self._q(f"SELECT created_at, resolved_at, resolved FROM errors WHERE {cond}", params)]

    def error_types_between(self, scope: Scope, start: str, end: str) -> dict[str, int]:
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT error_type, count(*) FROM errors WHERE created_at >= ? AND created_at < ? AND {cond}"
                       " GROUP BY error_type", (start, end, *params))
        return {r[0]: int(r[1]) for r in rows}

    def database_bytes(self) -> int:
        """The store's size on disk (the one statement the two dialects spell differently)."""
        if self.backend == "postgresql":
            return int(self._one("SELECT pg_database_size(current_database())")[0])
        return int(self._one("PRAGMA page_count")[0]) * int(self._one("PRAGMA page_size")[0])

    def graph_fingerprint(self, scope: Scope) -> str:
        """What the graph reports read, summed up: it changes when an entity, a live observation
        or a relation in scope is added, removed or changes importance, type or strength."""
        cond, params = scope_sql(scope, "project_id")
        parts = [
            self._one(f"SELECT count(*), coalesce(max(seq), 0), coalesce(sum(importance), 0) FROM entities"
                      f" WHERE {cond}", params),
            self._one("SELECT count(*), coalesce(max(seq), 0) FROM observations"
                      f" WHERE observation_type != 'superseded' AND {cond}", params),
            self._one(f"SELECT count(*), coalesce(sum(strength), 0), coalesce(max(created_at), '') FROM relations"
                      f" WHERE {cond}", params),
        ]
        return "|".join(str(value) for row in parts for value in row)
