"""Shared SQL of forgetting an entity everywhere (cuba_forget).

One transaction deletes the entity (its observations, episodes, relations, facts, aliases and
the judgments of its observations go by ON DELETE CASCADE, counted first) and every row of the
caller's scope that names it: errors, verify-log rows, working-memory notes, compaction
snapshots and reminders; work sessions that name it are purged of it (name, goals, summary).
The lexical indexes follow (FTS5 delete triggers on SQLite, in-row columns on PostgreSQL), and
the in-memory vector index drops the rows once the transaction commits. What remains in freed
space is the backend's ``scrub_freed_space``.

"Names it" means the entity's name, or one of its aliases, appears as a whole word, compared
case-insensitively (Unicode case folding, in Python so both backends agree). The original
deletes every error and session that contains the name as a substring in every project; whole
words keep forgetting "Al" from deleting every "fatal" error, and the scope keeps a client
from deleting rows of projects it does not act in.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

from cuba_memorys.models import ID_PATTERN, Scope
from cuba_memorys.storage.rows import ForgetCounts
from cuba_memorys.storage.sql.common import SqlBase, marks, scope_sql

# Tables whose rows name an entity in free text: (table, count key, text columns). Notes and
# snapshots come before sessions, whose deletion would otherwise take some of them uncounted.
NAMING_TABLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("errors", "errors_purged", ("error_type", "error_message", "context", "solution")),
    ("working_memory", "notes_purged", ("content", "tag")),
    ("verify_log", "verify_log_purged", ("claim", "entity_name")),
    ("compaction_snapshots", "snapshots_purged",
     ("summary_md", "key_observations", "decisions", "unresolved_errors", "pending_embeddings", "active_goals")),
    ("triggers", "triggers_purged", ("entity_pattern", "message")),
)
# A work session that names the entity is not deleted but purged of it: its name, the goals and
# the summary that name it are cleared. Deleting it would take its notes and snapshots (ON DELETE
# CASCADE) and every row's link to it, most of them about other things.
FORGOTTEN_SESSION = "(forgotten)"
# Every table a forget deletes from (directly or by cascade): what PostgreSQL vacuums afterwards.
FORGET_TABLES = ("entities", "observations", "episodes", "relations", "facts", "fact_supersedes",
                 "entity_aliases", "judgments", "meta", "observation_anchors", *(t for t, _, _ in NAMING_TABLES))
_CHUNK = 500  # ids per DELETE … IN (…)


def mentions(needles: Sequence[str]) -> Callable[[str], bool]:
    """A test for "this text names one of ``needles``": a whole-word, case-folded match."""
    alternatives = [rf"(?<!\w){re.escape(n.casefold())}(?!\w)" for n in needles if n.strip()]
    pattern = re.compile("|".join(alternatives))
    return lambda text: bool(alternatives) and pattern.search(text.casefold()) is not None


def _text_of(value: Any) -> str:
    """A column's text; a JSON column also as decoded text, so an escaped name (\\u00e9) is seen."""
    if value is None:
        return ""
    text = str(value)
    if text[:1] in ("[", "{"):
        with contextlib.suppress(ValueError):  # text that only looks like JSON is matched as it is
            text += "\n" + json.dumps(json.loads(text), ensure_ascii=False)
    return text


class SqlForget(SqlBase):
    """Mixed into SqlStore."""

    def forget_entity(self, entity_id: str, name: str, scope: Scope) -> ForgetCounts:
        with self.transaction():
            aliases = [r[0] for r in self._q("SELECT alias_text FROM entity_aliases WHERE entity_id = ?",
                                             (entity_id,))]
            names = mentions([name, *aliases])
            counts: dict[str, int] = self._cascade_counts(entity_id)
            # A snapshot can also quote a row without its entity's name (a preview of an
            # unembedded observation, an error message): it goes when it names a forgotten row's id.
            forgotten = {r[0] for r in self._q("SELECT id FROM observations WHERE entity_id = ?", (entity_id,))}

            def names_or_quotes(text: str) -> bool:
                return names(text) or not forgotten.isdisjoint(ID_PATTERN.findall(text))

            for table, key, columns in NAMING_TABLES:
                test = names_or_quotes if table == "compaction_snapshots" else names
                ids = self._naming_rows(table, columns, scope, test)
                self._delete_ids(table, ids)
                counts[key] = len(ids)
                if table == "errors":
                    forgotten.update(ids)
            counts["sessions_purged"] = self._purge_sessions(scope, names)
            gone = self._seqs_of("observations", "entity_id = ?", [entity_id])
            gone_episodes = self._seqs_of("episodes", "entity_id = ?", [entity_id])
            self._exec("DELETE FROM entities WHERE id = ?", (entity_id,))
            self._after_commit(lambda: self._vectors_dropped("observation", gone))
            self._after_commit(lambda: self._vectors_dropped("episode", gone_episodes))
        return cast(ForgetCounts, counts)

    def _cascade_counts(self, entity_id: str) -> dict[str, int]:
        """What ON DELETE CASCADE will take with the entity, counted before it goes."""
        of_entity = "SELECT id FROM observations WHERE entity_id = ?"

        def count(sql: str, params: Sequence[Any]) -> int:
            return int(self._one(sql, params)[0])

        return {
            "observations": count("SELECT count(*) FROM observations WHERE entity_id = ?", (entity_id,)),
            "episodes": count("SELECT count(*) FROM episodes WHERE entity_id = ?", (entity_id,)),
            "relations": count("SELECT count(*) FROM relations WHERE from_entity_id = ? OR to_entity_id = ?",
                               (entity_id, entity_id)),
            "facts": count(f"SELECT count(*) FROM facts WHERE subject_entity_id = ? OR observation_id IN ({of_entity})",
                           (entity_id, entity_id)),
            "aliases": count("SELECT count(*) FROM entity_aliases WHERE entity_id = ?", (entity_id,)),
            "judgments_purged": count(f"SELECT count(*) FROM judgments WHERE observation_a IN ({of_entity})"
                                      f" OR observation_b IN ({of_entity})", (entity_id, entity_id)),
        }

    def _naming_rows(self, table: str, columns: tuple[str, ...], scope: Scope,
                     names: Callable[[str], bool]) -> list[str]:
        """Ids of the rows of ``table`` in ``scope`` whose text columns name the entity."""
        cond, params = scope_sql(scope, "project_id")
        rows = self._q(f"SELECT id, {', '.join(columns)} FROM {table} WHERE {cond}", params)
        return [r[0] for r in rows if names("\n".join(_text_of(v) for v in list(r)[1:]))]

    def _delete_ids(self, table: str, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start:start + _CHUNK])
            self._exec(f"DELETE FROM {table} WHERE id IN ({marks(chunk)})", chunk)

    def _purge_sessions(self, scope: Scope, names: Callable[[str], bool]) -> int:
        """Clear what names the entity from the sessions in scope (see FORGOTTEN_SESSION)."""
        cond, params = scope_sql(scope, "project_id")
        purged = 0
        for row in self._q(f"SELECT id, name, goals, summary FROM sessions WHERE {cond}", params):
            goals = json.loads(row[2] or "[]")
            kept = [g for g in goals if not names(_text_of(g))]
            name = FORGOTTEN_SESSION if names(row[1] or "") else row[1]
            summary = None if row[3] is not None and names(row[3]) else row[3]
            if (name, kept, summary) != (row[1], goals, row[3]):
                self._exec("UPDATE sessions SET name = ?, goals = ?, summary = ? WHERE id = ?",
                           (name, json.dumps(kept, ensure_ascii=False), summary, row[0]))
                purged += 1
        return purged
