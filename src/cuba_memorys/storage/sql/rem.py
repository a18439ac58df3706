"""Shared SQL of the consolidation cycles' record (``rem_cycles``, the latest 500 kept by a
trigger). The cycle itself is services/lifecycle/rem.py; its cross-process lock is each
backend's ``exclusive``."""

from __future__ import annotations

from typing import cast

from cuba_memorys.storage.rows import RemCycleRow
from cuba_memorys.storage.sql.common import SqlBase, marks

REM_COLUMNS = ("started_at", "finished_at", "duration_ms", "decayed_count", "episodes_decayed",
               "protected_entities", "embeddings_backfilled", "duplicate_candidates", "autolink_edges",
               "entities_scanned", "facts_extracted", "communities", "relation_scan_failed",
               "extraction_failed", "error", "trigger")


# The consolidation cycle's ANALYZE step (spec §4c, 10): these tables (the original's also
# observation_chunks, which this build has not) when never analyzed, or when more rows changed
# since the last ANALYZE than max(50, 5% of the rows).
ANALYZED_TABLES = ("observations", "entities", "relations")
MIN_CHANGED, CHANGED_SHARE = 50, 0.05


def analyze_due(rows: int, changed: int | None) -> bool:
    """``changed`` None: never analyzed. An empty table has nothing to describe."""
    return rows > 0 and (changed is None or changed > max(MIN_CHANGED, CHANGED_SHARE * rows))


def _quoted(column: str) -> str:
    return f'"{column}"'  # `trigger` is a keyword in both dialects


class SqlRem(SqlBase):
    """Mixed into SqlStore."""

    def add_rem_cycle(self, row: RemCycleRow) -> int:
        columns = [c for c in REM_COLUMNS if c in row]
        values = [row[c] for c in columns]  # type: ignore[literal-required]
        added = self._one(f"INSERT INTO rem_cycles({', '.join(map(_quoted, columns))}) VALUES ({marks(columns)})"
                          " RETURNING id", values)
        return int(added[0])

    def rem_cycles(self, limit: int) -> list[RemCycleRow]:
        """The newest ``limit`` cycles, newest first."""
        rows = self._q("SELECT * FROM rem_cycles ORDER BY id DESC LIMIT ?", (limit,))
        return [cast(RemCycleRow, dict(r)) for r in rows]
