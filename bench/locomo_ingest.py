"""LoCoMo, agent style: ingest and search through the real server over MCP stdio.

This drives `cuba-memorys` exactly as an outside check does (see ../shared/bench/README.md,
"How outside checks ingest a store"): for each conversation a fresh server process with a fresh
data folder, `cuba_cronica` batch_add in chunks of 100 rows
`{"entity_name": session, "content": text, "observation_type": "context", "created_at": ...}`,
then every dev question of that conversation as
`cuba_faro {"query": q, "limit": 10, "max_tokens": 100000}`; returned ids are mapped back to
corpus ids. Quality: R@5, R@10, nDCG@10 (binary gain, ideal DCG from all relevant ids) over
answerable questions with at least one relevant id, per category.

Speed: ingest rows/s (overall, and the median over chunks) and client-side wall time per search
call (p50/p95), both measured around `session.call_tool`.

Baseline, measured in the same run on the same turns and questions: plain Okapi BM25
(k1=1.2, b=0.75, lowercase word tokens; `rank_bm25.BM25Okapi` if installed, else the small
implementation below), one index per conversation. The nDCG@10 difference gets a paired
bootstrap 95% CI (1000 resamples over questions).

    .venv/bin/python bench/locomo_ingest.py [--conversations N] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import anyio
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from cuba_memorys.services.benchmarks.metrics import percentile

SERVER = Path(sys.executable).with_name("cuba-memorys")
DATA = (Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo")
CHUNK = 100
K1, B = 1.2, 0.75
BOOTSTRAP = 1000
SEED = 20240817
CATEGORY_ORDER = ["single_hop", "multi_hop", "temporal", "open_domain"]


def read_jsonl(path: Path) -> list[dict]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ---------------------------------------------------------------- metrics ---------------------
def score(ranked: list[list[str]], relevant: set[str]) -> dict[str, float]:
    """``ranked``: per result position, the corpus ids it stands for (usually one; several when
    the server deduplicated turns into one row; none for rows that are not turns).
    A position is a hit when it brings a relevant id not already credited (binary gain)."""
    found: set[str] = set()
    dcg = 0.0
    recall_at: dict[int, float] = {}
    for pos, ids in enumerate(ranked[:10], 1):
        new = (set(ids) & relevant) - found
        if new:
            dcg += 1.0 / math.log2(pos + 1)
            found |= new
        if pos in (5, 10):
            recall_at[pos] = len(found) / len(relevant)
    for k in (5, 10):
        recall_at.setdefault(k, len(found) / len(relevant))
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(relevant), 10) + 1))
    return {"r5": recall_at[5], "r10": recall_at[10], "ndcg10": dcg / ideal}


def paired_bootstrap(a: list[float], b: list[float], n: int = BOOTSTRAP, seed: int = SEED) -> dict:
    """Mean of a-b with a percentile 95% CI from resampling questions with replacement."""
    diffs = [x - y for x, y in zip(a, b)]
    rng = random.Random(seed)
    m = len(diffs)
    means = sorted(sum(diffs[rng.randrange(m)] for _ in range(m)) / m for _ in range(n))
    return {"diff": sum(diffs) / m, "ci95": [percentile(means, 2.5), percentile(means, 97.5)], "n": m}


# ---------------------------------------------------------------- BM25 baseline ---------------
TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class OkapiBM25:
    """Plain Okapi BM25 with the Robertson-Sparck Jones idf floored at 0."""

    def __init__(self, docs: list[list[str]], k1: float = K1, b: float = B) -> None:
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.len = [len(d) for d in docs]
        self.avgdl = sum(self.len) / len(docs)
        df = Counter(t for d in docs for t in set(d))
        n = len(docs)
        self.idf = {t: max(0.0, math.log((n - f + 0.5) / (f + 0.5) + 1)) for t, f in df.items()}

    def get_scores(self, query: list[str]) -> list[float]:
        out = []
        for tf, dl in zip(self.tf, self.len):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl)
            for t in query:
                f = tf.get(t)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out


def bm25_index(docs: list[list[str]]):
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        return OkapiBM25(docs), "self-written Okapi BM25 (k1=1.2, b=0.75, idf floored at 0)"
    return BM25Okapi(docs, k1=K1, b=B), "rank_bm25 0.2.2 BM25Okapi (k1=1.2, b=0.75, epsilon=0.25)"


def bm25_rank(index, query: str, ids: list[str], k: int = 10) -> list[list[str]]:
    scores = list(index.get_scores(tokens(query)))
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))[:k]
    return [[ids[i]] for i in order]


# ---------------------------------------------------------------- one conversation ------------
async def call(session: ClientSession, tool: str, args: dict) -> tuple[dict, float]:
    t0 = time.perf_counter()
    result = await session.call_tool(tool, args)
    elapsed = time.perf_counter() - t0
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text}")
    return result.structured_content, elapsed


async def run_conversation(name: str, rows: list[dict], questions: list[dict], log) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"cuba-locomo-{name}-") as data_dir:
        return await _run_in(data_dir, name, rows, questions, log)


async def _run_in(data_dir: str, name: str, rows: list[dict], questions: list[dict], log) -> dict:
    params = StdioServerParameters(command=str(SERVER), args=[], env={"CUBA_DATA_DIR": data_dir})
    t_start = time.perf_counter()
    async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        startup_s = time.perf_counter() - t_start

        to_corpus: dict[str, list[str]] = defaultdict(list)
        chunks = []
        dedup = 0
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start:start + CHUNK]
            items = [{"entity_name": r["session"], "content": r["text"], "observation_type": "context",
                      "created_at": r["created_at"]} for r in chunk]
            out, elapsed = await call(session, "cuba_cronica", {"action": "batch_add", "observations": items})
            if len(out["ids"]) != len(chunk):
                raise RuntimeError(f"batch_add returned {len(out['ids'])} ids for {len(chunk)} items")
            for r, obs_id in zip(chunk, out["ids"]):
                to_corpus[obs_id].append(r["id"])
            dedup += out["deduplicated"] + out["reinforced"]
            chunks.append({"rows": len(chunk), "seconds": elapsed})

        per_question = []
        latencies = []
        unmapped = degraded = 0
        for q in questions:
            out, elapsed = await call(session, "cuba_faro", {"query": q["query"], "limit": 10, "max_tokens": 100000})
            latencies.append(elapsed)
            degraded += bool(out.get("degraded"))
            ranked = [to_corpus.get(row["id"], []) for row in out["results"]]
            unmapped += sum(1 for ids in ranked if not ids)
            per_question.append({"id": q["id"], "query": q["query"], "category": q["category"],
                                 "answerable": q["answerable"], "relevant": q["relevant"], "ranked": ranked})

    index, bm25_name = bm25_index([tokens(r["text"]) for r in rows])
    corpus_ids = [r["id"] for r in rows]
    for pq in per_question:
        pq["bm25_ranked"] = bm25_rank(index, pq["query"], corpus_ids)
    return {"conversation": name, "rows": len(rows), "questions": len(questions), "startup_s": startup_s,
            "chunks": chunks, "deduplicated_rows": dedup, "distinct_ids": len(to_corpus),
            "search_latency_s": latencies, "unmapped_result_rows": unmapped, "degraded_responses": degraded,
            "per_question": per_question, "bm25": bm25_name}


# ---------------------------------------------------------------- summary ---------------------
def summarise(convs: list[dict]) -> dict:
    scored = defaultdict(lambda: {"ours": [], "bm25": []})
    for conv in convs:
        for pq in conv["per_question"]:
            if not (pq["answerable"] and pq["relevant"]):
                continue
            rel = set(pq["relevant"])
            ours, base = score(pq["ranked"], rel), score(pq["bm25_ranked"], rel)
            pq["ours"], pq["bm25"] = ours, base
            for cat in ("all", pq["category"]):
                scored[cat]["ours"].append(ours)
                scored[cat]["bm25"].append(base)
    quality = {}
    for cat in (["all"] + [c for c in CATEGORY_ORDER if c in scored]
                + sorted(set(scored) - set(CATEGORY_ORDER) - {"all"})):
        ours, base = scored[cat]["ours"], scored[cat]["bm25"]
        mean = lambda xs, key: sum(x[key] for x in xs) / len(xs)  # noqa: E731
        quality[cat] = {
            "n": len(ours),
            "ours": {m: mean(ours, m) for m in ("r5", "r10", "ndcg10")},
            "bm25": {m: mean(base, m) for m in ("r5", "r10", "ndcg10")},
            "ndcg10_diff": paired_bootstrap([x["ndcg10"] for x in ours], [x["ndcg10"] for x in base]),
        }
    rows = sum(c["rows"] for c in convs)
    ingest_s = sum(ch["seconds"] for c in convs for ch in c["chunks"])
    chunk_rates = [ch["rows"] / ch["seconds"] for c in convs for ch in c["chunks"]]
    lat = [x for c in convs for x in c["search_latency_s"]]
    return {
        "rows": rows,
        "questions": sum(c["questions"] for c in convs),
        "ingest": {"seconds": ingest_s, "rows_per_s": rows / ingest_s,
                   "median_chunk_rows_per_s": statistics.median(chunk_rates), "chunks": len(chunk_rates),
                   "deduplicated_rows": sum(c["deduplicated_rows"] for c in convs)},
        "search": {"calls": len(lat), "p50_ms": 1000 * percentile(lat, 50), "p95_ms": 1000 * percentile(lat, 95),
                   "mean_ms": 1000 * sum(lat) / len(lat)},
        "startup_s_median": statistics.median(c["startup_s"] for c in convs),
        "unmapped_result_rows": sum(c["unmapped_result_rows"] for c in convs),
        "degraded_responses": sum(c["degraded_responses"] for c in convs),
        "quality": quality,
        "bm25": convs[0]["bm25"],
    }


def markdown(summary: dict) -> str:
    ing, se = summary["ingest"], summary["search"]
    lines = [
        f"LoCoMo dev over MCP stdio: {summary['conversations']} conversation(s), {summary['rows']} turns,"
        f" {summary['questions']} questions ({summary['quality']['all']['n']} scored)",
        "",
        f"- ingest: {ing['rows_per_s']:.1f} rows/s overall ({ing['seconds']:.1f} s in batch_add),"
        f" median per chunk {ing['median_chunk_rows_per_s']:.1f} rows/s over {ing['chunks']} chunks;"
        f" {ing['deduplicated_rows']} rows deduplicated by the server",
        f"- search (cuba_faro, client wall time): p50 {se['p50_ms']:.1f} ms, p95 {se['p95_ms']:.1f} ms"
        f" over {se['calls']} calls",
        f"- server start to initialized (median): {summary['startup_s_median']:.2f} s;"
        f" degraded responses: {summary['degraded_responses']}; result rows that are not turns:"
        f" {summary['unmapped_result_rows']}",
        f"- baseline: {summary['bm25']}",
        "",
        "| category | n | R@5 ours | R@5 BM25 | R@10 ours | R@10 BM25 | nDCG@10 ours | nDCG@10 BM25 "
        "| Δ nDCG@10 [95% CI] |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for cat, q in summary["quality"].items():
        o, b, d = q["ours"], q["bm25"], q["ndcg10_diff"]
        lines.append(f"| {cat} | {q['n']} | {o['r5']:.3f} | {b['r5']:.3f} | {o['r10']:.3f} | {b['r10']:.3f}"
                     f" | {o['ndcg10']:.3f} | {b['ndcg10']:.3f} | {d['diff']:+.3f}"
                     f" [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict:
    corpus = read_jsonl(args.data / "corpus.jsonl")
    queries = read_jsonl(args.data / "queries-dev.jsonl")
    by_conv: dict[str, list[dict]] = defaultdict(list)
    for row in corpus:
        by_conv[row["conversation"]].append(row)
    q_by_conv: dict[str, list[dict]] = defaultdict(list)
    for q in queries:
        q_by_conv[q["conversation"]].append(q)
    names = list(by_conv)[: args.conversations or None]
    convs = []
    log_path = Path(tempfile.gettempdir()) / "cuba-locomo-server.log"
    with log_path.open("w") as log:
        for name in names:
            t0 = time.perf_counter()
            conv = await run_conversation(name, by_conv[name], q_by_conv[name], log)
            convs.append(conv)
            print(f"{name}: {conv['rows']} rows, {conv['questions']} questions in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
    summary = summarise(convs)
    summary["conversations"] = len(convs)
    summary["date_utc"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary["machine"] = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
    return {"summary": summary, "conversations": convs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=0, help="only the first N conversations (default all)")
    parser.add_argument("--out", type=Path, help="write the full results (per question) as JSON here")
    parser.add_argument("--data", type=Path, default=DATA, help="folder with corpus.jsonl and queries-dev.jsonl")
    args = parser.parse_args()
    result = anyio.run(main_async, args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(markdown(result["summary"]))


if __name__ == "__main__":
    main()
