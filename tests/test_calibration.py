"""Calibration (cuba_calibrar): outcomes of verify calls, the Beta trust of sources, Brier and ECE
against hand-computed values, trust weighing verify's evidence, and every action over MCP with
bad values, on both backends."""

from __future__ import annotations

import math

import pytest

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.judge.base import Verdict
from cuba_memorys.models import SOURCES, iso, utc_now
from cuba_memorys.services import audit, calibration
from cuba_memorys.services.graph import projects
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import verify
from mcp_helpers import run_stdio

# (confidence, grounding level, outcome) of the constructed resolved calls.
RESOLVED = [(0.95, "verified", "correct"), (0.95, "verified", "incorrect"), (1.0, "verified", "correct"),
            (0.85, "verified", "correct"), (0.35, "weak", "incorrect"), (0.3, "unknown", "correct"),
            (0.05, "contradicted", "incorrect")]
# By hand: squared errors 0.0025 + 0.9025 + 0 + 0.0225 + 0.1225 + 0.49 + 0.0025 = 1.5425 over 7.
BRIER = 1.5425 / 7
# Bins: [0.9, 1.0] holds 0.95✓ 0.95✗ 1.0✓ (accuracy 2/3, confidence 2.9/3, gap 0.3); [0.8, 0.9) 0.85✓
# (gap 0.15); [0.3, 0.4) 0.35✗ 0.3✓ (accuracy 0.5, confidence 0.325, gap 0.175); [0.0, 0.1) 0.05✗ (0.05).
ECE = (3 * 0.3 + 1 * 0.15 + 2 * 0.175 + 1 * 0.05) / 7


def _log(mem, entity: str | None, confidence: float = 0.8, level: str = "verified",
         project_id: str | None = None) -> str:
    return mem.store.add_verify_log("a claim", entity, confidence, level, "heuristic", project_id)


def _trust(mem) -> dict[str, tuple[float, float]]:
    return {r["source"]: (r["alpha"], r["beta"]) for r in calibration.trust(mem, None)["sources"]}


def test_metrics_and_stats_against_hand_computed_values(memory):
    projects.switch(memory, "a", name="alpha")
    alpha_id = memory.client("a").project_id
    projects.switch(memory, "b", name="beta")
    ids = [_log(memory, None, conf, level, alpha_id) for conf, level, _ in RESOLVED]
    for vid, (_, _, outcome) in zip(ids, RESOLVED, strict=True):
        calibration.resolve(memory, "a", verify_id=vid, outcome=outcome)
    _log(memory, None, 0.9, "verified", alpha_id)  # pending: not in the metrics
    other = _log(memory, None, 0.1, "verified", memory.client("b").project_id)  # another project
    calibration.resolve(memory, "b", verify_id=other, outcome="correct")

    got = calibration.metrics(memory, "a")
    assert got["n"] == 7
    assert got["brier"] == pytest.approx(BRIER, abs=1e-4) and got["ece"] == pytest.approx(ECE, abs=1e-4)
    diagram = {(b["bin_lo"], b["bin_hi"]): b for b in got["reliability_diagram"]}
    assert list(diagram) == [(0.0, 0.1), (0.3, 0.4), (0.8, 0.9), (0.9, 1.0)]
    top = diagram[(0.9, 1.0)]
    assert (top["n"], top["accuracy"], top["confidence"], top["gap"]) == (3, 0.6667, 0.9667, 0.3)
    assert diagram[(0.3, 0.4)]["gap"] == 0.175 and diagram[(0.0, 0.1)]["accuracy"] == 0.0
    assert sum(b["n"] / 7 * b["gap"] for b in diagram.values()) == pytest.approx(got["ece"], abs=1e-4)
    assert "overconfident" in got["interpretation"]

    stats = calibration.stats(memory, "a")
    assert stats["overall"] == {"total_predictions": 8, "correct": 4, "incorrect": 3, "pending": 1}
    levels = {lv["grounding_level"]: lv for lv in stats["levels"]}
    assert levels["verified"] == {"grounding_level": "verified", "alpha": 4, "beta": 2, "p_correct": 0.6667,
                                  "total_resolved": 4}
    assert (levels["weak"]["alpha"], levels["weak"]["beta"], levels["weak"]["p_correct"]) == (1, 2, 0.3333)
    assert set(levels) == {"verified", "weak", "unknown", "contradicted"}
    # The other project sees only its own call.
    assert calibration.metrics(memory, "b")["n"] == 1
    assert calibration.stats(memory, "b")["overall"]["total_predictions"] == 1


