"""Ingest over MCP on LoCoMo turns: the background embedding queue against embedding before the answer.

The outside checks' load (../shared/bench/README.md, "How outside checks ingest a store"): per
conversation a fresh `cuba-memorys` stdio server with a fresh data folder, `cuba_cronica`
batch_add in chunks of 100 rows `{"entity_name": session, "content": text, "observation_type":
"context", "created_at": ...}`. Each conversation is loaded twice in the same run, once per mode,
the order alternating between conversations (the machine is shared and noisy):

- ``queue``: the default (CUBA_EMBED_QUEUE=on): batch_add commits the rows and answers; the
  server's background queue embeds them afterwards.
- ``sync``: CUBA_EMBED_QUEUE=off, what every batch write did before: embed, then write, then answer.

Per load: rows/s acknowledged (rows / wall time from the first batch_add sent to the last answer),
rows/s until all embedded (rows / wall time from the first batch_add to the moment the store holds
no row without a vector: the store file is polled read-only every 50 ms), the median per-chunk
rate, and the server's peak RSS (VmHWM of the server process, read just before it is stopped).
With ``--quality`` the conversation's dev questions are also asked right after the last answer
(while the queue may still be embedding: what an outside check that searches at once sees) and
again once everything is embedded, scored as bench/locomo_ingest.py scores them.

    .venv/bin/python bench/ingest_mcp.py [--conversations N] [--quality] [--engine E] [--search-wait-ms MS]
                                         [--out FILE.json]
    .venv/bin/python bench/ingest_mcp.py --store-cost 100000   # storing one queue batch at 100k rows
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
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
from locomo_ingest import CHUNK, DATA, SERVER, read_jsonl, score

MODES = {"queue": {"CUBA_EMBED_QUEUE": "on"}, "sync": {"CUBA_EMBED_QUEUE": "off"}}
POLL = 0.05


ENGINE: dict[str, str] = {}  # --engine: CUBA_EMBED_ENGINE for every server (default: not set)


def server_env(data_dir: str, mode: str | None = None) -> dict[str, str]:
    """The caller's environment without any CUBA_* setting (defaults, as a user has them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    return {**env, "CUBA_DATA_DIR": data_dir, **ENGINE, **(MODES[mode] if mode else {})}


def engine_in_use() -> dict:
    """What `doctor` says runs the model with these settings (the engine is measured, not assumed)."""
    with tempfile.TemporaryDirectory(prefix="cuba-ingest-doctor-") as data_dir:
        done = subprocess.run([str(SERVER), "doctor", "--json"], env=server_env(data_dir), capture_output=True,
                              text=True, timeout=300)
    model = json.loads(done.stdout)["model"] if done.stdout.strip() else {}
    return {"engine": model.get("engine"), "engine_note": model.get("engine_note"), "setting": ENGINE or "default"}


def server_pid() -> int | None:
    """The cuba-memorys process this one started (stdio_client does not expose it)."""
    mine = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if fields[1] == mine and b"cuba-memorys" in cmdline:
            return int(stat.parent.name)
    return None


