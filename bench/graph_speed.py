"""Graph tools at scale (issue 14): every cuba_vigia metric, cuba_reflexion, cuba_hipotesis and
cuba_puente predict over MCP stdio, on synthetic graphs with a power-law degree distribution.

Graphs: preferential attachment (Barabási–Albert, m = 5, fixed seed), so 10k entities carry ~50k
relations and 100k entities ~500k, with one observation per entity (a fact, a decision on every
tenth) so reflexion's observation gaps have something to read. The store is written straight into
a fresh embedded database through SQL (building it is not what is measured), with no embedding
model (`CUBA_EMBED_MODEL=none`: no graph tool reads vectors).

Measured per size, against the real server (`.venv/bin/cuba-memorys`) and the official client:
- each tool call's client wall time, p50/p95 over --calls calls (2 warm-up calls first, not
  counted), and the first call's time on its own (above 20k entities the slow reports are computed
  by that call, or by the consolidation cycle, and served from the store while the graph is
  unchanged: services/graph/reports.py); hipotesis and predict start from random entities (the same
  ones for every run);
- the PageRank + communities step: `cuba_zafra pagerank` then `communities`, median of 3;
- the server's peak resident memory (VmHWM of /proc/<pid>/status) at the end.

    .venv/bin/python bench/graph_speed.py --sizes 10000 100000 --calls 20 --out graph_speed.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from cuba_memorys.models import iso, new_id, utc_now
from cuba_memorys.storage.sql.common import lexical_texts

SERVER = Path(sys.executable).with_name("cuba-memorys")
SEED = 14
TYPES = ("concept", "technology", "pattern", "config", "person", "project")
RELATION_TYPES = ("uses", "depends_on", "causes", "related_to", "implements")
CALLS = [  # (tool, arguments; {entity} is filled from the sampled entities)
    ("cuba_vigia", {"metric": "summary"}),
    ("cuba_vigia", {"metric": "health"}),
    ("cuba_vigia", {"metric": "drift"}),
    ("cuba_vigia", {"metric": "communities"}),
    ("cuba_vigia", {"metric": "bridges"}),
    ("cuba_vigia", {"metric": "structural"}),
    ("cuba_reflexion", {"action": "analyze"}),
    ("cuba_hipotesis", {"action": "explain", "effect": "{entity}"}),
    ("cuba_puente", {"action": "predict", "entity_name": "{entity}"}),
]


def barabasi_albert(n: int, m: int, rng: random.Random) -> list[tuple[int, int]]:
    """Preferential attachment: each new node links to m distinct earlier nodes chosen with
    probability proportional to their degree (the repeated-nodes list)."""
    edges, targets, repeated = [], list(range(m)), []
    for node in range(m, n):
        chosen = set()
        while len(chosen) < m:
            chosen.add(rng.choice(repeated) if repeated else rng.choice(targets))
        for other in chosen:
            edges.append((node, other))
            repeated += [node, other]
    return edges


def fill(data_dir: Path, n: int) -> dict:
    """A fresh embedded store holding the synthetic graph (through its own schema)."""
    from cuba_memorys.storage.sqlite.store import SqliteStore

    rng = random.Random(SEED)
    store = SqliteStore(data_dir / "memory.db")
    conn = store.db.conn
    now = iso(utc_now())
    ids = [new_id() for _ in range(n)]
    started = time.perf_counter()
    with store.transaction():
        conn.executemany("INSERT INTO entities(seq, id, name, entity_type, importance, created_at, updated_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(i + 1, ids[i], f"entity-{i}", TYPES[i % len(TYPES)], round(rng.uniform(0.2, 0.9), 3),
                           now, now) for i in range(n)])
        conn.executemany("INSERT INTO entities_fts(rowid, raw, stem) VALUES (?, ?, ?)",
                         [(i + 1, *lexical_texts(f"entity-{i} {TYPES[i % len(TYPES)]}")) for i in range(n)])
        rows = [(i + 1, new_id(), ids[i], f"entity-{i} handles part {i % 97} of the pipeline",
                 "decision" if i % 10 == 0 else "fact", now, now) for i in range(n)]
        conn.executemany("INSERT INTO observations(seq, id, entity_id, content, observation_type, created_at,"
                         " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO observations_fts(rowid, raw, stem) VALUES (?, ?, ?)",
                         [(r[0], *lexical_texts(r[3])) for r in rows])
        edges = barabasi_albert(n, 5, rng)
        conn.executemany("INSERT INTO relations(id, from_entity_id, to_entity_id, relation_type, strength,"
                         " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                         [(new_id(), ids[a], ids[b], RELATION_TYPES[(a + b) % len(RELATION_TYPES)],
                           round(rng.uniform(0.3, 1.0), 3), now) for a, b in edges])
    store.close()
    return {"entities": n, "relations": len(edges), "fill_s": round(time.perf_counter() - started, 1)}


def env_for(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    return {**env, "CUBA_DATA_DIR": str(data_dir), "CUBA_EMBED_MODEL": "none", "CUBA_REM_FIRST_DELAY_SECS": "86400",
            "CUBA_HANDLER_TIMEOUT_SECS": "600"}


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def server_pid(data_dir: Path) -> int | None:
    """The server process serving ``data_dir`` (the newest cuba-memorys child of this process)."""
    mine = str(os.getpid())
    for status in sorted(Path("/proc").glob("[0-9]*/status"), key=lambda p: -int(p.parent.name)):
        try:
            text = status.read_text()
        except OSError:
            continue
        if f"PPid:\t{mine}" in text and "cuba-memorys" in (status.parent / "cmdline").read_text(errors="ignore"):
            return int(status.parent.name)
    return None


async def measure(data_dir: Path, n: int, calls: int) -> dict:
    params = StdioServerParameters(command=str(SERVER), args=[], env=env_for(data_dir))
    rng = random.Random(SEED + 1)
    sample = [f"entity-{rng.randrange(n)}" for _ in range(calls + 2)]
    out: dict = {"tools": {}}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def timed(tool: str, args: dict) -> tuple[float, bool]:
            started = time.perf_counter()
            result = await session.call_tool(tool, args)
            return (time.perf_counter() - started) * 1000, bool(result.is_error)

        steps = []
        for _ in range(3):
            first, bad = await timed("cuba_zafra", {"action": "pagerank"})
            second, bad2 = await timed("cuba_zafra", {"action": "communities"})
            steps.append((first + second) / 1000)
            out["pagerank_communities_error"] = bad or bad2
        out["pagerank_communities_s_median"] = round(statistics.median(steps), 2)
        for tool, template in CALLS:
            key = f"{tool} {template.get('metric') or template.get('action')}"
            times, errors, first = [], 0, 0.0
            for i, entity in enumerate(sample):
                args = {k: (v.format(entity=entity) if isinstance(v, str) else v) for k, v in template.items()}
                ms, bad = await timed(tool, args)
                errors += bad
                if i == 0:
                    first = ms  # on a large graph the call that computes a stored report
                if i >= 2:
                    times.append(ms)
            times.sort()
            out["tools"][key] = {"first_ms": round(first, 1), "p50_ms": round(statistics.median(times), 1),
                                 "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1),
                                 "errors": errors}
        pid = server_pid(data_dir)
        out["server_peak_rss_mib"] = peak_rss_mib(pid) if pid else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.machine(),
              "cpus": os.cpu_count(), "python": platform.python_version(), "sizes": {}}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix=f"cuba-graph-{n}-") as folder:
            data_dir = Path(folder) / "data"
            data_dir.mkdir()
            built = fill(data_dir, n)
            print(f"{n}: filled {built}", file=sys.stderr)
            report["sizes"][n] = {**built, **asyncio.run(measure(data_dir, n, args.calls))}
            print(json.dumps(report["sizes"][n], indent=1), file=sys.stderr)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
