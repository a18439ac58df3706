"""Plain BM25 baseline in `cuba-memorys eval --out` format, for `eval --compare`.

Okapi BM25 (rank_bm25.BM25Okapi, k1=1.2, b=0.75), one index per conversation, top 10 per
question. `--tokens stemmed` (default: English stop words removed, Snowball stems — it lands on
the benchmark README's reference numbers) or `--tokens plain` (lowercase words only).

    .venv/bin/python bench/bm25_baseline.py --dataset ../shared/bench/locomo --out bm25-locomo.json
    .venv/bin/cuba-memorys eval --compare bm25-locomo.json ours-locomo.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import snowballstemmer
from rank_bm25 import BM25Okapi

from cuba_memorys.services.benchmarks import evaluation, metrics
from cuba_memorys.text import STOPWORDS_EN

TOKEN = re.compile(r"\w+")
STEM = snowballstemmer.stemmer("english")


def plain_tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def stemmed_tokens(text: str) -> list[str]:
    """English stop words out, Snowball (Porter2) stems: the usual "BM25" of IR toolkits."""
    return STEM.stemWords([t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS_EN])


TOKENIZERS = {"plain": plain_tokens, "stemmed": stemmed_tokens}


def run(dataset: Path, tokens) -> list[dict]:
    corpus = evaluation.read_jsonl(sorted(dataset.glob("corpus.jsonl*"))[0])
    queries = evaluation.read_jsonl(sorted(dataset.glob("queries*.jsonl"))[0])
    by_conv = defaultdict(list)
    for row in corpus:
        by_conv[row["conversation"]].append(row)
    results = []
    for name, rows in by_conv.items():
        index = BM25Okapi([tokens(r["text"]) for r in rows], k1=1.2, b=0.75)
        for q in (q for q in queries if q["conversation"] == name):
            scores = index.get_scores(tokens(q["query"]))
            ranked = [rows[i]["id"] for i in np.argsort(-scores, kind="stable")[:10]]
            relevant = set(q.get("relevant") or [])
            results.append({
                "id": q["id"], "category": q["category"], "answerable": q.get("answerable", True),
                "scored": bool(relevant) and q.get("answerable", True) is not False, "abstained": False,
                "ndcg10": metrics.ndcg_at(ranked, relevant, 10), "r5": metrics.recall_at(ranked, relevant, 5),
                "r10": metrics.recall_at(ranked, relevant, 10), "mrr": metrics.reciprocal_rank(ranked, relevant),
                "tokens": 0, "latency_ms": 0.0, "ranked": ranked})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", choices=sorted(TOKENIZERS), default="stemmed")
    args = parser.parse_args()
    results = run(args.dataset, TOKENIZERS[args.tokens])
    summary = evaluation.summarize(results)
    args.out.write_text(json.dumps({"summary": summary, "options": [f"BM25 ({args.tokens} tokens)"],
                                    "results": results}))
    s = summary["all"]
    print(f"BM25 ({args.tokens}): n={s['n']} nDCG@10 {s['ndcg10']:.3f} R@5 {s['r5']:.3f}"
          f" R@10 {s['r10']:.3f} MRR {s['mrr']:.3f}")


if __name__ == "__main__":
    main()