def test_metrics_with_nothing_resolved_are_nulls_with_a_note(memory):
    _log(memory, None)
    got = calibration.metrics(memory, None)
    assert (got["brier"], got["ece"], got["n"], got["reliability_diagram"]) == (None, None, 0, [])
    assert "action=resolve" in got["note"]
    assert calibration.stats(memory, None)["levels"] == []


def test_resolve_updates_the_trust_of_each_live_source_behind_the_claim(memory):
    write.add(memory, None, entity_name="cache", content="We use Redis for session storage")
    write.add(memory, None, entity_name="cache", content="Sessions expire after 30 minutes", source="user")
    write.add(memory, None, entity_name="cache", content="The cache is warmed at deploy time")
    old = write.add(memory, None, entity_name="cache", content="Memcached held sessions once", source="inference")
    memory.store.supersede_observations([old["id"]], None, iso(utc_now()))
    assert set(_trust(memory).values()) == {(1.0, 1.0)} and len(_trust(memory)) == len(SOURCES)  # the prior

    first = _log(memory, "cache")
    out = calibration.resolve(memory, None, verify_id=first, outcome="correct")
    assert (out["verify_id"], out["outcome"], out["entity_name"], out["sources_credibility_updated"]) == (
        first, "correct", "cache", 2)
    trust = _trust(memory)
    assert trust["agent"] == (2.0, 1.0) and trust["user"] == (2.0, 1.0)
    assert trust["inference"] == (1.0, 1.0)  # its only observation is superseded
    calibration.resolve(memory, None, verify_id=_log(memory, "cache"), outcome="incorrect")
    calibration.resolve(memory, None, verify_id=_log(memory, "cache"), outcome="incorrect")
    rows = {r["source"]: r for r in calibration.trust(memory, None)["sources"]}
    agent = rows["agent"]
    assert (agent["alpha"], agent["beta"], agent["p_correct"], agent["total_resolved"]) == (2.0, 3.0, 0.4, 3)
    # 2·sqrt(αβ/((α+β)²(α+β+1))) = 2·sqrt(6/150)
    assert agent["credible_interval_width"] == round(2 * math.sqrt(6 / 150), 4)
    assert rows["inference"]["updated_at"] is None and agent["updated_at"]
    ordered = [r["p_correct"] for r in calibration.trust(memory, None)["sources"]]
    assert ordered == sorted(ordered, reverse=True) and ordered[-1] == 0.4
    assert "agent" in calibration.trust(memory, None)["interpretation"]
    # The audit log names the call by id only.
    events = [e for e in audit.tail(memory, None)["entries"] if e["action"] == "calibration.resolve"]
    assert events[-1]["payload"] == {"verify_id": first, "outcome": "correct"} and len(events) == 3
    assert memory.store.verify_entry(first, memory.scope(None))["resolved_at"]


