"""Cross-encoders run with onnxruntime: an NLI model (does A entail B?) and a reranker.

No NLI or reranker model ships on PyPI, so the user supplies a model directory:

    model.onnx       the graph; inputs among input_ids / attention_mask / token_type_ids
    tokenizer.json   a HuggingFace fast tokenizer (its pair template builds "[CLS] a [SEP] b [SEP]")
    config.json      optional; for NLI, ``id2label`` names the logit columns

:func:`load_model` never raises for a missing or broken directory: like embed's
``EmbedderStatus``, it returns a :class:`ModelStatus` whose ``reason`` says what to do, so
features that need the model degrade instead of failing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
REQUIRED_FILES = (MODEL_FILE, TOKENIZER_FILE)
MAX_TOKENS = 512  # what both reference models (mDeBERTa, XLM-R) were trained with
BATCH_SIZE = 16
# Reranking runs under a deadline: small batches let it stop close to the budget, and the
# passages come in fused order, so whatever is scored first is what matters most.
RERANK_BATCH_SIZE = 4
NLI_LABELS = ("entailment", "neutral", "contradiction")  # mDeBERTa-v3-base-xnli's order
FEEDS = ("input_ids", "attention_mask", "token_type_ids")
_INSTALL_HINT = "pip install onnxruntime tokenizers"

KIND_HELP = {
    "nli": "an NLI cross-encoder exported to ONNX with 3 labels (e.g. mDeBERTa-v3-base-xnli)",
    "reranker": "a cross-encoder reranker exported to ONNX with 1 logit (e.g. bge-reranker-v2-m3)",
}


@dataclass(frozen=True)
class ModelStatus:
    """What :func:`load_model` found. ``model`` is None when it could not be used; ``reason``
    then says why, in words a user can act on."""

    model: CrossEncoder | None
    kind: str
    path: Path | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.model is not None


class CrossEncoder:
    """Scores (text_a, text_b) pairs jointly: one row of logits per pair."""

    kind = "cross-encoder"

    def __init__(self, path: Path | str, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.path = Path(path)
        self.config = _read_config(self.path)
        # The hub name HuggingFace exports record, so verdicts can say which model judged.
        self.name = str(self.config.get("_name_or_path") or self.path.name)
        self._tok = Tokenizer.from_file(str(self.path / TOKENIZER_FILE))
        limit = min(MAX_TOKENS, int(self.config.get("max_position_embeddings") or MAX_TOKENS))
        self._tok.enable_truncation(limit)  # longest_first: trims the longer text of the pair
        # Pad per batch to its longest pair (not to a fixed width the file may pin).
        self._tok.enable_padding(pad_id=_pad_id(self._tok), pad_token=_pad_token(self._tok))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # exported graphs warn about unused initialisers; not the user's problem
        self._session = ort.InferenceSession(str(self.path / MODEL_FILE), opts,
                                             providers=["CPUExecutionProvider"])
        self._inputs = {i.name: (np.int32 if "int32" in i.type else np.int64)
                        for i in self._session.get_inputs()}
        unknown = sorted(set(self._inputs) - set(FEEDS))
        if unknown:
            raise ValueError(f"model.onnx needs inputs this loader cannot provide: {', '.join(unknown)}"
                             f" (supported: {', '.join(FEEDS)})")

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """(n, k) float32 logits, one row per pair, in input order (one engine call)."""
        if not pairs:
            return np.zeros((0, 0), dtype=np.float32)
        encodings = self._tok.encode_batch([(a, b) for a, b in pairs])
        columns = {"input_ids": [e.ids for e in encodings],
                   "attention_mask": [e.attention_mask for e in encodings],
                   "token_type_ids": [e.type_ids for e in encodings]}
        feeds = {name: np.asarray(columns[name], dtype=dtype) for name, dtype in self._inputs.items()}
        out = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        return out.reshape(len(pairs), -1)  # a (n,) single-logit output becomes (n, 1)

    def logits_batched(self, pairs: Sequence[tuple[str, str]], batch_size: int = BATCH_SIZE) -> np.ndarray:
        rows = [self.logits(pairs[i:i + batch_size]) for i in range(0, len(pairs), batch_size)]
        return np.concatenate(rows) if rows else np.zeros((0, 0), dtype=np.float32)


class NliModel(CrossEncoder):
    """Natural-language inference: how likely the premise entails/contradicts the hypothesis."""

    kind = "nli"

    def __init__(self, path: Path | str, threads: int = 1) -> None:
        super().__init__(path, threads)
        self.labels = nli_labels(self.config)

    def judge_many(self, pairs: Sequence[tuple[str, str]], batch_size: int = BATCH_SIZE) -> list[dict[str, float]]:
        """For each (premise, hypothesis): softmax probabilities keyed by label name."""
        if not pairs:
            return []
        logits = self.logits_batched(list(pairs), batch_size)
        if logits.size and logits.shape[1] != len(self.labels):
            raise ValueError(f"the model gives {logits.shape[1]} logits per pair; NLI needs 3")
        probs = _softmax(logits)
        return [{label: float(row[i]) for i, label in enumerate(self.labels)} for row in probs]

    def judge(self, premise: str, hypothesis: str) -> dict[str, float]:
        return self.judge_many([(premise, hypothesis)])[0]


class Reranker(CrossEncoder):
    """Relevance of passages to a query, in [0, 1]."""

    kind = "reranker"

    def prefetch_query(self, query: str, executor: Executor) -> None:
        """Nothing to start: a cross-encoder reads the query beside each passage."""

    def scores(self, query: str, passages: Sequence[str], budget_seconds: float | None = None,
               batch_size: int = RERANK_BATCH_SIZE) -> list[float | None]:
        """One score per passage, in input order. With ``budget_seconds``, batches run while the
        next one is expected to fit (the first always runs); passages left unscored are None."""
        out: list[float | None] = [None] * len(passages)
        start, slowest = time.monotonic(), 0.0
        for i in range(0, len(passages), batch_size):
            elapsed = time.monotonic() - start
            if budget_seconds is not None and i and elapsed + slowest > budget_seconds:
                break
            t0 = time.monotonic()
            out[i:i + batch_size] = _relevance(self.logits([(query, p) for p in passages[i:i + batch_size]]))
            slowest = max(slowest, time.monotonic() - t0)
        return out


def unscored_reason(scores: Sequence[float | None], budget_seconds: float | None) -> str | None:
    """What a caller reports as ``reranker_degraded`` when the budget cut scoring short."""
    missing = sum(s is None for s in scores)
    if not missing:
        return None
    return (f"reranker time budget ({budget_seconds:g} s, CUBA_RERANK_TIMEOUT_SECS) ran out:"
            f" {len(scores) - missing} of {len(scores)} passages scored; the rest keep the fused order")


def _relevance(logits: np.ndarray) -> list[float]:
    if logits.shape[1] == 1:  # bge-reranker style: one logit, sigmoid
        return [float(x) for x in 1.0 / (1.0 + np.exp(-logits[:, 0]))]
    if logits.shape[1] == 2:  # (not relevant, relevant)
        return [float(x) for x in _softmax(logits)[:, -1]]
    raise ValueError(f"the model gives {logits.shape[1]} logits per pair; a reranker gives 1 (or 2)")


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def nli_labels(config: dict) -> tuple[str, ...]:
    """Label name of each logit column, from config.json's id2label (else mDeBERTa-xnli's order)."""
    raw = config.get("id2label")
    if not raw:
        return NLI_LABELS
    try:
        names = {int(k): str(v).strip().lower() for k, v in raw.items()}
    except (AttributeError, ValueError):
        raise ValueError(f"config.json id2label is not a mapping of index to label: {raw!r}") from None
    labels = tuple(names.get(i, "") for i in range(len(names)))
    if sorted(labels) != sorted(NLI_LABELS):
        raise ValueError(f"config.json id2label must name entailment, neutral and contradiction once"
                         f" each (indices 0-2); it has {raw!r}")
    return labels


def _read_config(path: Path) -> dict:
    file = path / CONFIG_FILE
    if not file.exists():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"config.json is not valid JSON: {exc}") from None
    return data if isinstance(data, dict) else {}


def _pad_token(tok) -> str:
    if tok.padding:
        return tok.padding["pad_token"]
    for token in ("[PAD]", "<pad>"):
        if tok.token_to_id(token) is not None:
            return token
    return "[PAD]"


def _pad_id(tok) -> int:
    if tok.padding:
        return int(tok.padding["pad_id"])
    found = tok.token_to_id(_pad_token(tok))
    return 0 if found is None else int(found)


def _probe(model: NliModel | Reranker) -> None:
    """One real inference, so a broken model fails here as a reason, not at the first search."""
    if isinstance(model, NliModel):
        probs = model.judge("The service listens on port 8080.", "The service uses port 8080.")
        values = list(probs.values())
    else:
        # No time budget, so every passage gets a score (never None).
        values = cast(list[float], model.scores("which port", ["The service listens on port 8080."]))
    if not np.all(np.isfinite(values)):
        raise ValueError(f"a test inference returned non-finite values: {values}")


def missing_files(path: Path) -> list[str]:
    return [name for name in REQUIRED_FILES if not (path / name).is_file()]


def load_model(kind: str, path: Path | str | None, threads: int = 1) -> ModelStatus:
    """Load the ``kind`` ("nli" or "reranker") model in directory ``path`` and run one inference."""
    classes: dict[str, type[NliModel] | type[Reranker]] = {"nli": NliModel, "reranker": Reranker}
    cls = classes[kind]
    if path is None:
        return ModelStatus(None, kind, None, f"no {kind} model is configured")
    path = Path(path)
    if not path.is_dir():
        return ModelStatus(None, kind, path, f"no {kind} model at {path}: put {KIND_HELP[kind]} there"
                           f" (model.onnx + tokenizer.json), or `cuba-memorys models install {kind} DIR`")
    missing = missing_files(path)
    if missing:
        return ModelStatus(None, kind, path, f"{path} lacks {' and '.join(missing)}: a {kind} model"
                           f" directory needs model.onnx and tokenizer.json (HuggingFace fast tokenizer)")
    try:
        model = cls(path, threads=threads)
        _probe(model)
    except ImportError as exc:
        return ModelStatus(None, kind, path, f"package {exc.name} is not installed: {_INSTALL_HINT}")
    except Exception as exc:
        return ModelStatus(None, kind, path, f"could not load the {kind} model at {path}:"
                           f" {type(exc).__name__}: {_first_line(exc)}")
    return ModelStatus(model, kind, path, None)


def _first_line(exc: Exception) -> str:
    # onnxruntime's messages carry a C++ stack after the first line; the user needs the first.
    return (str(exc).strip().splitlines() or [""])[0][:300]
