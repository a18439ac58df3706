"""Tiny ONNX cross-encoders with the real models' inputs and outputs, for tests.

No NLI model or reranker ships on PyPI, so tests build stand-ins with ``onnx.helper`` and a real
``tokenizer.json`` (a WordLevel tokenizer trained here, with a BERT-style pair template), and run
them through the same loading and inference code as a real model directory.

Both models look only at which words occur on each side of the pair (presence, via a one-hot
lookup max-pooled over the unmasked positions), so padding and batching cannot change a score.
"Content words" are the vocabulary minus special tokens, STOP_WORDS, NEGATIONS and punctuation;
words outside the vocabulary become [UNK] and are ignored — pass the words a test uses in
``words`` so the tokenizer knows them. Let

    coverage = share of the second text's (NLI) / the query's (reranker) content words that
               also occur in the other text (0 when it has none)
    mismatch = 1 if exactly one side of the pair contains a negation word, else 0

NLI (``build_nli_model``; inputs input_ids, attention_mask, token_type_ids; 3 logits):
    entailment    = 20·coverage − 12·mismatch − 15
    neutral       = 2
    contradiction = 20·coverage·mismatch − 15
  so: every hypothesis content word in the premise (coverage > 0.85) and negation agrees →
  entailment (p ≈ 0.95); the same but exactly one side negated → contradiction (p ≈ 0.95);
  otherwise neutral. "port 5432" vs "port 5433" is neutral, not a contradiction.

Reranker (``build_reranker_model``; inputs input_ids, attention_mask only — like XLM-R based
rerankers, which have no token_type_ids — so the passage is found after the first [SEP]):
    logit = 8·coverage − 4, score = sigmoid(logit): ≈ 0.98 when the passage has every query
    content word, ≈ 0.02 when none, 0.5 at half. ``outputs=2`` gives (0, logit) instead, whose
    softmax[-1] is the same score.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import (
    Tokenizer,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID = range(4)
NLI_LABELS = ("entailment", "neutral", "contradiction")
STOP_WORDS = frozenset(["the", "a", "an", "is", "are", "was", "were", "be", "been", "of", "on", "in", "at", "to", "for",
                        "and", "or", "it", "this", "that", "with", "by", "which", "what", "when", "where", "who", "how",
                        "do", "does", "did"])
NEGATIONS = frozenset({"not", "no", "never", "nunca", "cannot"})
CORPUS = (
    "The service listens on port 8080 and the database uses port 5432.",
    "The deploy runs on Fridays with blue green switching.",
    "We migrated from MySQL to PostgreSQL last year.",
    "Deploys happen on Fridays; the team never deploys on Mondays.",
    "The cache is Redis and it is not persistent.",
    "Authentication uses JWT tokens signed with RS256.",
    "The billing service is written in Go; the frontend uses React.",
    "Which port does the service use? When do deploys run? What database do we use?",
    "El servicio usa el puerto 8080 y nunca se despliega los lunes.",
)
OPSET = 17


def build_tokenizer(words: Iterable[str] = ()) -> Tokenizer:
    """A WordLevel tokenizer trained on CORPUS plus ``words``, with a BERT pair template."""
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIALS), min_frequency=1)
    tok.train_from_iterator([*CORPUS, " ".join(words)], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)])
    return tok


def _is_content(token: str) -> bool:
    return (token not in SPECIALS and token not in STOP_WORDS and token not in NEGATIONS
            and re.search(r"\w", token) is not None)


def _vocab_masks(tok: Tokenizer) -> tuple[int, np.ndarray, np.ndarray]:
    vocab = tok.get_vocab()
    size = max(vocab.values()) + 1
    content, negation = np.zeros(size, np.float32), np.zeros(size, np.float32)
    for token, idx in vocab.items():
        content[idx] = _is_content(token)
        negation[idx] = token in NEGATIONS
    return size, content, negation


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _presence_nodes(side: str, mask: str) -> list[onnx.NodeProto]:
    """P_<side> (B, V): 1 where a vocabulary word occurs on that side of the pair."""
    return [
        helper.make_node("Unsqueeze", [mask, "axis2"], [f"{side}_m3"]),
        helper.make_node("Mul", ["onehot", f"{side}_m3"], [f"{side}_hot"]),
        helper.make_node("ReduceMax", [f"{side}_hot"], [f"P{side}"], axes=[1], keepdims=0),
    ]


def _coverage_nodes(covered: str, other: str) -> list[onnx.NodeProto]:
    """coverage (B, 1): share of ``covered``'s content words present on the ``other`` side."""
    return [
        helper.make_node("Mul", [f"P{covered}", "content"], ["Pc"]),
        helper.make_node("Mul", ["Pc", f"P{other}"], ["both_sides"]),
        helper.make_node("ReduceSum", ["both_sides", "axis1"], ["overlap"], keepdims=1),
        helper.make_node("ReduceSum", ["Pc", "axis1"], ["n_content"], keepdims=1),
        helper.make_node("Max", ["n_content", "one"], ["n_safe"]),
        helper.make_node("Div", ["overlap", "n_safe"], ["coverage"]),
    ]


