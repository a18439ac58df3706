"""`cuba-memorys eval`: retrieval quality and latency on a benchmark, measured the way outside
checks measure it (batch_add in chunks of 100 per store, then cuba_faro per question).

Two dataset forms: the shared benchmarks' JSONL (a corpus file plus questions with
`relevant` corpus ids, one store per `conversation`), and the original's rows
`{query, relevant_ids, ...}` asked against the configured memory.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from cuba_memorys.config import Settings
from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import MAX_CONTENT_CHARS
from cuba_memorys.search.tokens import count_tokens
from cuba_memorys.services.benchmarks import metrics
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.storage import is_postgres_url

CHUNK = 100


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        raise InvalidInput("dataset", f"file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput("dataset", f"{path} is not JSON lines ({exc})") from None


ENTITY_FIELDS = ("session", "speaker")


def _entity(row: dict, entity_field: str) -> str:
    """The entity a corpus row is written to: its session (the default, as outside checks do),
    or with ``speaker`` who said it (the corpus' ``entity``), so questions can name it."""
    if entity_field == "speaker":
        return row.get("entity") or row.get("session") or "memory"
    return row.get("session") or row.get("entity") or "memory"


def _ingest(mem: Memory, rows: list[dict], stats: dict | None = None,
            entity_field: str = "session") -> dict[str, list[str]]:
    """batch_add the rows; returns stored id -> the corpus ids it holds (dedup can merge).

    A row longer than an observation may be (10,000 characters) is cut to that length and
    counted in ``stats["rows_truncated"]``, rather than failing its whole chunk."""
    held: dict[str, list[str]] = defaultdict(list)
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        if stats is not None:
            stats["rows_truncated"] = stats.get("rows_truncated", 0) + sum(
                len(r["text"]) > MAX_CONTENT_CHARS for r in chunk)
        result = observations.batch_add(mem, None, [
            {"entity_name": _entity(r, entity_field),
             "content": r["text"][:MAX_CONTENT_CHARS],
             "observation_type": "context", "created_at": r.get("created_at")} for r in chunk])
        for row, stored in zip(chunk, result["ids"]):
            held[stored].append(row["id"])
    return held


def _ask(mem: Memory, query: dict, options: dict) -> tuple[list[str], dict, float]:
    started = time.perf_counter()
    response = search.faro(mem, None, query=query["query"], **{"limit": 10, "max_tokens": 100_000, **options})
    return [r["id"] for r in response["results"]], response, (time.perf_counter() - started) * 1000


def _score(query: dict, corpus_ranked: list[str], response: dict, latency_ms: float) -> dict:
    relevant = set(query.get("relevant") or query.get("relevant_ids") or [])
    scored = bool(relevant) and query.get("answerable", True) is not False
    abstained = bool(response.get("ood")) or not response["results"]
    return {
        "id": query.get("id") or query["query"],
        "category": query.get("category") or query.get("ability") or "all",
        "scored": scored,
        "answerable": query.get("answerable", not query.get("abstain", False)) is not False,
        "abstained": abstained,
        "ndcg10": metrics.ndcg_at(corpus_ranked, relevant, 10),
        "r5": metrics.recall_at(corpus_ranked, relevant, 5),
        "r10": metrics.recall_at(corpus_ranked, relevant, 10),
        "mrr": metrics.reciprocal_rank(corpus_ranked, relevant),
        "tokens": count_tokens(json.dumps(response["results"], ensure_ascii=False)),
        "latency_ms": latency_ms,
        "ranked": corpus_ranked[:10],
    }


def _to_corpus(stored_ids: list[str], held: dict[str, list[str]]) -> list[str]:
    ranked: list[str] = []
    for stored in stored_ids:
        for corpus_id in held.get(stored, []):
            if corpus_id not in ranked:
                ranked.append(corpus_id)
    return ranked


def conversations_of(corpus_path: Path, queries_path: Path,
                     limit: int | None = None) -> Iterator[tuple[str, list[dict], list[dict]]]:
    """(conversation, its corpus rows, its questions) in the questions' order: each is one store."""
    queries = read_jsonl(queries_path)
    by_conv: dict[str, list[dict]] = defaultdict(list)
    for row in read_jsonl(corpus_path):
        by_conv[row.get("conversation", "all")].append(row)
    for name in list(dict.fromkeys(q.get("conversation", "all") for q in queries))[:limit]:
        yield name, by_conv.get(name, []), [q for q in queries if q.get("conversation", "all") == name]


def run_benchmark(settings: Settings, corpus_path: Path, queries_path: Path, *, options: dict,
                  conversations: int | None = None,
                  progress: Callable[[str], None] | None = None, stats: dict | None = None,
                  entity_field: str = "session") -> list[dict]:
    if entity_field not in ENTITY_FIELDS:
        raise InvalidInput("--entity-field", f"{entity_field!r} is not one of {', '.join(ENTITY_FIELDS)}")
    results = []
    for name, rows, asked in conversations_of(corpus_path, queries_path, conversations):
        with _fresh_memory(settings) as mem:
            held = _ingest(mem, rows, stats, entity_field)
            # retrieval quality of the stored rows, every one embedded: batch_add leaves the
            # vectors to the background queue, so wait for it (ingest speed is not measured here)
            mem.wait_for_embeddings()
            for query in asked:
                stored, response, ms = _ask(mem, query, options)
                results.append(_score(query, _to_corpus(stored, held), response, ms))
        if progress:
            progress(name)
    return results


def run_on_memory(mem: Memory, queries_path: Path, *, options: dict) -> list[dict]:
    """The original's form: relevant_ids are ids in the configured memory."""
    results = []
    for query in read_jsonl(queries_path):
        if "query" not in query:
            raise InvalidInput("dataset", "every row needs a 'query'")
        stored, response, ms = _ask(mem, query, options)
        results.append(_score(query, stored, response, ms))
    return results


class _fresh_memory:
    """A throw-away store for one benchmark conversation: an embedded SQLite file, or a
    scratch database on the PostgreSQL server DATABASE_URL names (dropped afterwards)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._stack = ExitStack()

    def __enter__(self) -> Memory:
        folder = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="cuba-eval-"))
        url = ""
        if is_postgres_url(self._settings.database_url):
            from cuba_memorys.storage.postgres.scratch import scratch_database

            url = self._stack.enter_context(scratch_database(self._settings.database_url))
        self.mem = Memory.open(replace(self._settings, data_dir=Path(folder), database_url=url))
        self._stack.callback(self.mem.close)
        return self.mem

    def __exit__(self, *exc) -> None:
        self._stack.close()


def summarize(results: list[dict]) -> dict:
    scored = [r for r in results if r["scored"]]
    groups: dict[str, list[dict]] = {"all": scored}
    for r in scored:
        # Questions without a category are filed under "all": that group already holds them
        # (appending to the list being iterated never ended and ate all memory).
        if r["category"] != "all":
            groups.setdefault(r["category"], []).append(r)
    summary = {name: _group_summary(rows) for name, rows in groups.items()}
    unanswerable = [r for r in results if not r["answerable"]]
    summary["abstention"] = {
        "questions": len(results),
        "unanswerable": len(unanswerable),
        "accuracy": _share(r["abstained"] != r["answerable"] for r in results),
        "abstained_on_unanswerable": _share(r["abstained"] for r in unanswerable),
        "abstained_on_answerable": _share(r["abstained"] for r in results if r["answerable"]),
    }
    latencies = [r["latency_ms"] for r in results]
    summary["latency_ms"] = {"p50": metrics.percentile(latencies, 50), "p95": metrics.percentile(latencies, 95)}
    summary["response_tokens"] = {"mean": _mean(r["tokens"] for r in results),
                                  "p50": metrics.percentile([r["tokens"] for r in results], 50)}
    return summary


def _group_summary(rows: list[dict]) -> dict:
    mean, low, high = metrics.bootstrap_ci([r["ndcg10"] for r in rows])
    return {"n": len(rows), "ndcg10": mean, "ndcg10_ci": [low, high],
            "r5": _mean(r["r5"] for r in rows), "r10": _mean(r["r10"] for r in rows),
            "mrr": _mean(r["mrr"] for r in rows)}


def compare(before: list[dict], after: list[dict]) -> dict:
    """Paired bootstrap of nDCG@10 (after − before) over the questions both runs scored."""
    old = {r["id"]: r for r in before if r["scored"]}
    new = {r["id"]: r for r in after if r["scored"]}
    common = [qid for qid in old if qid in new]
    if not common:
        raise InvalidInput("compare", "the two result files share no scored questions")
    out = {}
    categories = {"all": common}
    for qid in common:
        categories.setdefault(old[qid]["category"], []).append(qid)
    for name, ids in categories.items():
        diff, low, high = metrics.paired_bootstrap([old[q]["ndcg10"] for q in ids], [new[q]["ndcg10"] for q in ids])
        out[name] = {"n": len(ids), "before": _mean(old[q]["ndcg10"] for q in ids),
                     "after": _mean(new[q]["ndcg10"] for q in ids), "diff": diff, "ci": [low, high]}
    return out


def _mean(values: Iterator[float]) -> float:
    data = list(values)
    return sum(data) / len(data) if data else float("nan")


def _share(flags: Iterator[bool]) -> float:
    return _mean(1.0 if f else 0.0 for f in flags)
