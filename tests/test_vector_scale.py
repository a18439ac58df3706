"""Speed-at-scale code keeps answers unchanged: the HNSW accelerator stays in step with SQLite
(adds, re-embeds, deletes, clears, other processes, restarts, a bad saved file), filtered
searches fall back to exact scoring, and the faster dedup / token budget / FTS steps decide
exactly as the plain versions do. Small synthetic data; the real numbers are in bench/scale.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from cuba_memorys.models import NewObservation, SearchFilter
from cuba_memorys.search.format import budget_rows
from cuba_memorys.search.fusion import Fused, dedup
from cuba_memorys.search.tokens import row_tokens
from cuba_memorys.storage.sqlite import ann
from cuba_memorys.storage.sqlite.store import SqliteStore
from cuba_memorys.storage.sqlite.vector_index import VectorIndex
from cuba_memorys.text import same_claim, word_overlap

pytestmark = pytest.mark.skipif(not ann.available(), reason="usearch is not installed")

DIM = 16
MIN_ROWS = 60


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _store(path, min_rows: int = MIN_ROWS) -> SqliteStore:
    return SqliteStore(path, DIM, ann_min_rows=min_rows)


def _add(store: SqliteStore, vectors: np.ndarray, created: str = "2026-01-01T00:00:00Z") -> list[str]:
    entity = store.get_entity("e", SearchFilter().scope) or store.create_entity("e", "concept", None)
    ids = []
    with store.transaction():
        for i, vec in enumerate(vectors):
            ids.append(store.add_observation(NewObservation(
                entity_id=entity.id, content=f"row {random.random()} {i}", created_at=created,
                embedding=vec.astype(np.float32).tobytes(), embedding_model="test")))
    return ids


def _ready(store: SqliteStore) -> ann.AnnAccelerator:
    acc = store.vectors["observation"].accelerator
    assert acc is not None and acc.wait(30), acc.last_error
    return acc


def _top(store: SqliteStore, vec: np.ndarray, k: int = 5, flt: SearchFilter | None = None) -> list[str]:
    return [h.id for h in store.vector_candidates("observation", vec, k, flt or SearchFilter())]


def test_accelerator_builds_in_background_and_mirrors_every_change(tmp_path):
    rng = np.random.default_rng(1)
    store = _store(tmp_path / "m.db")
    vecs = _unit(rng, 100)
    ids = _add(store, vecs)
    acc = _ready(store)
    assert len(acc) == 100
    assert _top(store, vecs[7], 1) == [ids[7]]
    # an add after the build is found through the graph
    (new_id,) = _add(store, _unit(rng, 1) * 1.0)
    new_vec = store.observation_vectors([new_id])[new_id]
    assert _top(store, new_vec, 1) == [new_id] and len(acc) == 101
    # a delete leaves no ghost
    assert store.delete_observation(ids[7])
    assert ids[7] not in _top(store, vecs[7], 10) and len(acc) == 100
    # a re-embed moves the row: found at its new place, under a new revision
    seq = store._one("SELECT seq FROM observations WHERE id = ?", (ids[3],))[0]
    target = _unit(rng, 1)[0]
    store.set_embeddings("observation", [(seq, target)], "test")
    assert _top(store, target, 1) == [ids[3]]
    assert acc._revs[seq] == store.vectors["observation"].revisions()[seq] == 2
    # clearing the embeddings clears the graph too
    store.clear_embeddings()
    assert len(acc) == 0 and not acc.ready
    store.close()


def test_scores_are_exact_and_recall_is_high(tmp_path):
    rng = np.random.default_rng(2)
    index = VectorIndex(DIM, ann.AnnAccelerator(DIM, min_rows=MIN_ROWS))
    exact = VectorIndex(DIM)
    vecs = _unit(rng, 400)
    for key, vec in enumerate(vecs):
        index.upsert(key, vec, 1)
        exact.upsert(key, vec, 1)
    assert index.accelerator.wait(30)
    overlap = []
    for q in _unit(rng, 30):
        got, want = index.search(q, 10), exact.search(q, 10)
        want_scores = dict(want)
        for key, score in got:  # re-scored from the exact matrix
            assert score == pytest.approx(float(vecs[key] @ q), abs=1e-6)
        overlap.append(len({k for k, _ in got} & set(want_scores)) / 10)
    assert np.mean(overlap) >= 0.9


def test_changes_during_the_build_are_not_lost():
    rng = np.random.default_rng(3)
    index = VectorIndex(DIM, ann.AnnAccelerator(DIM, min_rows=MIN_ROWS))
    vecs = _unit(rng, 300)
    for key, vec in enumerate(vecs[:200]):
        index.upsert(key, vec, 1)
    for key, vec in enumerate(vecs[200:], start=200):  # likely while the thread builds
        index.upsert(key, vec, 1)
    for key in range(0, 50):
        index.remove(key)
    acc = index.accelerator
    assert acc.wait(30)
    assert set(acc._revs) == set(index.revisions()) == set(range(50, 300))


def test_another_process_write_reaches_the_graph(tmp_path):
    rng = np.random.default_rng(4)
    reader = _store(tmp_path / "m.db")
    ids = _add(reader, _unit(rng, 80))
    acc = _ready(reader)
    writer = _store(tmp_path / "m.db", min_rows=0)  # another connection, as another process
    fresh = _unit(rng, 1)
    (other_id,) = _add(writer, fresh)
    writer.delete_observation(ids[0])
    writer.close()
    assert _top(reader, fresh[0], 1) == [other_id]  # refresh -> exact index -> graph
    seqs = set(acc._revs)
    assert seqs == set(reader.vectors["observation"].revisions()) and len(seqs) == 80
    reader.close()


def test_saved_graph_is_reloaded_and_brought_up_to_date(tmp_path):
    rng = np.random.default_rng(5)
    store = _store(tmp_path / "m.db")
    vecs = _unit(rng, 120)
    ids = _add(store, vecs)
    _ready(store)
    store.close()
    saved = tmp_path / "m.ann-observation.usearch"
    assert saved.exists()
    # while no server runs, another writer deletes a row and adds one
    other = _store(tmp_path / "m.db", min_rows=0)
    other.delete_observation(ids[5])
    (late,) = _add(other, _unit(rng, 1))
    late_vec = other.observation_vectors([late])[late]
    other.close()
    again = _store(tmp_path / "m.db")
    acc = _ready(again)
    assert set(acc._revs) == set(again.vectors["observation"].revisions())
    assert ids[5] not in _top(again, vecs[5], 10)
    assert _top(again, late_vec, 1) == [late]
    again.close()


def test_a_corrupt_saved_graph_only_costs_a_rebuild(tmp_path):
    rng = np.random.default_rng(6)
    store = _store(tmp_path / "m.db")
    vecs = _unit(rng, 90)
    ids = _add(store, vecs)
    _ready(store)
    store.close()
    (tmp_path / "m.ann-observation.usearch").write_bytes(b"CUBAANN1garbage")
    again = _store(tmp_path / "m.db")
    acc = _ready(again)
    assert len(acc) == 90 and _top(again, vecs[11], 1) == [ids[11]]
    again.close()


def test_filtered_search_falls_back_to_exact_when_the_net_comes_back_short(tmp_path):
    rng = np.random.default_rng(7)
    store = _store(tmp_path / "m.db")
    old = _unit(rng, 150)
    _add(store, old, created="2025-01-01T00:00:00Z")
    recent_vecs = _unit(rng, 6)
    recent = _add(store, recent_vecs, created="2026-06-01T00:00:00Z")
    _ready(store)
    flt = SearchFilter(after="2026-01-01T00:00:00Z")
    q = old[0]  # near an old row: the unfiltered net is all old rows
    got = _top(store, q, 5, flt)
    scores = {i: float(v @ q) for i, v in zip(recent, recent_vecs)}
    assert got == sorted(scores, key=scores.get, reverse=True)[:5]
    store.close()


def test_below_the_threshold_nothing_is_built(tmp_path):
    store = _store(tmp_path / "m.db", min_rows=1000)
    _add(store, _unit(np.random.default_rng(8), 50))
    acc = store.vectors["observation"].accelerator
    assert not acc.ready and not acc.building
    store.close()
    assert not (tmp_path / "m.ann-observation.usearch").exists()


# -- the faster steps decide exactly as the plain ones -------------------------------------
WORDS = ["port", "5432", "5433", "the", "database", "migrated", "not", "kubernetes", "uses", "we", "mysql", "auth",
         "token", "cache"]


def _reference_dedup(items, text_of):
    kept, kept_texts = [], []
    for item in items:
        text = text_of.get(item.key, "")
        if any(word_overlap(text, o) > 0.85 and same_claim(text, o) for o in kept_texts):
            continue
        kept.append(item)
        kept_texts.append(text)
    return kept


def test_dedup_matches_the_pairwise_definition():
    rng = random.Random(9)
    for _ in range(200):
        items = [Fused("observation", str(i)) for i in range(rng.randint(0, 25))]
        texts = {f.key: " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6))) for f in items}
        assert [f.id for f in dedup(items, texts)] == [f.id for f in _reference_dedup(items, texts)]


def _reference_budget(rows, max_tokens):
    kept, used = [], 0
    for row in rows:
        cost = row_tokens(row)
        if used + cost > max_tokens:
            return None  # truncation path: same code in both
        kept.append(row)
        used += cost
    return kept


@pytest.mark.parametrize("max_tokens", [5, 40, 120, 5000])
def test_token_budget_shortcut_keeps_what_counting_keeps(max_tokens):
    rows = [{"id": str(i), "c": "ñandú café " * i, "s": 0.5} for i in range(6)]
    want = _reference_budget(rows, max_tokens)
    if want is not None:
        assert budget_rows(rows, max_tokens, "c") == want


def test_two_step_fts_matches_the_joined_query(tmp_path):
    store = SqliteStore(tmp_path / "m.db", None)
    rng = random.Random(10)
    entity = store.create_entity("e", "concept", None)
    with store.transaction():
        for i in range(400):
            store.add_observation(NewObservation(
                entity_id=entity.id, content=" ".join(rng.choice(WORDS) for _ in range(8)),
                created_at=f"2026-01-{1 + i % 28:02d}T00:00:00Z"))
    for flt in (SearchFilter(), SearchFilter(after="2026-01-27T00:00:00Z")):
        for terms in (["database"], ["port", "cache", "token"], ["nothing"]):
            got = [r["id"] for r in store._fts_match("observation", "raw", terms, 30, flt)]
            cond, params = store._filters("observation", flt)
            match = " OR ".join(f'"{t}"' for t in terms)
            want = [r[0] for r in store._q(
                "SELECT x.id FROM observations_fts f JOIN observations x ON x.seq = f.rowid"
                f" JOIN entities e ON e.id = x.entity_id WHERE observations_fts MATCH ? AND {cond}"
                " ORDER BY bm25(observations_fts, 1.0, 0.0), x.seq LIMIT 30", (f"raw : ({match})", *params))]
            assert set(got) == set(want) and len(got) == len(want)
    store.close()


def test_write_dedup_candidates_are_the_same_with_the_rowid_range(tmp_path):
    store = SqliteStore(tmp_path / "m.db", None)
    rng = random.Random(11)
    a = store.create_entity("a", "concept", None)
    b = store.create_entity("b", "concept", None)
    with store.transaction():
        for i in range(300):  # the two entities' rows interleave
            store.add_observation(NewObservation(
                entity_id=(a if i % 3 else b).id, content=" ".join(rng.choice(WORDS) for _ in range(6))))
    scope = SearchFilter().scope
    for entity in (a, b):
        for text in ("database port 5432", "kubernetes token cache", "mysql"):
            got = {o.id for o in store.similar_content(entity.id, text, scope)}
            terms = " OR ".join(f'"{t}"' for t in sorted(set(text.split()), key=len, reverse=True))
            want = {r[0] for r in store._q(
                "SELECT o.id FROM observations_fts f JOIN observations o ON o.seq = f.rowid"
                " WHERE observations_fts MATCH ? AND o.entity_id = ? AND o.observation_type != 'superseded'"
                " ORDER BY bm25(observations_fts) LIMIT 20", (f"raw : ({terms})", entity.id))}
            assert len(got) == len(want) and (len(want) == 20 or got == want)
    assert store.similar_content(store.create_entity("new", "concept", None).id, "database", scope) == []
    store.close()
