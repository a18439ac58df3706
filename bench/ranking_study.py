"""Ranking study: load each benchmark conversation once, keep every row's vector and every
question's full branch scores, then score ranking variants offline in seconds.

Collection goes through the real store exactly as `cuba-memorys eval` loads it (batch_add in
chunks of 100; set CUBA_EMBED_CACHE so reruns skip embedding). Variants are whole-pipeline
ideas (session evidence, best-chunk vectors, fusion weights), scored on every answerable
question of the dev split with a paired bootstrap against the baseline. It never looks at
individual questions; per-category means are printed so that one category cannot carry a
change unnoticed.

    .venv/bin/python bench/ranking_study.py collect --dataset ../shared/bench/longmemeval_s \\
        --out /work/cache/study-lme.pkl
    .venv/bin/python bench/ranking_study.py score --data /work/cache/study-lme.pkl
"""

from __future__ import annotations

import argparse
import math
import pickle
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from cuba_memorys.config import Settings
from cuba_memorys.models import SearchFilter
from cuba_memorys.services.benchmarks import metrics
from cuba_memorys.services.benchmarks.evaluation import (
    _fresh_memory,
    _ingest,
    conversations_of,
)
from cuba_memorys.text import analyze


def _rows(mem) -> dict:
    rows = mem.store._q(
        "SELECT o.id, o.entity_id, o.seq, o.content, o.created_at, o.embedding FROM observations o"
        " ORDER BY o.seq")
    return {
        "ids": [r["id"] for r in rows],
        "entity": [r["entity_id"] for r in rows],
        "seq": np.array([r["seq"] for r in rows]),
        "text": [r["content"] for r in rows],
        "created": [r["created_at"] for r in rows],
        "vec": np.stack([np.frombuffer(r["embedding"], dtype=np.float32) for r in rows]),
    }


def _question(mem, q: dict, n: int) -> dict:
    flt = SearchFilter()
    bm25 = mem.store.bm25_candidates("observation", analyze(q["query"]), n, flt)
    text = mem.store.text_candidates("observation", q["query"], n, flt)
    return {"id": q["id"], "category": q["category"], "query": q["query"], "relevant": q["relevant"],
            "asked_at": q.get("asked_at"), "qvec": mem.embedder.embed_query(q["query"]),
            "bm25": {h.id: h.score for h in bm25}, "text": {h.id: h.score for h in text}}


def collect(dataset: Path, out: Path, conversations: int | None) -> None:
    corpus, questions = (next(iter(sorted(dataset.glob(p)))) for p in ("corpus.jsonl*", "queries*.jsonl"))
    data = []
    for name, rows, questions_here in conversations_of(corpus, questions, conversations):
        asked = [q for q in questions_here if q.get("answerable", True) and q.get("relevant")]
        if not asked:
            continue
        with _fresh_memory(Settings.from_env()) as mem:
            held = _ingest(mem, rows)
            conv = _rows(mem)
            conv["held"] = dict(held)
            conv["questions"] = [_question(mem, q, len(conv["ids"])) for q in asked]
        data.append(conv)
        print(f"  {name}: {len(conv['ids'])} rows, {len(asked)} questions", flush=True)
    out.write_bytes(pickle.dumps(data))


# -- the pipeline, offline ----------------------------------------------------------------------
# The same rules as search/fusion.py (min-max over each branch's top 100, weighted sum, a 0.15
# share to same-entity neighbours of the top 30), re-implemented over plain dicts so variants
# can change one step at a time. `baseline` reproduces `cuba-memorys eval` to within dedup.

WEIGHTS = {"vector": 0.45, "bm25": 0.45, "text": 0.10}


def minmax_top(scores: dict, depth: int = 100) -> dict:
    items = sorted(scores.items(), key=lambda kv: -kv[1])[:depth]
    if not items:
        return {}
    low, high = items[-1][1], items[0][1]
    span = high - low
    return {k: 1.0 if span == 0 else (v - low) / span for k, v in items}


def fuse(branches: dict, weights: dict, depth: int = 100) -> dict:
    out: dict = defaultdict(float)
    for name, scores in branches.items():
        for k, v in minmax_top(scores, depth).items():
            out[k] += weights.get(name, 0.0) * v
    return out


