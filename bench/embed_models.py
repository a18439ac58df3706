"""Choose the default embedding model by measurement on LoCoMo (dev questions).

For each model: passage throughput (1 and 2 threads, median of 3 runs over the same 512 turns,
each thread count in its own process because OpenMP reads OMP_NUM_THREADS once), single-query
latency, and dense-only retrieval per conversation (each conversation is its own store) with
the turn embedded as plain text and as "[context:{session}] {text}", which mimics how the
original project prefixes observations with "[{entity_type}:{entity_name}]".

    python bench/embed_models.py [--data ../shared/bench/locomo] [--cache DIR]

Writes the e5 plain-text passage and query embeddings to --cache for bench/vector_index.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cuba_memorys.embed import load_embedder  # noqa: E402

# Benchmarks cache embeddings and stores here between runs (override with CUBA_BENCH_CACHE).
BENCH_CACHE = Path(os.environ.get("CUBA_BENCH_CACHE", Path.home() / ".cache" / "cuba-memorys" / "bench"))

MODELS = ["multilingual-e5-small", "all-MiniLM-L6-v2"]
N_THROUGHPUT = 512
N_LATENCY = 200
BOOTSTRAP = 1000


def read_jsonl(path: Path) -> list[dict]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def contextual(row: dict) -> str:
    return f"[context:{row['session']}] {row['text']}"


# ---------------------------------------------------------------- speed (subprocess) ---
def speed_worker(model: str, threads: int, data: Path) -> dict:
    """Runs in a fresh process so the thread count really applies to the engine."""
    corpus = read_jsonl(data / "corpus.jsonl")
    queries = read_jsonl(data / "queries-dev.jsonl")
    rng = np.random.default_rng(0)
    texts = [corpus[i]["text"] for i in rng.choice(len(corpus), N_THROUGHPUT, replace=False)]
    t0 = time.perf_counter()
    status = load_embedder(model, threads=threads)
    load_s = time.perf_counter() - t0
    emb = status.embedder
    assert emb is not None, status.reason
    emb.embed_passages(texts[:32])  # warm-up (page in weights, allocate buffers)
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        emb.embed_passages(texts)
        runs.append(N_THROUGHPUT / (time.perf_counter() - t0))
    # Distinct questions, so the query cache never hits; the uncached path is what we time.
    lat = []
    for q in queries[:N_LATENCY]:
        t0 = time.perf_counter()
        emb.embed_query(q["query"])
        lat.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    emb.embed_query(queries[0]["query"])
    cached_ms = (time.perf_counter() - t0) * 1000
    return {"texts_per_s": statistics.median(runs), "runs": runs, "query_ms_median": statistics.median(lat),
            "query_ms_p95": float(np.percentile(lat, 95)), "cached_query_ms": cached_ms, "load_s": load_s}


def measure_speed(model: str, threads: int, data: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, __file__, "--speed-worker", model, str(threads), "--data", str(data)],
                         env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------ retrieval ---
def evaluate(corpus: list[dict], P: np.ndarray, queries: list[dict], Q: np.ndarray) -> dict[str, np.ndarray]:
    """Per-query R@5, R@10, nDCG@10; each query ranks only its own conversation's rows."""
    rows_by_conv: dict[str, np.ndarray] = {}
    grouped = defaultdict(list)
    for i, row in enumerate(corpus):
        grouped[row["conversation"]].append(i)
    rows_by_conv = {c: np.array(ix) for c, ix in grouped.items()}
    ids = [row["id"] for row in corpus]
    discounts = 1.0 / np.log2(np.arange(2, 12))
    r5, r10, ndcg = [], [], []
    for q, qv in zip(queries, Q):
        ix = rows_by_conv[q["conversation"]]
        scores = P[ix] @ qv
        top = ix[np.argsort(-scores, kind="stable")[:10]]
        rel = set(q["relevant"])
        hits = np.array([ids[i] in rel for i in top], dtype=float)
        r5.append(hits[:5].sum() / len(rel))
        r10.append(hits.sum() / len(rel))
        idcg = discounts[: min(len(rel), 10)].sum()
        ndcg.append(float((hits * discounts[: len(hits)]).sum() / idcg))
    return {"R@5": np.array(r5), "R@10": np.array(r10), "nDCG@10": np.array(ndcg)}