def peak_rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def unembedded(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return conn.execute("SELECT count(*) FROM observations WHERE embedding IS NULL").fetchone()[0]


async def ask(session: ClientSession, questions: list[dict], to_corpus: dict[str, list[str]]) -> dict:
    """nDCG@10 of the scored questions, and each call's client wall time (ms)."""
    scores, latencies = [], []
    for q in questions:
        t0 = time.perf_counter()
        result = await session.call_tool("cuba_faro", {"query": q["query"], "limit": 10, "max_tokens": 100000,
                                                       "track_access": False})
        latencies.append(1000 * (time.perf_counter() - t0))
        ranked = [to_corpus.get(row["id"], []) for row in result.structured_content["results"]]
        if q["answerable"] and q["relevant"]:
            scores.append(score(ranked, set(q["relevant"]))["ndcg10"])
    return {"ndcg10": scores, "latency_ms": latencies}


async def load(mode: str, rows: list[dict], questions: list[dict], quality: bool, log) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"cuba-ingest-{mode}-") as data_dir:
        db = Path(data_dir) / "memory.db"
        params = StdioServerParameters(command=str(SERVER), args=[], env=server_env(data_dir, mode))
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            pid = server_pid()
            to_corpus: dict[str, list[str]] = defaultdict(list)
            chunk_rates, states = [], []
            started = time.perf_counter()
            for start in range(0, len(rows), CHUNK):
                chunk = rows[start:start + CHUNK]
                t0 = time.perf_counter()
                result = await session.call_tool("cuba_cronica", {"action": "batch_add", "observations": [
                    {"entity_name": r["session"], "content": r["text"], "observation_type": "context",
                     "created_at": r["created_at"]} for r in chunk]})
                if result.is_error:
                    raise RuntimeError(result.content[0].text)
                out = result.structured_content
                chunk_rates.append(len(chunk) / (time.perf_counter() - t0))
                states.append(out["embedding"])
                for r, obs_id in zip(chunk, out["ids"]):
                    to_corpus[obs_id].append(r["id"])
            acknowledged = time.perf_counter() - started
            at_once = await ask(session, questions, to_corpus) if quality and mode == "queue" else None
            while unembedded(db):
                await anyio.sleep(POLL)
            embedded = time.perf_counter() - started
            settled = await ask(session, questions, to_corpus) if quality else None
            rss = peak_rss_mib(pid)
    n = len(rows)
    return {"mode": mode, "rows": n, "acknowledged_s": acknowledged, "embedded_s": embedded,
            "acknowledged_rows_per_s": n / acknowledged, "embedded_rows_per_s": n / embedded,
            "median_chunk_rows_per_s": statistics.median(chunk_rates), "answers_embedding": states,
            "peak_rss_mib": rss, "questions_at_once": at_once, "questions_settled": settled}


