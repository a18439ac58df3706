"""How well does out-of-distribution abstention separate unanswerable questions?

For each conversation store (loaded as `cuba-memorys eval` does): fit the OOD model, take the
Mahalanobis distance of every question, and report (1) the AUC of distance for unanswerable vs
answerable questions, (2) abstention with the default √χ²₀.₉₉(d) threshold, and (3) with a
conformal threshold (α = 0.05) calibrated on a random half of the answerable questions, measured
on the other half and on the unanswerable ones. The BM25 top score's AUC is shown beside it.

    CUBA_EMBED_CACHE=... .venv/bin/python bench/ood_study.py --dataset ../shared/bench/locomo
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict
from pathlib import Path

import numpy as np

from cuba_memorys.config import Settings
from cuba_memorys.models import SearchFilter
from cuba_memorys.search.ood import conformal_threshold, default_threshold
from cuba_memorys.services.benchmarks.evaluation import (
    _fresh_memory,
    _ingest,
    read_jsonl,
)
from cuba_memorys.services.search.ood import OodState
from cuba_memorys.text import analyze


def auc(positives: list[float], negatives: list[float]) -> float:
    """P(a random positive scores higher than a random negative), ties count half."""
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    args = parser.parse_args()
    corpus = read_jsonl(sorted(args.dataset.glob("corpus.jsonl*"))[0])
    queries = read_jsonl(sorted(args.dataset.glob("queries*.jsonl"))[0])
    by_conv = defaultdict(list)
    for row in corpus:
        by_conv[row["conversation"]].append(row)
    rng = random.Random(7)
    rows = []  # (answerable, distance, bm25 top, calibrated threshold, default threshold)
    for name in dict.fromkeys(q["conversation"] for q in queries):
        with _fresh_memory(Settings.from_env()) as mem:
            _ingest(mem, by_conv[name])
            state = OodState()
            model, why = state.model(mem)
            if model is None:
                print(f"  {name}: skipped ({why})")
                continue
            mine = [q for q in queries if q["conversation"] == name]
            dist = {q["id"]: model.distance(mem.embedder.embed_query(q["query"])) for q in mine}
            top = {q["id"]: max([h.score for h in mem.store.bm25_candidates(
                "observation", analyze(q["query"]), 1, SearchFilter())] or [0.0]) for q in mine}
            answerable = [q["id"] for q in mine if q.get("answerable", True)]
            rng.shuffle(answerable)
            calib, held_out = answerable[: len(answerable) // 2], set(answerable[len(answerable) // 2:])
            limit = conformal_threshold([dist[i] for i in calib], 0.05)
            for q in mine:
                if q["id"] in calib:
                    continue
                rows.append((q["id"] in held_out, dist[q["id"]], top[q["id"]], limit,
                             default_threshold(mem.embedder.dim)))
    ans = [r for r in rows if r[0]]
    una = [r for r in rows if not r[0]]
    print(f"held-out answerable {len(ans)}, unanswerable {len(una)}")
    print(f"AUC, distance (higher = more out of distribution): {auc([r[1] for r in una], [r[1] for r in ans]):.3f}")
    print(f"AUC, negated BM25 top score:                     {auc([-r[2] for r in una], [-r[2] for r in ans]):.3f}")
    for label, idx in (("sqrt(chi2_0.99(d))", 4), ("conformal, alpha 0.05", 3)):
        refused_u = np.mean([r[1] > r[idx] for r in una])
        refused_a = np.mean([r[1] > r[idx] for r in ans])
        print(f"{label:<28} refuses {refused_u:.3f} of unanswerable, {refused_a:.3f} of answerable")
    print(f"median distance: answerable {np.median([r[1] for r in ans]):.2f}, unanswerable"
          f" {np.median([r[1] for r in una]):.2f}, default threshold {ans[0][4]:.2f}")


if __name__ == "__main__":
    main()