def neighbours(conv: dict) -> dict:
    if "nb" not in conv:
        nb, last = defaultdict(list), {}
        for i, entity in enumerate(conv["entity"]):
            if entity in last:
                a, b = conv["ids"][i], conv["ids"][last[entity]]
                nb[a].append(b)
                nb[b].append(a)
            last[entity] = i
        conv["nb"] = nb
    return conv["nb"]


def smooth(conv: dict, fused: dict, share: float = 0.15, top: int = 30) -> dict:
    out = dict(fused)
    for k, v in sorted(fused.items(), key=lambda kv: -kv[1])[:top]:
        for other in neighbours(conv).get(k, []):
            out[other] = out.get(other, 0.0) + share * v
    return out


def vector_scores(conv: dict, qvec: np.ndarray) -> dict:
    return dict(zip(conv["ids"], (conv["vec"] @ qvec).tolist()))


def branches(conv: dict, q: dict) -> dict:
    return {"vector": vector_scores(conv, q["qvec"]), "bm25": q["bm25"], "text": q["text"]}


def baseline(conv: dict, q: dict) -> dict:
    return smooth(conv, fuse(branches(conv, q), WEIGHTS))


def bm25(conv: dict, terms: list[str], k1: float = 1.2, b: float = 0.75) -> dict:
    """Okapi BM25 with FTS5's idf, so (k1, b) can vary (FTS5 fixes 1.2 and 0.75)."""
    if "tf" not in conv:
        conv["tf"] = [Counter(analyze(t)) for t in conv["text"]]
        conv["dl"] = np.array([sum(c.values()) for c in conv["tf"]], dtype=float)
        conv["df"] = Counter(t for c in conv["tf"] for t in c)
    n, avg = len(conv["tf"]), conv["dl"].mean()
    out = {}
    for i, tf in enumerate(conv["tf"]):
        score = 0.0
        for t in dict.fromkeys(terms):
            if tf.get(t):
                idf = max(math.log((n - conv["df"][t] + 0.5) / (conv["df"][t] + 0.5)), 1e-6)
                score += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * conv["dl"][i] / avg))
        if score > 0:
            out[conv["ids"][i]] = score
    return out


def with_bm25(k1: float, b: float):
    def rank(conv, q):
        br = branches(conv, q)
        br["bm25"] = bm25(conv, analyze(q["query"]), k1, b)
        return smooth(conv, fuse(br, WEIGHTS))
    return rank


def with_weights(weights: dict, share: float = 0.15):
    return lambda conv, q: smooth(conv, fuse(branches(conv, q), weights), share)


def session_evidence(gamma: float):
    """Each row gains gamma × its entity's best fused score (parent-document evidence)."""
    def rank(conv, q):
        fused = fuse(branches(conv, q), WEIGHTS)
        entity = dict(zip(conv["ids"], conv["entity"]))
        best: dict = {}
        for k, v in fused.items():
            best[entity[k]] = max(best.get(entity[k], 0.0), v)
        top = max(best.values())
        return smooth(conv, {k: v + gamma * best[entity[k]] / top for k, v in fused.items()})
    return rank


def dense_feedback(k: int, alpha: float):
    """Rocchio on the query vector: add alpha × the mean vector of the top k fused rows."""
    def rank(conv, q):
        order = sorted((s := baseline(conv, q)), key=lambda r: -s[r])[:k]
        at = {rid: i for i, rid in enumerate(conv["ids"])}
        qvec = q["qvec"] + alpha * conv["vec"][[at[r] for r in order]].mean(0)
        br = branches(conv, q)
        br["vector"] = vector_scores(conv, qvec / np.linalg.norm(qvec))
        return smooth(conv, fuse(br, WEIGHTS))
    return rank


def lexical_feedback(k: int, beta: float, n_terms: int = 10):
    """RM3-style: the top k fused rows' highest tf-idf terms, searched with weight beta."""
    def rank(conv, q):
        order = sorted((s := baseline(conv, q)), key=lambda r: -s[r])[:k]
        asked = analyze(q["query"])
        bm25(conv, asked)  # fills the term statistics
        at, n, weight = {rid: i for i, rid in enumerate(conv["ids"])}, len(conv["ids"]), Counter()
        for rid in order:
            tf = conv["tf"][at[rid]]
            for t, f in tf.items():
                weight[t] += f / sum(tf.values()) * math.log(n / conv["df"][t])
        extra = [t for t, _ in weight.most_common(n_terms + len(asked)) if t not in asked][:n_terms]
        first, second = bm25(conv, asked), bm25(conv, extra)
        br = branches(conv, q)
        br["bm25"] = {r: first.get(r, 0.0) + beta * second.get(r, 0.0) for r in set(first) | set(second)}
        return smooth(conv, fuse(br, WEIGHTS))
    return rank


