"""What freshness costs a search (issue 19 §3): cuba_faro p50 with and without the anchor check.

Builds a SQLite store of ``--rows`` observations (default 100 000; every ``--anchored``-th one
anchored to a function of a generated git repository of ``--files`` Python files), then runs
the same queries twice per round: through cuba_faro as it is, and with the anchors step
(services/code/search.mark_results) replaced by the identity — the baseline measured in the
same run. Reports the medians, their difference (what freshness costs a search) and the p50 of
the check alone over each answer's rows, warm (the caches filled by the search just made: what
a repeated read pays) and cold (a new FreshnessCache per answer: what the first read after a
start or after the files changed pays — parsing and git).

``--mix`` makes the rows not all fresh (see :func:`mix`): after seeding, a fifth of the files are
renamed (one commit), then half of those rewritten past git's 50% similarity and two functions
edited in two fifths of the others (a second commit), so answers meet fresh, moved-by-rename,
renamed-then-changed and changed anchors (moved ones are re-anchored after the first answer, as
in the product; the statuses are printed).

    .venv/bin/python bench/anchor_freshness.py [--rows 100000] [--anchored 5] [--rounds 5] [--mix]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from cuba_memorys.code import spans
from cuba_memorys.config import Settings
from cuba_memorys.models import NewObservation, iso, new_id, utc_now
from cuba_memorys.services.code import anchors, search
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.search import faro

WORDS = ["cache", "checkout", "billing", "invoice", "queue", "retry", "timeout", "gateway", "schema", "migration",
         "replica", "shard", "backup", "metric", "alert", "config", "secret", "webhook", "payment", "refund",
         "ledger", "report", "export", "import", "sync", "conflict"]


def make_repo(root: Path, files: int) -> list[tuple[str, str, int, int, str]]:
    """``files`` Python files of 20 functions each; (path, symbol, start, end, hash) per function."""
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x")
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    out = []
    for f in range(files):
        lines: list[str] = []
        for n in range(20):
            start = len(lines) + 1
            lines += [f"def fn_{n}(x):", f"    y = x * {n}", f"    return y + {f}", "", ""]
            out.append((f"pkg/mod_{f}.py", f"fn_{n}", start, start + 2, spans.span_hash("\n".join(lines[-5:-2]))))
        path = root / "pkg" / f"mod_{f}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(lines))
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "seed"], cwd=root, check=True, env=env)
    return out


def mix(root: Path, files: int) -> None:
    """Two commits: rename the files f % 5 == 0 (a fifth); then rewrite half of those past git's
    50% similarity (150 helpers first, fn_0's body changed) and edit fn_5 and fn_15 in the files
    f % 5 in (1, 2) (another two fifths). Seed anchors every 5th function (fn_0, 5, 10, 15), so
    about a fifth of the anchors move with a renamed file and a fifth are changed."""
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x")

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    for f in range(0, files, 5):
        git("mv", f"pkg/mod_{f}.py", f"pkg/renamed_{f}.py")
    git("commit", "-qm", "rename a fifth")
    helpers = "".join(f"def helper_{n}(x):\n    return x - {n}\n\n\n" for n in range(150))
    for f in range(0, files, 10):
        path = root / "pkg" / f"renamed_{f}.py"
        path.write_text(helpers + path.read_text().replace("y = x * 0\n", "y = x * 100\n"))
    for f in (f for f in range(files) if f % 5 in (1, 2)):
        path = root / "pkg" / f"mod_{f}.py"
        text = path.read_text().replace("y = x * 5\n", "y = x * 55\n")
        path.write_text(text.replace("y = x * 15\n", "y = x * 1515\n"))
    git("commit", "-qam", "rewrite and edit")


def seed(mem: Memory, root: Path, functions: list, rows: int, every: int, rng: random.Random) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    entities = [mem.store.create_entity(f"component-{i}", "concept", None).id for i in range(200)]
    now = iso(utc_now())
    with mem.store.transaction():
        for n in range(rows):
            content = " ".join(rng.choice(WORDS) for _ in range(12)) + f" note {n}"
            obs_id = mem.store.add_observation(NewObservation(
                entity_id=entities[n % len(entities)], content=content, observation_type="fact", source="agent",
                importance=0.5, tags=[], trust="trusted", project_id=None, session_id=None, created_at=None,
                embedding=None, embedding_model=None))
            if n % every == 0:
                path, symbol, start, end, digest = functions[n % len(functions)]
                mem.store.add_anchors([{
                    "id": new_id(), "observation_id": obs_id, "project_id": None, "repo_root": str(root),
                    "commit_sha": head, "path": path, "symbol": symbol, "line_start": start, "line_end": end,
                    "span_hash": digest, "created_at": now, "updated_at": now, "status": "fresh",
                    "status_checked_at": now, "changed_since": None}])


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--anchored", type=int, default=5, help="every N-th row is anchored")
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--mix", action="store_true", help="rename, rewrite and edit some files after seeding")
    args = parser.parse_args()
    rng = random.Random(19)
    work = Path(tempfile.mkdtemp(prefix="cuba-anchor-bench-"))
    functions = make_repo(work / "repo", args.files)
    settings = replace(Settings.from_env(), data_dir=work / "data", embed_model="none", code_root=work / "repo",
                       undo_dir=work / "undo")
    mem = Memory.open(settings, check_model=False)
    started = time.perf_counter()
    seed(mem, work / "repo", functions, args.rows, args.anchored, rng)
    if args.mix:
        mix(work / "repo", args.files)
    print(f"seeded {args.rows} rows ({args.rows // args.anchored} anchored) in {time.perf_counter() - started:.0f} s")
    queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
    real = search.mark_results
    with_check: list[float] = []
    without: list[float] = []
    check_only: list[float] = []
    check_cold: list[float] = []
    statuses: Counter[str] = Counter()
    anchored_rows = []
    for _ in range(args.rounds):
        for query in queries:
            search.mark_results = real  # type: ignore[assignment]
            answer: dict = {}
            with_check.append(timed(lambda q=query, a=answer: a.update(faro.faro(mem, None, query=q,
                                                                               track_access=False))))
            statuses.update(a["status"] for r in answer["results"] for a in r.get("anchors", []))
            search.mark_results = lambda mem, client, outcome, ctx: (outcome, 0)  # type: ignore[assignment]
            without.append(timed(lambda q=query: faro.faro(mem, None, query=q, track_access=False)))
            search.mark_results = real  # type: ignore[assignment]
            ids = [r["id"] for r in faro.faro(mem, None, query=query, track_access=False)["results"]]
            anchored_rows.append(len(mem.store.anchors_of(ids)))
            check_only.append(timed(lambda i=ids: anchors.annotate(mem, None, i)))
            mem.settle()
            saved = mem.caches.pop("code_freshness", None)  # cold: a new cache for this answer
            check_cold.append(timed(lambda i=ids: anchors.annotate(mem, None, i)))
            mem.settle()
            if saved is not None:
                mem.caches["code_freshness"] = saved
    mem.close()
    shutil.rmtree(work, ignore_errors=True)  # its 100k-row store and repository: ~90 MB each run
    p50_with, p50_without = statistics.median(with_check), statistics.median(without)
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores,"
          f" Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    print(f"cuba_faro p50 with freshness {p50_with:.2f} ms, without {p50_without:.2f} ms"
          f" (ratio {p50_with / p50_without:.3f}, difference {p50_with - p50_without:+.2f} ms)")
    for name, values in (("warm", check_only), ("cold", check_cold)):
        print(f"the check alone over each answer's rows, {name}: p50 {statistics.median(values):.3f} ms,"
              f" p95 {sorted(values)[int(len(values) * 0.95)]:.3f} ms")
    print(f"anchored rows per answer: median {statistics.median(anchored_rows):.0f};"
          f" their anchors' statuses as the searches read them, all rounds: {dict(sorted(statuses.items()))}")


if __name__ == "__main__":
    main()