def _negation_nodes(side: str) -> list[onnx.NodeProto]:
    """neg<side> (B, 1): 1 if that side contains a negation word (count, clipped to 1)."""
    return [
        helper.make_node("Mul", [f"P{side}", "negation"], [f"P{side}_neg"]),
        helper.make_node("ReduceSum", [f"P{side}_neg", "axis1"], [f"neg{side}_n"], keepdims=1),
        helper.make_node("Min", [f"neg{side}_n", "one"], [f"neg{side}"]),
    ]


def _common(tok: Tokenizer) -> tuple[list, list]:
    size, content, negation = _vocab_masks(tok)
    inits = [_const("eye", np.eye(size, dtype=np.float32)), _const("content", content),
             _const("negation", negation), _const("axis1", np.array([1], np.int64)),
             _const("axis2", np.array([2], np.int64)), _const("one", np.float32(1.0))]
    nodes = [helper.make_node("Gather", ["eye", "input_ids"], ["onehot"]),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT)]
    return inits, nodes


def _ids_input(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])


def _save(directory: Path, tok: Tokenizer, graph: onnx.GraphProto, config: dict | None) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tiny_models")
    model.ir_version = 8  # old enough for every onnxruntime >= 1.17
    onnx.checker.check_model(model)
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "model.onnx"))
    tok.save(str(directory / "tokenizer.json"))
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


