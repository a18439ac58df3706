"""Grounding rows both backends share: the verify log and cached pair judgments."""

from __future__ import annotations

from typing import cast

from cuba_memorys.models import iso, new_id, utc_now
from cuba_memorys.storage.rows import VerifyJudgmentRow
from cuba_memorys.storage.sql.common import SqlBase


class SqlGrounding(SqlBase):
    """Mixed into SqlStore."""

    def add_verify_log(self, claim: str, entity_name: str | None, confidence: float, level: str,
                       judged_by: str, project_id: str | None) -> str:
        log_id = new_id()
        self._exec("INSERT INTO verify_log(id, claim, entity_name, confidence, grounding_level, judged_by,"
                   " project_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (log_id, claim, entity_name, confidence, level, judged_by, project_id, iso(utc_now())))
        return log_id

    def get_judgment(self, a: str, b: str) -> VerifyJudgmentRow | None:
        first, second = sorted((a, b))
        row = self._one("SELECT * FROM judgments WHERE observation_a = ? AND observation_b = ?", (first, second))
        return cast(VerifyJudgmentRow, dict(row)) if row else None

    def put_judgment(self, a: str, b: str, verdict: str, confidence: float, reason: str | None,
                     backend: str, model: str | None) -> VerifyJudgmentRow:
        first, second = sorted((a, b))
        row = self._one(
            "INSERT INTO judgments(id, observation_a, observation_b, verdict, confidence, reason, backend,"
            " model, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(observation_a, observation_b) DO UPDATE SET verdict = excluded.verdict,"
            " confidence = excluded.confidence, reason = excluded.reason, backend = excluded.backend,"
            " model = excluded.model, created_at = excluded.created_at RETURNING *",
            (new_id(), first, second, verdict, confidence, reason, backend, model, iso(utc_now())))
        return cast(VerifyJudgmentRow, dict(row))
