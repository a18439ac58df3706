"""The codegraph's own rows (issue 19), both backends: the files a build parsed (content hash
and symbols, so the next build skips unchanged files), and the observations a build wrote,
found by their verification text ("tree-sitter parse of <file> in <root>") so that a build touches only
its own rows, never an agent's note on the same entity.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from cuba_memorys.models import iso, new_id, utc_now
from cuba_memorys.storage.codegraph_rows import CodegraphFileRow, CodegraphObservationRow
from cuba_memorys.storage.sql.common import SqlBase, json_value, marks

FILE_COLUMNS = ("id", "project_id", "repo_root", "path", "language", "content_hash", "symbol_count", "symbols",
                "parsed_at")
_CHUNK = 500  # values per IN list


def _project(project_id: str | None) -> tuple[str, list[Any]]:
    return ("project_id IS NULL", []) if project_id is None else ("project_id = ?", [project_id])


class SqlCodegraph(SqlBase):
    """Mixed into SqlStore."""

    def codegraph_files(self, project_id: str | None, repo_root: str) -> dict[str, CodegraphFileRow]:
        """The files of ``repo_root`` a build for the project parsed, by path (the newest row)."""
        cond, params = _project(project_id)
        rows = self._q(f"SELECT {', '.join(FILE_COLUMNS)} FROM codegraph_files WHERE {cond} AND repo_root = ?"
                       " ORDER BY parsed_at, id", (*params, repo_root))
        out: dict[str, CodegraphFileRow] = {}
        for row in rows:
            item = {c: row[c] for c in FILE_COLUMNS}
            item["symbols"] = json_value(item["symbols"]) or []
            out[row["path"]] = cast(CodegraphFileRow, item)
        return out

    def save_codegraph_file(self, project_id: str | None, repo_root: str, path: str, language: str,
                            content_hash: str, symbols: Sequence[Sequence[str]]) -> None:
        """Record a parse of ``path``, replacing what was recorded for it before."""
        self.drop_codegraph_files(project_id, repo_root, [path])
        self._exec(f"INSERT INTO codegraph_files({', '.join(FILE_COLUMNS)}) VALUES ({marks(FILE_COLUMNS)})",
                   (new_id(), project_id, repo_root, path, language, content_hash, len(symbols),
                    json.dumps([list(s) for s in symbols], ensure_ascii=False), iso(utc_now())))

    def drop_codegraph_files(self, project_id: str | None, repo_root: str, paths: Sequence[str]) -> int:
        cond, params = _project(project_id)
        dropped = 0
        for start in range(0, len(paths), _CHUNK):
            chunk = list(paths[start:start + _CHUNK])
            dropped += self._exec(f"DELETE FROM codegraph_files WHERE {cond} AND repo_root = ?"
                                  f" AND path IN ({marks(chunk)})", (*params, repo_root, *chunk)).rowcount
        return dropped

    def codegraph_observations(self, project_id: str | None,
                               verifications: Sequence[str]) -> list[CodegraphObservationRow]:
        """Active (not superseded) observations of the project whose verification is one of
        ``verifications``, with their entity's name."""
        cond, params = _project(project_id)
        out: list[CodegraphObservationRow] = []
        wanted = list(dict.fromkeys(verifications))
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start:start + _CHUNK]
            rows = self._q("SELECT o.id, o.entity_id, e.name, o.content, o.verification, o.version,"
                           " o.previous_versions FROM observations o JOIN entities e ON e.id = o.entity_id"
                           f" WHERE o.{cond} AND o.observation_type != 'superseded'"
                           f" AND o.verification IN ({marks(chunk)}) ORDER BY o.seq", (*params, *chunk))
            out.extend(CodegraphObservationRow(
                id=r[0], entity_id=r[1], entity_name=r[2], content=r[3], verification=r[4], version=r[5],
                previous_versions=json_value(r[6]) or []) for r in rows)
        return out

    def mark_observed(self, observation_ids: Sequence[str], verification: str, at: str) -> int:
        """Evidence 'observed', with how (``verification``) and when: a parse saw it."""
        changed = 0
        for start in range(0, len(observation_ids), _CHUNK):
            chunk = list(observation_ids[start:start + _CHUNK])
            changed += self._exec("UPDATE observations SET evidence = 'observed', verification = ?, verified_at = ?"
                                  f" WHERE id IN ({marks(chunk)})", (verification, at, *chunk)).rowcount
        return changed

    def touch_relations(self, relation_ids: Sequence[str], at: str) -> None:
        """last_traversed = ``at``: a build saw these edges again (their strength is upsert's)."""
        for start in range(0, len(relation_ids), _CHUNK):
            chunk = list(relation_ids[start:start + _CHUNK])
            self._exec(f"UPDATE relations SET last_traversed = ? WHERE id IN ({marks(chunk)})", (at, *chunk))
