"""Shared SQL of whole-row snapshots and their restore: what undo files are made of.

A snapshot is every column of a row as JSON values, the embedding as base64 of its float32
bytes. The lexical index material (PostgreSQL's ``lex_*``/``tsv_*`` columns, SQLite's FTS5
rows) is derived from the text, so it is left out and rebuilt on restore through the same
hooks a write uses; the vector indexes are told after the commit, as for any write.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cuba_memorys.errors import StorageError
from cuba_memorys.models import iso, utc_now
from cuba_memorys.storage.sql.common import EMBEDDED_TABLES, INTERNAL_COLUMNS, LEXICAL_SOURCES, SqlBase, marks

# The tables an undo file may hold, parents before children (the order rows are restored in),
# each with its primary key; fact_supersedes has none and is restored row for row.
UNDO_TABLES: dict[str, str | None] = {
    "projects": "id", "entities": "id", "observations": "id", "episodes": "id", "errors": "id", "relations": "id",
    "facts": "fact_id", "fact_supersedes": None, "entity_aliases": "alias_id", "procedures": "id",
    "observation_anchors": "id",
}
VECTOR_COLUMN = "embedding"
DERIVED_COLUMNS = frozenset(INTERNAL_COLUMNS) - {VECTOR_COLUMN}  # rebuilt from the text on restore
_KIND_OF = {table: kind for kind, table in EMBEDDED_TABLES.items()}
_CHUNK = 500  # ids per IN list


class SqlUndo(SqlBase):
    """Mixed into SqlStore."""

    def snapshot_rows(self, table: str, key: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        self._undo_checked(table, key)
        rows: list[dict[str, Any]] = []
        for start in range(0, len(values), _CHUNK):
            chunk = list(values[start:start + _CHUNK])
            found = self._q(f"SELECT * FROM {table} WHERE {key} IN ({marks(chunk)})", chunk)
            rows.extend(self._encoded(dict(r)) for r in found)
        return rows

    def restore_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> int:
        """Put each row back as it was: inserted when its key is absent, else every column
        overwritten (but ``seq``, which keys the indexes). A ``seq`` another row took since is
        left for the database to assign anew."""
        pk = self._undo_checked(table, None)
        with self.transaction():
            for row in rows:
                values = self._decoded(table, row)
                if pk is None:
                    self._restore_keyless(table, values)
                else:
                    self._restore_keyed(table, pk, values)
            if table in _KIND_OF and rows:
                self._after_commit(self._vectors_reloaded)
        return len(rows)

    def remove_rows(self, table: str, key: str, values: Sequence[Any]) -> int:
        self._undo_checked(table, key)
        removed = 0
        with self.transaction():
            for start in range(0, len(values), _CHUNK):
                chunk = list(values[start:start + _CHUNK])
                where = f"{key} IN ({marks(chunk)})"
                kind = _KIND_OF.get(table)
                seqs = self._seqs_of(table, where, chunk) if kind else []
                removed += self._exec(f"DELETE FROM {table} WHERE {where}", chunk).rowcount
                if kind:
                    self._after_commit(self._dropper(kind, seqs))
            if table == "entities" and removed:  # their observations and episodes went by cascade
                self._after_commit(self._vectors_reloaded)
        return removed

    # -- helpers ------------------------------------------------------------------------
    def _dropper(self, kind: str, seqs: list[int]) -> Callable[[], None]:
        return lambda: self._vectors_dropped(kind, seqs)

    def _undo_checked(self, table: str, key: str | None) -> str | None:
        """The table's primary key, after refusing a table or key column undo does not know
        (names go into SQL text, so only real ones pass)."""
        if table not in UNDO_TABLES:
            raise StorageError(f"undo: '{table}' is not a table undo files may hold"
                               f" ({', '.join(UNDO_TABLES)})")
        if key is not None and key not in self._table_columns(table):
            raise StorageError(f"undo: '{key}' is not a column of {table}")
        return UNDO_TABLES[table]

    def _table_columns(self, table: str) -> frozenset[str]:
        cache: dict[str, frozenset[str]] = self.__dict__.setdefault("_undo_columns", {})  # the schema is fixed
        if table not in cache:
            if self.backend == "postgresql":
                rows = self._q("SELECT column_name FROM information_schema.columns"
                               " WHERE table_schema = current_schema() AND table_name = ?", (table,))
            else:
                rows = self._q("SELECT name FROM pragma_table_info(?)", (table,))
            cache[table] = frozenset(r[0] for r in rows) - DERIVED_COLUMNS
        return cache[table]

    def _encoded(self, row: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in row.items() if k not in DERIVED_COLUMNS}
        vector = out.get(VECTOR_COLUMN)
        if vector is not None:
            blob = bytes(vector) if isinstance(vector, (bytes, memoryview)) else \
                np.asarray(self._vector_value(vector), dtype=np.float32).tobytes()
            out[VECTOR_COLUMN] = base64.b64encode(blob).decode("ascii")
        return out

    def _decoded(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        unknown = set(row) - self._table_columns(table)
        if unknown:
            raise StorageError(f"undo: {table} has no column {', '.join(sorted(unknown))}")
        values = dict(row)
        vector = values.get(VECTOR_COLUMN)
        if vector is not None:
            try:
                values[VECTOR_COLUMN] = self._vector_param(base64.b64decode(vector, validate=True))
            except (TypeError, ValueError) as exc:
                raise StorageError(f"undo: an embedding of {table} is not base64: {exc}") from exc
        return values

    def _restore_keyed(self, table: str, pk: str, values: dict[str, Any]) -> None:
        if pk not in values:
            raise StorageError(f"undo: a row of {table} has no {pk}")
        current = self._one(f"SELECT * FROM {table} WHERE {pk} = ?", (values[pk],))
        if current is not None:
            values = _moved_forward(table, dict(current), values)
            changed = [c for c in values if c not in (pk, "seq")]
            if changed:
                self._exec(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in changed)} WHERE {pk} = ?",
                           [*(values[c] for c in changed), values[pk]])
        else:
            if "seq" in values:
                taken = self._one(f"SELECT {pk} FROM {table} WHERE seq = ?", (values["seq"],))
                if taken is not None:
                    values = {k: v for k, v in values.items() if k != "seq"}
            columns = list(values)
            self._exec(f"INSERT INTO {table}({', '.join(columns)}) VALUES ({marks(columns)})",
                       [values[c] for c in columns])
        if table in LEXICAL_SOURCES:
            row = self._one(f"SELECT seq, {LEXICAL_SOURCES[table]} FROM {table} WHERE {pk} = ?", (values[pk],))
            self._index_text(table, row[0], row[1])

    def _restore_keyless(self, table: str, values: dict[str, Any]) -> None:
        """A row with no key is inserted unless an identical one is there."""
        columns = sorted(values)
        same = " AND ".join(f"coalesce({c}, '') = coalesce(?, '')" for c in columns)
        if self._one(f"SELECT 1 FROM {table} WHERE {same}", [values[c] for c in columns]) is None:
            self._exec(f"INSERT INTO {table}({', '.join(columns)}) VALUES ({marks(columns)})",
                       [values[c] for c in columns])


# The columns whose change is a change of meaning (the clock discipline of docs/memory-model.md).
MEANING = ("content", "observation_type", "trust", "evidence", "tags")


def _moved_forward(table: str, current: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """An observation put back over a live row (undoing a merge or a summary) changes its meaning
    again: its clock moves forward (updated_at now, the next version), never back to the
    snapshot's, so a machine that synced the superseded state sees the undo as the newer change."""
    if table != "observations" or all(current.get(c) == values.get(c) for c in MEANING if c in values):
        return values
    return {**values, "updated_at": iso(utc_now()), "version": int(current.get("version") or 1) + 1}
