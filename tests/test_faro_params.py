"""The remaining cuba_faro parameters: diversify/mmr_lambda, abstain_ood/ood_threshold,
associative, rerank, include_unscoped — service level, plus calibrate."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import settings_for
from cuba_memorys.errors import InvalidInput
from cuba_memorys.search.mmr import jaccard
from cuba_memorys.search.ood import conformal_threshold, default_threshold, ledoit_wolf
from cuba_memorys.services.benchmarks.calibration import calibrate
from cuba_memorys.services.graph import projects, relations
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.text import words

TOPICS = ["database", "cache", "queue", "auth", "deploy", "logging", "billing", "search", "frontend", "tests"]


def _fill_software(memory, n=60):
    items = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        items.append({"entity_name": topic, "content": f"The {topic} component (module {i}) is configured in"
                      f" config/{topic}_{i}.yaml and owned by team {i % 7}"})
    observations.batch_add(memory, None, items[:50])
    observations.batch_add(memory, None, items[50:])
    assert memory.wait_for_embeddings(120)  # the OOD fit reads the vectors the background queue stores


@pytest.fixture(scope="module")
def software(module_location):
    """One store with 60 software observations, shared by the tests that only read it
    (embedding 60 rows per test would dominate this file's run time)."""

    from cuba_memorys.services.memory import Memory

    settings = settings_for(module_location)
    mem = Memory.open(settings)
    _fill_software(mem)
    yield mem
    mem.close()


def test_default_threshold_matches_the_spec():
    assert default_threshold(384) == pytest.approx(21.25, abs=0.02)


def test_ledoit_wolf_is_well_conditioned_with_few_samples():
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 100))
    cov, shrink = ledoit_wolf(x)
    assert 0 < shrink <= 1
    assert np.linalg.cond(cov) < 1e6  # the raw sample covariance (rank 59) would be singular


def test_conformal_rank():
    assert conformal_threshold([float(i) for i in range(1, 20)], 0.05) == 19.0  # ⌈20·0.95⌉ = 19
    assert conformal_threshold([float(i) for i in range(1, 101)], 0.05) == 96.0  # ⌈101·0.95⌉ = 96


def test_ood_needs_enough_samples(memory):
    observations.add(memory, None, entity_name="x", content="only one row")
    result = search.faro(memory, None, query="anything", abstain_ood=True)
    assert "ood" not in result and "at least 50" in result["ood_skipped_reason"]


def test_ood_threshold_precedence_and_abstain_shape(software):
    memory = software
    abstained = search.faro(memory, None, query="chocolate cake recipe", abstain_ood=True, ood_threshold=0.0)
    assert abstained["results"] == [] and abstained["count"] == 0 and abstained["ood"] is True
    assert abstained["mahalanobis_distance"] > 0 and abstained["abstain_reason"]
    assert abstained["ood_threshold_source"] == "argument" and abstained["graphrag_context"] == []
    kept = search.faro(memory, None, query="database config", abstain_ood=True, ood_threshold=1e9)
    assert kept["results"] and kept["ood"] is False
    uncalibrated = search.faro(memory, None, query="chocolate cake recipe", abstain_ood=True)
    assert uncalibrated["results"] and uncalibrated["ood"] is False  # never refuse on a guessed threshold
    assert "calibrate" in uncalibrated["ood_skipped_reason"] and uncalibrated["mahalanobis_distance"] > 0
    with pytest.raises(InvalidInput, match="ood_threshold"):
        search.faro(memory, None, query="x", abstain_ood=True, ood_threshold=-1)


def test_off_topic_queries_are_farther_than_on_topic_ones(software):
    memory = software
    def dist(q):
        return search.faro(memory, None, query=q, abstain_ood=True, ood_threshold=0.0)["mahalanobis_distance"]
    on_topic = [dist("where is the cache component configured"), dist("which team owns billing")]
    off_topic = [dist("how long should I boil an egg"), dist("best beaches in Portugal for surfing")]
    assert max(on_topic) < min(off_topic)


def test_calibrate_sets_a_threshold_that_search_then_uses(software, tmp_path):
    memory = software
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps({"query": f"where is the {t} component configured for module {i}"})
                                   for i, t in enumerate(TOPICS * 3)))
    result = calibrate(memory, questions, alpha=0.05, apply=True)
    assert result["applied"] and result["questions"] == 30 and result["would_abstain_with_new"] <= 0.05
    used = search.faro(memory, None, query="where is the queue component configured", abstain_ood=True)
    assert used.get("ood") is False and used["ood_threshold"] == pytest.approx(result["threshold"], abs=1e-3)
    few = tmp_path / "few.jsonl"
    few.write_text(json.dumps({"query": "one question"}))
    with pytest.raises(InvalidInput, match="at least 20"):
        calibrate(memory, few)


