"""Observations anchored to code (issue 19), both backends: the anchors of some observations,
the anchors on some paths (a diff's files), every anchor of a scope (``anchors check``), and the
two writes a check makes: moving an anchor to where its text now is, and recording a status.

An anchor is read through its observation's id (already checked against the caller's scope) or
with the scope's condition on its own project_id, which is its observation's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from cuba_memorys.models import Scope, SearchFilter
from cuba_memorys.storage.anchor_rows import AnchorRow, AnchorStatus
from cuba_memorys.storage.sql.common import SqlBase, marks, scope_sql

ANCHOR_COLUMNS = ("id", "observation_id", "project_id", "repo_root", "commit_sha", "path", "symbol",
                  "line_start", "line_end", "span_hash", "created_at", "updated_at", "status",
                  "status_checked_at", "changed_since")
# What re-anchoring may change (moved text, `cuba_eco correct` at HEAD); never the observation.
MOVABLE_COLUMNS = ("repo_root", "commit_sha", "path", "symbol", "line_start", "line_end", "span_hash",
                   "updated_at", "status", "status_checked_at", "changed_since")
_CHUNK = 500  # ids per IN list


def _row(row: Any) -> AnchorRow:
    return cast(AnchorRow, {c: row[c] for c in ANCHOR_COLUMNS})


class SqlAnchors(SqlBase):
    """Mixed into SqlStore."""

    def add_anchors(self, anchors: Sequence[AnchorRow]) -> int:
        for anchor in anchors:
            values = [anchor[c] for c in ANCHOR_COLUMNS]  # type: ignore[literal-required]
            self._exec(f"INSERT INTO observation_anchors({', '.join(ANCHOR_COLUMNS)})"
                       f" VALUES ({marks(values)})", values)
        return len(anchors)

    def anchors_of(self, observation_ids: Sequence[str]) -> dict[str, list[AnchorRow]]:
        """Each observation's anchors, oldest first; observations without any are absent."""
        out: dict[str, list[AnchorRow]] = {}
        ids = list(dict.fromkeys(observation_ids))
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            rows = self._q(f"SELECT {', '.join(ANCHOR_COLUMNS)} FROM observation_anchors"
                           f" WHERE observation_id IN ({marks(chunk)})"
                           " ORDER BY created_at, path, line_start, id", chunk)
            for row in rows:
                out.setdefault(row["observation_id"], []).append(_row(row))
        return out

    def anchors_on_paths(self, paths: Sequence[str], scope: Scope, limit: int, repo_root: str | None = None,
                         flt: SearchFilter | None = None) -> list[AnchorRow]:
        """Anchors of ``scope`` on any of ``paths`` (relative posix paths), newest first.

        ``repo_root``: only anchors into that repository (a relative path names a different
        file in another one). ``flt``: only anchors of observations the search's filter admits,
        applied exactly as the search's branches apply it (scope, after/before, as_of, types,
        entities, session, live and trusted rows), with one addition: the filter's ``tags``,
        which only lift tagged rows in a search, are a constraint here, since these rows join the
        answer for their anchors, not for their text: a tags argument keeps untagged ones out.
        """
        paths = list(dict.fromkeys(paths))[:_CHUNK]
        if not paths:
            return []
        where = [f"a.path IN ({marks(paths)})"]
        params: list[Any] = list(paths)
        if repo_root is not None:
            where.append("a.repo_root = ?")
            params.append(repo_root)
        if flt is None:
            cond, scope_params = scope_sql(scope, "a.project_id")
            where.append(cond)
            params.extend(scope_params)
            source = "observation_anchors a"
        else:
            if flt.tags and not flt.any_tags:
                flt = replace(flt, any_tags=flt.tags)
            # the search half of the store (storage/sql/search.py), mixed into the same class
            cond, filter_params = cast(Any, self)._filters("observation", replace(flt, scope=scope))
            where.append(cond)
            params.extend(filter_params)
            source = "observation_anchors a JOIN observations x ON x.id = a.observation_id"
        columns = ", ".join(f"a.{c}" for c in ANCHOR_COLUMNS)
        rows = self._q(f"SELECT {columns} FROM {source} WHERE {' AND '.join(where)}"
                       " ORDER BY a.created_at DESC, a.id LIMIT ?", (*params, limit))
        return [_row(r) for r in rows]

    def anchors_in_scope(self, scope: Scope, limit: int) -> list[AnchorRow]:
        """Every anchor of ``scope`` (of live observations), by path then line."""
        cond, params = scope_sql(scope, "a.project_id")
        columns = ", ".join(f"a.{c}" for c in ANCHOR_COLUMNS)
        rows = self._q(f"SELECT {columns} FROM observation_anchors a JOIN observations o ON o.id = a.observation_id"
                       f" WHERE {cond} AND o.observation_type <> 'superseded'"
                       " ORDER BY a.path, a.line_start, a.id LIMIT ?",
                       (*params, limit))
        return [_row(r) for r in rows]

    def recorded_stale_anchors(self, scope: Scope) -> dict[str, Any]:
        """What the last recorded check (``anchors check --record``, the post-commit hook, the
        consolidation cycle) found stale in ``scope``, without reading the repository: the number
        of live memories whose code changed or is missing, and when that check ran."""
        cond, params = scope_sql(scope, "a.project_id")
        row = self._one("SELECT COUNT(DISTINCT a.observation_id) AS n, MAX(a.status_checked_at) AS checked_at"
                        " FROM observation_anchors a JOIN observations o ON o.id = a.observation_id"
                        f" WHERE {cond} AND o.observation_type <> 'superseded'"
                        " AND a.status IN ('changed', 'missing')", params)
        return {"count": int(row["n"] or 0), "checked_at": row["checked_at"]}

    def move_anchor(self, anchor_id: str, values: dict[str, Any]) -> bool:
        """Re-anchor: set the MOVABLE_COLUMNS given in ``values``."""
        unknown = set(values) - set(MOVABLE_COLUMNS)
        if unknown:
            raise ValueError(f"not a movable anchor column: {sorted(unknown)}")
        if not values:
            return False
        sets = ", ".join(f"{c} = ?" for c in values)
        return self._exec(f"UPDATE observation_anchors SET {sets} WHERE id = ?",
                          (*values.values(), anchor_id)).rowcount > 0

    def record_anchor_statuses(self, statuses: Sequence[AnchorStatus]) -> int:
        changed = 0
        for s in statuses:
            changed += self._exec("UPDATE observation_anchors SET status = ?, changed_since = ?,"
                                  " status_checked_at = ? WHERE id = ?",
                                  (s["status"], s["changed_since"], s["checked_at"], s["id"])).rowcount
        return changed