def test_resolve_refuses_bad_calls_and_writes_nothing(memory):
    write.add(memory, None, entity_name="cache", content="We use Redis for session storage")
    vid = _log(memory, "cache")
    calibration.resolve(memory, None, verify_id=vid, outcome="correct")
    before = (_trust(memory), calibration.stats(memory, None), audit.tail(memory, None)["count"])
    with pytest.raises(InvalidInput, match="already resolved as correct"):
        calibration.resolve(memory, None, verify_id=vid, outcome="incorrect")
    with pytest.raises(NotFound, match="not found"):
        calibration.resolve(memory, None, verify_id="00000000-0000-0000-0000-000000000000", outcome="correct")
    pending = _log(memory, "cache")
    with pytest.raises(InvalidInput, match=r"outcome: unknown value 'maybe' \(accepted: correct \| incorrect\)"):
        calibration.resolve(memory, None, verify_id=pending, outcome="maybe")
    with pytest.raises(InvalidInput, match="verify_id"):
        calibration.resolve(memory, None, verify_id="", outcome="correct")
    assert memory.store.verify_entry(pending, memory.scope(None))["outcome"] == "pending"
    assert _trust(memory) == before[0] and audit.tail(memory, None)["count"] == before[2]
    assert calibration.stats(memory, None)["overall"]["pending"] == before[1]["overall"]["pending"] + 1
    # A call of another project is not there for this one.
    projects.switch(memory, "a", name="alpha")
    projects.switch(memory, "b", name="beta")
    theirs = _log(memory, "cache", project_id=memory.client("b").project_id)
    with pytest.raises(NotFound):
        calibration.resolve(memory, "a", verify_id=theirs, outcome="correct")


class Supports:
    """A scripted client model: every evidence row supports the claim, with confidence 0.9."""

    backend, model = "sampling", "scripted"

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        return Verdict("supports", 0.9, "scripted", self.backend, self.model)

    def judge_pair(self, first: str, second: str) -> Verdict:
        return Verdict("unknown", 0.0, "scripted", self.backend, self.model)


def test_a_source_with_low_trust_weighs_less_in_verify(memory):
    claim = "The billing service retries failed charges three times"
    write.add(memory, None, entity_name="billing", content=claim, source="inference")
    trusted = verify.verify(memory, None, claim, sampler=Supports())
    (row,) = trusted["evidence"]
    assert row["source"] == "inference" and "trust_weight" not in row and "trust_adjusted" not in trusted
    assert trusted["confidence"] == round(1 - math.exp(-2 * row["similarity"] * 0.9), 4)
    assert "calibrated_accuracy" not in trusted

    # Three claims resting on inference turn out wrong: Beta(1, 4), p_correct 0.2, weight 0.4.
    rumour = write.add(memory, None, entity_name="rumours", content="Guessed from a log line", source="inference")
    for _ in range(3):
        calibration.resolve(memory, None, verify_id=_log(memory, "rumours", 0.6, "partial"), outcome="incorrect")
    memory.store.supersede_observations([rumour["id"]], None, iso(utc_now()))  # out of the evidence
    weighed = verify.verify(memory, None, claim, sampler=Supports())
    assert weighed["trust_adjusted"] == [{"source": "inference", "p_correct": 0.2, "weight": 0.4}]
    (row,) = weighed["evidence"]
    assert row["trust_weight"] == 0.4
    support = row["similarity"] * 0.9 * 0.4
    assert weighed["confidence"] == round(1 - math.exp(-2 * support), 4) < trusted["confidence"]
    assert (trusted["grounding"], weighed["grounding"]) == ("verified", "partial")
    # Its level now has outcomes: (correct + 1)/(resolved + 2) = 1/5.
    assert weighed["calibrated_accuracy"] == 0.2


def test_pure_formulas():
    assert calibration.beta_mean(0, 0) == 0.5 and calibration.beta_mean(3, 1) == pytest.approx(4 / 6)
    assert calibration.interval_width(1, 1) == pytest.approx(min(1, 2 * math.sqrt(1 / 12)))
    bins = calibration.reliability_bins([(0.3, True), (0.1, False), (0.0, False)])
    assert [(b["bin_lo"], b["n"]) for b in bins] == [(0.0, 1), (0.1, 1), (0.3, 1)]  # lower bounds included
    evidence = [{"source": "user", "similarity": 1.0, "judge_confidence": 1.0, "verdict": "supports"},
                {"source": "agent", "similarity": 1.0, "judge_confidence": 1.0, "verdict": "supports"}]
    assert calibration.weigh_by_trust(evidence, {"user": 0.25, "agent": 0.5}) == [
        {"source": "user", "p_correct": 0.25, "weight": 0.5}]
    assert "trust_weight" not in evidence[1]


