"""The bitemporal fact log's SQL, shared by both backends (services/lifecycle/facts.py).

A fact is what one version of an observation asserted and for how long the memory held it
true: [valid_from, valid_to), valid_to NULL while it is current.
"""

from __future__ import annotations

from collections.abc import Sequence

from cuba_memorys.storage.rows import FactRow
from cuba_memorys.storage.sql.common import SqlBase, marks

FACT_COLUMNS = ("fact_id, subject_entity_id, observation_id, project_id, subject, predicate, object, valid_from,"
                " valid_to, observed_at, confidence, is_current, created_at")


def fact_from(row) -> FactRow:
    values = dict(row)
    values["is_current"] = bool(values["is_current"])
    return FactRow(**values)  # type: ignore[typeddict-item]


class SqlFacts(SqlBase):
    """Mixed into SqlStore."""

    def open_fact(self, fact: FactRow) -> None:
        values = {**fact, "is_current": 1 if fact["is_current"] else 0}
        columns = ", ".join(values)
        self._exec(f"INSERT INTO facts({columns}) VALUES ({marks(list(values))})", list(values.values()))

    def close_facts(self, observation_ids: Sequence[str], at: str, reason: str,
                    new_fact_id: str | None = None) -> int:
        """Close the current facts of these observations at ``at`` (all but ``new_fact_id``
        itself), each linked in fact_supersedes to the fact that replaced it, if any."""
        if not observation_ids:
            return 0
        with self.transaction():
            closed = self._q(f"UPDATE facts SET is_current = 0, valid_to = CASE WHEN valid_from > ? THEN valid_from"
                             f" ELSE ? END WHERE is_current = 1 AND observation_id IN ({marks(observation_ids)})"
                             " AND fact_id != ? RETURNING fact_id", (at, at, *observation_ids, new_fact_id or ""))
            for row in closed:
                self._exec("INSERT INTO fact_supersedes(old_fact_id, new_fact_id, reason, superseded_at)"
                           " VALUES (?, ?, ?, ?)", (row[0], new_fact_id, reason, at))
        return len(closed)

    def facts_of(self, observation_id: str) -> list[FactRow]:
        rows = self._q(f"SELECT {FACT_COLUMNS} FROM facts WHERE observation_id = ? ORDER BY valid_from, created_at",
                       (observation_id,))
        return [fact_from(r) for r in rows]

    def facts_valid_at(self, observation_ids: Sequence[str], as_of: str) -> dict[str, FactRow]:
        if not observation_ids:
            return {}
        rows = self._q(f"SELECT {FACT_COLUMNS} FROM facts WHERE observation_id IN ({marks(observation_ids)})"
                       " AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)"
                       " ORDER BY valid_from", (*observation_ids, as_of, as_of))
        return {r["observation_id"]: fact_from(r) for r in rows}

    def fact_counts(self) -> dict[str, int]:
        row = self._one("SELECT count(*), coalesce(sum(is_current), 0) FROM facts")
        return {"facts": int(row[0]), "current": int(row[1]), "closed": int(row[0]) - int(row[1])}
