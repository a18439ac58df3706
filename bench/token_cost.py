"""What late interaction at write time costs (issue 31), over MCP stdio against the real server.

``ingest``: the same uncached texts written into a fresh store with the reranker's token vectors
computed by the embedding queue (today's default) and without them (CUBA_RERANKER=none, the write
path before issue 31), alternating which goes first, ``--runs`` times: client wall time from the
first batch_add to the last row holding its vector (and, with tokens, its token vectors), read
from the store itself. Reported: rows/s of each, their ratio per run and its median.

``search``: a store of ``--size`` rows (LongMemEval_S sentence pieces, as bench/scale.py builds
them; filled over MCP and kept between runs in --store-dir), then ~200 distinct questions asked
twice each, alternately first: ``cuba_faro {query, limit: 10}`` (the default: its fused top 10
reranked from the stored token vectors) and the same with ``rerank: false``. Reported: p50/p95 of
each (client wall time), bytes of token vectors per row and the store's size.

    .venv/bin/python bench/token_cost.py ingest --rows 300 --runs 3 [--long] [--postgres]
    .venv/bin/python bench/token_cost.py search --size 1000 [--postgres]
    .venv/bin/python bench/token_cost.py search --size 10000 --out bench/recorded/token_cost-10k.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # bench/ helpers: the real-text pool, the server command, MCP call timing
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from cuba_memorys.services.benchmarks.metrics import percentile

CHUNK = 100
QUERIES = 200


def coverage(where: str) -> tuple[int, int, int]:
    """(rows, rows with a vector, rows with token vectors) of the store's observations."""
    sql = "SELECT count(*), count(embedding), count(token_vectors) FROM observations"
    if where.startswith("postgresql"):
        import psycopg

        with psycopg.connect(where, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
    else:
        with sqlite3.connect(f"file:{where}?mode=ro", uri=True, timeout=30) as conn:
            row = conn.execute(sql).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def token_bytes(where: str) -> dict:
    sql = "SELECT count(token_vectors), coalesce(avg(length(token_vectors)), 0) FROM observations"
    if where.startswith("postgresql"):
        import psycopg

        with psycopg.connect(where, autocommit=True) as conn:
            n, mean = conn.execute(sql).fetchone()
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    else:
        with sqlite3.connect(f"file:{where}?mode=ro", uri=True) as conn:
            n, mean = conn.execute(sql).fetchone()
        size = sum(p.stat().st_size for p in Path(where).parent.glob("memory.*") if p.is_file())
    return {"rows_with_tokens": int(n), "token_bytes_per_row": round(float(mean), 1), "store_bytes": int(size)}


class Target:
    """Where a run's store lives: a folder of the embedded store, or a new PostgreSQL database."""

    def __init__(self, postgres: bool) -> None:
        self.pg = None
        if postgres:
            from daemon_load import EmbeddedPostgres

            self.pg = EmbeddedPostgres()

    def new(self, folder: Path) -> tuple[dict[str, str], str]:
        """(server environment, what :func:`coverage` reads) for a fresh store."""
        env = scale.server_env(folder, 1, "")
        if self.pg is None:
            return env, str(folder / "memory.db")
        url = self.pg.database()  # the superuser's: coverage reads every row, whatever the policies
        env["DATABASE_URL"] = url
        return env, url


def params(env: dict[str, str]):
    from mcp import StdioServerParameters

    return StdioServerParameters(command=scale.SERVER_CMD[0], args=scale.SERVER_CMD[1:], env=env)


async def fill(session: ClientSession, rows: list[dict]) -> None:
    for start in range(0, len(rows), CHUNK):
        await scale.call(session, "cuba_cronica", {"action": "batch_add", "observations": rows[start:start + CHUNK],
                                                   "allow_secret": True})


async def timed_ingest(env: dict[str, str], where: str, rows: list[dict], tokens: bool, log) -> float:
    """Seconds from the first batch_add to every row embedded (and given token vectors)."""
    env = {**env, "CUBA_RERANKER": "late-interaction" if tokens else "none"}
    async with stdio_client(params(env), errlog=log) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await scale.call(session, "cuba_faro", {"query": "warm the models", "limit": 1})
        t0 = time.perf_counter()
        await fill(session, rows)
        while True:
            total, embedded, tokened = coverage(where)
            if total >= len(rows) and embedded >= total and (not tokens or tokened >= total):
                return time.perf_counter() - t0
            await asyncio.sleep(0.2)


def long_turns(count: int, low: int = 800, high: int = 2000) -> list[dict]:
    """Whole LongMemEval_S chat turns of ``low``-``high`` characters (the long texts agents write),
    the last ``count`` of them in a fixed shuffled order."""
    import gzip

    with gzip.open(scale.LME / "corpus.jsonl.gz", "rt") as fh:
        turns = [json.loads(line) for line in fh if line.strip()]
    turns = [t for t in turns if low <= len(t["text"]) <= high]
    random.Random(scale.SEED).shuffle(turns)
    return [{"entity_name": t["session"], "content": t["text"], "observation_type": "context",
             "created_at": t["created_at"]} for t in turns[-count:]]


async def ingest(args: argparse.Namespace, log) -> dict:
    # texts no sized store uses: in no embedding cache (and the cache is off for these runs)
    rows = long_turns(args.rows) if args.long else scale.build_pool()[-args.rows:]
    target = Target(args.postgres)
    runs = []
    for run in range(args.runs):
        order = [True, False] if run % 2 == 0 else [False, True]
        took = {}
        for tokens in order:
            with tempfile.TemporaryDirectory(prefix="cuba-token-cost-") as tmp:
                env, where = target.new(Path(tmp) / "data")
                took[tokens] = await timed_ingest(env, where, rows, tokens, log)
        entry = {"with_tokens_rows_per_s": len(rows) / took[True], "without_rows_per_s": len(rows) / took[False],
                 "ratio": took[False] / took[True], "loadavg": scale.loadavg()}
        runs.append(entry)
        print(f"  run {run + 1}: with tokens {entry['with_tokens_rows_per_s']:.1f} rows/s, without"
              f" {entry['without_rows_per_s']:.1f} rows/s, ratio {entry['ratio']:.2f}", file=sys.stderr, flush=True)
    return {"rows": len(rows), "texts": "long turns (800-2000 chars)" if args.long else "pieces (40-300 chars)",
            "mean_chars": round(sum(len(r["content"]) for r in rows) / len(rows)), "runs": runs,
            "median_ratio": statistics.median(r["ratio"] for r in runs),
            "median_with_tokens_rows_per_s": statistics.median(r["with_tokens_rows_per_s"] for r in runs),
            "median_without_rows_per_s": statistics.median(r["without_rows_per_s"] for r in runs)}


async def search(args: argparse.Namespace, log) -> dict:
    pool = scale.build_pool()
    rows = pool[:args.size]
    folder = args.store_dir / (f"pg-{args.size}" if args.postgres else str(args.size))
    target = Target(args.postgres)
    env, where = target.new(folder)
    if args.postgres or not (folder / "memory.db").exists() or coverage(where)[0] < len(rows) * 0.99:
        folder.mkdir(parents=True, exist_ok=True)
        async with stdio_client(params(env), errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            t0 = time.perf_counter()
            await fill(session, rows)
            while coverage(where)[2] < coverage(where)[0]:
                await asyncio.sleep(1)
            print(f"  filled {len(rows)} rows in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    queries = scale.build_queries(rows, n=QUERIES + 3)
    lat: dict[str, list[float]] = {"default": [], "rerank_false": []}
    async with stdio_client(params(env), errlog=log) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await asyncio.sleep(scale.SETTLE_S)
        for q in queries[:3]:
            await scale.call(session, "cuba_faro", {"query": q, "limit": 10})
        for n, q in enumerate(queries[3:]):
            calls = [("default", {"query": q, "limit": 10}), ("rerank_false", {"query": q, "limit": 10,
                                                                                "rerank": False})]
            for label, arguments in (calls if n % 2 == 0 else calls[::-1]):
                _, elapsed = await scale.call(session, "cuba_faro", arguments)
                lat[label].append(1000 * elapsed)
    out = {label: {"calls": len(ms), "p50_ms": round(percentile(ms, 50), 1), "p95_ms": round(percentile(ms, 95), 1)}
           for label, ms in lat.items()}
    return {"size": args.size, **out, **token_bytes(where), "coverage": coverage(where)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["ingest", "search"])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--long", action="store_true", help="ingest: whole long chat turns instead of pieces")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--store-dir", type=Path, default=scale.STORE_DIR / "token-cost")
    parser.add_argument("--server-src", type=Path, help="spawn servers from this source tree")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.server_src:
        scale.use_server_src(args.server_src)
    random.seed(scale.SEED)
    result = {"date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": f"nproc {os.cpu_count()}",
              "loadavg_start": scale.loadavg(), "backend": "postgresql" if args.postgres else "sqlite",
              "phase": args.phase}
    with (Path(tempfile.gettempdir()) / "cuba-token-cost-server.log").open("a") as log:
        result.update(asyncio.run(ingest(args, log) if args.phase == "ingest" else search(args, log)))
    result["loadavg_end"] = scale.loadavg()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
