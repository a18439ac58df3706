"""Where one search's time goes on an existing store: the query embedding, the lexical branches, the
vector branch, and the whole `faro`, each timed in-process (p50 / p95 over real questions).

    OMP_NUM_THREADS=1 .venv/bin/python bench/search_breakdown.py \\
        --data-dir ~/.cache/cuba-memorys/bench/scale-stores/100000

The HNSW accelerator is waited for first (loaded from its saved file, or built: ~25 s at 100k the
first time), so the vector branch is timed as a running server answers, not as an exact scan
beside a build in progress. ``--questions`` takes a JSONL file of {"query": ...} lines or a JSON
list of strings (e.g. the queries bench/scale.py sends).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from cuba_memorys.config import Settings
from cuba_memorys.search.hybrid import BM25_KINDS, SCOPE_KINDS, SearchRequest
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.search import faro as search
from cuba_memorys.text import analyze

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo" / "queries-dev.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="CUBA_DATA_DIR of a filled store")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    mem = Memory.open(replace(Settings.from_env(), data_dir=args.data_dir))
    waited = time.perf_counter()
    ready = _accelerator_ready(mem)
    print(f"HNSW accelerator: {ready} ({time.perf_counter() - waited:.1f} s)")
    queries = _questions(args.questions)[:args.count]
    for q in queries[:5]:  # warm-up: caches, lazy loads
        search.faro(mem, None, query=q, track_access=False)
    times: dict[str, list[float]] = {"query embedding": [], "lexical branches": [], "vector branch": [], "faro": []}
    flt = SearchRequest(query="").filter
    for q in queries[5:]:
        started = time.perf_counter()
        vec = mem.embedder.embed_query(q + " ?")  # a text the query cache has not seen
        times["query embedding"].append(time.perf_counter() - started)
        started = time.perf_counter()
        for kind in SCOPE_KINDS["all"]:
            mem.store.text_candidates(kind, q, 100, flt)
        for kind in BM25_KINDS:
            mem.store.bm25_candidates(kind, analyze(q), 100, flt)
        times["lexical branches"].append(time.perf_counter() - started)
        started = time.perf_counter()
        for kind in ("observation", "episode"):
            mem.store.vector_candidates(kind, vec, 100, flt)
        times["vector branch"].append(time.perf_counter() - started)
        started = time.perf_counter()
        search.faro(mem, None, query=q + " !", track_access=False)
        times["faro"].append(time.perf_counter() - started)
    mem.close()
    for name, values in times.items():
        values.sort()
        print(f"{name:<18} p50 {statistics.median(values) * 1000:6.1f} ms"
              f"   p95 {values[int(0.95 * len(values))] * 1000:6.1f} ms")


def _accelerator_ready(mem: Memory) -> str:
    index = getattr(mem.store, "vectors", {}).get("observation")
    if index is None or index.accelerator is None:
        return "none (exact search)"
    return "ready" if index.accelerator.wait(600) else f"not ready ({index.accelerator.last_error})"


def _questions(path: Path) -> list[str]:
    text = path.read_text()
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line)["query"] for line in text.splitlines() if line.strip()]


if __name__ == "__main__":
    main()
