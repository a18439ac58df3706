"""Fusion study: compute each search branch once per question, then score many fusion rules.

Loads every conversation of a benchmark into a fresh store exactly as `cuba-memorys eval` does
(batch_add, one store per conversation; set CUBA_EMBED_CACHE so reruns skip embedding), asks
each branch for a deep candidate list, and evaluates fusion variants offline. Used to choose
the fusion rule on the dev splits; it never looks at individual questions' answers.

    .venv/bin/python bench/fusion_study.py --dataset ../shared/bench/locomo --out study.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from cuba_memorys.config import Settings
from cuba_memorys.models import SearchFilter
from cuba_memorys.services.benchmarks import metrics
from cuba_memorys.services.benchmarks.evaluation import (
    _fresh_memory,
    _ingest,
    _to_corpus,
    conversations_of,
)
from cuba_memorys.text import analyze, query_entropy

DEPTH = 100
KINDS = ("observation", "entity")


def branch_lists(mem, query: str) -> dict[str, list[tuple[str, float]]]:
    flt = SearchFilter()
    text = sorted((h for k in KINDS for h in mem.store.text_candidates(k, query, DEPTH, flt)),
                  key=lambda h: -h.score)[:DEPTH]
    bm25 = sorted((h for k in KINDS for h in mem.store.bm25_candidates(k, analyze(query), DEPTH, flt)),
                  key=lambda h: -h.score)[:DEPTH]
    vec = mem.store.vector_candidates("observation", mem.embedder.embed_query(query), DEPTH, flt)
    return {name: [(h.id, h.score) for h in hits] for name, hits in
            (("text", text), ("bm25", bm25), ("vector", vec))}


def collect(dataset: Path, conversations: int | None) -> list[dict]:
    corpus, questions = (next(iter(sorted(dataset.glob(p)))) for p in ("corpus.jsonl*", "queries*.jsonl"))
    out = []
    for name, rows, asked in conversations_of(corpus, questions, conversations):
        with _fresh_memory(Settings.from_env()) as mem:
            held = _ingest(mem, rows)
            for q in asked:
                if not q.get("answerable", True) or not q.get("relevant"):
                    continue
                lists = branch_lists(mem, q["query"])
                out.append({"id": q["id"], "category": q["category"], "query": q["query"],
                            "relevant": q["relevant"], "lists": lists,
                            "held": {i: held[i] for ids in lists.values() for i, _ in ids}})
        print(f"  {name}: {len(out)} questions so far", flush=True)
    return out


# -- fusion rules ------------------------------------------------------------------------------

def rrf(lists, weights, k=60, depth=20):
    scores = defaultdict(float)
    for name, items in lists.items():
        for rank, (rid, _) in enumerate(items[:depth]):
            scores[rid] += weights.get(name, 0) / (k + rank + 1)
    return sorted(scores, key=lambda r: -scores[r])


def minmax(items, depth):
    items = items[:depth]
    if not items:
        return {}
    values = [s for _, s in items]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return {rid: (s - lo) / span for rid, s in items}


def score_fusion(lists, weights, depth=50):
    scores = defaultdict(float)
    for name, items in lists.items():
        for rid, value in minmax(items, depth).items():
            scores[rid] += weights.get(name, 0) * value
    return sorted(scores, key=lambda r: -scores[r])


def entropy_weights(query):
    """The original's routing: t = σ(2(H − 2.75)); text = BM25 = 0.7 − 0.4t; vector = 0.3 + 0.4t."""
    t = 1.0 / (1.0 + math.exp(-2.0 * (query_entropy(query) - 2.75)))
    return {"text": 0.7 - 0.4 * t, "vector": 0.3 + 0.4 * t, "bm25": 0.7 - 0.4 * t}


VARIANTS = {
    "rrf_entropy_d20 (current)": lambda q, L: rrf(L, entropy_weights(q), depth=20),
    "rrf_entropy_d50": lambda q, L: rrf(L, entropy_weights(q), depth=50),
    "rrf_entropy_d100": lambda q, L: rrf(L, entropy_weights(q), depth=100),
    "rrf_equal_d50": lambda q, L: rrf(L, {"text": 1, "vector": 1, "bm25": 1}, depth=50),
    "rrf_vec_bm25_d50": lambda q, L: rrf(L, {"vector": 1, "bm25": 1}, depth=50),
    "rrf_vec2_bm25_d50": lambda q, L: rrf(L, {"vector": 2, "bm25": 1}, depth=50),
    "rrf_vec2_bm25_text05_d50": lambda q, L: rrf(L, {"vector": 2, "bm25": 1, "text": 0.5}, depth=50),
    "vector_only": lambda q, L: [r for r, _ in L["vector"]],
    "bm25_only": lambda q, L: [r for r, _ in L["bm25"]],
    "text_only": lambda q, L: [r for r, _ in L["text"]],
}
for wv in (0.4, 0.5, 0.6, 0.7):
    VARIANTS[f"score_v{wv}_b{1 - wv:.1f}"] = lambda q, L, wv=wv: score_fusion(
        L, {"vector": wv, "bm25": 1 - wv})
    VARIANTS[f"score_v{wv}_b{(1 - wv) * 0.7:.2f}_t{(1 - wv) * 0.3:.2f}"] = lambda q, L, wv=wv: score_fusion(
        L, {"vector": wv, "bm25": (1 - wv) * 0.7, "text": (1 - wv) * 0.3})


def evaluate(data: list[dict]) -> dict[str, list[float]]:
    per_variant = {}
    for name, rule in VARIANTS.items():
        values = []
        for q in data:
            ranked = _to_corpus(rule(q["query"], q["lists"])[:10], q["held"])
            values.append(metrics.ndcg_at(ranked, set(q["relevant"]), 10))
        per_variant[name] = values
    return per_variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--conversations", type=int)
    parser.add_argument("--cache", type=Path, help="reuse collected branch lists from this JSON")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.cache and args.cache.exists():
        data = json.loads(args.cache.read_text())
    else:
        data = collect(args.dataset, args.conversations)
        if args.cache:
            args.cache.write_text(json.dumps(data))
    results = evaluate(data)
    base = results["rrf_entropy_d20 (current)"]
    print(f"{len(data)} answerable questions; nDCG@10, paired 95% CI vs current")
    for name, values in sorted(results.items(), key=lambda kv: -np.mean(kv[1])):
        diff, low, high = metrics.paired_bootstrap(base, values)
        print(f"{name:<36}{np.mean(values):.4f}   {diff:+.4f} [{low:+.4f}, {high:+.4f}]")
    if args.out:
        args.out.write_text(json.dumps({k: float(np.mean(v)) for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
