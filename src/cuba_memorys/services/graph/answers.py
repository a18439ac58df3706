"""Typed answers of graph reasoning: cuba_reflexion, cuba_hipotesis, cuba_puente predict.

Keyed as ``shared/spec/interface.md`` lists them; ``tests/test_answers.py`` holds every call to
them. (No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from
evaluated annotations.)
"""

from typing import Any, NotRequired, TypedDict

from cuba_memorys.services.answers import Clamped

Row = dict[str, Any]


class Gaps(TypedDict):
    isolated_entities: list[Row]
    underconnected_high_importance: list[Row]
    type_silos: list[Row]
    observation_gaps: list[Row]
    density_anomalies: list[Row]


class Reflection(TypedDict):
    action: str
    gaps: Gaps
    summary: Row
    recommendations: list[str]
    computed_at: NotRequired[str]  # served from the stored report of an unchanged large graph


class Hypotheses(TypedDict):
    action: str
    effect: str
    hypotheses: list[Row]
    count: int
    max_depth: int
    scoring: str
    note: NotRequired[str]
    truncated: NotRequired[bool]
    clamped: NotRequired[dict[str, Clamped]]


class Prediction(TypedDict):
    action: str
    entity: str
    predictions: list[Row]
    count: int
    algorithm: str
    persisted: bool
    relations_created: int
    note: NotRequired[str]
    clamped: NotRequired[dict[str, Clamped]]
