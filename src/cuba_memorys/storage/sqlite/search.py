"""Search primitives only the SQLite store has: FTS5 matching and the in-memory vector index.

The filters, the text and structured branches and result rows are shared with PostgreSQL
(:mod:`sql_search`); this module adds how SQLite finds lexical matches (FTS5's BM25) and
nearest vectors (the exact numpy index with its HNSW accelerator).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cuba_memorys.models import Hit, SearchFilter
from cuba_memorys.storage.sql.search import KINDS, Kind, SqlSearch
from cuba_memorys.storage.sqlite.db import SqliteDatabase

# Over-fetch factor for vector search before SQL filters are applied: exact scores are
# cheap, so a wide net keeps filtered searches from coming back short.
_VECTOR_OVERFETCH = 8


# How many FTS-ranked rowids the ranking step keeps for a request of ``limit`` rows when the
# filters removed some of the first ``limit``: a little more than asked, since the usual
# filters (visible, in scope, embedded) rarely remove any; when they remove too many, the full
# query answers.
def _fts_wide(limit: int) -> int:
    return limit + limit // 2 + 10


def _match_expression(column: str, terms: Sequence[str]) -> str | None:
    unique = list(dict.fromkeys(t for t in terms if t))
    if not unique:
        return None
    quoted = " OR ".join('"' + t.replace('"', '""') + '"' for t in unique)
    return f"{column} : ({quoted})"


class SqliteSearchMixin(SqlSearch):
    # Set by SqliteStore.__init__.
    db: SqliteDatabase
    vectors: dict
    _seen_version: int

    def _json_elements(self, column: str) -> str:
        return f"json_each({column})"

    def _phrase_condition(self, kind: str) -> str:
        # The FTS `raw` column already holds the row's folded words, so a padded instr() is a
        # whole-word, case- and accent-insensitive phrase test with no second copy of the text.
        return (f"instr(' ' || (SELECT raw FROM {KINDS[kind].table}_fts WHERE rowid = x.seq)"
                " || ' ', ?) > 0")

    def _fts_match(self, kind: str, column: str, terms: Sequence[str], limit: int,
                   flt: SearchFilter) -> list:
        """Rows of ``kind`` whose FTS ``column`` matches any term, best BM25 first, with
        ``rank`` (positive: higher is better), ``body`` and ``importance``.

        Two steps, same answer as one joined query: the FTS table alone ranks its matches
        and keeps the best ``limit`` rowids (common words match tens of thousands of rows at
        100k; joining and filtering every one of them before the sort cost more than the
        ranking), then only those are joined and filtered. The usual filters remove none of
        them (and the first ``limit`` of a longer ranked list are the same rows in the same
        order: the sort breaks ties by scan order); when they remove some, the best
        ``_fts_wide(limit)`` are ranked, joined and filtered instead. If the filter leaves
        fewer than ``limit`` of those while more matches exist, the full joined query answers
        instead, so a restrictive filter never comes back short."""
        match = _match_expression(column, terms)
        if match is None:
            return []
        spec = KINDS[kind]
        weights = "1.0, 0.0" if column == "raw" else "0.0, 1.0"
        cond, params = self._filters(kind, flt)
        # Sorted by the selected column: bm25() is computed once per match, not again for the
        # kept rows; ties keep the scan order either way (the sorter's sequence number).
        ranked = (f"SELECT rowid, bm25({spec.table}_fts, {weights}) AS r FROM {spec.table}_fts"
                  f" WHERE {spec.table}_fts MATCH ? ORDER BY r LIMIT ?")
        top = self._q(ranked, (match, limit))
        if not top:
            return []
        rows = self._joined(spec, [seq for seq, _ in top], cond, params)
        if len(rows) < limit and len(top) == limit:  # the filter removed some, and more may match
            wide = _fts_wide(limit)
            top = self._q(ranked, (match, wide))
            rows = self._joined(spec, [seq for seq, _ in top], cond, params)  # (rare: no reuse)
            if len(rows) < limit and len(top) == wide:
                return self._q(
                    f"SELECT x.id, -bm25({spec.table}_fts, {weights}) AS rank, {spec.text} AS body,"
                    f" {spec.importance} AS importance FROM {spec.table}_fts f"
                    f" JOIN {spec.table} x ON x.seq = f.rowid {spec.join}"
                    f" WHERE {spec.table}_fts MATCH ? AND {cond} ORDER BY bm25({spec.table}_fts, {weights})"
                    " LIMIT ?", (match, *params, limit))
        order = {seq: (pos, -r) for pos, (seq, r) in enumerate(top)}
        rows = sorted(rows, key=lambda r: order[r["seq"]][0])[:limit]
        return [{"id": r["id"], "rank": order[r["seq"]][1], "body": r["body"], "importance": r["importance"]}
                for r in rows]

    def _joined(self, spec: Kind, seqs: list[int], cond: str, params: list) -> list:
        """The rows of ``seqs`` (FTS rowids) that pass the filter ``cond``, in no order."""
        if not seqs:
            return []
        return self._q(
            f"SELECT x.seq, x.id, {spec.text} AS body, {spec.importance} AS importance"
            f" FROM {spec.table} x {spec.join} WHERE x.seq IN ({','.join('?' * len(seqs))}) AND {cond}",
            (*seqs, *params))

    # -- vectors ------------------------------------------------------------------------
    def vector_candidates(self, kind: str, query_vec: np.ndarray, limit: int,
                          flt: SearchFilter) -> list[Hit]:
        index = self.vectors.get(kind)
        if index is None:
            return []
        self.refresh_vectors()  # first: another process may have written the first rows
        if len(index) == 0:
            return []
        # Nets of 2x, then 8x the limit: the usual filters remove few rows, and a smaller net
        # is cheaper to check in SQL (and to search when the HNSW accelerator is on).
        for net in (2 * limit, limit * _VECTOR_OVERFETCH):
            wide = index.search(query_vec, net)
            ids = self._allowed_ids(kind, [k for k, _ in wide], limit, flt)
            hits = [(k, s) for k, s in wide if k in ids]
            if len(hits) >= limit or len(wide) >= len(index):
                break
        if len(hits) < limit and len(wide) < len(index):
            # The filter removed too much of the wide net: score every visible row instead.
            every = self._visible_seqs(kind, flt)
            scored = index.score(query_vec, list(every))
            hits = sorted(scored.items(), key=lambda kv: kv[1], reverse=True)
            ids = self._ids_for_seqs(kind, [k for k, _ in hits[:limit]])
        return [Hit(kind, ids[k], s) for k, s in hits[:limit] if k in ids]

    def _allowed_ids(self, kind: str, seqs: list[int], limit: int, flt: SearchFilter) -> dict[int, str]:
        """The ids of the ``seqs`` (best first) that pass the filter, enough of them to pick the
        best ``limit``: the first ``limit`` are checked, and the rest only when the filter
        removed some of those (the usual filters remove none, so half the net is never read)."""
        ids = self._passing(kind, seqs[:limit], flt)
        if len(ids) < limit and len(seqs) > limit:
            ids.update(self._passing(kind, seqs[limit:], flt))
        return ids

    def _passing(self, kind: str, seqs: list[int], flt: SearchFilter) -> dict[int, str]:
        if not seqs:
            return {}
        cond, params = self._filters(kind, flt)
        rows = self._q(f"SELECT x.seq, x.id FROM {KINDS[kind].table} x WHERE {cond}"
                       f" AND x.seq IN ({','.join('?' * len(seqs))})", [*params, *seqs])
        return {r[0]: r[1] for r in rows}

    def _visible_seqs(self, kind: str, flt: SearchFilter) -> set[int]:
        """Every row of ``kind`` the filter lets through (the exact fallback's candidates)."""
        cond, params = self._filters(kind, flt)
        return {r[0] for r in self._q(f"SELECT x.seq FROM {KINDS[kind].table} x WHERE {cond}", params)}

    def _drop_vectors(self, kind: str, seqs: list[int]) -> None:
        index = self.vectors.get(kind)
        if index is not None:
            for seq in seqs:
                index.remove(seq)

    def refresh_vectors(self, force: bool = False) -> None:
        """Bring the in-memory indexes in line with the stored embeddings.

        Cheap when nothing changed: `PRAGMA data_version` moves only when another
        connection (another process) commits. Then the (seq, revision) lists are compared
        and only changed rows are loaded.
        """
        if not self.vectors:
            return
        version = self.db.data_version()
        if not force and version == self._seen_version:
            return
        with self.db.held():
            for kind, table in (("observation", "observations"), ("episode", "episodes")):
                self._sync_index(self.vectors[kind], table)
            self._seen_version = version

    def _sync_index(self, index, table: str) -> None:
        stored = {r[0]: r[1] for r in self._q(
            f"SELECT seq, embedding_rev FROM {table} WHERE embedding IS NOT NULL")}
        known = index.revisions()
        for seq in set(known) - set(stored):
            index.remove(seq)
        changed = [seq for seq, rev in stored.items() if known.get(seq) != rev]
        for start in range(0, len(changed), 500):
            chunk = changed[start:start + 500]
            rows = self._q(f"SELECT seq, embedding, embedding_rev FROM {table}"
                           f" WHERE seq IN ({','.join('?' * len(chunk))})", chunk)
            for seq, blob, rev in rows:
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape == (index.dim,):
                    index.upsert(seq, vec, rev)
