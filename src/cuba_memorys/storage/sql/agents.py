"""What agents read at the start of a turn (cuba_contexto), shared by both backends.

One query shape serves the three recall legs (written in this session, about entities the
working memory names, most important in the project): live, trusted observations in the
caller's scope, cut to their first 240 characters in SQL so a large row never leaves the
database whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from cuba_memorys.models import Scope
from cuba_memorys.storage.agent_rows import RecallRow
from cuba_memorys.storage.sql.common import SqlBase, marks, scope_sql

SNIPPET_CHARS = 240


class SqlAgents(SqlBase):
    """Mixed into SqlStore."""

    def recall_observations(self, scope: Scope, limit: int, *, session_id: str | None = None,
                            entity_ids: Sequence[str] = (), newest: bool = False) -> list[RecallRow]:
        """Live (not superseded), trusted observations visible in ``scope``: of that session
        and/or of those entities when given; most important first, or newest first."""
        cond, params = scope_sql(scope, "o.project_id")
        where = ["o.observation_type != 'superseded'", "o.trust = 'trusted'", cond]
        if session_id is not None:
            where.append("o.session_id = ?")
            params.append(session_id)
        if entity_ids:
            where.append(f"o.entity_id IN ({marks(entity_ids)})")
            params.extend(entity_ids)
        order = "o.created_at DESC, o.seq DESC" if newest else "o.importance DESC, o.seq DESC"
        rows = self._q(f"SELECT o.id, e.name AS entity, substr(o.content, 1, {SNIPPET_CHARS}) AS snippet,"
                       " o.importance FROM observations o JOIN entities e ON e.id = o.entity_id"
                       f" WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?", (*params, limit))
        return [cast(RecallRow, {"id": r["id"], "entity": r["entity"], "snippet": r["snippet"],
                                 "importance": float(r["importance"])}) for r in rows]