def bootstrap_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(BOOTSTRAP, len(values)))
    means = values[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=(Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo"))
    ap.add_argument("--cache", type=Path, default=BENCH_CACHE)
    ap.add_argument("--threads", type=int, default=2, help="threads for the retrieval embedding pass")
    ap.add_argument("--speed-worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.speed_worker:
        print(json.dumps(speed_worker(args.speed_worker[0], int(args.speed_worker[1]), args.data)))
        return

    print(f"# embed_models  {time.strftime('%Y-%m-%d %H:%M')}  nproc={os.cpu_count()}  "
          f"loadavg={os.getloadavg()[0]:.2f}", flush=True)
    speed = {}
    for model in MODELS:  # before any model loads here, so workers start clean
        for threads in (1, 2):
            speed[model, threads] = measure_speed(model, threads, args.data)
            print(f"speed {model} threads={threads}: {speed[model, threads]}", flush=True)

    corpus = read_jsonl(args.data / "corpus.jsonl")
    all_queries = read_jsonl(args.data / "queries-dev.jsonl")
    scored = [q for q in all_queries if q["answerable"] and q["relevant"]]
    results: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    embed_s = {}
    for model in MODELS:
        emb = load_embedder(model, threads=args.threads).embedder
        assert emb is not None
        Q = np.stack([emb.embed_query(q["query"]) for q in all_queries])
        scored_Q = Q[[i for i, q in enumerate(all_queries) if q["answerable"] and q["relevant"]]]
        for variant, fmt in (("plain", lambda r: r["text"]), ("context", contextual)):
            t0 = time.perf_counter()
            P = emb.embed_passages([fmt(r) for r in corpus])
            embed_s[model, variant] = time.perf_counter() - t0
            results[model, variant] = evaluate(corpus, P, scored, scored_Q)
            print(f"retrieval {model} {variant}: nDCG@10={results[model, variant]['nDCG@10'].mean():.3f} "
                  f"({embed_s[model, variant]:.0f}s to embed {len(corpus)} turns)", flush=True)
            if model == "multilingual-e5-small" and variant == "plain":
                args.cache.mkdir(parents=True, exist_ok=True)
                np.save(args.cache / "locomo_e5_passages.npy", P)
                (args.cache / "locomo_e5_passage_ids.json").write_text(json.dumps([r["id"] for r in corpus]))
                np.save(args.cache / "locomo_e5_queries.npy", Q)
                (args.cache / "locomo_e5_query_ids.json").write_text(json.dumps([q["id"] for q in all_queries]))
        del emb

    print(f"\nLoCoMo dev, dense only, {len(scored)} answerable questions with evidence, "
          f"{len(corpus)} turns in 10 per-conversation stores. Speed: {N_THROUGHPUT} turns, median of 3; "
          f"query latency: median (p95) of {N_LATENCY} distinct questions.\n")
    print("| model | passage text | R@5 | R@10 | nDCG@10 [95% CI] | texts/s 1 thr | texts/s 2 thr "
          "| query ms 1 thr | query ms 2 thr |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        for variant in ("plain", "context"):
            m = results[model, variant]
            lo, hi = bootstrap_ci(m["nDCG@10"])
            s1, s2 = speed[model, 1], speed[model, 2]
            print(f"| {model} | {variant} | {m['R@5'].mean():.3f} | {m['R@10'].mean():.3f} | "
                  f"{m['nDCG@10'].mean():.3f} [{lo:.3f}, {hi:.3f}] | {s1['texts_per_s']:.0f} | "
                  f"{s2['texts_per_s']:.0f} | {s1['query_ms_median']:.1f} ({s1['query_ms_p95']:.1f}) | "
                  f"{s2['query_ms_median']:.1f} ({s2['query_ms_p95']:.1f}) |")
    # Paired bootstrap of the model difference (same questions resampled for both models).
    for variant in ("plain", "context"):
        diff = results[MODELS[0], variant]["nDCG@10"] - results[MODELS[1], variant]["nDCG@10"]
        lo, hi = bootstrap_ci(diff)
        print(f"\nnDCG@10 e5 - MiniLM ({variant}): {diff.mean():+.3f} [95% CI {lo:+.3f}, {hi:+.3f}]", end="")
    for model in MODELS:
        diff = results[model, "context"]["nDCG@10"] - results[model, "plain"]["nDCG@10"]
        lo, hi = bootstrap_ci(diff)
        print(f"\nnDCG@10 context - plain ({model}): {diff.mean():+.3f} [95% CI {lo:+.3f}, {hi:+.3f}]", end="")
    print("\nload time (s): " + ", ".join(f"{m} {speed[m, 1]['load_s']:.2f}" for m in MODELS))
    print("cached query (ms): " + ", ".join(f"{m} {speed[m, 1]['cached_query_ms']:.3f}" for m in MODELS))


if __name__ == "__main__":
    main()
