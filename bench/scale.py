"""Speed at scale: fill the embedded store with 10k / 100k real rows over MCP stdio, then time it.

Rows: the 19,915 LongMemEval_S turns split into sentence pieces (40-300 characters, sentences
joined up to 300, long ones cut at words; pieces under 20 characters and repeats dropped), which
gives ~170k distinct real rows. Sessions are shuffled with a fixed seed and taken whole, so the
10k store is a prefix of the 100k one (and shares its cached embeddings). Each row is loaded as
an outside check does (../shared/bench/README.md): `cuba_cronica` batch_add in chunks of 100,
`{"entity_name": session, "content": piece, "observation_type": "context", "created_at": ...}`
with `allow_secret: true` (a few real turns look like credential assignments to the secret gate).

Measured, per size, against the real server (`.venv/bin/cuba-memorys`) with a fresh CUBA_DATA_DIR:
- ingest rows/s (client wall time around batch_add), with the share of rows whose passage
  embedding was already in the persistent cache (CUBA_EMBED_CACHE) before the run;
- the embedding model's own batch throughput on the same passage texts (`[concept:session] piece`),
  measured in a subprocess with the same thread count as the server (CUBA_EMBED_INTRA_THREADS);
- an uncached ingest sample (fresh store, no cache, rows not in the sized pool) beside the model's
  throughput on exactly those texts: the direct ingest/model ratio;
- search: ~300 distinct queries (LongMemEval and LoCoMo questions, and questions built from noun
  phrases of random ingested rows; none repeated, so the query-embedding LRU never hits) as
  `cuba_faro {"query": q, "limit": 10}`, client wall time per call: p50/p95 (3 warm-up queries
  first, not counted). No reranker exists in this build, so "without rerank" is the default;
- cold start: spawn of a server on the existing 10k store to the first answered cuba_faro,
  median of 5;
- append (phase `append`): the same uncached sample ingested into a copy of each filled store,
  beside the model's throughput on those texts (what adding rows costs at that size);
- synthetic (phase `synthetic`, instead of `ingest`): the same rows written in-process with vectors
  derived from real e5 vectors, for timing search at a size whose real embedding is not cached yet;
- recall (phase `recall`, in-process): the HNSW accelerator against exact search on the store's
  own vectors, with the same real queries.

    .venv/bin/python bench/scale.py --sizes 10000 100000 --threads 1 --out scale.json
    # reuse stores already filled by an earlier run (skips their ingest):
    .venv/bin/python bench/scale.py --sizes 10000 100000 --reuse --phases search coldstart
    # the same searches against an older source tree (e.g. a `git worktree` of the last commit):
    .venv/bin/python bench/scale.py --reuse --phases search coldstart --server-src /tmp/before/src

Stores are kept in --store-dir (default ~/.cache/cuba-memorys/bench/scale-stores/<size>, or $CUBA_BENCH_CACHE)
so search runs can be repeated on the same data; CUBA_EMBED_CACHE defaults to embeddings.sqlite in that cache
folder.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import anyio
from locomo_ingest import (
    call,  # same MCP call timing as the LoCoMo benchmark (bench/ is on sys.path)
)
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from cuba_memorys.services.benchmarks.metrics import percentile

# Benchmarks cache embeddings and stores here between runs (override with CUBA_BENCH_CACHE).
BENCH_CACHE = Path(os.environ.get("CUBA_BENCH_CACHE", Path.home() / ".cache" / "cuba-memorys" / "bench"))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SERVER = Path(sys.executable).with_name("cuba-memorys")
LME = (Path(__file__).resolve().parents[2] / "shared" / "bench" / "longmemeval_s")
LOCOMO = (Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo")
CACHE = str(BENCH_CACHE / "embeddings.sqlite")
STORE_DIR = (BENCH_CACHE / "scale-stores")
MODEL = "multilingual-e5-small"
DIM = 384
CHUNK = 100
SEED = 20261129
N_QUERIES = 300
N_WARMUP = 3
COLD_RUNS = 5
SETTLE_S = 2.0
ENTITY_TYPE = "concept"  # what ensure_entity gives a new entity: the passage text's prefix

SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


# ------------------------------------------------------------------ the real-text pool -------
def pieces(text: str, lo: int = 40, hi: int = 300) -> list[str]:
    """Sentences of ``text``; short ones joined up to ``hi`` chars, long ones cut at words."""
    out: list[str] = []
    buf = ""
    for sent in SENTENCE.split(text):
        sent = sent.strip()
        if not sent:
            continue
        if len(sent) > hi:
            cur = ""
            for word in sent.split():
                if cur and len(cur) + len(word) + 1 > hi:
                    out.append(cur)
                    cur = word
                else:
                    cur = f"{cur} {word}".strip()
            sent = cur
        if len(buf) < lo and len(buf) + len(sent) + 1 <= hi:
            buf = f"{buf} {sent}".strip()
        else:
            if buf:
                out.append(buf)
            buf = sent
    if buf:
        out.append(buf)
    return out


def build_pool(data: Path = LME) -> list[dict]:
    """Every distinct piece, sessions in a fixed shuffled order (pieces in turn order)."""
    with gzip.open(data / "corpus.jsonl.gz", "rt") as fh:
        turns = [json.loads(line) for line in fh if line.strip()]
    by_session: dict[str, list[dict]] = defaultdict(list)
    for turn in turns:
        by_session[turn["session"]].append(turn)
    sessions = sorted(by_session)
    random.Random(SEED).shuffle(sessions)
    seen: set[str] = set()
    pool = []
    for session in sessions:
        for turn in by_session[session]:
            for piece in pieces(turn["text"]):
                if len(piece) < 20 or piece in seen:
                    continue
                seen.add(piece)
                pool.append({"entity_name": session, "content": piece, "observation_type": "context",
                             "created_at": turn["created_at"]})
    return pool


def passage(row: dict) -> str:
    return f"[{ENTITY_TYPE}:{row['entity_name']}] {row['content']}"


# ------------------------------------------------------------------ queries ------------------
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_TEMPLATES = ["What did I say about {}?", "{}", "Remind me about {}", "When did we talk about {}?",
              "Any notes on {}?", "What do I know about {}"]


def noun_phrases(text: str) -> list[str]:
    """Runs of 2-3 content words (a cheap stand-in for noun phrases)."""
    from cuba_memorys.text import STOPWORDS

    toks = _WORD.findall(text)
    out, run = [], []
    for tok in toks + [""]:
        if tok and tok.lower() not in STOPWORDS and len(tok) > 2 and tok.lower() not in {"user", "assistant"}:
            run.append(tok)
            continue
        if len(run) >= 2:
            out.append(" ".join(run[:3]))
        run = []
    return out


def build_queries(rows: list[dict], n: int = N_QUERIES + N_WARMUP + COLD_RUNS, seed: int = SEED) -> list[str]:
    """LongMemEval questions, LoCoMo dev questions (a third each at most), then questions built
    from noun phrases of random ingested rows; all distinct, fixed order for a given size."""
    rng = random.Random(seed)
    lme = [json.loads(x)["query"] for x in (LME / "queries.jsonl").read_text().splitlines() if x.strip()]
    locomo = [json.loads(x)["query"] for x in (LOCOMO / "queries-dev.jsonl").read_text().splitlines() if x.strip()]
    rng.shuffle(locomo)
    out: list[str] = []
    seen: set[str] = set()

    def add(q: str) -> None:
        key = q.strip().lower()
        if key and key not in seen and len(out) < n:
            seen.add(key)
            out.append(q.strip())

    for q in lme:
        add(q)
    for q in locomo[: n // 3]:
        add(q)
    tries = 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        phrases = noun_phrases(rng.choice(rows)["content"])
        if phrases:
            add(rng.choice(_TEMPLATES).format(rng.choice(phrases)))
    rng.shuffle(out)
    return out


# ------------------------------------------------------------------ helpers ------------------


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cached_share(texts: list[str], cache: str) -> float:
    """Share of ``texts`` whose vectors the persistent cache already holds."""
    if not cache or not Path(cache).exists() or not texts:
        return 0.0
    from cuba_memorys.embed.cache import CachedEmbedder

    probe = CachedEmbedder(SimpleNamespace(name=MODEL, dim=DIM), cache)
    keys = [probe._key(t) for t in texts]
    return len(probe._lookup(keys)) / len(texts)


SERVER_CMD: list[str] = [str(SERVER)]
# Extra environment for every server this module spawns (bench/scale_pg.py sets DATABASE_URL
# here to run the same phases against PostgreSQL); empty for the SQLite runs.
EXTRA_ENV: dict[str, str] = {}


def use_server_src(src: Path) -> None:
    """Spawn servers from this source tree instead of .venv/bin/cuba-memorys."""
    SERVER_CMD[:] = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(src)!r});"
                     " from cuba_memorys.cli import main; sys.argv[0] = 'cuba-memorys'; main()"]


def server_params(data_dir: Path, threads: int, cache: str) -> StdioServerParameters:
    return StdioServerParameters(command=SERVER_CMD[0], args=SERVER_CMD[1:], env=server_env(data_dir, threads, cache))


def server_env(data_dir: Path, threads: int, cache: str) -> dict[str, str]:
    env = {"CUBA_DATA_DIR": str(data_dir), "CUBA_EMBED_INTRA_THREADS": str(threads)}
    if cache:
        env["CUBA_EMBED_CACHE"] = cache
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUBA_ANN_MIN_ROWS", "CUBA_EMBED_ENGINE"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.update(EXTRA_ENV)
    return env


def model_throughput(texts: list[str], threads: int) -> dict:
    """The model's own batch throughput on ``texts``, in a fresh process (OpenMP reads its
    thread count once per process), through the same embed_passages the server uses."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(texts, fh)
        path = fh.name
    code = (
        "import json, sys, time\n"
        "from cuba_memorys.embed import load_embedder\n"
        f"st = load_embedder({MODEL!r}, threads={threads})\n"
        "texts = json.load(open(sys.argv[1]))\n"
        "st.embedder.embed_passages(texts[:8])\n"  # warm
        "t0 = time.perf_counter(); st.embedder.embed_passages(texts); dt = time.perf_counter() - t0\n"
        "print(json.dumps({'texts': len(texts), 'seconds': dt}))\n"
    )
    env = {**os.environ}
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, check=True)
    os.unlink(path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["texts_per_s"] = res["texts"] / res["seconds"]
    res["threads"] = threads
    res["loadavg"] = loadavg()
    return res


# ------------------------------------------------------------------ phases -------------------
async def ingest(data_dir: Path, rows: list[dict], threads: int, cache: str, log, label: str = "",
                 fresh: bool = True) -> dict:
    if fresh:
        if data_dir.exists():
            shutil.rmtree(data_dir)
        data_dir.mkdir(parents=True)
    params = server_params(data_dir, threads, cache)
    chunks = []
    dedup = 0
    load_before = loadavg()
    async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        t_all = time.perf_counter()
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start:start + CHUNK]
            out, elapsed = await call(session, "cuba_cronica", {"action": "batch_add", "observations": chunk,
                                                             "allow_secret": True})
            dedup += out["deduplicated"] + out["reinforced"]
            chunks.append(elapsed)
            done = start + len(chunk)
            if done % 5000 == 0 or done == len(rows):
                spent = time.perf_counter() - t_all
                print(f"  {label} ingest {done}/{len(rows)} rows, {spent:.0f} s, {done / spent:.1f} rows/s,"
                      f" last chunk {elapsed:.2f} s, load {loadavg()}", file=sys.stderr, flush=True)
        total = time.perf_counter() - t_all
    rates = [CHUNK / c for c in chunks]
    return {"rows": len(rows), "seconds": total, "rows_per_s": len(rows) / total,
            "chunk_seconds_sum": sum(chunks), "median_chunk_rows_per_s": statistics.median(rates),
            "last_10pct_rows_per_s": len(chunks[-max(1, len(chunks) // 10):]) * CHUNK
            / sum(chunks[-max(1, len(chunks) // 10):]),
            "deduplicated": dedup, "loadavg_before": load_before, "loadavg_after": loadavg()}


async def search(data_dir: Path, queries: list[str], threads: int, cache: str, log) -> dict:
    params = server_params(data_dir, threads, cache)
    latencies = []
    counts = []
    load_before = loadavg()
    async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await anyio.sleep(SETTLE_S)  # a saved HNSW accelerator loads in the background at start
        for q in queries[:N_WARMUP]:
            await call(session, "cuba_faro", {"query": q, "limit": 10})
        for q in queries[N_WARMUP:N_WARMUP + N_QUERIES]:
            out, elapsed = await call(session, "cuba_faro", {"query": q, "limit": 10})
            latencies.append(elapsed)
            counts.append(out["count"])
    ms = [1000 * x for x in latencies]
    return {"calls": len(ms), "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95),
            "mean_ms": sum(ms) / len(ms), "max_ms": max(ms), "mean_results": sum(counts) / len(counts),
            "loadavg_before": load_before, "loadavg_after": loadavg()}


async def cold_start(data_dir: Path, queries: list[str], threads: int, cache: str, log) -> dict:
    times = []
    for q in queries:
        params = server_params(data_dir, threads, cache)
        t0 = time.perf_counter()
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            t_init = time.perf_counter() - t0
            await call(session, "cuba_faro", {"query": q, "limit": 10})
            times.append((time.perf_counter() - t0, t_init))
    return {"runs": len(times), "median_s": statistics.median(t for t, _ in times),
            "median_initialize_s": statistics.median(i for _, i in times),
            "all_s": [round(t, 3) for t, _ in times], "loadavg": loadavg()}


def ann_recall(data_dir: Path, queries: list[str], threads: int) -> dict:
    """Recall of the HNSW accelerator against exact search on this store's real vectors and
    the real queries (embedded in-process with the server's model): recall@10 of the vector
    branch's top 10, and recall@100 of its 100-deep list (the depth fusion reads), both from a
    200-candidate search as the branch makes (SqliteSearchMixin.vector_candidates)."""
    from cuba_memorys.embed import load_embedder
    from cuba_memorys.storage.sqlite.store import SqliteStore

    model = load_embedder(MODEL, threads=threads).embedder
    store = SqliteStore(data_dir / "memory.db", DIM, ann_min_rows=1)
    index = store.vectors["observation"]
    acc = index.accelerator
    t0 = time.perf_counter()
    ready = acc.wait(3600)
    wait_s = time.perf_counter() - t0
    exact = SimpleNamespace(search=lambda q, k: _exact_search(index, q, k))
    r10, r100, ann_ms, exact_ms = [], [], [], []
    for q in queries:
        vec = model.embed_query(q)
        t = time.perf_counter()
        want = exact.search(vec, 100)
        exact_ms.append(1000 * (time.perf_counter() - t))
        t = time.perf_counter()
        got = index.search(vec, 200)[:100]  # the vector branch's first net for 100-deep fusion
        ann_ms.append(1000 * (time.perf_counter() - t))
        want_keys, got_keys = [k for k, _ in want], [k for k, _ in got]
        r10.append(len(set(got_keys[:10]) & set(want_keys[:10])) / 10)
        r100.append(len(set(got_keys) & set(want_keys)) / len(want_keys))
    store.close()
    return {"rows": len(index), "ready": ready, "ready_wait_s": wait_s, "queries": len(queries),
            "recall_at_10": sum(r10) / len(r10), "recall_at_100": sum(r100) / len(r100),
            "ann_search_200_p50_ms": statistics.median(ann_ms), "exact_search_100_p50_ms": statistics.median(exact_ms)}


def _exact_search(index, q, k):
    accelerator, index.accelerator = index.accelerator, None
    try:
        return index.search(q, k)
    finally:
        index.accelerator = accelerator


def fill_synthetic(data_dir: Path, rows: list[dict], vectors_file: Path) -> dict:
    """A store of the pool's real rows with *derived* vectors, written in-process (seconds, not
    hours): real e5 passage vectors of LongMemEval pieces (bench/vector_index.py's cache) cycled
    with 3% noise. Search cost does not depend on which vectors are stored (HNSW recall does:
    measure that on a store ingested over MCP); use this when the real fill is not done yet."""
    import numpy as np

    from cuba_memorys.models import NewObservation
    from cuba_memorys.storage.sqlite.store import SqliteStore
    from cuba_memorys.text import extract_tags, importance_prior

    if data_dir.exists():
        shutil.rmtree(data_dir)
    base = np.load(vectors_file).astype(np.float32)
    rng = np.random.default_rng(SEED)
    store = SqliteStore(data_dir / "memory.db", DIM, ann_min_rows=0)
    store.set_meta("embedding_model", MODEL)
    store.set_meta("embedding_dim", str(DIM))
    entities: dict[str, object] = {}
    t0 = time.perf_counter()
    for start in range(0, len(rows), 1000):
        with store.transaction():
            for i in range(start, min(len(rows), start + 1000)):
                row = rows[i]
                entity = entities.get(row["entity_name"])
                if entity is None:
                    entity = entities[row["entity_name"]] = store.create_entity(row["entity_name"], ENTITY_TYPE, None)
                vec = base[i % len(base)] + 0.03 * rng.standard_normal(DIM).astype(np.float32)
                vec /= np.linalg.norm(vec)
                store.add_observation(NewObservation(
                    entity_id=entity.id, content=row["content"], observation_type="context",
                    importance=importance_prior("context", row["content"]), tags=extract_tags(row["content"]),
                    created_at=row["created_at"], embedding=vec.tobytes(), embedding_model=MODEL))
    store.close()
    return {"rows": len(rows), "seconds": time.perf_counter() - t0, "vectors": f"derived from {vectors_file}"}


def store_rows(data_dir: Path) -> int:
    db = data_dir / "memory.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM observations").fetchone()[0]


# ------------------------------------------------------------------ main ---------------------
async def main_async(args: argparse.Namespace) -> dict:
    pool = build_pool()
    print(f"pool: {len(pool)} distinct pieces from LongMemEval_S", file=sys.stderr, flush=True)
    if max(args.sizes) > len(pool):
        raise SystemExit(f"the pool has only {len(pool)} rows")
    result: dict = {"date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()},"
                               f" nproc {os.cpu_count()}",
                    "loadavg_start": loadavg(), "threads": args.threads, "cache": args.cache,
                    "pool_rows": len(pool), "sizes": {}}
    log_path = Path(tempfile.gettempdir()) / "cuba-scale-server.log"
    with log_path.open("a") as log:
        if "model" in args.phases or "uncached" in args.phases:
            # Rows beyond the largest size: texts no sized store uses (and no cache holds
            # unless an earlier uncached sample embedded them - the cache is off for that run).
            sample = pool[-args.uncached_sample:]
            texts = [passage(r) for r in sample]
            res: dict = {"rows": len(sample)}
            res["model_before"] = model_throughput(texts, args.threads)
            print(f"model before: {res['model_before']['texts_per_s']:.1f} texts/s", file=sys.stderr, flush=True)
            if "uncached" in args.phases:
                with tempfile.TemporaryDirectory(prefix="cuba-scale-uncached-") as tmp:
                    res["ingest"] = await ingest(Path(tmp) / "data", sample, args.threads, "", log, "uncached")
                res["model_after"] = model_throughput(texts, args.threads)
                model = (res["model_before"]["texts_per_s"] + res["model_after"]["texts_per_s"]) / 2
                res["model_texts_per_s"] = model
                res["ratio"] = res["ingest"]["rows_per_s"] / model
                print(f"uncached ingest {res['ingest']['rows_per_s']:.1f} rows/s vs model {model:.1f}"
                      f" texts/s: {res['ratio']:.2f}", file=sys.stderr, flush=True)
            result["uncached_sample"] = res
        for size in args.sizes:
            rows = pool[:size]
            data_dir = args.store_dir / str(size)
            entry: dict = {}
            result["sizes"][str(size)] = entry
            if "synthetic" in args.phases and not (args.reuse and store_rows(data_dir) >= size * 0.99):
                entry["synthetic_fill"] = fill_synthetic(data_dir, rows, args.synthetic_vectors)
            if "ingest" in args.phases and not (args.reuse and store_rows(data_dir) >= size * 0.99):
                share = cached_share([passage(r) for r in rows], args.cache)
                print(f"{size}: {share:.1%} of passages already cached", file=sys.stderr, flush=True)
                entry["ingest"] = await ingest(data_dir, rows, args.threads, args.cache, log, str(size))
                entry["ingest"]["cached_share_before"] = share
            entry["store_rows"] = store_rows(data_dir)
            queries = build_queries(rows)
            if "search" in args.phases:
                entry["search"] = await search(data_dir, queries, args.threads, args.cache, log)
                s = entry["search"]
                print(f"{size}: search p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms"
                      f" (load {s['loadavg_after']})", file=sys.stderr, flush=True)
            if "append" in args.phases:
                # Ingest into a copy of the filled store, embeddings not cached: what adding to
                # a store of this size costs, beside the model's own throughput on those texts.
                sample = pool[-args.uncached_sample:]
                texts = [passage(r) for r in sample]
                res = {"rows": len(sample), "model_before": model_throughput(texts, args.threads)}
                with tempfile.TemporaryDirectory(prefix="cuba-scale-append-") as tmp:
                    copy = Path(tmp) / "data"
                    shutil.copytree(data_dir, copy, symlinks=False)
                    res["ingest"] = await ingest(copy, sample, args.threads, "", log, f"append@{size}", fresh=False)
                res["model_after"] = model_throughput(texts, args.threads)
                model = (res["model_before"]["texts_per_s"] + res["model_after"]["texts_per_s"]) / 2
                res["model_texts_per_s"], res["ratio"] = model, res["ingest"]["rows_per_s"] / model
                entry["append_uncached"] = res
                print(f"{size}: append {res['ingest']['rows_per_s']:.1f} rows/s vs model {model:.1f}"
                      f" texts/s: {res['ratio']:.2f}", file=sys.stderr, flush=True)
            if "recall" in args.phases:
                entry["ann_recall"] = ann_recall(data_dir, queries[N_WARMUP:N_WARMUP + N_QUERIES], args.threads)
                a = entry["ann_recall"]
                print(f"{size}: ANN recall@10 {a['recall_at_10']:.3f}, recall@100 {a['recall_at_100']:.3f}",
                      file=sys.stderr, flush=True)
            if "coldstart" in args.phases and size == min(args.sizes):
                cold_q = queries[N_WARMUP + N_QUERIES:][:COLD_RUNS]
                entry["cold_start"] = await cold_start(data_dir, cold_q, args.threads, args.cache, log)
                print(f"{size}: cold start median {entry['cold_start']['median_s']:.2f} s",
                      file=sys.stderr, flush=True)
    result["loadavg_end"] = loadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--threads", type=int, default=int(os.environ.get("CUBA_EMBED_INTRA_THREADS", "1")),
                        help="CUBA_EMBED_INTRA_THREADS for the server and the model measurement (default 1)")
    parser.add_argument("--phases", nargs="+", default=["uncached", "ingest", "search", "coldstart"],
                        choices=["model", "uncached", "ingest", "synthetic", "append", "search", "coldstart", "recall"])
    parser.add_argument("--synthetic-vectors", type=Path, default=(BENCH_CACHE / "lme_e5_pieces.npy"),
                        help="real e5 vectors to derive the `synthetic` phase's vectors from")
    parser.add_argument("--server-src", type=Path,
                        help="run the server from this source tree instead of .venv/bin/cuba-memorys"
                             " (to time an older version in the same session)")
    parser.add_argument("--label", default="", help="free text stored in the result (e.g. 'before')")
    parser.add_argument("--uncached-sample", type=int, default=500,
                        help="rows for the uncached ingest sample and the model throughput (default 500)")
    parser.add_argument("--reuse", action="store_true", help="keep a store that already holds the size's rows")
    parser.add_argument("--store-dir", type=Path, default=STORE_DIR)
    parser.add_argument("--cache", default=os.environ.get("CUBA_EMBED_CACHE", CACHE),
                        help="persistent passage-embedding cache for the server ('' for none)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.server_src:
        use_server_src(args.server_src)
    result = anyio.run(main_async, args)
    result["label"] = args.label
    result["server"] = " ".join(SERVER_CMD)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
