"""Rerank study (issue 31): how deep to rerank, how to blend with the fused score, and how compactly
the passages' token vectors may be stored, scored offline on the dev splits.

``collect`` loads each conversation as `cuba-memorys eval` does (a fresh store, batch_add in chunks of
100, the queue drained; CUBA_EMBED_CACHE makes reruns skip the e5 model), asks every answerable
question through cuba_faro's own pipeline with a 50-row pool and no rerank, and keeps, per question,
the pool in fused order (ids, fused scores, corpus ids) and the late-interaction token vectors of the
query and of every pool passage (float32, as the reranker computes them). ``score`` then scores
variants over the same pools in seconds, each with a paired bootstrap against the fused order and
against today's reranker (MaxSim over the whole pool), on the whole split and on each half of its
conversations (a choice must hold on both halves). It never looks at individual questions.

    CUBA_EMBED_CACHE=/tmp/e5-cache.sqlite .venv/bin/python bench/rerank_study.py collect \\
        --dataset ../shared/bench/locomo --out /tmp/rerank-locomo.pkl
    .venv/bin/python bench/rerank_study.py score --data /tmp/rerank-locomo.pkl [--data /tmp/rerank-lme.pkl]
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from cuba_memorys.config import Settings
from cuba_memorys.judge.late_interaction import PASSAGE_STOPWORDS, QUERY_STOPWORDS, LateInteractionReranker
from cuba_memorys.services.benchmarks import metrics
from cuba_memorys.services.benchmarks.evaluation import _fresh_memory, _ingest, conversations_of
from cuba_memorys.services.search import faro

POOL = 50
TODAY = "maxsim, pool 50 (today's rerank=true)"


def ndcg10(ranked: list[list[str]], relevant: set[str]) -> float:
    found: set[str] = set()
    dcg = 0.0
    for pos, ids in enumerate(ranked[:10], 1):
        new = (set(ids) & relevant) - found
        if new:
            dcg += 1.0 / math.log2(pos + 1)
            found |= new
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(relevant), 10) + 1))
    return dcg / ideal if ideal else 0.0


def _token_vectors(model: LateInteractionReranker, texts: list[str], stop: bool) -> list[np.ndarray]:
    out = []
    for start in range(0, len(texts), 16):
        for vecs, toks in model.forward(texts[start:start + 16]):
            out.append(model.content(vecs, toks, stop).astype(np.float32))
    return out


def collect(dataset: Path, out: Path, conversations: int | None) -> None:
    corpus, queries = (next(iter(sorted(dataset.glob(p)))) for p in ("corpus.jsonl*", "queries*.jsonl"))
    model = LateInteractionReranker(threads=1)
    settings = replace(Settings.from_env(), reranker_kind="none")
    data = []
    for name, rows, asked in conversations_of(corpus, queries, conversations):
        asked = [q for q in asked if q.get("answerable", True) and q.get("relevant")]
        if not asked:
            continue
        with _fresh_memory(settings) as mem:
            held = _ingest(mem, rows)
            mem.wait_for_embeddings(None)
            texts: dict[str, str] = {}
            questions = []
            for q in asked:
                found = faro.faro(mem, None, query=q["query"], limit=POOL, max_tokens=1_000_000, track_access=False,
                                  format="verbose")
                pool = found["results"]
                for row in pool:  # a row's text as the reranker reads it (row_content's fields)
                    texts.setdefault(row["id"], str(row.get("content") or row.get("name")
                                                    or f"{row.get('error_type', '')} {row.get('error_message', '')}"))
                questions.append({"id": q["id"], "category": q["category"], "query": q["query"],
                                  "relevant": q["relevant"], "pool": [r["id"] for r in pool],
                                  "fused": [float(r.get("fused_score", r.get("score", 0.0))) for r in pool]})
            ids = list(texts)
            vectors = dict(zip(ids, _token_vectors(model, [texts[i] for i in ids], PASSAGE_STOPWORDS)))
            for q in questions:
                q["qvec"] = _token_vectors(model, [q["query"]], QUERY_STOPWORDS)[0]
        data.append({"conversation": name, "held": dict(held), "vectors": vectors, "questions": questions})
        print(f"  {name}: {len(rows)} rows, {len(questions)} questions, {len(vectors)} pooled passages",
              file=sys.stderr, flush=True)
    out.write_bytes(pickle.dumps(data))


# -- variants -------------------------------------------------------------------------------------
def maxsim(q: np.ndarray, p: np.ndarray) -> float:
    return float((q @ p.T).max(axis=1).mean()) if len(q) and len(p) else 0.0


def quantized(p: np.ndarray) -> np.ndarray:
    """int8 per token with a float16 scale, as the store keeps them; decoded to float32."""
    scale = np.maximum(np.abs(p).max(axis=1, keepdims=True), 1e-8) / 127.0
    codes = np.clip(np.round(p / scale), -127, 127).astype(np.int8)
    return codes.astype(np.float32) * scale.astype(np.float16).astype(np.float32)


def projected(p: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    x = p @ matrix
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-8)


def minmax(values: list[float]) -> list[float]:
    low, high = min(values), max(values)
    return [1.0 if high == low else (v - low) / (high - low) for v in values]


def rerank(q: dict, vectors: dict, depth: int, blend: float | None, encode=None) -> list[str]:
    """The pool with its first ``depth`` rows reordered: by MaxSim alone, or by
    blend·MaxSim + (1 − blend)·fused, each min-max scaled over those rows."""
    top, rest = q["pool"][:depth], q["pool"][depth:]
    if not top:
        return q["pool"]
    qv = q["qvec"] if encode is None else encode(q["qvec"], query=True)
    sims = [maxsim(qv, vectors[i] if encode is None else encode(vectors[i])) for i in top]
    if blend is None:
        score = sims
    else:
        fused = minmax(q["fused"][:depth])
        score = [blend * s + (1 - blend) * f for s, f in zip(minmax(sims), fused)]
    order = sorted(range(len(top)), key=lambda n: -score[n])
    return [top[n] for n in order] + rest


def evaluate(data: list[dict], pick) -> list[float]:
    out = []
    for conv in data:
        held = conv["held"]
        for q in conv["questions"]:
            ranked = [held.get(i, []) for i in pick(q, conv)]
            out.append(ndcg10(ranked, set(q["relevant"])))
    return out


def halves(data: list[dict]) -> list[list[dict]]:
    mid = len(data) // 2
    return [data[:mid], data[mid:]] if mid else [data]


def score(paths: list[Path]) -> None:
    rng = np.random.default_rng(31)
    dims = {d: np.linalg.qr(rng.standard_normal((384, d)))[0] for d in (96, 128, 192)}

    def encoder(matrix):
        cache: dict[int, np.ndarray] = {}

        def encode(p: np.ndarray, query: bool = False) -> np.ndarray:
            key = id(p)
            if key not in cache:
                x = p if matrix is None else projected(p, matrix)
                cache[key] = x if query else quantized(x)
            return cache[key]

        return encode

    variants: dict[str, object] = {"fused (no rerank)": lambda q, c: q["pool"],
                                   TODAY: lambda q, c: rerank(q, c["vectors"], 50, None)}
    for depth in (5, 10, 15, 20, 30):
        variants[f"maxsim, top {depth}"] = lambda q, c, d=depth: rerank(q, c["vectors"], d, None)
    for depth in (10, 20):
        for blend in (0.5, 0.6, 0.7, 0.8, 0.9):
            variants[f"blend {blend}, top {depth}"] = lambda q, c, d=depth, b=blend: rerank(q, c["vectors"], d, b)
    int8 = encoder(None)
    variants["int8 per token, top 10"] = lambda q, c: rerank(q, c["vectors"], 10, None, int8)
    variants["int8 per token, blend 0.7, top 20"] = lambda q, c: rerank(q, c["vectors"], 20, 0.7, int8)
    for d, matrix in dims.items():
        enc = encoder(matrix)
        variants[f"random projection {d} + int8, top 10"] = lambda q, c, e=enc: rerank(q, c["vectors"], 10, None, e)
    report = {}
    for path in paths:
        data = pickle.loads(path.read_bytes())
        parts = {"all": data, **{f"half {n + 1}": h for n, h in enumerate(halves(data))}}
        base = {name: evaluate(part, variants["fused (no rerank)"]) for name, part in parts.items()}
        today = {name: evaluate(part, variants[TODAY]) for name, part in parts.items()}
        rows = {}
        for label, pick in variants.items():
            entry = {}
            for name, part in parts.items():
                got = evaluate(part, pick)
                _, low, high = metrics.paired_bootstrap(base[name], got)
                _, tlow, thigh = metrics.paired_bootstrap(today[name], got)
                entry[name] = {"n": len(got), "ndcg10": round(float(np.mean(got)), 4),
                               "vs_fused": [round(float(np.mean(got) - np.mean(base[name])), 4), round(low, 4),
                                            round(high, 4)],
                               "vs_today": [round(float(np.mean(got) - np.mean(today[name])), 4), round(tlow, 4),
                                            round(thigh, 4)]}
            rows[label] = entry
            a = entry["all"]
            print(f"{path.name:28} {label:40} {a['ndcg10']:.4f}  vs fused {a['vs_fused']}  vs today {a['vs_today']}"
                  f"  halves {[entry[h]['vs_fused'][0] for h in entry if h != 'all']}")
        report[path.name] = rows
    print(json.dumps(report, indent=1), file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--dataset", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--conversations", type=int)
    s = sub.add_parser("score")
    s.add_argument("--data", type=Path, action="append", required=True)
    args = parser.parse_args()
    if args.cmd == "collect":
        collect(args.dataset, args.out, args.conversations)
    else:
        score(args.data)


if __name__ == "__main__":
    main()
