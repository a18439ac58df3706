"""Run the code-anchor set (build_set.py) through the real services (issue 19, §5).

A throw-away clone of the repository is checked out at each commit of the set in turn, oldest
first; the store (SQLite, in a temporary CUBA_DATA_DIR, CUBA_CODE_ROOT = the clone) sees:

1. at commit C, first the queries made from C: ``cuba_faro`` with the subject line as the query,
   plain and with ``context: {diff: C's diff}``, each with the stale-row factor as shipped and with
   it set to 1.0 (services/code/anchors.STALE_FACTOR is patched in this process — the factor is a
   module constant, not a setting); the working tree is C, so the memories about code C changed
   read as ``changed`` at that moment;
2. then C's memories, written with ``batch_add`` and their anchors ({path, symbol}, resolved by
   the service at C, the clone's HEAD).

After the walk the clone goes to the set's head and every anchor is checked (no time budget)
against the staleness labels. ``--budget`` lifts the read-time freshness budget
(anchors.BUDGET_SECONDS, patched the same way) to see the factor's effect when every row is checked.
Access tracking is off for every query (track_access=false), so
one variant's query cannot change another's ranking.

    .venv/bin/python -m bench.code_anchors.run [--set bench/results/code_anchors/set.json]
        [--out bench/results/code_anchors/run.json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.code_anchors import scoring
from bench.code_anchors.build_set import DEFAULT_OUT, ROOT
from bench.code_anchors.history import git

from cuba_memorys.code.freshness import FreshnessCache, check_anchor
from cuba_memorys.config import Settings
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search

VARIANTS = ("plain", "diff", "plain_factor1", "diff_factor1")
COMPARISONS = [("plain", "diff"), ("plain_factor1", "plain"), ("diff_factor1", "diff"),
               ("plain_factor1", "diff_factor1")]
LIMIT = 10


@contextmanager
def stale_factor(value: float | None) -> Iterator[None]:
    """The stale-row factor set to ``value`` for every status (None: as shipped), then put back."""
    saved = dict(code_anchors.STALE_FACTOR)
    if value is not None:
        for status in saved:
            code_anchors.STALE_FACTOR[status] = value
    try:
        yield
    finally:
        code_anchors.STALE_FACTOR.clear()
        code_anchors.STALE_FACTOR.update(saved)


def ask(mem: Memory, query: str, diff: str | None, factor: float | None) -> dict[str, Any]:
    args: dict[str, Any] = {"query": query[:10_000], "limit": LIMIT, "max_tokens": 1_000_000,
                            "track_access": False}
    if diff:
        args["context"] = {"diff": diff}
    started = time.perf_counter()
    with stale_factor(factor):
        response = search.faro(mem, None, **args)
        mem.settle()  # moved anchors are re-anchored after the answer: done before the next call
    return {"ms": (time.perf_counter() - started) * 1000, "results": response["results"],
            "context_matches": response.get("context_matches")}


def _statuses(results: list[dict[str, Any]]) -> Counter[str]:
    seen: Counter[str] = Counter()
    for r in results:
        if "freshness" in r:
            seen[r["freshness"]] += 1
            budget = any(a.get("detail") == "not checked: time budget" for a in r.get("anchors", []))
            seen["unverifiable (time budget)"] += budget
    return seen


def check_cost(mem: Memory, results: list[dict[str, Any]]) -> dict[str, float]:
    """What checking the answer's anchors costs, apart from the search, in a cache of its own
    (the variants' own cache is put back, so this changes no ranking): cold (a new
    FreshnessCache: the first read after a start or after the files changed — parsing, the
    rename maps, changed_since) and warm (the same rows again: a repeated read). No budget, so
    the whole cost shows, and nothing is written."""
    ids = [r["id"] for r in results]
    rows = [a for found in mem.store.anchors_of(ids).values() for a in found]
    saved = mem.caches.pop("code_freshness", None)
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        code_anchors.check_rows(mem, rows, unlimited=True)
        timings.append((time.perf_counter() - started) * 1000)
    cache = FreshnessCache()  # cold again, the status alone: what a read must fit in its budget
    started = time.perf_counter()
    for row in rows:
        check_anchor(Path(row["repo_root"]), code_anchors.as_anchor(row), cache, history=False)
    timings.append((time.perf_counter() - started) * 1000)
    mem.caches.pop("code_freshness", None)
    if saved is not None:
        mem.caches["code_freshness"] = saved
    return {"check_cold_ms": round(timings[0], 2), "check_warm_ms": round(timings[1], 2),
            "check_cold_status_ms": round(timings[2], 2), "anchors": len(rows)}


def run_query(mem: Memory, query: dict[str, Any], relevant: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": query["id"], "commit": query["commit"], "relevant": len(relevant)}
    for variant in VARIANTS:
        answer = ask(mem, query["query"], query["diff"] if variant.startswith("diff") else None,
                     1.0 if variant.endswith("factor1") else None)
        ranked = [r["id"] for r in answer["results"]]
        out[variant] = {**scoring.per_query(ranked, relevant), "ms": round(answer["ms"], 1),
                        "freshness": dict(_statuses(answer["results"])),
                        "relevant_stale_in_top": sum(1 for r in answer["results"]
                                                     if r["id"] in relevant and r.get("stale")),
                        "from_context": sum(1 for r in answer["results"] if r.get("from_context"))}
        if answer["context_matches"] is not None:
            out[variant]["context_matches"] = answer["context_matches"]
        if variant == "diff":
            out["check_cost"] = check_cost(mem, answer["results"])
    return out


def write_memories(mem: Memory, memories: list[dict[str, Any]]) -> tuple[dict[str, str], int]:
    """Store one commit's memories with their anchors; memory id -> observation id, and how many
    anchors the service resolved to other lines or another hash than the set's."""
    items = [{"entity_name": f"commit {m['commit'][:10]}", "content": m["text"], "observation_type": "context",
              **({"anchors": [{"path": a["path"], "symbol": a["symbol"]} for a in m["anchors"]]}
                 if m["anchors"] else {})} for m in memories]
    answer = observations.batch_add(mem, None, items)
    ids = dict(zip((m["id"] for m in memories), answer["ids"]))
    stored = mem.store.anchors_of(list(set(answer["ids"])))
    mismatched = 0
    for m in memories:
        have = {(a["path"], a["symbol"]): a for a in stored.get(ids[m["id"]], [])}
        for a in m["anchors"]:
            got = have.get((a["path"], a["symbol"]))
            if got is None or [got["line_start"], got["line_end"]] != a["lines"] or got["span_hash"] != a["span_hash"]:
                mismatched += 1
    mem.wait_for_embeddings()
    return ids, mismatched