VARIANTS = {
    "bm25 alone": with_weights({"bm25": 1.0}, 0.0),
    "vector alone": with_weights({"vector": 1.0}, 0.0),
    "text alone": with_weights({"text": 1.0}, 0.0),
    "no neighbour share": with_weights(WEIGHTS, 0.0),
    "neighbour share 0.25": with_weights(WEIGHTS, 0.25),
    "weights v.30 b.60 t.10": with_weights({"vector": 0.3, "bm25": 0.6, "text": 0.1}),
    "weights v.45 b.35 t.20": with_weights({"vector": 0.45, "bm25": 0.35, "text": 0.2}),
    "weights v.60 b.30 t.10": with_weights({"vector": 0.6, "bm25": 0.3, "text": 0.1}),
    "bm25 k1=1.2 b=0.9": with_bm25(1.2, 0.9),
    "bm25 k1=2.0 b=0.75": with_bm25(2.0, 0.75),
    "session evidence 0.1": session_evidence(0.1),
    "session evidence 0.3": session_evidence(0.3),
    "dense feedback k3 a0.3": dense_feedback(3, 0.3),
    "dense feedback k10 a0.3": dense_feedback(10, 0.3),
    "lexical feedback k3 b0.2": lexical_feedback(3, 0.2),
    "lexical feedback k10 b0.2": lexical_feedback(10, 0.2),
}


def corpus_ranking(conv: dict, scores: dict, k: int = 10) -> list[str]:
    ranked: list[str] = []
    for stored in sorted(scores, key=lambda r: -scores[r]):
        ranked += [c for c in conv["held"].get(stored, []) if c not in ranked]
        if len(ranked) >= k:
            break
    return ranked


def evaluate(data: list[dict], rank) -> tuple[np.ndarray, list[str]]:
    values, categories = [], []
    for conv in data:
        for q in conv["questions"]:
            values.append(metrics.ndcg_at(corpus_ranking(conv, rank(conv, q)), set(q["relevant"]), 10))
            categories.append(q["category"])
    return np.array(values), categories


def score(path: Path, only: str | None) -> None:
    data = pickle.loads(path.read_bytes())
    base, categories = evaluate(data, baseline)
    print(f"{len(base)} questions; nDCG@10, paired 95% CI vs baseline; per-category means")
    for name, rank in [("baseline", baseline), *VARIANTS.items()]:
        if only and only not in name and name != "baseline":
            continue
        values, _ = evaluate(data, rank)
        diff, low, high = metrics.paired_bootstrap(base, values)
        per = defaultdict(list)
        for v, c in zip(values, categories):
            per[c].append(v)
        cats = " ".join(f"{c.replace('single-session-', 'ss-')[:14]}={np.mean(v):.2f}"
                        for c, v in sorted(per.items()))
        print(f"{name:<28}{values.mean():.4f} {diff:+.4f} [{low:+.4f}, {high:+.4f}]  {cats}", flush=True)


# -- text variants on each question's candidate pool ----------------------------------------
# Re-embedding every row under another text form takes hours on this CPU, so these variants
# re-embed only each question's pool: the top 60 of every branch plus its relevant rows. Ranking
# within the pool reproduces the full baseline to within 0.005 nDCG@10.

def chunks(text: str, size: int = 1400, overlap: int = 200, over: int = 1800) -> list[str]:
    """The original's chunking: content over 1800 characters in 1400-character overlapping pieces."""
    if len(text) <= over:
        return [text]
    pieces, start = [], 0
    while True:
        pieces.append(text[start:start + size])
        if start + size >= len(text):
            return pieces
        start += size - overlap


def pools(data: list[dict], depth: int = 60) -> dict[str, list[str]]:
    found = {}
    for conv in data:
        for q in conv["questions"]:
            pool = {k for k, held in conv["held"].items() if set(held) & set(q["relevant"])}
            for scores in branches(conv, q).values():
                pool |= {k for k, _ in sorted(scores.items(), key=lambda kv: -kv[1])[:depth]}
            found[q["id"]] = sorted(pool)
    return found