def summary(loads: list[dict]) -> dict:
    out: dict = {}
    for mode in MODES:
        mine = [x for x in loads if x["mode"] == mode]
        rows = sum(x["rows"] for x in mine)
        out[mode] = {
            "loads": len(mine), "rows": rows,
            "acknowledged_rows_per_s": rows / sum(x["acknowledged_s"] for x in mine),
            "embedded_rows_per_s": rows / sum(x["embedded_s"] for x in mine),
            "median_load_acknowledged_rows_per_s": statistics.median(x["acknowledged_rows_per_s"] for x in mine),
            "median_load_embedded_rows_per_s": statistics.median(x["embedded_rows_per_s"] for x in mine),
            "median_chunk_rows_per_s": statistics.median(x["median_chunk_rows_per_s"] for x in mine),
            "peak_rss_mib_max": max((x["peak_rss_mib"] or 0) for x in mine),
            "answers_pending": sum(s == "pending" for x in mine for s in x["answers_embedding"]),
            "answers": sum(len(x["answers_embedding"]) for x in mine),
        }
        for key in ("at_once", "settled"):
            asked = [x[f"questions_{key}"] for x in mine if x[f"questions_{key}"]]
            scores = [s for a in asked for s in a["ndcg10"]]
            if scores:
                latencies = sorted(ms for a in asked for ms in a["latency_ms"])
                out[mode][f"ndcg10_{key}"] = sum(scores) / len(scores)
                out[mode][f"ndcg10_{key}_n"] = len(scores)
                out[mode][f"search_p50_ms_{key}"] = statistics.median(latencies)
                out[mode][f"search_p95_ms_{key}"] = latencies[int(0.95 * (len(latencies) - 1))]
    paired: dict[str, dict[str, dict]] = defaultdict(dict)  # conversation -> mode -> load
    for x in loads:
        paired[x["conversation"]][x["mode"]] = x
    both = [p for p in paired.values() if len(p) == 2]
    q, s = out["queue"], out["sync"]
    out["paired_median_ratios"] = {  # per conversation queue / sync, the median over conversations
        key: statistics.median(p["queue"][key] / p["sync"][key] for p in both)
        for key in ("acknowledged_rows_per_s", "embedded_rows_per_s")} if both else {}
    out["ratios_queue_over_sync"] = {
        "acknowledged_rows_per_s": q["acknowledged_rows_per_s"] / s["acknowledged_rows_per_s"],
        "embedded_rows_per_s": q["embedded_rows_per_s"] / s["embedded_rows_per_s"],
        "peak_rss": q["peak_rss_mib_max"] / s["peak_rss_mib_max"] if s["peak_rss_mib_max"] else None}
    return out


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [f"{result['conversations']} conversation(s), {s['queue']['rows']} turns per mode; {result['date_utc']};"
             f" load average {result['load_before']} before, {result['load_after']} after;"
             f" engine {result['engine']['engine']} ({result['engine']['setting']})",
             "", "| measure | queue (default) | sync (CUBA_EMBED_QUEUE=off) | queue / sync |",
             "| --- | ---: | ---: | ---: |"]
    r = s["ratios_queue_over_sync"]
    for key, label in (("acknowledged_rows_per_s", "rows/s acknowledged (all loads)"),
                       ("embedded_rows_per_s", "rows/s until all embedded (all loads)")):
        lines.append(f"| {label} | {s['queue'][key]:.1f} | {s['sync'][key]:.1f} | {r[key]:.2f}× |")
    for key, label in (("median_load_acknowledged_rows_per_s", "rows/s acknowledged, median load"),
                       ("median_load_embedded_rows_per_s", "rows/s until all embedded, median load"),
                       ("median_chunk_rows_per_s", "rows/s per 100-row batch_add, median")):
        lines.append(f"| {label} | {s['queue'][key]:.1f} | {s['sync'][key]:.1f} |"
                     f" {s['queue'][key] / s['sync'][key]:.2f}× |")
    for key, label in (("acknowledged_rows_per_s", "paired ratio per conversation, median: acknowledged"),
                       ("embedded_rows_per_s", "paired ratio per conversation, median: until all embedded")):
        if key in s["paired_median_ratios"]:
            lines.append(f"| {label} | | | {s['paired_median_ratios'][key]:.2f}× |")
    lines.append(f"| server peak RSS (max over loads) | {s['queue']['peak_rss_mib_max']:.0f} MiB |"
                 f" {s['sync']['peak_rss_mib_max']:.0f} MiB | {r['peak_rss'] or 0:.2f}× |")
    lines.append(f"| answers saying pending | {s['queue']['answers_pending']}/{s['queue']['answers']} |"
                 f" {s['sync']['answers_pending']}/{s['sync']['answers']} | |")
    if "ndcg10_settled" in s["queue"]:
        q, y = s["queue"], s["sync"]
        lines.append(f"| nDCG@10 asked right after the last answer ({q['ndcg10_at_once_n']} questions) |"
                     f" {q['ndcg10_at_once']:.3f} | {y['ndcg10_settled']:.3f} | |")
        lines.append(f"| nDCG@10 once all embedded | {q['ndcg10_settled']:.3f} | {y['ndcg10_settled']:.3f} | |")
        lines.append(f"| cuba_faro p50 / p95 ms, right after the last answer | {q['search_p50_ms_at_once']:.0f} /"
                     f" {q['search_p95_ms_at_once']:.0f} | {y['search_p50_ms_settled']:.0f} /"
                     f" {y['search_p95_ms_settled']:.0f} | |")
        lines.append(f"| cuba_faro p50 / p95 ms, once all embedded | {q['search_p50_ms_settled']:.0f} /"
                     f" {q['search_p95_ms_settled']:.0f} | {y['search_p50_ms_settled']:.0f} /"
                     f" {y['search_p95_ms_settled']:.0f} | |")
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
    engine = engine_in_use()
    print(f"engine: {engine}", file=sys.stderr, flush=True)
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    loads = []
    with (Path(tempfile.gettempdir()) / "cuba-ingest-mcp-server.log").open("w") as log:
        for n, name in enumerate(names):
            for mode in (("queue", "sync") if n % 2 == 0 else ("sync", "queue")):
                done = await load(mode, by_conv[name], q_by_conv[name], args.quality, log)
                done["conversation"] = name
                loads.append(done)
                print(f"{name} {mode}: {done['rows']} rows, acknowledged {done['acknowledged_rows_per_s']:.1f} rows/s,"
                      f" embedded {done['embedded_rows_per_s']:.1f} rows/s, peak RSS {done['peak_rss_mib']:.0f} MiB",
                      file=sys.stderr, flush=True)
    return {"summary": summary(loads), "loads": loads, "conversations": len(names), "engine": engine,
            "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs,"
                       f" Python {platform.python_version()}"}