def read_flags(mem: Memory, data: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """Every anchor checked at the head (no time budget), per memory (the row's worst anchor,
    as the read path shows it) and per anchor, against the labels."""
    rows = mem.store.anchors_in_scope(mem.scope(None), 1_000_000)
    started = time.perf_counter()
    found = code_anchors.check_rows(mem, rows, unlimited=True)
    cold_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    code_anchors.check_rows(mem, rows, unlimited=True)
    warm_ms = (time.perf_counter() - started) * 1000
    by_obs: dict[str, list[str]] = defaultdict(list)
    read_anchor: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row, f in zip(rows, found):
        by_obs[row["observation_id"]].append(f.status)
        read_anchor[(row["observation_id"], row["symbol"] or "")].append(f.status)
    labels: dict[str, list[str]] = defaultdict(list)
    anchor_labels: dict[tuple[str, str], set[str]] = defaultdict(set)
    memories = {m["id"]: m for m in data["memories"]}
    for s in data["staleness"]:
        obs = ids[s["memory"]]
        labels[obs].append(s["label"])
        for a, label in zip(memories[s["memory"]]["anchors"], s["anchor_labels"]):
            anchor_labels[(obs, a["symbol"])].add(label)
    row_pairs = [(min(labels[obs], key=("missing", "changed", "fresh").index), code_anchors.worst(by_obs[obs]))
                 for obs in sorted(labels)]
    anchor_pairs = [(next(iter(lab)), read_anchor[key][0]) for key, lab in sorted(anchor_labels.items())
                    if len(lab) == 1 and len(read_anchor.get(key, [])) == 1]
    return {"anchors_checked": len(rows), "check_all_cold_ms": round(cold_ms, 1),
            "check_all_warm_ms": round(warm_ms, 1), "rows": scoring.flag_quality(row_pairs),
            "anchors": scoring.flag_quality(anchor_pairs),
            "anchors_not_compared": len(anchor_labels) - len(anchor_pairs)}


def replay(data: dict[str, Any], source: Path, work: Path, max_queries: int | None = None) -> dict[str, Any]:
    clone = work / "repo"
    git(work, "clone", "-q", "--no-checkout", str(source), str(clone))
    settings = replace(Settings.from_env(), data_dir=work / "data", database_url="", code_root=clone,
                       undo_dir=work / "data" / "undo", juez_cli="none")
    memories: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in data["memories"]:
        memories[m["commit_index"]].append(m)
    queries = {q["commit_index"]: q for q in data["queries"][:max_queries]}
    ids: dict[str, str] = {}
    per_query: list[dict[str, Any]] = []
    mismatched = 0
    mem = Memory.open(settings)
    try:
        for step in data["commits"]:
            git(clone, "checkout", "-q", "-f", "--detach", step["sha"])
            query = queries.get(step["index"])
            if query is not None:
                relevant = {ids[m] for m in query["relevant"]}
                per_query.append(run_query(mem, query, relevant))
                print(f"{query['id']}: relevant {len(relevant)}  nDCG plain {per_query[-1]['plain']['ndcg10']:.3f}"
                      f"  diff {per_query[-1]['diff']['ndcg10']:.3f}", flush=True)
            if memories[step["index"]]:
                written, bad = write_memories(mem, memories[step["index"]])
                ids.update(written)
                mismatched += bad
        git(clone, "checkout", "-q", "-f", "--detach", data["head"])
        flags = read_flags(mem, data, ids)
    finally:
        mem.close()
    return {"queries": per_query, "flags": flags, "anchors_resolved_differently": mismatched,
            "observations": len(set(ids.values()))}


def summarize(data: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    rows = result["queries"]
    freshness: dict[str, Counter[str]] = {v: Counter() for v in VARIANTS}
    for r in rows:
        for v in VARIANTS:
            freshness[v].update(r[v]["freshness"])
    return {"set": data["stats"], "head": data["head"], "observations": result["observations"],
            "anchors_resolved_differently": result["anchors_resolved_differently"],
            "ranking": scoring.ranking(rows, list(VARIANTS), COMPARISONS),
            "top10_freshness": {v: dict(sorted(c.items())) for v, c in freshness.items()},
            "read_budget_seconds": code_anchors.BUDGET_SECONDS,
            "queries_with_more_than_10_relevant": sum(r["relevant"] > LIMIT for r in rows),
            "median_ms": {v: sorted(r[v]["ms"] for r in rows)[len(rows) // 2] for v in VARIANTS} if rows else {},
            "per_search_check_ms": _check_percentiles([r["check_cost"] for r in rows if "check_cost" in r]),
            "flags": result["flags"]}


def _check_percentiles(costs: list[dict[str, float]]) -> dict[str, Any]:
    """p50 / p95 of the per-search check (diff-seeded top 10), warm and cold."""
    out: dict[str, Any] = {"searches": len(costs)}
    for name in ("check_warm_ms", "check_cold_ms", "check_cold_status_ms"):
        values = sorted(c[name] for c in costs)
        if values:
            out[name] = {"p50": values[len(values) // 2], "p95": values[min(len(values) - 1, int(len(values) * 0.95))]}
    anchors = sorted(c["anchors"] for c in costs)
    out["anchors_per_search_median"] = anchors[len(anchors) // 2] if anchors else 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT.with_name("run.json"))
    parser.add_argument("--source", type=Path, default=ROOT, help="the repository the set was built from")
    parser.add_argument("--max-queries", type=int, default=None, help="a quick partial run")
    parser.add_argument("--keep", type=Path, default=None, help="keep the clone and store in this folder")
    parser.add_argument("--budget", type=float, default=None,
                        help="read-time freshness budget in seconds (patches anchors.BUDGET_SECONDS; default"
                             " as shipped)")
    args = parser.parse_args()
    if args.budget is not None:
        code_anchors.BUDGET_SECONDS = args.budget
    data = json.loads(args.set.read_text())
    started = time.time()
    work = args.keep or Path(tempfile.mkdtemp(prefix="cuba-code-anchors-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = replay(data, args.source.resolve(), work, args.max_queries)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(data, result)
    summary["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "load_at_end": os.getloadavg(), "seconds": round(time.time() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "queries": result["queries"]}, indent=1, sort_keys=True))
    print(json.dumps(summary, indent=1, sort_keys=True))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