def pool_embed(path: Path, out: Path) -> None:
    """Pool rows as plain text (no entity prefix), as best-chunk vectors, and with MiniLM."""
    from cuba_memorys.embed.cache import CachedEmbedder
    from cuba_memorys.embed.e5 import E5Embedder
    from cuba_memorys.embed.minilm import MiniLMEmbedder

    data = pickle.loads(path.read_bytes())
    e5 = CachedEmbedder(E5Embedder(threads=2), Settings.from_env().embed_cache or out.with_suffix(".cache"))
    minilm = MiniLMEmbedder(threads=2)
    found = pools(data)
    text, prefix = {}, {}
    for conv in data:
        for q in conv["questions"]:
            for k in found[q["id"]]:
                text[k] = conv["text"][conv["ids"].index(k)]
                prefix[k] = f"[concept:{conv['held'][k][0].rsplit(':', 1)[0]}] "
    keys = sorted(text)
    result = {"pools": found, "plain": dict(zip(keys, e5.embed_passages([text[k] for k in keys])))}
    owners = [(k, piece) for k in keys if len(chunks(text[k])) > 1 for piece in chunks(text[k])]
    per_row: dict = defaultdict(list)
    for (k, _), vec in zip(owners, e5.embed_passages([prefix[k] + piece for k, piece in owners])):
        per_row[k].append(vec)
    result["chunks"] = {k: np.stack(v) for k, v in per_row.items()}
    result["minilm"] = dict(zip(keys, minilm.embed_passages([text[k] for k in keys])))
    result["minilm_queries"] = {q["id"]: minilm.embed_query(q["query"]) for c in data for q in c["questions"]}
    out.write_bytes(pickle.dumps(result))


def pool_score(path: Path, pool_path: Path) -> None:
    data, extra = pickle.loads(path.read_bytes()), pickle.loads(pool_path.read_bytes())

    def pooled(swap: str | None, weights: dict, share: float = 0.15):
        def rank(conv, q):
            pool = extra["pools"][q["id"]]
            at = {rid: i for i, rid in enumerate(conv["ids"])}
            stored = {k: float(conv["vec"][at[k]] @ q["qvec"]) for k in pool}
            alt = {"plain": lambda k: float(extra["plain"][k] @ q["qvec"]),
                   "best chunk": lambda k: max([stored[k], *(extra["chunks"].get(k, np.zeros((0, 384))) @ q["qvec"])]),
                   "minilm": lambda k: float(extra["minilm"][k] @ extra["minilm_queries"][q["id"]])}
            br = {"vector": stored, "bm25": {k: q["bm25"][k] for k in pool if k in q["bm25"]},
                  "text": {k: q["text"][k] for k in pool if k in q["text"]}}
            if swap:
                br["vector"] = {k: alt[swap](k) for k in pool}
            return smooth(conv, fuse(br, weights), share)
        return rank

    base, _ = evaluate(data, baseline)
    print(f"{len(base)} questions; nDCG@10, paired 95% CI vs the full baseline")
    rows = [("baseline, pool only", pooled(None, WEIGHTS))]
    for swap in ("plain", "best chunk", "minilm"):
        rows += [(f"{swap} alone", pooled(swap, {"vector": 1.0}, 0.0)), (f"fused with {swap}", pooled(swap, WEIGHTS))]
    for name, rank in rows:
        values, _ = evaluate(data, rank)
        diff, low, high = metrics.paired_bootstrap(base, values)
        print(f"{name:<28}{values.mean():.4f} {diff:+.4f} [{low:+.4f}, {high:+.4f}]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--dataset", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--conversations", type=int)
    s = sub.add_parser("score")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--only", help="run only variants whose name contains this")
    e = sub.add_parser("pool-embed")
    e.add_argument("--data", type=Path, required=True)
    e.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("pool-score")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--pool", type=Path, required=True)
    args = parser.parse_args()
    if args.cmd == "collect":
        collect(args.dataset, args.out, args.conversations)
    elif args.cmd == "score":
        score(args.data, args.only)
    elif args.cmd == "pool-embed":
        pool_embed(args.data, args.out)
    else:
        pool_score(args.data, args.pool)


if __name__ == "__main__":
    main()