def store_cost(rows: int, batches: int = 7, size: int = 64) -> dict:
    """What storing one queue batch costs the embedded store at ``rows`` rows: set_embeddings now
    (the index learns the rows written) against the same call followed by the full index refresh
    it used to run after every commit (``refresh_vectors(force=True)``), medians of ``batches``."""
    import uuid

    import numpy as np

    from cuba_memorys.storage.sqlite.store import SqliteStore

    rng = np.random.default_rng(20261201)
    with tempfile.TemporaryDirectory(prefix="cuba-store-cost-") as folder:
        path = Path(folder) / "memory.db"
        store = SqliteStore(path, 384, ann_min_rows=0)
        entity = store.create_entity("e", "concept", None)
        now = "2026-12-01T00:00:00Z"
        with store.transaction():
            for start in range(0, rows, 5000):
                vecs = rng.standard_normal((min(5000, rows - start), 384)).astype(np.float32)
                store.db.conn.executemany(
                    "INSERT INTO observations(id, entity_id, content, observation_type, importance, source, tags,"
                    " trust, embedding, embedding_model, embedding_rev, created_at, updated_at)"
                    " VALUES (?, ?, ?, 'fact', 0.5, 'agent', '[]', 'trusted', ?, 'm', 1, ?, ?)",
                    [(str(uuid.uuid4()), entity.id, f"row {start + i}", v.tobytes(), now, now)
                     for i, v in enumerate(vecs)])
        store.close()
        store = SqliteStore(path, 384, ann_min_rows=0)
        seqs = [r[0] for r in store._q("SELECT seq FROM observations ORDER BY seq DESC LIMIT ?", (size,))]
        timings: dict[str, list[float]] = {"now": [], "with_full_refresh": []}
        for n in range(2 * batches):
            with store.transaction():
                store._exec(f"UPDATE observations SET embedding = NULL WHERE seq IN ({','.join('?' * size)})", seqs)
            batch = [(seq, rng.standard_normal(384).astype(np.float32)) for seq in seqs]
            t0 = time.perf_counter()
            store.set_embeddings("observation", batch, "m")
            if n % 2:
                store.refresh_vectors(force=True)
            timings["with_full_refresh" if n % 2 else "now"].append(1000 * (time.perf_counter() - t0))
        store.close()
    return {"rows": rows, "batch": size, **{k: statistics.median(v) for k, v in timings.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=3, help="the first N conversations (default 3; 0 = all)")
    parser.add_argument("--quality", action="store_true", help="also ask the dev questions (at once and settled)")
    parser.add_argument("--out", type=Path, help="write every load's figures as JSON here")
    parser.add_argument("--data", type=Path, default=DATA, help="folder with corpus.jsonl and queries-dev.jsonl")
    parser.add_argument("--engine", help="CUBA_EMBED_ENGINE for the servers (default: the default engine)")
    parser.add_argument("--search-wait-ms", type=int,
                        help="CUBA_EMBED_SEARCH_WAIT_MS for the servers (default: the default, 2000)")
    parser.add_argument("--store-cost", type=int, metavar="ROWS",
                        help="only time storing one 64-row queue batch in an embedded store of ROWS rows")
    parser.add_argument("--summarise", type=Path, metavar="FILE.json", help="only print the table of an --out file")
    args = parser.parse_args()
    if args.summarise:
        result = json.loads(args.summarise.read_text())
        result["summary"] = summary(result["loads"])
        print(markdown(result))
        return
    if args.store_cost:
        print(json.dumps(store_cost(args.store_cost)))
        return
    if args.engine:
        ENGINE["CUBA_EMBED_ENGINE"] = args.engine
    if args.search_wait_ms is not None:
        ENGINE["CUBA_EMBED_SEARCH_WAIT_MS"] = str(args.search_wait_ms)
    result = anyio.run(main_async, args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(markdown(result))


if __name__ == "__main__":
    main()
