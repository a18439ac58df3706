"""The figures of the code-anchor run: nDCG@10 per variant with paired-bootstrap CIs of the
differences, and precision/recall of the stale flag against the staleness labels."""

from __future__ import annotations

from collections import Counter
from typing import Any

from cuba_memorys.services.benchmarks import metrics

RESAMPLES = 10_000
SEED = 19
STALE = ("changed", "missing")


def per_query(ranked: list[str], relevant: set[str]) -> dict[str, float]:
    return {"ndcg10": metrics.ndcg_at(ranked, relevant, 10), "r10": metrics.recall_at(ranked, relevant, 10),
            "mrr": metrics.reciprocal_rank(ranked, relevant)}


def mean_ci(values: list[float]) -> dict[str, float]:
    mean, low, high = metrics.bootstrap_ci(values, resamples=RESAMPLES, seed=SEED)
    return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}


def paired(before: list[float], after: list[float]) -> dict[str, Any]:
    """Mean of (after − before) with its 95% CI; and how many queries went up / down / stayed."""
    mean, low, high = metrics.paired_bootstrap(before, after, resamples=RESAMPLES, seed=SEED)
    diffs = [a - b for a, b in zip(after, before)]
    return {"delta": round(mean, 4), "low": round(low, 4), "high": round(high, 4),
            "better": sum(d > 1e-9 for d in diffs), "worse": sum(d < -1e-9 for d in diffs),
            "same": sum(abs(d) <= 1e-9 for d in diffs)}


def ranking(rows: list[dict[str, Any]], variants: list[str], comparisons: list[tuple[str, str]]) -> dict[str, Any]:
    """Per-variant means (nDCG@10, R@10, MRR, with the nDCG CI) and the paired differences."""
    out: dict[str, Any] = {"n": len(rows), "variants": {}, "paired": {}}
    for v in variants:
        out["variants"][v] = {"ndcg10": mean_ci([r[v]["ndcg10"] for r in rows]),
                              "r10": round(sum(r[v]["r10"] for r in rows) / max(len(rows), 1), 4),
                              "mrr": round(sum(r[v]["mrr"] for r in rows) / max(len(rows), 1), 4)}
    for before, after in comparisons:
        out["paired"][f"{after} - {before}"] = paired([r[before]["ndcg10"] for r in rows],
                                                      [r[after]["ndcg10"] for r in rows])
    return out


def flag_quality(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """``pairs`` of (label, status read): the confusion counts and, for "stale" (changed or
    missing) and for "changed" alone, precision and recall of the status against the label."""
    confusion = Counter(f"{label}->{status}" for label, status in pairs)
    out: dict[str, Any] = {"n": len(pairs), "confusion": dict(sorted(confusion.items()))}
    for name, positive in (("stale", STALE), ("changed", ("changed",))):
        tp = sum(lab in positive and st in positive for lab, st in pairs)
        fp = sum(lab not in positive and st in positive for lab, st in pairs)
        fn = sum(lab in positive and st not in positive for lab, st in pairs)
        out[name] = {"tp": tp, "fp": fp, "fn": fn,
                     "precision": round(tp / (tp + fp), 4) if tp + fp else None,
                     "recall": round(tp / (tp + fn), 4) if tp + fn else None}
    return out
