"""cuba_vigia summary, health and drift on both backends, against hand-computed values, then over
stdio with the official MCP client (bad values included)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from cuba_memorys.models import iso, utc_now
from cuba_memorys.services import incidents
from cuba_memorys.services.graph import entities, relations, vigia
from cuba_memorys.services.observations import write
from mcp_helpers import run_stdio


def test_chi2_survival_matches_the_tables():
    # the 5% critical values of the chi-squared distribution, 1 to 6 degrees of freedom
    for dof, critical in ((1, 3.841459), (2, 5.991465), (3, 7.814728), (4, 9.487729), (5, 11.070498),
                          (6, 12.591587)):
        assert vigia.chi2_survival(critical, dof) == pytest.approx(0.05, abs=1e-6), dof
    assert vigia.chi2_survival(0, 3) == 1.0
    assert vigia.chi2_survival(10, 2) == pytest.approx(math.exp(-5))


def test_normalised_entropy_matches_hand_computed_values():
    assert vigia.normalised_entropy({"a": 5, "b": 5}) == 1.0
    # p = 3/4, 1/4: H = 0.811278 bits over log2(2) = 1
    assert vigia.normalised_entropy({"a": 3, "b": 1}) == 0.811
    # p = 1/2, 1/4, 1/4: H = 1.5 bits over log2(3) = 1.584963 → 0.946
    assert vigia.normalised_entropy({"a": 2, "b": 1, "c": 1}) == 0.946
    assert vigia.normalised_entropy({"a": 7}) == 0.0 and vigia.normalised_entropy({}) == 0.0


def test_summary_and_health(memory):
    write.add(memory, None, entity_name="api", content="The API is versioned in the URL path")
    write.add(memory, None, entity_name="api", content="We chose REST over gRPC for browsers",
              observation_type="decision")
    write.add(memory, None, entity_name="db", content="Postgres is the primary store")
    entities.create(memory, None, name="ops", entity_type="person")
    relations.create(memory, None, from_entity="api", to_entity="db", relation_type="uses")
    summary = vigia.summary(memory, None)
    assert {k: summary[k] for k in ("entities", "observations", "relations", "errors")} == {
        "entities": 3, "observations": 3, "relations": 1, "errors": 0}
    assert summary["estimated_tokens"] == (3 + summary["episodes"]) * 50 and summary["project_scoped"] is False

    health = vigia.health(memory, None)
    # entity types: concept ×2, person ×1 → 0.918 bits / log2(2); observation types fact ×2, decision ×1
    assert health["entropy"]["entity_types"] == 0.918 and health["entropy"]["observation_types"] == 0.918
    assert health["entropy"]["knowledge_diversity_score"] == 0.918
    assert health["unused_entities"] == 3 and health["database_size"] > 0
    assert health["error_metrics"] == {"resolution_rate": None, "mttr_minutes": None}


def _error(mem, kind, message, days_ago, resolved_after_minutes=None):
    row = incidents.report(mem, None, error_type=kind, error_message=message)
    created = utc_now() - timedelta(days=days_ago)
    resolved = iso(created + timedelta(minutes=resolved_after_minutes)) if resolved_after_minutes else None
    mem.store._exec("UPDATE errors SET created_at = ?, resolved = ?, resolved_at = ? WHERE id = ?",
                    (iso(created), 1 if resolved else 0, resolved, row["error_id"]))


def test_error_metrics_and_drift_against_hand_computed_values(memory):
    # the four weeks before: 8 timeouts and 4 import errors (2 and 1 expected per week)
    for i in range(8):
        _error(memory, "TimeoutError", f"upstream {i} timed out", 10 + i, resolved_after_minutes=30)
    for i in range(4):
        _error(memory, "ImportError", f"module {i} missing", 20 + i, resolved_after_minutes=90)
    # this week: 6 timeouts, 1 import error and a new kind
    for i in range(6):
        _error(memory, "TimeoutError", f"gateway {i} timed out", 1 + i * 0.5)
    _error(memory, "ImportError", "module x missing", 2)
    _error(memory, "DiskFull", "no space left on device", 3)

    metrics = vigia.health(memory, None)["error_metrics"]
    assert metrics["resolution_rate"] == round(12 / 20, 4)
    assert metrics["mttr_minutes"] == pytest.approx((8 * 30 + 4 * 90) / 12)

    drift = vigia.drift(memory, None)
    # expected: Timeout 2, Import 1, DiskFull max(0.5, 0): χ² = (6−2)²/2 + (1−1)²/1 + (1−0.5)²/0.5 = 8.5
    assert drift["chi_squared"] == pytest.approx(8.5) and drift["degrees_of_freedom"] == 2
    assert drift["p_value"] == pytest.approx(math.exp(-8.5 / 2), abs=1e-6)  # two degrees: e^(−x/2)
    assert drift["drift_detected"] is True and drift["categories"] == 3
    assert {d["error_type"]: d["count"] for d in drift["error_distribution"]} == {
        "DiskFull": 1, "ImportError": 1, "TimeoutError": 6}


def test_no_errors_means_no_drift(memory):
    drift = vigia.drift(memory, None)
    assert (drift["chi_squared"], drift["p_value"], drift["drift_detected"]) == (0, 1.0, False)


def test_vigia_over_mcp(location):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="svc", content="The service uses gRPC")
        assert (await agent.call("cuba_vigia"))["metric"] == "summary"  # the default
        health = await agent.call("cuba_vigia", metric="health")
        assert health["entropy"]["knowledge_diversity_score"] == 0.0  # one kind of everything
        assert (await agent.call("cuba_vigia", metric="drift"))["drift_detected"] is False
        assert "metric" in await agent.error("cuba_vigia", metric="weather")
        assert "query" in await agent.error("cuba_vigia", metric="summary", query="x")  # not a parameter

    run_stdio(location, body)
