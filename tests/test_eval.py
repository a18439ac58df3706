"""`cuba-memorys eval`: the metrics, a run over a small benchmark in the shared JSONL form (one
fresh store per conversation, loaded as outside checks load it), --compare, the original's
{query, relevant_ids} form, and bad input."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from conftest import SERVER_BIN, settings_for
from cuba_memorys.services.benchmarks import metrics
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations

CORPUS = [
    ("c1", "Maria adopted a golden retriever puppy named Biscuit last spring"),
    ("c1", "The deploy pipeline moved from Jenkins to GitHub Actions in March"),
    ("c1", "Our staging database is PostgreSQL 16 on a single VM"),
    ("c1", "The mobile app uses React Native with Expo"),
    ("c2", "I ran the Lisbon half marathon in one hour and fifty minutes"),
    ("c2", "My sister is learning to play the cello"),
    ("c2", "The kitchen renovation finished two weeks late"),
]
QUESTIONS = [
    {"id": "q1", "conversation": "c1", "query": "What is the name of Maria's dog?", "relevant": ["c1:0"],
     "category": "single_hop", "answerable": True},
    {"id": "q2", "conversation": "c1", "query": "Which CI system runs the deploy pipeline now?",
     "relevant": ["c1:1"], "category": "single_hop", "answerable": True},
    {"id": "q3", "conversation": "c1", "query": "What colour is Maria's car?", "relevant": [],
     "category": "adversarial", "answerable": False},
    {"id": "q4", "conversation": "c2", "query": "How long did the Lisbon half marathon take me?",
     "relevant": ["c2:0"], "category": "temporal", "answerable": True},
]


def _benchmark(folder, questions=QUESTIONS):
    folder.mkdir()
    counters: dict[str, int] = {}
    with open(folder / "corpus.jsonl", "w") as out:
        for conv, text in CORPUS:
            n = counters[conv] = counters.get(conv, -1) + 1
            out.write(json.dumps({"id": f"{conv}:{n}", "text": text, "created_at": f"2026-01-0{n + 1}T10:00:00",
                                  "entity": "user", "session": f"{conv}:session_1", "conversation": conv}) + "\n")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return folder


def _cli(location, *args, check=True):
    out = subprocess.run([str(SERVER_BIN), *args], capture_output=True, text=True, env=location.env(), timeout=600)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_metrics_follow_their_definitions():
    # DCG of hits at ranks 1 and 3 over the ideal (ranks 1 and 2)
    assert metrics.ndcg_at(["a", "x", "b"], {"a", "b"}, 10) == pytest.approx(
        (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert metrics.ndcg_at(["x"] * 10 + ["a"], {"a"}, 10) == 0.0  # past the cut
    assert metrics.recall_at(["a", "x", "b"], {"a", "b", "c"}, 2) == pytest.approx(1 / 3)
    assert metrics.reciprocal_rank(["x", "y", "a"], {"a"}) == pytest.approx(1 / 3)
    diff, low, high = metrics.paired_bootstrap([0.2, 0.4, 0.5, 0.1], [0.3, 0.5, 0.6, 0.2])
    assert diff == pytest.approx(0.1) and low == pytest.approx(0.1) and high == pytest.approx(0.1)
    diff, low, high = metrics.paired_bootstrap([0.5] * 40, [0.5 + (0.1 if i % 2 else -0.1) for i in range(40)])
    assert low < 0 < high  # no consistent change: the interval straddles zero


def test_eval_runs_a_benchmark_and_compare_pairs_two_runs(location, tmp_path):
    data = _benchmark(tmp_path / "bench")
    run = tmp_path / "run.json"
    summary = json.loads(_cli(location, "eval", "--dataset", str(data), "--out", str(run), "--json").stdout)
    assert summary["all"]["n"] == 3  # the unanswerable question is not scored
    assert summary["all"]["ndcg10"] == pytest.approx(1.0)
    assert set(summary) >= {"single_hop", "temporal", "abstention", "latency_ms", "response_tokens"}
    assert summary["abstention"]["questions"] == 4 and summary["abstention"]["unanswerable"] == 1
    assert summary["latency_ms"]["p50"] > 0 and summary["response_tokens"]["mean"] > 0
    saved = {r["id"]: r for r in json.loads(run.read_text())["results"]}
    assert saved["q1"]["ranked"][0] == "c1:0" and saved["q4"]["ranked"][0] == "c2:0"
    assert all(r.startswith("c1:") for r in saved["q1"]["ranked"])  # one store per conversation

    worse = json.loads(run.read_text())
    for row in worse["results"]:
        row["ndcg10"] = row["ndcg10"] / 2 if row["id"] != "q4" else row["ndcg10"]
    before = tmp_path / "before.json"
    before.write_text(json.dumps(worse))
    compared = json.loads(_cli(location, "eval", "--compare", str(before), str(run), "--json").stdout)
    assert compared["all"]["n"] == 3
    assert compared["all"]["diff"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert compared["single_hop"]["ci"] == [pytest.approx(0.5), pytest.approx(0.5)]


def test_eval_asks_the_configured_memory_in_the_original_form(location, tmp_path):
    memory = Memory.open(settings_for(location))
    try:
        row = observations.add(memory, None, entity_name="billing",
                               content="Invoices are generated by the Stripe webhook worker")
        observations.add(memory, None, entity_name="auth", content="Sessions expire after thirty minutes of inactivity")
    finally:
        memory.close()
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"query": "who generates invoices?", "relevant_ids": [row["id"]]}) + "\n")
    summary = json.loads(_cli(location, "eval", "--dataset", str(questions), "--json").stdout)
    assert summary["all"]["n"] == 1 and summary["all"]["mrr"] == pytest.approx(1.0)


def test_eval_rejects_bad_input_clearly(location, tmp_path):
    missing = _cli(location, "eval", "--dataset", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode != 0 and "nowhere" in missing.stderr
    folder = _benchmark(tmp_path / "broken")
    (folder / "queries.jsonl").write_text('{"query": "fine"}\nnot json\n')
    broken = _cli(location, "eval", "--dataset", str(folder), check=False)
    assert broken.returncode != 0 and "not JSON lines" in broken.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    no_files = _cli(location, "eval", "--dataset", str(empty), check=False)
    assert no_files.returncode != 0 and "corpus.jsonl" in no_files.stderr
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"results": [{"id": "x", "scored": True, "ndcg10": 1.0, "category": "c"}]}))
    b.write_text(json.dumps({"results": [{"id": "y", "scored": True, "ndcg10": 1.0, "category": "c"}]}))
    disjoint = _cli(location, "eval", "--compare", str(a), str(b), check=False)
    assert disjoint.returncode != 0 and "share no scored questions" in disjoint.stderr
