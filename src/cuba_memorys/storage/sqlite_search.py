"""Search primitives of the SQLite store: one ranked candidate list per branch and row kind.

Fusion, routing and formatting happen in the search layer; here each branch only answers
"which rows, in what order, with what score" under the caller's filters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..models import Hit, SearchFilter
from ..text import STOPWORDS, trigrams, words


@dataclass(frozen=True)
class _Kind:
    table: str
    join: str
    visible: str  # rows a search may ever return
    text: str  # SQL expression of the row's searchable text
    importance: str


_KINDS = {
    "observation": _Kind("observations", "JOIN entities e ON e.id = x.entity_id",
                         "x.trust = 'trusted' AND x.observation_type != 'superseded'",
                         "x.content", "x.importance"),
    "entity": _Kind("entities", "", "1", "x.name || ' ' || x.entity_type", "x.importance"),
    "episode": _Kind("episodes", "JOIN entities e ON e.id = x.entity_id", "x.trust = 'trusted'",
                     "x.content", "x.importance"),
    "error": _Kind("errors", "", "x.trust = 'trusted'", "x.error_type || ' ' || x.error_message",
                   "min(1.0, 0.5 + 0.1 * x.synapse_weight)"),
}

# Over-fetch factor for vector search before SQL filters are applied: exact scores are
# cheap, so a wide net keeps filtered searches from coming back short.
_VECTOR_OVERFETCH = 8
# How many FTS-ranked rowids the ranking step keeps for a request of ``limit`` rows, before
# the join and the filters: a little more than asked, since the usual filters (visible, in
# scope, embedded) rarely remove any; when they remove too many, the full query answers.
def _fts_wide(limit: int) -> int:
    return limit + limit // 2 + 10


def _match_expression(column: str, terms: Sequence[str]) -> str | None:
    unique = list(dict.fromkeys(t for t in terms if t))
    if not unique:
        return None
    quoted = " OR ".join('"' + t.replace('"', '""') + '"' for t in unique)
    return f"{column} : ({quoted})"


def _squash(x: float) -> float:
    """Map an unbounded positive relevance (FTS5's negated bm25) into 0..1."""
    return x / (1.0 + x) if x > 0 else 0.0


def _admits_kind(kind: str, flt: SearchFilter) -> bool:
    """False when a set filter field rules out every row of ``kind`` (see SearchFilter)."""
    if flt.kinds and kind not in flt.kinds:
        return False
    if (flt.observation_types or flt.any_tags) and kind != "observation":
        return False
    if flt.entity_names and kind == "error":
        return False
    return not (flt.session_id and kind == "entity")


def _marks(values: Sequence) -> str:
    return ",".join("?" * len(values))


def _narrow(kind: str, flt: SearchFilter, parts: list[str], params: list) -> None:
    """Append the SearchFilter's structured conditions for a kind it admits (alias ``x``)."""
    if flt.entity_names:
        names = _marks(flt.entity_names)
        parts.append(f"x.name IN ({names})" if kind == "entity"
                     else f"x.entity_id IN (SELECT id FROM entities WHERE name IN ({names}))")
        params.extend(flt.entity_names)
    if flt.observation_types:
        parts.append(f"x.observation_type IN ({_marks(flt.observation_types)})")
        params.extend(flt.observation_types)
    if flt.any_tags:
        parts.append(f"EXISTS (SELECT 1 FROM json_each(x.tags) WHERE json_each.value IN ({_marks(flt.any_tags)}))")
        params.extend(flt.any_tags)
    if flt.ids or flt.seqs:
        named = [f"x.id IN ({_marks(flt.ids)})"] if flt.ids else []
        named += [f"x.seq IN ({_marks(flt.seqs)})"] if flt.seqs else []
        parts.append("(" + " OR ".join(named) + ")")
        params.extend([*flt.ids, *flt.seqs])
    if flt.session_id:
        parts.append("x.session_id = ?")
        params.append(flt.session_id)
    if not flt.include_pending and kind in ("observation", "episode"):
        parts.append("x.embedding IS NOT NULL")
    for phrase in flt.phrases:
        # The FTS `raw` column already holds the row's folded words, so a padded instr() is a
        # whole-word, case- and accent-insensitive phrase test with no second copy of the text.
        folded = " ".join(words(phrase))
        if folded:
            parts.append(f"instr(' ' || (SELECT raw FROM {_KINDS[kind].table}_fts"
                         " WHERE rowid = x.seq) || ' ', ?) > 0")
            params.append(f" {folded} ")


class SqliteSearchMixin:
    vectors: dict

    def _filters(self, kind: str, flt: SearchFilter) -> tuple[str, list]:
        from .sqlite_store import scope_sql  # the store module imports this one

        spec = _KINDS[kind]
        if not _admits_kind(kind, flt):
            return "0", []
        cond, params = scope_sql(flt.scope, "x.project_id")
        parts = [spec.visible, cond]
        if flt.after:
            parts.append("x.created_at > ?")
            params.append(flt.after)
        if flt.before:
            parts.append("x.created_at < ?")
            params.append(flt.before)
        _narrow(kind, flt, parts, params)
        return " AND ".join(parts), params

    def _fts_match(self, kind: str, column: str, terms: Sequence[str], limit: int,
                   flt: SearchFilter) -> list:
        """Rows of ``kind`` whose FTS ``column`` matches any term, best BM25 first, with
        ``rank`` (positive: higher is better), ``body`` and ``importance``.

        Two steps, same answer as one joined query: the FTS table alone ranks its matches
        and keeps the best ``_fts_wide(limit)`` rowids (common words match tens of
        thousands of rows at 100k; joining and filtering every one of them before the sort
        cost more than the ranking), then only those are joined and filtered. If the filter
        leaves fewer than ``limit`` of them while more matches exist, the full joined query
        answers instead, so a restrictive filter never comes back short."""
        match = _match_expression(column, terms)
        if match is None:
            return []
        spec = _KINDS[kind]
        weights = "1.0, 0.0" if column == "raw" else "0.0, 1.0"
        cond, params = self._filters(kind, flt)
        wide = _fts_wide(limit)
        top = self._q(f"SELECT rowid, -bm25({spec.table}_fts, {weights}) FROM {spec.table}_fts"
                      f" WHERE {spec.table}_fts MATCH ? ORDER BY bm25({spec.table}_fts, {weights})"
                      " LIMIT ?", (match, wide))
        if not top:
            return []
        order = {seq: (pos, rank) for pos, (seq, rank) in enumerate(top)}
        rows = self._q(
            f"SELECT x.seq, x.id, {spec.text} AS body, {spec.importance} AS importance"
            f" FROM {spec.table} x {spec.join} WHERE x.seq IN ({','.join('?' * len(order))}) AND {cond}",
            (*order, *params))
        if len(rows) < limit and len(top) == wide:
            return self._q(
                f"SELECT x.id, -bm25({spec.table}_fts, {weights}) AS rank, {spec.text} AS body,"
                f" {spec.importance} AS importance FROM {spec.table}_fts f"
                f" JOIN {spec.table} x ON x.seq = f.rowid {spec.join}"
                f" WHERE {spec.table}_fts MATCH ? AND {cond} ORDER BY bm25({spec.table}_fts, {weights})"
                " LIMIT ?", (match, *params, limit))
        rows = sorted(rows, key=lambda r: order[r["seq"]][0])[:limit]
        return [{"id": r["id"], "rank": order[r["seq"]][1], "body": r["body"], "importance": r["importance"]}
                for r in rows]

    def text_candidates(self, kind: str, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        """Word match, rescored as (lexical rank + trigram similarity)·0.7 + importance·0.3."""
        terms = words(query)
        rows = self._fts_match(kind, "raw", [t for t in terms if t not in STOPWORDS] or terms,
                               limit * 3, flt)
        query_grams = trigrams(query)  # once, not once per row (trigram_similarity's formula)

        def similarity(body: str) -> float:
            grams = trigrams(body)
            return len(query_grams & grams) / len(query_grams | grams) if query_grams and grams else 0.0

        scored = [
            Hit(kind, r["id"], (_squash(r["rank"]) + similarity(r["body"])) * 0.7 + r["importance"] * 0.3)
            for r in rows
        ]
        scored.sort(key=lambda h: h.score, reverse=True)
        return scored[:limit]

    def bm25_candidates(self, kind: str, terms: list[str], limit: int, flt: SearchFilter) -> list[Hit]:
        return [Hit(kind, r["id"], float(r["rank"])) for r in self._fts_match(kind, "stem", terms, limit, flt)]

    def tag_candidates(self, tags: Sequence[str], limit: int, flt: SearchFilter) -> list[Hit]:
        """Observations carrying any of ``tags``, most important first. With no tags, the
        structured channel on its own: rows of every kind ``flt`` admits, newest first (a
        search by filters alone has no text to rank by)."""
        if not tags:
            return self._listed(limit, flt)
        cond, params = self._filters("observation", flt)
        marks = ",".join("?" * len(tags))
        rows = self._q(
            f"SELECT x.id, x.importance FROM observations x WHERE {cond} AND EXISTS"
            f" (SELECT 1 FROM json_each(x.tags) WHERE json_each.value IN ({marks}))"
            " ORDER BY x.importance DESC, x.created_at DESC LIMIT ?", (*params, *tags, limit))
        return [Hit("observation", r["id"], float(r["importance"])) for r in rows]

    def _listed(self, limit: int, flt: SearchFilter) -> list[Hit]:
        """Newest ``limit`` rows over the kinds ``flt`` admits, scored by importance."""
        found: list[tuple[str, int, Hit]] = []
        for kind, spec in _KINDS.items():
            cond, params = self._filters(kind, flt)
            if cond == "0":
                continue
            rows = self._q(f"SELECT x.id, x.seq, x.created_at, {spec.importance} AS importance"
                           f" FROM {spec.table} x WHERE {cond}"
                           " ORDER BY x.created_at DESC, x.seq DESC LIMIT ?", (*params, limit))
            found += [(r["created_at"], r["seq"], Hit(kind, r["id"], float(r["importance"]))) for r in rows]
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [hit for _, _, hit in found[:limit]]

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
            allowed = self._allowed_seqs(kind, [k for k, _ in wide], flt)
            hits = [(k, s) for k, s in wide if k in allowed]
            if len(hits) >= limit or len(wide) >= len(index):
                break
        if len(hits) < limit and len(wide) < len(index):
            # The filter removed too much of the wide net: score every visible row instead.
            every = self._allowed_seqs(kind, None, flt)
            scored = index.score(query_vec, list(every))
            hits = sorted(scored.items(), key=lambda kv: kv[1], reverse=True)
        ids = self._ids_for_seqs(kind, [k for k, _ in hits[:limit]])
        return [Hit(kind, ids[k], s) for k, s in hits[:limit] if k in ids]

    def _allowed_seqs(self, kind: str, seqs: list[int] | None, flt: SearchFilter) -> set[int]:
        spec = _KINDS[kind]
        cond, params = self._filters(kind, flt)
        sql = f"SELECT x.seq FROM {spec.table} x WHERE {cond}"
        if seqs is not None:
            if not seqs:
                return set()
            sql += f" AND x.seq IN ({','.join('?' * len(seqs))})"
            params = [*params, *seqs]
        return {r[0] for r in self._q(sql, params)}

    def _ids_for_seqs(self, kind: str, seqs: list[int]) -> dict[int, str]:
        if not seqs:
            return {}
        table = _KINDS[kind].table
        rows = self._q(f"SELECT seq, id FROM {table} WHERE seq IN ({','.join('?' * len(seqs))})", seqs)
        return {r[0]: r[1] for r in rows}

    def _vector_keys_of(self, table: str, where: str, params: list) -> list[int]:
        return [r[0] for r in self._q(f"SELECT seq FROM {table} WHERE {where}", params)]

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
        with self.db.lock:
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

    def adjacent_observations(self, ids: Sequence[str], flt: SearchFilter) -> dict[str, list[str]]:
        """For each observation id: the visible observations written just before and just after
        it on the same entity (by write order), under the same filters as search."""
        if not ids:
            return {}
        cond, params = self._filters("observation", flt)
        marks = ",".join("?" * len(ids))
        neighbour = (f"SELECT x.id FROM observations x WHERE x.entity_id = o.entity_id AND {cond}"
                     " AND x.seq {op} o.seq ORDER BY x.seq {order} LIMIT 1")
        rows = self._q(
            f"SELECT o.id, ({neighbour.format(op='<', order='DESC')}) AS before,"
            f" ({neighbour.format(op='>', order='ASC')}) AS after"
            f" FROM observations o WHERE o.id IN ({marks})", [*params, *params, *ids])
        return {r["id"]: [n for n in (r["before"], r["after"]) if n] for r in rows}

    def created_times(self, kind: str, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        table = _KINDS[kind].table
        rows = self._q(f"SELECT id, created_at FROM {table} WHERE id IN ({','.join('?' * len(ids))})", list(ids))
        return {r[0]: r[1] for r in rows}

    # -- rows for results ---------------------------------------------------------------
    def fetch_rows(self, kind: str, ids: Sequence[str]) -> dict[str, dict]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        if kind == "observation":
            sql = ("SELECT x.*, e.name AS entity_name, e.id AS entity_id FROM observations x"
                   f" JOIN entities e ON e.id = x.entity_id WHERE x.id IN ({marks})")
        elif kind == "episode":
            sql = ("SELECT x.*, e.name AS entity_name FROM episodes x"
                   f" JOIN entities e ON e.id = x.entity_id WHERE x.id IN ({marks})")
        else:
            sql = f"SELECT x.* FROM {_KINDS[kind].table} x WHERE x.id IN ({marks})"
        out = {}
        for row in self._q(sql, list(ids)):
            data = dict(row)
            data.pop("embedding", None)
            for key in ("tags", "previous_versions", "actors", "artifacts", "context"):
                if key in data and isinstance(data[key], str):
                    data[key] = json.loads(data[key])
            out[data["id"]] = data
        return out
