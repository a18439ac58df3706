"""Search primitives both backends share: filters, the text and structured branches, rows.

Fusion, routing and formatting happen in the search layer; here each branch only answers
"which rows, in what order, with what score" under the caller's filters. A backend supplies
its lexical match (``_fts_match``: FTS5 or tsvector) and its vector search; everything a
filter means is written here once, so both backends filter identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cuba_memorys.models import Hit, SearchFilter
from cuba_memorys.storage.sql.common import (
    SqlBase,
    json_value,
    marks,
    scope_sql,
    without_internal,
)
from cuba_memorys.text import STOPWORDS, trigrams, words

NOTHING = "1 = 0"  # the condition of a kind a filter rules out


@dataclass(frozen=True)
class Kind:
    table: str
    join: str
    visible: str  # rows a search may ever return
    text: str  # SQL expression of the row's searchable text
    importance: str


KINDS = {
    "observation": Kind("observations", "JOIN entities e ON e.id = x.entity_id",
                        "x.trust = 'trusted' AND x.observation_type != 'superseded'",
                        "x.content", "x.importance"),
    "entity": Kind("entities", "", "1 = 1", "x.name || ' ' || x.entity_type", "x.importance"),
    "episode": Kind("episodes", "JOIN entities e ON e.id = x.entity_id", "x.trust = 'trusted'",
                    "x.content", "x.importance"),
    "error": Kind("errors", "", "x.trust = 'trusted'", "x.error_type || ' ' || x.error_message",
                  "least(1.0, 0.5 + 0.1 * x.synapse_weight)"),
}


def squash(x: float) -> float:
    """Map an unbounded positive lexical relevance into 0..1."""
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


class SqlSearch(SqlBase):
    """The shared half of the search primitives (see the module docstring)."""

    # -- backend hooks ------------------------------------------------------------------
    def _json_elements(self, column: str) -> str:
        """A FROM item yielding the elements of a JSON array column as ``json_each.value``."""
        raise NotImplementedError

    def _phrase_condition(self, kind: str) -> str:
        """SQL true when the row's folded words contain ``?`` (a padded folded phrase)."""
        raise NotImplementedError

    def _fts_match(self, kind: str, column: str, terms: Sequence[str], limit: int,
                   flt: SearchFilter) -> list[dict]:
        """Rows matching any term in the ``raw`` or ``stem`` lexical column, best first, as
        dicts with ``id``, ``rank`` (positive, higher is better), ``body``, ``importance``."""
        raise NotImplementedError

    # -- filters ------------------------------------------------------------------------
    def _filters(self, kind: str, flt: SearchFilter) -> tuple[str, list]:
        spec = KINDS[kind]
        if not _admits_kind(kind, flt):
            return NOTHING, []
        cond, params = scope_sql(flt.scope, "x.project_id")
        parts = [spec.visible, cond]
        if flt.as_of:  # its parameters come first, as its condition does
            visible_params: list = []
            parts[0] = self._visible_as_of(kind, flt.as_of, visible_params)
            params = visible_params + params
        if flt.after:
            parts.append("x.created_at > ?")
            params.append(flt.after)
        if flt.before:
            parts.append("x.created_at < ?")
            params.append(flt.before)
        self._narrow(kind, flt, parts, params)
        return " AND ".join(parts), params

    def _visible_as_of(self, kind: str, as_of: str, params: list) -> str:
        """Rows visible at ``as_of``: written by then; an observation when one of its facts was
        valid then, or, having no fact (written with CUBA_BITEMPORAL off), when it is live now."""
        if kind != "observation":
            params.append(as_of)
            return f"{KINDS[kind].visible} AND x.created_at <= ?"
        params.extend([as_of, as_of, as_of])
        return ("x.trust = 'trusted' AND x.created_at <= ? AND (EXISTS (SELECT 1 FROM facts f"
                " WHERE f.observation_id = x.id AND f.valid_from <= ? AND (f.valid_to IS NULL OR f.valid_to > ?))"
                " OR (x.observation_type != 'superseded'"
                " AND NOT EXISTS (SELECT 1 FROM facts f WHERE f.observation_id = x.id)))")

    def _narrow(self, kind: str, flt: SearchFilter, parts: list[str], params: list) -> None:
        """Append the SearchFilter's structured conditions for a kind it admits (alias ``x``)."""
        if flt.entity_names:
            names = marks(flt.entity_names)
            parts.append(f"x.name IN ({names})" if kind == "entity"
                         else f"x.entity_id IN (SELECT id FROM entities WHERE name IN ({names}))")
            params.extend(flt.entity_names)
        if flt.observation_types:
            parts.append(f"x.observation_type IN ({marks(flt.observation_types)})")
            params.extend(flt.observation_types)
        if flt.any_tags:
            parts.append(f"EXISTS (SELECT 1 FROM {self._json_elements('x.tags')}"
                         f" WHERE json_each.value IN ({marks(flt.any_tags)}))")
            params.extend(flt.any_tags)
        if flt.ids or flt.seqs:
            named = [f"x.id IN ({marks(flt.ids)})"] if flt.ids else []
            named += [f"x.seq IN ({marks(flt.seqs)})"] if flt.seqs else []
            parts.append("(" + " OR ".join(named) + ")")
            params.extend([*flt.ids, *flt.seqs])
        if flt.session_id:
            parts.append("x.session_id = ?")
            params.append(flt.session_id)
        if not flt.include_pending and kind in ("observation", "episode"):
            parts.append("x.embedding IS NOT NULL")
        for phrase in flt.phrases:
            folded = " ".join(words(phrase))
            if folded:
                parts.append(self._phrase_condition(kind))
                params.append(f" {folded} ")

    # -- lexical branches ---------------------------------------------------------------
    def text_candidates(self, kind: str, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        """Word match, rescored as (lexical rank + trigram similarity)·0.7 + importance·0.3."""
        terms = words(query)
        rows = self._fts_match(kind, "raw", [t for t in terms if t not in STOPWORDS] or terms,
                               limit * 3, flt)
        query_grams = trigrams(query)  # once, not once per row (trigram_similarity's formula)

        def similarity(body: str) -> float:
            grams = trigrams(body)
            if not query_grams or not grams:
                return 0.0
            shared = len(query_grams & grams)  # |A ∪ B| from the counts: no union set is built
            return shared / (len(query_grams) + len(grams) - shared)

        scored = [
            Hit(kind, r["id"], (squash(r["rank"]) + similarity(r["body"])) * 0.7 + r["importance"] * 0.3)
            for r in rows
        ]
        scored.sort(key=lambda h: h.score, reverse=True)
        return scored[:limit]

    def bm25_candidates(self, kind: str, terms: list[str], limit: int, flt: SearchFilter) -> list[Hit]:
        return [Hit(kind, r["id"], float(r["rank"])) for r in self._fts_match(kind, "stem", terms, limit, flt)]

    # -- the structured channel ---------------------------------------------------------
    def tag_candidates(self, tags: Sequence[str], limit: int, flt: SearchFilter) -> list[Hit]:
        """Observations carrying any of ``tags``, most important first. With no tags, the
        structured channel on its own: rows of every kind ``flt`` admits, newest first (a
        search by filters alone has no text to rank by)."""
        if not tags:
            return self._listed(limit, flt)
        cond, params = self._filters("observation", flt)
        rows = self._q(
            f"SELECT x.id, x.importance FROM observations x WHERE {cond} AND EXISTS"
            f" (SELECT 1 FROM {self._json_elements('x.tags')} WHERE json_each.value IN ({marks(tags)}))"
            " ORDER BY x.importance DESC, x.created_at DESC LIMIT ?", (*params, *tags, limit))
        return [Hit("observation", r["id"], float(r["importance"])) for r in rows]

    def _listed(self, limit: int, flt: SearchFilter) -> list[Hit]:
        """Newest ``limit`` rows over the kinds ``flt`` admits, scored by importance."""
        found: list[tuple[str, int, Hit]] = []
        for kind, spec in KINDS.items():
            cond, params = self._filters(kind, flt)
            if cond == NOTHING:
                continue
            rows = self._q(f"SELECT x.id, x.seq, x.created_at, {spec.importance} AS importance"
                           f" FROM {spec.table} x WHERE {cond}"
                           " ORDER BY x.created_at DESC, x.seq DESC LIMIT ?", (*params, limit))
            found += [(r["created_at"], r["seq"], Hit(kind, r["id"], float(r["importance"]))) for r in rows]
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [hit for _, _, hit in found[:limit]]

    # -- neighbours, times and rows -----------------------------------------------------
    def adjacent_observations(self, ids: Sequence[str], flt: SearchFilter) -> dict[str, list[str]]:
        """For each observation id: the visible observations written just before and just after
        it on the same entity (by write order), under the same filters as search."""
        if not ids:
            return {}
        cond, params = self._filters("observation", flt)
        neighbour = (f"SELECT x.id FROM observations x WHERE x.entity_id = o.entity_id AND {cond}"
                     " AND x.seq {op} o.seq ORDER BY x.seq {order} LIMIT 1")
        rows = self._q(
            f"SELECT o.id, ({neighbour.format(op='<', order='DESC')}) AS before,"
            f" ({neighbour.format(op='>', order='ASC')}) AS after"
            f" FROM observations o WHERE o.id IN ({marks(ids)})", [*params, *params, *ids])
        return {r["id"]: [n for n in (r["before"], r["after"]) if n] for r in rows}

    def created_times(self, kind: str, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        rows = self._q(f"SELECT id, created_at FROM {KINDS[kind].table} WHERE id IN ({marks(ids)})", list(ids))
        return {r[0]: r[1] for r in rows}

    def fetch_rows(self, kind: str, ids: Sequence[str]) -> dict[str, dict]:
        if not ids:
            return {}
        if kind == "observation":
            sql = ("SELECT x.*, e.name AS entity_name, e.id AS entity_id FROM observations x"
                   f" JOIN entities e ON e.id = x.entity_id WHERE x.id IN ({marks(ids)})")
        elif kind == "episode":
            sql = ("SELECT x.*, e.name AS entity_name FROM episodes x"
                   f" JOIN entities e ON e.id = x.entity_id WHERE x.id IN ({marks(ids)})")
        else:
            sql = f"SELECT x.* FROM {KINDS[kind].table} x WHERE x.id IN ({marks(ids)})"
        out = {}
        for row in self._q(sql, list(ids)):
            data = without_internal(row)
            for key in ("tags", "previous_versions", "actors", "artifacts", "context"):
                if key in data:
                    data[key] = json_value(data[key])
            out[data["id"]] = data
        return out

    def _ids_for_seqs(self, kind: str, seqs: list[int]) -> dict[int, str]:
        if not seqs:
            return {}
        rows = self._q(f"SELECT seq, id FROM {KINDS[kind].table} WHERE seq IN ({marks(seqs)})", seqs)
        return {r[0]: r[1] for r in rows}
