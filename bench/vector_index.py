"""Choose the vector index by measurement, on real multilingual-e5-small embeddings.

Candidates: exact numpy (float32, and float16 storage), faiss-cpu HNSWFlat (inner product),
usearch HNSW (inner product) and sqlite-vec (vec0, exact, via apsw because this Python's
sqlite3 cannot load extensions). Rows: LoCoMo turns (from bench/embed_models.py's cache) plus
LongMemEval_S turns split into <=400-char pieces and embedded here (cached), up to a time
budget; sizes beyond the real rows are filled with derived vectors (described in the output).
Queries: real e5 embeddings of LoCoMo dev questions; odd ones tune efSearch, even ones measure.

    python bench/vector_index.py [--sizes 10000 100000] [--embed-budget-s 1200]

Single-query timings use one thread everywhere (OPENBLAS_NUM_THREADS=1, faiss omp 1, usearch
threads=1), as a server answering one query at a time would; builds use 2 threads.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS

import argparse
import gzip
import json
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

# Benchmarks cache embeddings and stores here between runs (override with CUBA_BENCH_CACHE).
BENCH_CACHE = Path(os.environ.get("CUBA_BENCH_CACHE", Path.home() / ".cache" / "cuba-memorys" / "bench"))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


# ---------------------------------------------------------------------- methods ---
def exact_topk(X: np.ndarray, q: np.ndarray, k: int, mask: np.ndarray | None) -> np.ndarray:
    scores = X @ q
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top], kind="stable")]


class Method:
    """One candidate. Ids are row positions 0..n-1 of the build matrix; adds get n, n+1, ..."""

    tunable = False
    skip_reason = ""
    filter_how = ""
    notes = ""

    def available(self) -> bool:
        return True

    def set_ef(self, ef: int) -> None:
        self.ef = ef

    def time_load_saved(self) -> float | None:
        return None

    def time_rebuild(self, X: np.ndarray, mask: np.ndarray) -> float:
        t0 = time.perf_counter()
        self.build(X, mask)
        return time.perf_counter() - t0

    def close(self) -> None:
        pass


class NumpyExact(Method):
    dtype = np.float32
    filter_how = "scores of disallowed rows set to -inf before argpartition (boolean mask)"
    notes = ("exact; float32 matrix in a capacity-doubling buffer, `M @ q` + argpartition; "
             "delete = swap the last row into the hole (O(dim)); nothing to save or rebuild beyond "
             "copying the matrix.")

    def build(self, X, mask=None):
        self.n, self.M = len(X), np.array(X, dtype=self.dtype)
        self.ids = np.arange(self.n)
        self.pos = {i: i for i in range(self.n)}  # id -> row, for swap-delete
        self.next_id = self.n

    def _scores(self, q):
        return self.M[: self.n] @ q

    def search(self, q, k, mask):
        scores = self._scores(q)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, k)[:k]
        return self.ids[top[np.argsort(-scores[top])]]

    def memory_bytes(self):
        return self.n * self.M.shape[1] * np.dtype(self.dtype).itemsize

    def add_one(self, v):
        if self.n == len(self.M):
            self.M = np.concatenate([self.M, np.empty_like(self.M)])
            self.ids = np.concatenate([self.ids, np.empty_like(self.ids)])
        self.M[self.n], self.ids[self.n] = v, self.next_id
        self.pos[self.next_id] = self.n
        self.n, self.next_id = self.n + 1, self.next_id + 1

    def time_delete(self, ids):
        t0 = time.perf_counter()
        for i in ids:
            p, last = self.pos.pop(int(i)), self.n - 1
            if p != last:
                self.M[p], self.ids[p] = self.M[last], self.ids[last]
                self.pos[int(self.ids[p])] = p
            self.n = last
        return time.perf_counter() - t0


class NumpyF16(NumpyExact):
    dtype = np.float16
    notes = ("exact; float16 storage (half the memory), scored in 16,384-row chunks upcast to float32 "
             "(numpy has no float16 BLAS; a direct float16 matvec is far slower).")

    def _scores(self, q):
        out = np.empty(self.n, dtype=np.float32)
        for a in range(0, self.n, 16384):
            b = min(a + 16384, self.n)
            out[a:b] = self.M[a:b].astype(np.float32) @ q
        return out


class FaissHNSW(Method):
    tunable = True
    filter_how = ("faiss SearchParametersHNSW(sel=IDSelectorBitmap), bitmap packed per query, "
                  "applied during graph search")

    def __init__(self, m: int = 32):
        self.m = m
        self.notes = (f"faiss-cpu IndexHNSWFlat(M={m}, inner product), efConstruction 128; "
                      "remove_ids is not supported for HNSW (deletes need tombstones + periodic rebuild); "
                      "load saved = faiss.deserialize_index.")

    def available(self):
        try:
            import faiss  # noqa: F401
        except ImportError:
            self.skip_reason = "faiss-cpu not installed"
            return False
        return True

    def build(self, X, mask=None):
        import faiss

        faiss.omp_set_num_threads(2)
        self.index = faiss.IndexHNSWFlat(X.shape[1], self.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = 128
        self.index.add(np.ascontiguousarray(X, dtype=np.float32))
        faiss.omp_set_num_threads(1)
        self.ef = 64

    def search(self, q, k, mask):
        import faiss

        if mask is None:
            params = faiss.SearchParametersHNSW(efSearch=self.ef)
        else:
            bits = np.packbits(mask, bitorder="little")
            params = faiss.SearchParametersHNSW(efSearch=self.ef)
            params.sel = sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))  # noqa: F841
        _, ids = self.index.search(q[None, :], k, params=params)
        return ids[0]

    def memory_bytes(self):
        import faiss

        return len(faiss.serialize_index(self.index))

    def time_load_saved(self):
        import faiss

        buf = faiss.serialize_index(self.index)
        t0 = time.perf_counter()
        faiss.deserialize_index(buf)
        return time.perf_counter() - t0

    def add_one(self, v):
        self.index.add(v[None, :].astype(np.float32))

    def time_delete(self, ids):
        import faiss

        try:
            self.index.remove_ids(faiss.IDSelectorBatch(np.asarray(ids, dtype=np.int64)))
        except RuntimeError:
            return None
        raise AssertionError("faiss HNSW unexpectedly supports remove_ids; measure it")


class USearchHNSW(Method):
    tunable = True
    filter_how = ("no filter in usearch's Python search: post-filter, fetching 2 x k / allowed-fraction "
                  "candidates and growing x4 until k allowed")

    def __init__(self, m: int = 16):
        self.m = m
        self.notes = (f"usearch Index(metric ip, f32, connectivity {m}, expansion_add 128); "
                      "remove() marks a tombstone (memory is reclaimed on rebuild); load saved = Index.restore(bytes).")

    def available(self):
        try:
            import usearch.index  # noqa: F401
        except ImportError:
            self.skip_reason = "usearch not installed"
            return False
        return True

    def build(self, X, mask=None):
        from usearch.index import Index

        self.index = Index(ndim=X.shape[1], metric="ip", dtype="f32", connectivity=self.m, expansion_add=128)
        self.index.add(np.arange(len(X), dtype=np.uint64), np.ascontiguousarray(X, dtype=np.float32), threads=2)
        self.next_key = len(X)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def search(self, q, k, mask):
        if mask is None:
            return self.index.search(q, k, threads=1).keys.astype(np.int64)
        count = int(2 * k / max(mask.mean(), 1e-3))
        while True:
            keys = self.index.search(q, count, threads=1).keys.astype(np.int64)
            keep = keys[mask[keys]]
            if len(keep) >= k or count >= len(mask):
                return keep[:k]
            count *= 4

    def memory_bytes(self):
        return int(self.index.memory_usage)

    def time_load_saved(self):
        from usearch.index import Index

        buf = self.index.save()
        t0 = time.perf_counter()
        Index.restore(buf)
        return time.perf_counter() - t0

    def add_one(self, v):
        self.index.add(self.next_key, v)
        self.next_key += 1

    def time_delete(self, ids):
        t0 = time.perf_counter()
        for i in ids:
            self.index.remove(int(i))
        return time.perf_counter() - t0


class SqliteVec(Method):
    filter_how = "vec0 metadata column `allowed integer` in the KNN WHERE clause"
    notes = ("sqlite-vec 0.1.9 vec0 table (exact scan, float32) in an on-disk WAL database "
             "(memory column = database file size), loaded with apsw "
             "(python's sqlite3 here cannot load extensions); persistent, so nothing to rebuild at start: "
             "`load saved` = reopen + load extension + first query; adds/deletes are one autocommit statement each.")

    def available(self):
        try:
            import apsw  # noqa: F401
            import sqlite_vec  # noqa: F401
        except ImportError as exc:
            self.skip_reason = f"{exc.name} not installed"
            return False
        return True

    def _open(self, path):
        import apsw
        import sqlite_vec

        conn = apsw.Connection(str(path))
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.execute("pragma journal_mode=wal; pragma synchronous=normal")
        return conn

    def build(self, X, mask=None):
        self.tmp = tempfile.mkdtemp(prefix="vecbench")
        self.path = Path(self.tmp) / "v.db"
        self.conn = self._open(self.path)
        self.conn.execute(f"create virtual table v using vec0(embedding float[{X.shape[1]}], allowed integer)")
        allowed = mask if mask is not None else np.ones(len(X), bool)
        with self.conn:
            self.conn.executemany("insert into v(rowid, embedding, allowed) values (?, ?, ?)",
                                  ((i + 1, X[i].tobytes(), int(allowed[i])) for i in range(len(X))))
        self.next_id = len(X) + 1

    def search(self, q, k, mask):
        sql = "select rowid from v where embedding match ? and k = ?" + (" and allowed = 1" if mask is not None else "")
        return np.array([r[0] - 1 for r in self.conn.execute(sql, (q.astype(np.float32).tobytes(), k))])

    def memory_bytes(self):
        # Size on disk after a checkpoint (the bulk insert leaves a WAL as large as the data);
        # queries scan it through SQLite's page cache rather than holding it in process memory.
        self.conn.execute("pragma wal_checkpoint(truncate)")
        return self.path.stat().st_size

    def time_load_saved(self):
        t0 = time.perf_counter()
        conn = self._open(self.path)
        list(conn.execute("select rowid from v where embedding match ? and k = 20",
                          (np.ones(384, np.float32).tobytes(),)))
        conn.close()
        return time.perf_counter() - t0

    def add_one(self, v):
        self.conn.execute("insert into v(rowid, embedding, allowed) values (?, ?, 1)", (self.next_id, v.tobytes()))
        self.next_id += 1

    def time_delete(self, ids):
        t0 = time.perf_counter()
        for i in ids:
            self.conn.execute("delete from v where rowid = ?", (int(i) + 1,))
        return time.perf_counter() - t0

    def time_rebuild(self, X, mask):
        old_conn, old_tmp = self.conn, self.tmp
        t = super().time_rebuild(X, mask)
        old_conn.close()
        subprocess.run(["rm", "-rf", old_tmp], check=False)
        return t

    def close(self):
        self.conn.close()
        subprocess.run(["rm", "-rf", self.tmp], check=False)


METHODS = {
    "numpy-f32": NumpyExact,
    "numpy-f16": NumpyF16,
    "faiss-hnsw16": lambda: FaissHNSW(16),
    "faiss-hnsw32": lambda: FaissHNSW(32),
    "usearch-hnsw16": lambda: USearchHNSW(16),
    "sqlite-vec": SqliteVec,
}
NOTES = {"faiss-hnsw16": FaissHNSW(16).notes, "faiss-hnsw32": FaissHNSW(32).notes,
         "usearch-hnsw16": USearchHNSW(16).notes}

K, RECALL_AT, FILTER_FRACTION, TARGET_RECALL = 20, 10, 0.30, 0.95
NOISE_SIGMA = 0.0025  # per dimension; |noise| ~ 0.05 for 384 dims


# ------------------------------------------------------------------------- data ---
def split_pieces(text: str, limit: int = 400) -> list[str]:
    """Sentences packed greedily into pieces of at most ``limit`` characters."""
    out, cur = [], ""
    for sent in re.split(r"(?<=[.!?])\s+|\n+", text):
        sent = sent.strip()
        for part in textwrap.wrap(sent, limit) if len(sent) > limit else [sent] if sent else []:
            if cur and len(cur) + 1 + len(part) > limit:
                out.append(cur)
                cur = part
            else:
                cur = f"{cur} {part}" if cur else part
    if cur:
        out.append(cur)
    return out


def lme_embeddings(path: Path, cache: Path, budget_s: float) -> tuple[np.ndarray, int, float]:
    """Embed shuffled, de-duplicated LongMemEval_S pieces until the time budget is spent."""
    vec_file, meta_file = cache / "lme_e5_pieces.npy", cache / "lme_e5_pieces.json"
    if vec_file.exists() and meta_file.exists():
        meta = json.loads(meta_file.read_text())
        return np.load(vec_file), meta["available"], meta["seconds"]
    with gzip.open(path, "rt") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    pieces = sorted({p for t in texts for p in split_pieces(t) if len(p) >= 20})
    np.random.default_rng(0).shuffle(pieces)
    from cuba_memorys.embed import load_embedder

    emb = load_embedder("multilingual-e5-small", threads=2).embedder
    assert emb is not None
    chunks, t0 = [], time.perf_counter()
    for start in range(0, len(pieces), 512):
        chunks.append(emb.embed_passages(pieces[start : start + 512]))
        if time.perf_counter() - t0 > budget_s:
            break
    seconds = time.perf_counter() - t0
    vecs = np.concatenate(chunks)
    np.save(vec_file, vecs)
    meta = {"available": len(pieces), "embedded": len(vecs), "seconds": seconds,
            "texts": pieces[: len(vecs)]}
    meta_file.write_text(json.dumps(meta))
    return vecs, len(pieces), seconds


def derived(real: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """normalise(w*a + (1-w)*b + noise): a, b random real rows, w ~ U(0.2, 0.8)."""
    a = real[rng.integers(0, len(real), n)]
    b = real[rng.integers(0, len(real), n)]
    w = rng.uniform(0.2, 0.8, (n, 1)).astype(np.float32)
    v = w * a + (1 - w) * b + rng.normal(0, NOISE_SIGMA, a.shape).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


# -------------------------------------------------------------------- measuring ---
def recall(found: list[np.ndarray], truth: list[np.ndarray]) -> float:
    return float(np.mean([len(set(f[:RECALL_AT]) & set(t[:RECALL_AT])) / RECALL_AT for f, t in zip(found, truth)]))


def timed_queries(search, queries: np.ndarray) -> tuple[list[np.ndarray], float, float]:
    search(queries[0])  # warm-up
    found, lat = [], []
    for q in queries:
        t0 = time.perf_counter()
        found.append(search(q))
        lat.append((time.perf_counter() - t0) * 1000)
    return found, float(np.median(lat)), float(np.percentile(lat, 95))


def tune(method, tune_q: np.ndarray, truth: list[np.ndarray], mask: np.ndarray | None) -> int | None:
    """Smallest efSearch giving recall@10 >= 0.95 on the tuning questions."""
    if not method.tunable:
        return None
    for ef in (20, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024):
        method.set_ef(ef)
        if recall([method.search(q, K, mask) for q in tune_q], truth) >= TARGET_RECALL:
            return ef
    return ef


def run_size(n: int, pool: np.ndarray, extra: np.ndarray, queries: np.ndarray, methods: list[str]) -> list[dict]:
    X = pool[:n]
    rng = np.random.default_rng(n)
    mask = rng.random(n) < FILTER_FRACTION
    tune_q, eval_q = queries[1::2], queries[0::2]
    truth = {name: [exact_topk(X, q, K, m) for q in qs] for name, qs, m in
             [("tune", tune_q, None), ("eval", eval_q, None), ("tune_f", tune_q, mask), ("eval_f", eval_q, mask)]}
    rows = []
    for name in methods:
        method = METHODS[name]()
        if not method.available():
            rows.append({"size": n, "method": name, "skipped": method.skip_reason})
            continue
        t0 = time.perf_counter()
        method.build(X, mask)
        build_s = time.perf_counter() - t0
        ef = tune(method, tune_q, truth["tune"], None)
        if ef is not None:
            method.set_ef(ef)
        found, p50, p95 = timed_queries(lambda q, method=method: method.search(q, K, None), eval_q)
        ef_f = tune(method, tune_q, truth["tune_f"], mask)
        if ef_f is not None:
            method.set_ef(ef_f)
        found_f, fp50, fp95 = timed_queries(lambda q, method=method: method.search(q, K, mask), eval_q)
        row = {"size": n, "method": name, "build_s": build_s, "ef": ef, "ef_filtered": ef_f,
               "p50_ms": p50, "p95_ms": p95, "recall": recall(found, truth["eval"]),
               "f_p50_ms": fp50, "f_p95_ms": fp95, "f_recall": recall(found_f, truth["eval_f"]),
               "memory_bytes": method.memory_bytes(), "filter_how": method.filter_how}
        row["load_saved_s"] = method.time_load_saved()
        t0 = time.perf_counter()
        for v in extra[:1000]:
            method.add_one(v)
        row["add_1k_s"] = time.perf_counter() - t0
        row["delete_1k_s"] = method.time_delete(rng.choice(n, 1000, replace=False))
        row["rebuild_s"] = method.time_rebuild(X, mask)
        rows.append(row)
        print(json.dumps(row), flush=True)
        method.close()
    return rows


def fmt_table(rows: list[dict]) -> str:
    head = ("| rows | method | build s | rebuild s | load saved s | memory MB | top-20 p50 / p95 ms | recall@10 "
            "| filtered 30% p50 / p95 ms | filtered recall@10 | add 1k (one at a time) s | delete 1k s |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['size']:,} | {r['method']} | skipped: {r['skipped']} |" + " |" * 9)
            continue
        ef = f" (ef {r['ef']}/{r['ef_filtered']})" if r["ef"] else ""
        dele = "not supported" if r["delete_1k_s"] is None else f"{r['delete_1k_s']:.3f}"
        load = "-" if r["load_saved_s"] is None else f"{r['load_saved_s']:.3f}"
        lines.append(
            f"| {r['size']:,} | {r['method']}{ef} | {r['build_s']:.2f} | {r['rebuild_s']:.2f} | {load} | "
            f"{r['memory_bytes'] / 1e6:.1f} | {r['p50_ms']:.2f} / {r['p95_ms']:.2f} | {r['recall']:.3f} | "
            f"{r['f_p50_ms']:.2f} / {r['f_p95_ms']:.2f} | {r['f_recall']:.3f} | {r['add_1k_s']:.3f} | {dele} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--cache", type=Path, default=BENCH_CACHE)
    ap.add_argument("--lme", type=Path, default=(Path(__file__).resolve().parents[2] / "shared" / "bench"
                                                 / "longmemeval_s" / "corpus.jsonl.gz"))
    ap.add_argument("--embed-budget-s", type=float, default=1200)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "_vector_index_results.md")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]

    locomo = np.load(args.cache / "locomo_e5_passages.npy")
    queries = np.load(args.cache / "locomo_e5_queries.npy")
    lme, lme_available, lme_seconds = lme_embeddings(args.lme, args.cache, args.embed_budget_s)
    real = np.concatenate([locomo, lme]).astype(np.float32)
    rng = np.random.default_rng(0)
    real = real[rng.permutation(len(real))]
    need = max(args.sizes) + 1000
    n_derived = max(0, need - len(real))
    pool = np.concatenate([real, derived(real, n_derived, rng)]) if n_derived else real
    data_note = (
        f"Rows: {len(real):,} real e5 passage embeddings ({len(locomo):,} LoCoMo turns + {len(lme):,} of "
        f"{lme_available:,} de-duplicated LongMemEval_S pieces of <=400 chars, embedded in {lme_seconds / 60:.1f} "
        f"min at 2 threads; all {lme_available:,} would take ~{lme_available / len(lme) * lme_seconds / 60:.0f} min), "
        f"shuffled. Sizes above that are filled with {n_derived:,} derived vectors "
        f"normalise(w*a + (1-w)*b + N(0, {NOISE_SIGMA}^2 per dim)), a, b random real rows, w ~ U(0.2, 0.8); "
        f"the 1,000 rows added incrementally come after each size's rows in this pool. "
        f"Queries: {len(queries)} real e5 query embeddings of LoCoMo dev questions "
        f"(odd ones tune efSearch for recall@10 >= {TARGET_RECALL}, the {len(queries[0::2])} even ones are measured). "
        f"Filter: a random {FILTER_FRACTION:.0%} of rows allowed; recall is against exact search "
        f"over the allowed rows.")
    print(data_note, flush=True)

    rows = []
    for n in args.sizes:
        rows += run_size(n, pool[:n], pool[n : n + 1000], queries, args.methods)
    table = fmt_table(rows)
    notes = "\n".join(f"- {name}: {NOTES.get(name) or METHODS[name].notes} Filter: {METHODS[name]().filter_how}."
                      for name in args.methods)
    lscpu = subprocess.run("lscpu | head; lscpu | grep -i 'model name'", shell=True, capture_output=True,
                           text=True).stdout.strip()
    doc = (f"## Vector index benchmark\n\nCommand: `python bench/vector_index.py "
           f"--sizes {' '.join(map(str, args.sizes))}`  \nDate: {time.strftime('%Y-%m-%d %H:%M %Z')}  \n"
           f"Machine: nproc={os.cpu_count()}, Python {platform.python_version()}, 1-min load average "
           f"{load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end (the machine is shared)\n\n"
           f"```\n{lscpu}\n```\n\n{data_note}\n\n"
           "Single queries use one thread; builds two. `rebuild` = building the index from the float32 "
           "matrix, what a server without a saved index does at start; `load saved` = restoring a "
           "serialised index instead. ef = efSearch (unfiltered/filtered).\n\n"
           f"{table}\n\nMethods:\n{notes}\n")
    print("\n" + table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(doc)
    (args.cache / "vector_index_rows.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
