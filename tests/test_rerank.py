"""Reranking with a real (tiny) ONNX cross-encoder: cuba_faro rerank=true, the time budget, and
search_hipocampo's auto / always / never. The tiny reranker scores a passage by the share of the
query's content words it contains (tests/tiny_models.py), so the expected order is computable."""

from __future__ import annotations

import json
import re

import pytest

from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.services.search import hipocampo
from tiny_models import build_reranker_model, expected_relevance

ROWS = [
    ("cache", "The Redis cluster has three nodes in two zones"),
    ("cache", "Cache eviction runs hourly on the worker"),
    ("cache", "Redis cache eviction uses the allkeys lru policy"),
    ("cache", "Session keys in Redis expire after one day"),
    ("cache", "The cache warms up after each deploy"),
    ("cache", "Eviction metrics are exported to Prometheus"),
]
QUERY = "redis cache eviction policy"


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    words = {w for _, text in ROWS for w in re.findall(r"\w+", text.lower())} | set(QUERY.split())
    return build_reranker_model(tmp_path_factory.mktemp("reranker") / "model", words=words)


@pytest.fixture
def filled(open_memory, reranker_dir):
    def make(**changes):
        mem = open_memory(reranker_path=reranker_dir, **changes)
        if not mem.store.counts()["observations"]:
            observations.batch_add(mem, None, [{"entity_name": e, "content": c} for e, c in ROWS])
            assert mem.wait_for_embeddings(120)  # the vector branch ranks the rows the queue has embedded
        return mem
    return make


def _contents(result: dict) -> list[str]:
    return [r["c"] for r in result["results"] if r.get("t") != "entity"]


def test_faro_rerank_orders_by_the_cross_encoder(filled, reranker_dir):
    mem = filled()
    plain = search.faro(mem, None, query=QUERY, limit=6, scope="observations", track_access=False)
    ranked = search.faro(mem, None, query=QUERY, limit=6, scope="observations", rerank=True, track_access=False)
    assert "reranker_degraded" not in ranked
    relevance = [expected_relevance(reranker_dir, QUERY, c) for c in _contents(ranked)]
    assert relevance == sorted(relevance, reverse=True) and len(relevance) == 6
    assert _contents(ranked)[0] == "Redis cache eviction uses the allkeys lru policy"
    assert set(_contents(plain)) == set(_contents(ranked))  # same pool, reordered


def test_over_budget_keeps_the_fused_order_and_says_why(filled):
    mem = filled(rerank_timeout_secs=1e-9)  # the first batch of 4 always runs; the next cannot fit
    plain = search.faro(mem, None, query=QUERY, limit=6, scope="observations", track_access=False)
    late = search.faro(mem, None, query=QUERY, limit=6, scope="observations", rerank=True, track_access=False)
    assert late["reranker_degraded"] is True and "budget" in late["reranker_degraded_reason"]
    assert _contents(late) == _contents(plain)


def test_a_broken_reranker_degrades_instead_of_failing(open_memory, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"\x00")
    (broken / "tokenizer.json").write_text("{}")
    mem = open_memory(reranker_path=broken)
    observations.add(mem, None, entity_name="cache", content=ROWS[0][1])
    out = search.faro(mem, None, query=QUERY, rerank=True)
    assert out["reranker_degraded"] is True and out["results"]


def _hipo(mem, **args) -> dict:
    import json

    return json.loads(hipocampo.search(mem, None, query=QUERY, format="json", **{"k": 3, **args}))


def test_hipocampo_always_never_auto(filled, reranker_dir):
    mem = filled()
    always = _hipo(mem, rerank="always", rerank_top_k=6)
    assert always["rerank"]["applied"] is True and "reranked the top" in always["rerank"]["reason"]
    top = [r["snippet"] for r in always["results"]]
    relevance = [expected_relevance(reranker_dir, QUERY, t) for t in top]
    assert relevance == sorted(relevance, reverse=True)
    never = _hipo(mem, rerank="never")
    assert never["rerank"] == {"mode": "never", "applied": False, "reason": "rerank=never", "top_k": 8,
                               "budget_ms": 800}
    auto = _hipo(mem, rerank="auto", rerank_top_k=3)
    assert auto["rerank"]["mode"] == "auto"
    # auto reranks exactly when the top fused scores are a near tie
    fused = _hipo(mem, rerank="never", include_scores=True)["results"]
    scores = [r["score"] for r in fused]
    near_tie = scores[0] - scores[-1] <= 0.15 * scores[0]
    assert auto["rerank"]["applied"] is near_tie, (scores, auto["rerank"])


def test_rerank_over_mcp_with_and_without_a_reranker(location, reranker_dir):
    from mcp_helpers import run_stdio

    async def body(agent):
        await agent.call("cuba_cronica", action="batch_add",
                         observations=[{"entity_name": e, "content": c} for e, c in ROWS])
        faro = await agent.call("cuba_faro", query=QUERY, rerank=True, scope="observations", limit=6)
        hipo = await agent.session.call_tool("search_hipocampo", {"query": QUERY, "rerank": "always",
                                                                  "format": "json", "rerank_top_k": 6})
        return faro, json.loads(hipo.content[0].text)

    with_model = run_stdio(location, body, CUBA_RERANKER_PATH=str(reranker_dir))
    without = run_stdio(location.__class__(location.backend, location.data_dir.with_name("other"),
                                           location.database_url), lambda agent: _faro_only(agent))
    faro, hipo = with_model
    assert "reranker_degraded" not in faro and hipo["rerank"]["applied"] is True
    relevance = [expected_relevance(reranker_dir, QUERY, r["c"]) for r in faro["results"]]
    assert relevance == sorted(relevance, reverse=True)
    assert without["reranker_degraded"] is True and "CUBA_RERANKER_PATH" in without["reranker_degraded_reason"]


async def _faro_only(agent):
    await agent.call("cuba_cronica", action="add", entity_name="cache", content=ROWS[2][1])
    return await agent.call("cuba_faro", query=QUERY, rerank=True)


def test_hipocampo_relevance_after_a_rerank_stays_at_most_one_and_falls(filled):
    """The reranker reorders the head; the relevance shown (score / the first's) must still read
    as one: at most 1 for every row, and not rising down the list (it did rise above 1)."""
    mem = filled()
    fused = _hipo(mem, rerank="never", rerank_top_k=6, k=6)
    always = _hipo(mem, rerank="always", rerank_top_k=6, k=6, include_scores=True)
    assert always["rerank"]["applied"] is True
    assert [r["snippet"] for r in always["results"]] != [r["snippet"] for r in fused["results"]]  # it reordered
    relevance = [r["relevance"] for r in always["results"]]
    assert relevance[0] == 1.0 and all(0 < r <= 1 for r in relevance)
    assert relevance == sorted(relevance, reverse=True)
    assert sorted(r["score"] for r in always["results"]) == sorted(r["score"] for r in fused["results"])
