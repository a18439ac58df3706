"""The search's faster paths answer exactly as the plain ones: the FTS step that joins its ranked
rowids in two slices keeps the rows, order (ties included) and ranks of joining them all; and a
process that ends while the HNSW accelerator is building exits cleanly (it used to abort in
usearch's C++ with exit code 134)."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cuba_memorys.models import NewObservation, SearchFilter
from cuba_memorys.storage.sqlite import ann
from cuba_memorys.storage.sqlite.search import _fts_wide, _match_expression
from cuba_memorys.storage.sqlite.store import SqliteStore

WORDS = ["database", "port", "cache", "token", "deploy", "staging", "python", "queue", "index", "vector"]


def _joined_all(store: SqliteStore, column: str, terms: list[str], limit: int, flt: SearchFilter) -> list:
    """The two-step match as it was: rank ``_fts_wide(limit)`` rowids, join and filter all of them,
    keep the first ``limit`` in rank order (or the fully joined query when the filter left too few)."""
    weights = "1.0, 0.0" if column == "raw" else "0.0, 1.0"
    match = _match_expression(column, terms)
    cond, params = store._filters("observation", flt)
    wide = _fts_wide(limit)
    top = store._q(f"SELECT rowid, -bm25(observations_fts, {weights}) FROM observations_fts"
                   f" WHERE observations_fts MATCH ? ORDER BY bm25(observations_fts, {weights}) LIMIT ?", (match, wide))
    order = {seq: (pos, rank) for pos, (seq, rank) in enumerate(top)}
    rows = store._q(f"SELECT x.seq, x.id, x.content AS body, x.importance AS importance FROM observations x"
                    f" JOIN entities e ON e.id = x.entity_id WHERE x.seq IN ({','.join('?' * len(order))})"
                    f" AND {cond}", (*order, *params)) if order else []
    if len(rows) < limit and len(top) == wide:
        return [dict(r) for r in store._q(
            f"SELECT x.id, -bm25(observations_fts, {weights}) AS rank, x.content AS body, x.importance AS importance"
            " FROM observations_fts f JOIN observations x ON x.seq = f.rowid JOIN entities e ON e.id = x.entity_id"
            f" WHERE observations_fts MATCH ? AND {cond} ORDER BY bm25(observations_fts, {weights}) LIMIT ?",
            (match, *params, limit))]
    rows = sorted(rows, key=lambda r: order[r["seq"]][0])[:limit]
    return [{"id": r["id"], "rank": order[r["seq"]][1], "body": r["body"], "importance": r["importance"]}
            for r in rows]


@pytest.fixture
def store(tmp_path):
    store = SqliteStore(tmp_path / "m.db", None)
    rng = random.Random(18)
    entity = store.create_entity("e", "concept", None)
    with store.transaction():
        for i in range(600):
            # few words from a small list: many rows tie on BM25, so the tie order is tested too
            store.add_observation(NewObservation(
                entity_id=entity.id, content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))),
                created_at=f"2026-01-{1 + i % 28:02d}T00:00:00Z"))
    yield store
    store.close()


def _supersede_every(store: SqliteStore, nth: int) -> None:
    """Hide every ``nth`` row from search (superseded), so the first slice of ranked rows loses some."""
    with store.transaction():
        store._exec("UPDATE observations SET observation_type = 'superseded' WHERE seq % ? = 0", (nth,))


@pytest.mark.parametrize("column", ["raw", "stem"])
@pytest.mark.parametrize("hide", [None, 3, 2])
def test_sliced_fts_join_answers_as_joining_every_ranked_row(store, column, hide):
    if hide:
        _supersede_every(store, hide)
    filters = (SearchFilter(), SearchFilter(after="2026-01-20T00:00:00Z"), SearchFilter(before="2026-01-02T00:00:00Z"))
    for flt in filters:
        for terms in (["database"], ["port", "cache"], ["token", "deploy", "staging", "vector"], ["nothing"]):
            for limit in (5, 30, 100, 300):
                want = _joined_all(store, column, terms, limit, flt)
                got = [dict(r) for r in store._fts_match("observation", column, terms, limit, flt)]
                assert got == want, (flt, terms, limit)


def test_a_filter_that_removes_part_of_the_first_slice_still_fills_the_limit(store):
    _supersede_every(store, 2)  # half the rows: the first `limit` ranked rowids cannot all pass
    got = [dict(r) for r in store._fts_match("observation", "raw", ["database"], 30, SearchFilter())]
    assert len(got) == 30
    assert got == _joined_all(store, "raw", ["database"], 30, SearchFilter())


def test_vector_net_checked_in_two_slices_answers_as_exact_filtered_scoring(tmp_path):
    store = SqliteStore(tmp_path / "v.db", 16, ann_min_rows=0)  # exact index: the answer is known
    rng = np.random.default_rng(18)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    entity = store.create_entity("e", "concept", None)
    with store.transaction():
        for i, vec in enumerate(vectors):
            store.add_observation(NewObservation(
                entity_id=entity.id, content=f"row {i}", created_at=f"2026-01-{1 + i % 28:02d}T00:00:00Z",
                embedding=vec.tobytes(), embedding_model="test"))
    _supersede_every(store, 3)
    index = store.vectors["observation"]
    filters = (SearchFilter(), SearchFilter(after="2026-01-10T00:00:00Z"), SearchFilter(before="2026-01-03T00:00:00Z"))
    for flt in filters:
        cond, params = store._filters("observation", flt)
        visible = {r[0]: r[1] for r in store._q(f"SELECT x.seq, x.id FROM observations x WHERE {cond}", params)}
        for query in rng.standard_normal((5, 16)).astype(np.float32):
            query /= np.linalg.norm(query)
            for limit in (1, 10, 40):
                scored = sorted(index.score(query, list(visible)).items(), key=lambda kv: kv[1], reverse=True)
                got = store.vector_candidates("observation", query, limit, flt)
                # the same rows in the same order; scores to float32 rounding (the full scan and the
                # scoring of a subset multiply in different orders)
                assert [h.id for h in got] == [visible[k] for k, _ in scored[:limit]], (flt, limit)
                assert [h.score for h in got] == pytest.approx([s for _, s in scored[:limit]], abs=1e-6)
    store.close()


EXIT_DURING_BUILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from cuba_memorys.storage.sqlite.ann import AnnAccelerator
    from cuba_memorys.storage.sqlite.store import SqliteStore
    from cuba_memorys.storage.sqlite.vector_index import VectorIndex

    how, path = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((40_000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    if how == "store":  # a store closed while its accelerator builds
        store = SqliteStore(path, 384, ann_min_rows=0)
        index = store.vectors["observation"]
    else:  # an accelerator nobody closes: the process simply ends
        index = VectorIndex(384)
    for key, vec in enumerate(vectors):
        index.upsert(key, vec, 1)
    index.accelerator = AnnAccelerator(384, min_rows=1)
    assert index.accelerator.maybe_start(index)
    time.sleep(1.0)  # inside usearch's add by now (the whole build takes ~10 s)
    assert index.accelerator.building, "the build ended too soon to test anything"
    acc = index.accelerator
    if how == "store":
        store.close()  # stops the build itself (the exit handler is not what ends it)
        assert not acc.building and not acc.ready and not any(t.is_alive() for t in acc._threads)
        assert not acc.maybe_start(index), "a stopped accelerator starts no new build"
    elif how == "cleared":  # clear() orphans the running build; a new one starts; stop ends both
        first = acc._thread
        acc.clear()
        assert acc.maybe_start(index) and acc._thread is not first
        acc.stop(timeout=30)
        assert not any(t.is_alive() for t in acc._threads) and not first.is_alive()
    print("exiting", flush=True)
""")


@pytest.mark.skipif(not ann.available(), reason="usearch is not installed")
@pytest.mark.parametrize("how", ["store", "no-close", "cleared"])
def test_a_process_ending_while_the_accelerator_builds_exits_cleanly(tmp_path, how):
    done = subprocess.run([sys.executable, "-c", EXIT_DURING_BUILD, how, str(tmp_path / "m.db")],
                          capture_output=True, text=True, timeout=120)
    assert "exiting" in done.stdout, done.stderr
    assert done.returncode == 0, f"exit code {done.returncode}: {done.stderr[-500:]}"
    assert "terminate called" not in done.stderr
