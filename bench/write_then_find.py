"""Write, then find (issue 29): quality and latency right after an import, once settled, and with
the lexical branches alone — paired over the same questions, and between code versions.

Per conversation (LoCoMo) or haystack (LongMemEval_S), as the outside checks load a store
(../shared/bench/README.md, "How outside checks ingest a store"): a fresh data folder, a fresh
`cuba-memorys` over stdio, `cuba_cronica batch_add` in chunks of 100 rows, then its questions:

- ``after``: asked at once, right after the last batch_add answered (the queue still embedding);
- ``settled``: asked again once the store holds no row without a vector (polled read-only);
- ``lexical``: asked again by a server started on the same folder with CUBA_EMBED_MODEL=none
  (the lexical branches alone, same store, same questions).

Also the time from the first batch_add to fully embedded. ``--version NAME=DIR`` (repeatable)
runs each conversation once per version, their order alternating, with DIR/src on PYTHONPATH (a
checkout of an earlier commit: `git worktree add DIR COMMIT`); ``--version NAME=`` is this tree.
Every question's nDCG@10 is kept, so any two (version, phase) pairs can be compared with a paired
bootstrap; the summary compares each phase with ``lexical`` and ``after`` with ``settled``, and
each version with the first.

    .venv/bin/python bench/write_then_find.py --dataset longmemeval --conversations 20 --out wtf-lme.json
    .venv/bin/python bench/write_then_find.py --dataset locomo --version old=/tmp/old --version new= --out wtf.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import anyio
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_ingest import CHUNK, SERVER, score

from cuba_memorys.services.benchmarks.metrics import paired_bootstrap

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench"
DATASETS = {"locomo": (SHARED / "locomo" / "corpus.jsonl", SHARED / "locomo" / "queries-dev.jsonl"),
            "longmemeval": (SHARED / "longmemeval_s" / "corpus.jsonl.gz", SHARED / "longmemeval_s" / "queries.jsonl")}
PHASES = ("after", "settled", "lexical")


def read(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def env_for(data_dir: str, code: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k not in ("DATABASE_URL", "PYTHONPATH")}
    if code:
        env["PYTHONPATH"] = str(Path(code) / "src")
    return {**env, "CUBA_DATA_DIR": data_dir, **extra}


def unembedded(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return int(conn.execute("SELECT count(*) FROM observations WHERE embedding IS NULL").fetchone()[0])


async def ask(session: ClientSession, questions: list[dict], to_corpus: dict[str, list[str]]) -> list[dict]:
    out = []
    for q in questions:
        began = time.perf_counter()
        result = await session.call_tool("cuba_faro", {"query": q["query"], "limit": 10, "max_tokens": 100000,
                                                       "track_access": False})
        ms = 1000 * (time.perf_counter() - began)
        answer = result.structured_content or {}
        ranked = [to_corpus.get(row["id"], []) for row in answer.get("results", [])]
        out.append({"id": q["id"], "ms": round(ms, 1), "pending": answer.get("embedding_pending", 0),
                    "ndcg10": score(ranked, set(q["relevant"]))["ndcg10"] if q["relevant"] else None})
    return out


async def load(rows: list[dict], questions: list[dict], code: str, log) -> dict:
    with tempfile.TemporaryDirectory(prefix="cuba-wtf-") as data_dir:
        db = Path(data_dir) / "memory.db"
        to_corpus: dict[str, list[str]] = defaultdict(list)
        params = StdioServerParameters(command=str(SERVER), args=[], env=env_for(data_dir, code))
        async with stdio_client(params, errlog=log) as (read_stream, write_stream), \
                ClientSession(read_stream, write_stream) as session:
            await session.initialize()
            began = time.perf_counter()
            for start in range(0, len(rows), CHUNK):
                chunk = rows[start:start + CHUNK]
                result = await session.call_tool("cuba_cronica", {"action": "batch_add", "observations": [
                    {"entity_name": r["session"], "content": r["text"], "observation_type": "context",
                     "created_at": r["created_at"]} for r in chunk]})
                if result.is_error:
                    raise RuntimeError(result.content[0].text)
                for r, obs_id in zip(chunk, result.structured_content["ids"]):
                    to_corpus[obs_id].append(r["id"])
            imported = time.perf_counter() - began
            after = await ask(session, questions, to_corpus)
            while unembedded(db):
                await anyio.sleep(0.1)
            embedded = time.perf_counter() - began
            settled = await ask(session, questions, to_corpus)
        lexical_env = env_for(data_dir, code, CUBA_EMBED_MODEL="none")
        params = StdioServerParameters(command=str(SERVER), args=[], env=lexical_env)
        async with stdio_client(params, errlog=log) as (read_stream, write_stream), \
                ClientSession(read_stream, write_stream) as session:
            await session.initialize()
            lexical = await ask(session, questions, to_corpus)
    return {"rows": len(rows), "imported_s": round(imported, 2), "embedded_s": round(embedded, 2),
            "after": after, "settled": settled, "lexical": lexical}


def scored(loads: list[dict], version: str, phase: str) -> dict[str, float]:
    return {q["id"]: q["ndcg10"] for x in loads if x["version"] == version for q in x[phase]
            if q["ndcg10"] is not None}


def compare(loads: list[dict], a: tuple[str, str], b: tuple[str, str]) -> dict:
    """b − a over the questions both scored: mean difference and its paired 95% CI."""
    first, second = scored(loads, *a), scored(loads, *b)
    common = sorted(set(first) & set(second))
    mean, low, high = paired_bootstrap([first[i] for i in common], [second[i] for i in common])
    return {"a": "/".join(a), "b": "/".join(b), "n": len(common), "a_mean": round(statistics.fmean(
        first[i] for i in common), 4) if common else None, "b_mean": round(statistics.fmean(
            second[i] for i in common), 4) if common else None,
        "delta": round(mean, 4), "ci95": [round(low, 4), round(high, 4)]}


def latency(loads: list[dict], version: str, phase: str) -> dict:
    ms = sorted(q["ms"] for x in loads if x["version"] == version for q in x[phase])
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1)} if ms else {}


def summary(loads: list[dict], versions: list[str]) -> dict:
    out: dict = {}
    for v in versions:
        mine = [x for x in loads if x["version"] == v]
        out[v] = {
            "conversations": len(mine), "rows": sum(x["rows"] for x in mine),
            "embedded_s_median": statistics.median(x["embedded_s"] for x in mine),
            "imported_s_median": statistics.median(x["imported_s"] for x in mine),
            "latency": {phase: latency(loads, v, phase) for phase in PHASES},
            "after_vs_lexical": compare(loads, (v, "lexical"), (v, "after")),
            "settled_vs_lexical": compare(loads, (v, "lexical"), (v, "settled")),
            "after_vs_settled": compare(loads, (v, "settled"), (v, "after")),
        }
    base = versions[0]
    out["versions"] = {v: {phase: compare(loads, (base, phase), (v, phase)) for phase in PHASES}
                       for v in versions[1:]}
    return out


async def main_async(args: argparse.Namespace) -> dict:
    corpus_path, queries_path = DATASETS[args.dataset]
    corpus, queries = read(corpus_path), read(queries_path)
    by_conv: dict[str, list[dict]] = defaultdict(list)
    for row in corpus:
        by_conv[row["conversation"]].append(row)
    q_by_conv: dict[str, list[dict]] = defaultdict(list)
    for q in queries:
        if q.get("answerable", True):
            q_by_conv[q["conversation"]].append(q)
    names = [n for n in by_conv if q_by_conv[n]][: args.conversations or None]
    versions = args.version or ["current="]
    pairs = [(v.split("=", 1)[0], v.split("=", 1)[1]) for v in versions]
    loads = []
    with (Path(tempfile.gettempdir()) / "cuba-write-then-find.log").open("w") as log:
        for n, name in enumerate(names):
            order = pairs if n % 2 == 0 else list(reversed(pairs))
            for version, code in order:
                done = await load(by_conv[name], q_by_conv[name], code, log)
                done.update(conversation=name, version=version)
                loads.append(done)
                means = {p: statistics.fmean([q["ndcg10"] for q in done[p] if q["ndcg10"] is not None] or [0])
                         for p in PHASES}
                print(f"{name} {version}: {done['rows']} rows, imported {done['imported_s']} s, embedded"
                      f" {done['embedded_s']} s; nDCG@10 " + ", ".join(f"{p} {m:.3f}" for p, m in means.items()),
                      file=sys.stderr, flush=True)
    return {"dataset": args.dataset, "command": " ".join(sys.argv), "date_utc": datetime.now(UTC).isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
            "versions": dict(pairs), "summary": summary(loads, [v for v, _ in pairs]), "loads": loads}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="longmemeval")
    parser.add_argument("--conversations", type=int, default=0, help="the first N (default all)")
    parser.add_argument("--version", action="append", help="NAME=DIR: run DIR/src (empty DIR: this tree)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = anyio.run(main_async, args)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