def test_calibrate_cli_takes_the_originals_flags(software, module_location, tmp_path):
    """-d is --dataset and --samples N bounds the stored embeddings the model is fitted on, as
    CUBA_OOD_FIT_LIMIT does (clamped to 500-5000 the same way)."""
    from conftest import SERVER_BIN

    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps({"query": f"which team owns the {t} component"}) for t in TOPICS * 3))
    out = subprocess.run([str(SERVER_BIN), "calibrate", "-d", str(questions), "--samples", "100", "--json"],
                         capture_output=True, text=True, env=module_location.env(), timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["questions"] == 30 and result["fitted_on"] == 60 and result["applied"] is False


def test_calibrate_cli_requires_a_dataset(tmp_path):
    from conftest import SERVER_BIN

    out = subprocess.run([str(SERVER_BIN), "calibrate"], capture_output=True, text=True,
                         env={"CUBA_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "--dataset" in out.stderr


def test_diversify_reduces_redundancy(memory):
    observations.batch_add(memory, None, [
        {"entity_name": "retry",
         "content": "HTTP client retries use exponential backoff with jitter starting at 100ms"},
        {"entity_name": "retry",
         "content": "The HTTP client retries with exponential backoff and random jitter from 100ms"},
        {"entity_name": "retry",
         "content": "Exponential backoff with jitter is used when the HTTP client retries, base 100ms"},
        {"entity_name": "retry", "content": "Idempotency keys make payment retries safe"},
        {"entity_name": "retry", "content": "Circuit breakers open after five consecutive failures"},
    ])
    def redundancy(result):
        bags = [set(words(r["c"])) for r in result["results"]]
        return max(jaccard(a, b) for i, a in enumerate(bags) for b in bags[i + 1:])
    plain = search.faro(memory, None, query="http client retries backoff", limit=3, scope="observations")
    diverse = search.faro(memory, None, query="http client retries backoff", limit=3, scope="observations",
                          diversify=True, mmr_lambda=0.3)
    assert redundancy(diverse) < redundancy(plain)
    assert diverse["results"][0]["id"] == plain["results"][0]["id"]  # the best hit stays first
    with pytest.raises(InvalidInput, match="mmr_lambda"):
        search.faro(memory, None, query="x", diversify=True, mmr_lambda="high")
    for given, used in ((-0.1, 0.0), (1.1, 1.0)):  # out of range: clamped, as the original does, and said
        clamped = search.faro(memory, None, query="x", diversify=True, mmr_lambda=given)["clamped"]
        assert clamped == {"mmr_lambda": {"given": given, "used": used}}


def test_associative_adds_graph_neighbours_only(memory):
    observations.add(memory, None, entity_name="checkout", content="Checkout calls the pricing engine")
    observations.add(memory, None, entity_name="pricing-engine", content="Written in Rust and deployed as a sidecar")
    relations.create(memory, None, "checkout", "pricing-engine", "depends_on")
    query = "what does checkout depend on"
    plain = search.faro(memory, None, query=query, format="verbose", limit=20, track_access=False)
    assoc = search.faro(memory, None, query=query, format="verbose", limit=20, associative=True, track_access=False)
    sidecar = "Written in Rust and deployed as a sidecar"
    added = [r for r in assoc["results"] if r.get("associative")]
    assert [r["content"] for r in added] == [sidecar] or sidecar in [r.get("content") for r in plain["results"]]
    assert {r["id"] for r in plain["results"]} <= {r["id"] for r in assoc["results"]}  # only adds
    assert sidecar in [r.get("content") for r in assoc["results"]]


def test_rerank_without_a_reranker_says_so_and_keeps_fused_order(software):
    memory = software
    plain = search.faro(memory, None, query="billing config", track_access=False)
    asked = search.faro(memory, None, query="billing config", rerank=True, track_access=False)
    assert asked["reranker_degraded"] is True and "CUBA_RERANKER_PATH" in asked["reranker_degraded_reason"]
    scores = [r["s"] for r in asked["results"]]
    assert scores == sorted(scores, reverse=True)  # fused (RRF) order, over the deeper rerank pool
    assert asked["results"][0]["id"] == plain["results"][0]["id"]
    assert "reranker_degraded" not in plain


def test_include_unscoped(memory):
    observations.add(memory, None, entity_name="global", content="Shared lint rules live in the monorepo root")
    projects.switch(memory, "a", "alpha")
    observations.add(memory, "a", entity_name="alpha", content="Alpha lint runs ruff in CI")
    shown = search.faro(memory, "a", query="lint rules", scope="observations", include_unscoped=True)
    hidden = search.faro(memory, "a", query="lint rules", scope="observations", include_unscoped=False)
    default = search.faro(memory, "a", query="lint rules", scope="observations")
    assert len(shown["results"]) == 2
    assert [r["c"] for r in hidden["results"]] == ["Alpha lint runs ruff in CI"]
    assert default["results"] == hidden["results"]  # false by default, as the seed's tool listing says


@pytest.mark.parametrize("param, value", [("diversify", "yes"), ("associative", 1), ("abstain_ood", "true"),
                                          ("include_unscoped", 0), ("rerank", "always")])
def test_flags_must_be_booleans(memory, param, value):
    with pytest.raises(InvalidInput, match=param):
        search.faro(memory, None, query="x", **{param: value})


def test_unknown_parameter_is_named(memory):
    with pytest.raises(InvalidInput, match="colour"):
        search.faro(memory, None, query="x", colour="blue")


def test_tags_argument_is_folded_like_stored_tags(memory):
    """Stored tags are folded (lowercase, no accents): a tags argument spelled with its accent
    and capital must find them too (it was only lower-cased, so "Configuración" never matched)."""
    for n in range(6):
        observations.add(memory, None, entity_name="deploy",
                         content=f"Deploy step {n} pushes the image to registry {n}")
    written = observations.add(memory, None, entity_name="servidor",
                               content="Configuración del servidor: la configuración vive en config.toml")
    assert "configuracion" in written["tags"]
    for spelled in ("Configuración", "configuracion", "CONFIGURACIÓN"):
        result = search.faro(memory, None, query="deploy image registry", tags=spelled, scope="observations")
        assert result["results"][0]["id"] == written["id"], spelled  # rows carrying the tag lead


def test_a_tag_filter_longer_than_any_tag_list_is_refused_with_its_size(memory):
    with pytest.raises(InvalidInput, match=r"tags.*150,000 characters.*at most 2,000"):
        search.faro(memory, None, query="deploy", tags="long " * 30_000)
    assert search.faro(memory, None, query="deploy", tags="infra," * 300)["results"] == []  # 1,800: fine