async def calibrar_over_mcp(agent) -> dict:
    out: dict = {"empty": await agent.call("cuba_calibrar", action="metrics"),
                 "errors": [await agent.error("cuba_calibrar", action="explode"),
                            await agent.error("cuba_calibrar"),
                            await agent.error("cuba_calibrar", action="history", limit="ten"),
                            await agent.error("cuba_calibrar", action="resolve", outcome="correct"),
                            await agent.error("cuba_calibrar", action="resolve", verify_id="x"),
                            await agent.error("cuba_calibrar", action="resolve", verify_id="x", outcome="correct"),
                            await agent.error("cuba_calibrar", action="resolve", verify_id="x", outcome="maybe"),
                            await agent.error("cuba_calibrar", action="trust", outcom="correct")]}
    await agent.call("cuba_cronica", action="add", entity_name="cache", content="We use Redis for session storage")
    await agent.call("cuba_faro", query="We do not use Redis for session storage", mode="verify")
    history = await agent.call("memory_calibrar", action="history", limit=500)
    out["history"] = history
    vid = history["entries"][0]["id"]
    out["resolved"] = await agent.call("cuba_calibrar", action="resolve", verify_id=vid, outcome="correct")
    out["again"] = await agent.error("cuba_calibrar", action="resolve", verify_id=vid, outcome="incorrect")
    out["stats"] = await agent.call("cuba_calibrar", action="stats")
    out["foreign"] = await agent.call("cuba_calibrar", action="stats", verify_id="x")  # resolve's: ignored
    out["trust"] = await agent.call("cuba_calibrar", action="trust")
    out["metrics"] = await agent.call("cuba_calibrar", action="metrics")
    out["verify"] = await agent.call("cuba_faro", query="We do not use Redis for session storage", mode="verify")
    return out


def test_every_action_over_mcp_with_bad_values(location):
    out = run_stdio(location, calibrar_over_mcp)
    assert out["empty"]["brier"] is None and out["empty"]["n"] == 0 and out["empty"]["note"]
    explode, no_action, bad_limit, no_id, no_outcome, unknown, maybe, typo = out["errors"]
    assert "action" in explode and "metrics" in explode
    assert "action" in no_action
    assert "limit" in bad_limit
    assert out["foreign"]["ignored"] == ["verify_id"] and out["foreign"]["overall"] == out["stats"]["overall"]
    assert "verify_id" in no_id and "outcome" in no_outcome
    assert "not found" in unknown and "history" in unknown
    assert "outcome" in maybe and "correct | incorrect" in maybe
    assert "outcome" in typo  # did you mean
    history = out["history"]
    assert history["clamped"] == {"limit": {"given": 500, "used": 100}} and history["count"] == 1
    entry = history["entries"][0]
    assert set(entry) == {"id", "claim", "entity_name", "confidence", "grounding_level", "outcome", "created_at"}
    assert (entry["grounding_level"], entry["outcome"], entry["entity_name"]) == ("contradicted", "pending", "cache")
    assert out["resolved"]["sources_credibility_updated"] == 1 and out["resolved"]["sources"][0]["source"] == "agent"
    assert "already resolved" in out["again"]
    assert out["stats"]["overall"] == {"total_predictions": 1, "correct": 1, "incorrect": 0, "pending": 0}
    assert out["trust"]["sources"][0] == {**out["trust"]["sources"][0], "source": "agent", "alpha": 2.0,
                                          "beta": 1.0, "p_correct": 0.6667, "total_resolved": 1}
    assert out["metrics"]["n"] == 1 and out["metrics"]["brier"] is not None
    assert out["verify"]["calibrated_accuracy"] == round(2 / 3, 4)  # (1 + 1)/(1 + 2) for contradicted
