"""Local judge models: an NLI cross-encoder (grounding) and a reranker, run with onnxruntime.

Same layer as ``embed/``: imports only models/errors/config/text and third-party libraries.
Users supply the model directories (none ships on PyPI); nothing is downloaded at run time,
and a missing or broken model is a :class:`ModelStatus` with a reason, never an exception.
"""

from __future__ import annotations

from cuba_memorys.judge.governor import memory_budget, resource_plan
from cuba_memorys.judge.onnx_models import (
    CrossEncoder,
    ModelStatus,
    NliModel,
    Reranker,
    load_model,
    unscored_reason,
)
from cuba_memorys.judge.registry import (
    KINDS,
    install_model,
    judge_warnings,
    judges,
    list_models,
    load,
    model_location,
    model_warnings,
)

__all__ = [
    "KINDS", "CrossEncoder", "ModelStatus", "NliModel", "Reranker", "install_model", "judge_warnings", "judges",
    "list_models", "load",
    "load_model", "memory_budget", "model_location", "model_warnings", "resource_plan", "unscored_reason",
]