def build_nli_model(directory: Path | str, *, words: Iterable[str] = (),
                    label_order: Sequence[str] = NLI_LABELS, write_config: bool = True) -> Path:
    """An NLI model directory following the rule in the module docstring.

    ``label_order`` names the logit columns (case kept in config.json's id2label, matched
    case-insensitively); ``write_config=False`` leaves config.json out, so loaders must assume
    mDeBERTa-xnli's order (the default ``label_order``).
    """
    tok = build_tokenizer(words)
    inits, nodes = _common(tok)
    # Columns for (coverage, mismatch, coverage·mismatch) and the bias, per label.
    rule = {"entailment": ([20, -12, 0], -15), "neutral": ([0, 0, 0], 2), "contradiction": ([0, 0, 20], -15)}
    order = [name.lower() for name in label_order]
    weights = np.array([rule[name][0] for name in order], np.float32).T
    bias = np.array([rule[name][1] for name in order], np.float32)
    inits += [_const("W", weights), _const("b", bias)]
    nodes += [
        helper.make_node("Cast", ["token_type_ids"], ["typef"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["maskf", "typef"], ["maskB"]),
        helper.make_node("Sub", ["maskf", "maskB"], ["maskA"]),
        *_presence_nodes("A", "maskA"), *_presence_nodes("B", "maskB"),
        *_coverage_nodes("B", "A"),
        *_negation_nodes("A"), *_negation_nodes("B"),
        helper.make_node("Sub", ["negA", "negB"], ["neg_diff"]),
        helper.make_node("Abs", ["neg_diff"], ["mismatch"]),
        helper.make_node("Mul", ["coverage", "mismatch"], ["cov_mis"]),
        helper.make_node("Concat", ["coverage", "mismatch", "cov_mis"], ["features"], axis=1),
        helper.make_node("MatMul", ["features", "W"], ["raw"]),
        helper.make_node("Add", ["raw", "b"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny_nli", [_ids_input(n) for n in ("input_ids", "attention_mask", "token_type_ids")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])], inits)
    config = {"id2label": {str(i): name for i, name in enumerate(label_order)}} if write_config else None
    return _save(Path(directory), tok, graph, config)


def build_reranker_model(directory: Path | str, *, words: Iterable[str] = (), outputs: int = 1) -> Path:
    """A reranker model directory following the rule in the module docstring (1 or 2 logits)."""
    if outputs not in (1, 2):
        raise ValueError("outputs must be 1 or 2")
    tok = build_tokenizer(words)
    inits, nodes = _common(tok)
    weights = [[8.0]] if outputs == 1 else [[0.0, 8.0]]
    bias = [-4.0] if outputs == 1 else [0.0, -4.0]
    inits += [_const("sep", np.int64(SEP_ID)), _const("seq_axis", np.int64(1)),
              _const("W", np.array(weights, np.float32)), _const("b", np.array(bias, np.float32))]
    nodes += [
        # The passage is every position after the first [SEP]: cumulative count of [SEP]s
        # before this position (exclusive) is ≥ 1 there.
        helper.make_node("Equal", ["input_ids", "sep"], ["is_sep_b"]),
        helper.make_node("Cast", ["is_sep_b"], ["is_sep"], to=TensorProto.FLOAT),
        helper.make_node("CumSum", ["is_sep", "seq_axis"], ["seps_before"], exclusive=1),
        helper.make_node("Min", ["seps_before", "one"], ["after_sep"]),
        helper.make_node("Mul", ["maskf", "after_sep"], ["maskB"]),
        helper.make_node("Sub", ["maskf", "maskB"], ["maskA"]),
        *_presence_nodes("A", "maskA"), *_presence_nodes("B", "maskB"),
        *_coverage_nodes("A", "B"),
        helper.make_node("MatMul", ["coverage", "W"], ["raw"]),
        helper.make_node("Add", ["raw", "b"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny_reranker", [_ids_input("input_ids"), _ids_input("attention_mask")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", outputs])], inits)
    return _save(Path(directory), tok, graph, None)


# -- the rule in plain Python, to check the graphs against -------------------------------------

def _words(tok: Tokenizer, text: str) -> set[str]:
    return set(tok.encode(text, add_special_tokens=False).tokens)


def expected_coverage(model_dir: Path | str, covered: str, other: str) -> float:
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    mine = {w for w in _words(tok, covered) if _is_content(w)}
    return len(mine & _words(tok, other)) / len(mine) if mine else 0.0


def expected_nli(model_dir: Path | str, premise: str, hypothesis: str) -> str:
    """The label the tiny NLI model gives (premise, hypothesis)."""
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    coverage = expected_coverage(model_dir, hypothesis, premise)
    mismatch = bool(_words(tok, premise) & NEGATIONS) != bool(_words(tok, hypothesis) & NEGATIONS)
    if coverage > 0.85:
        return "contradiction" if mismatch else "entailment"
    return "neutral"


def expected_relevance(model_dir: Path | str, query: str, passage: str) -> float:
    """The score the tiny reranker gives (query, passage)."""
    return float(1.0 / (1.0 + np.exp(-(8.0 * expected_coverage(model_dir, query, passage) - 4.0))))
