"""The embedded store: persistence, other processes, index consistency, migrations."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cuba_memorys.errors import ModelMismatch
from cuba_memorys.models import SearchFilter
from cuba_memorys.services.admin.doctor import doctor as run_doctor
from cuba_memorys.services.admin.reembed import reembed as run_reembed
from cuba_memorys.services.graph import entities
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.storage.sqlite.vector_index import VectorIndex


def _ids(result):
    return [r["id"] for r in result["results"]]


def lexical_rows(store) -> int:
    """Observations present in the lexical index (FTS5 table, or non-empty tsvectors)."""
    if store.backend == "sqlite":
        return store._q("SELECT count(*) FROM observations_fts")[0][0]
    return store._q("SELECT count(*) FROM observations WHERE tsv_raw <> ''::tsvector")[0][0]


def searchable_vectors(store, table: str = "observations") -> int:
    """Vectors of ``table`` the vector branch can reach."""
    if store.backend == "sqlite":
        return len(store.vectors[table.removesuffix("s")])
    return store._q(f"SELECT count(*) FROM {table} WHERE embedding IS NOT NULL")[0][0]


def test_restart_keeps_everything(open_memory):
    first = open_memory()
    added = observations.add(first, None, entity_name="cache", content="Redis holds the rate-limit counters")
    first.close()
    second = open_memory()
    assert added["id"] in _ids(search.faro(second, None, query="where are rate limit counters kept"))
    assert second.store.counts()["observations"] == 1
    assert second.store.migration_status()[1] == []  # nothing pending, nothing re-applied


def test_a_second_process_sees_writes_at_once(open_memory, settings):
    reader = open_memory()
    assert search.faro(reader, None, query="which message broker")["results"] == []
    script = textwrap.dedent(f"""
        from cuba_memorys.config import Settings
        from cuba_memorys.services.memory import Memory
        from cuba_memorys.services.observations import write as observations
        from dataclasses import replace
        from pathlib import Path
        mem = Memory.open(replace(Settings.from_env(), data_dir=Path({str(settings.data_dir)!r})))
        r = observations.add(mem, None, entity_name="broker", content="Events flow through NATS JetStream")
        print(r["id"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ})
    written = out.stdout.strip().splitlines()[-1]
    found = search.faro(reader, None, query="which message broker carries events", scope="observations")
    assert _ids(found)[0] == written
    # the reader's vector index picked the row up (not only the lexical branch)
    verbose = search.faro(reader, None, query="which message broker carries events", format="verbose",
                          scope="observations")
    assert verbose["results"][0]["vector_score"] is not None


def test_deletes_leave_no_ghosts_in_any_index(memory):
    observations.add(memory, None, entity_name="old-service", content="The legacy SOAP gateway translates XML")
    keep = observations.add(memory, None, entity_name="new-service", content="The gRPC gateway speaks protobuf")
    entities.delete(memory, None, "old-service")  # cascades in SQL, below Python
    assert searchable_vectors(memory.store) == 1
    results = search.faro(memory, None, query="SOAP gateway XML", format="verbose")["results"]
    assert all(r.get("content") != "The legacy SOAP gateway translates XML" for r in results)
    assert keep["id"] in _ids(search.faro(memory, None, query="gateway"))
    assert lexical_rows(memory.store) == 1


def test_index_rebuilds_from_stored_embeddings(open_memory, backend):
    if backend != "sqlite":
        pytest.skip("only the embedded store keeps an in-process vector index to rebuild")
    first = open_memory()
    observations.batch_add(first, None, [
        {"entity_name": "e", "content": f"distinct fact number {i} about topic {i * 7}"} for i in range(20)])
    first.close()
    second = open_memory()
    index = second.store.vectors["observation"]
    assert len(index) == 20
    stored = second.store._q("SELECT seq, embedding FROM observations")
    for seq, blob in stored:
        assert np.array_equal(index.vector(seq), np.frombuffer(blob, dtype=np.float32))


def test_lexical_index_is_rebuilt_when_the_analyzer_changes(open_memory):
    first = open_memory()
    observations.add(first, None, entity_name="e", content="Configuración del despliegue continuo")
    if first.store.backend == "sqlite":
        first.store._exec("DELETE FROM observations_fts")
    else:
        first.store._exec("UPDATE observations SET tsv_raw = ''::tsvector, tsv_stem = ''::tsvector")
    assert lexical_rows(first.store) == 0
    first.store.set_meta("analyzer_version", "0")
    first.close()
    second = open_memory()
    assert lexical_rows(second.store) == 1
    assert search.faro(second, None, query="configuracion despliegue", enable_bm25=True)["results"]


def test_writes_without_a_model_are_embedded_later(open_memory):
    degraded = open_memory(embed_model="none")
    added = observations.add(degraded, None, entity_name="ops", content="Backups are restored with pgBackRest")
    assert added["embedded"] is False
    result = search.faro(degraded, None, query="how are backups restored")
    assert result["degraded"] is True and "no embedding model" in result["degraded_reason"]
    assert added["id"] in _ids(result)  # lexical branches still answer
    assert run_doctor(degraded)["ok"] is False
    degraded.close()

    healthy = open_memory()
    assert healthy.store.embedding_coverage()["missing"] == 1
    done = run_reembed(healthy)
    assert done["updated"] == 1 and healthy.store.embedding_coverage()["missing"] == 0
    result = search.faro(healthy, None, query="how are backups restored", format="verbose", scope="observations")
    assert "degraded" not in result and result["results"][0]["vector_score"] is not None


def test_model_mismatch_refuses_to_open(open_memory):
    e5 = open_memory()
    observations.add(e5, None, entity_name="x", content="embedded with e5")
    e5.close()
    with pytest.raises(ModelMismatch) as err:
        open_memory(embed_model="all-MiniLM-L6-v2")
    message = str(err.value)
    assert "multilingual-e5-small" in message and "all-MiniLM-L6-v2" in message and "reembed" in message


def test_reembed_all_switches_model(open_memory):
    e5 = open_memory()
    observations.add(e5, None, entity_name="x", content="Kafka topics are compacted")
    e5.close()
    from dataclasses import replace

    from cuba_memorys.services.memory import Memory

    minilm = Memory.open(replace(e5.settings, embed_model="all-MiniLM-L6-v2"), check_model=False)
    try:
        run_reembed(minilm, everything=True)
        minilm.check_model()  # no longer a mismatch
        assert minilm.stored_model() == ("all-MiniLM-L6-v2", 384)
    finally:
        minilm.close()


def test_vector_index_matches_brute_force():
    rng = np.random.default_rng(7)
    index = VectorIndex(16)
    vectors = {}
    for key in range(300):
        v = rng.normal(size=16).astype(np.float32)
        v /= np.linalg.norm(v)
        vectors[key] = v
        index.upsert(key, v)
    for key in range(0, 300, 3):  # remove a third, including from the middle
        index.remove(key)
        del vectors[key]
    index.upsert(1, vectors[1] * 1.0, rev=2)  # update in place
    q = rng.normal(size=16).astype(np.float32)
    q /= np.linalg.norm(q)
    expected = sorted(vectors, key=lambda k: -float(vectors[k] @ q))[:10]
    assert [k for k, _ in index.search(q, 10)] == expected
    assert len(index) == 200 and index.revisions()[1] == 2


def test_reembed_also_covers_episodes(open_memory):
    from cuba_memorys.services.graph import episodes

    degraded = open_memory(embed_model="none")
    episodes.add(degraded, None, entity_name="incident", content="Friday outage: the cache stampeded")
    assert degraded.store.embedding_coverage("episode")["missing"] == 1
    degraded.close()
    healthy = open_memory()
    assert run_reembed(healthy)["updated"] == 1
    assert healthy.store.embedding_coverage("episode")["missing"] == 0
    assert searchable_vectors(healthy.store, "episodes") == 1


def test_postgres_writes_each_new_row_once(memory):
    """The lexical columns go into the INSERT: a follow-up UPDATE would leave the live row at
    a second tuple slot (ctid (0,2)) in the fresh table, and cost a second write per row."""
    if memory.store.backend == "sqlite":
        pytest.skip("FTS5 keeps the lexical index in its own table")
    observations.add(memory, None, entity_name="queue", content="Celery workers drain the email queue")
    assert memory.store._q("SELECT ctid::text FROM observations")[0][0] == "(0,1)"
    assert lexical_rows(memory.store) == 1
    assert _ids(search.faro(memory, None, query="which workers drain email", scope="observations"))


def test_postgres_leaves_room_for_in_place_access_updates(memory):
    """Search rewrites access counts; fillfactor leaves page space so those updates stay HOT."""
    if memory.store.backend == "sqlite":
        pytest.skip("a PostgreSQL storage parameter")
    options = dict(memory.store._q("SELECT relname, array_to_string(reloptions, ',') FROM pg_class"
                                   " WHERE relname IN ('observations', 'entities')"))
    assert "fillfactor=80" in options["observations"] and "fillfactor=90" in options["entities"]


def test_postgres_estimates_bm25_statistics_on_large_tables(memory, monkeypatch):
    """Above ESTIMATE_ABOVE rows the row count comes from pg_class and the mean length from a page
    sample (no full scan); both stay close to the exact figures, and search ranks as before."""
    if memory.store.backend == "sqlite":
        pytest.skip("FTS5 keeps its own statistics")
    from cuba_memorys.storage.postgres import lexical as pg_lexical

    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]
    observations.batch_add(memory, None, [
        {"entity_name": f"e{i % 7}", "content": " ".join(words[: 2 + i % 9]) + f" row {i}"} for i in range(100)])
    observations.batch_add(memory, None, [
        {"entity_name": f"e{i % 7}", "content": " ".join(words[: 2 + i % 9]) + f" row {i}"} for i in range(100, 200)])
    import psycopg

    with psycopg.connect(memory.settings.database_url, autocommit=True) as owner:  # ANALYZE is the owner's
        owner.execute("ANALYZE observations")
    exact_rows, exact_len = memory.store._q("SELECT count(*), avg(length(tsv_raw)) FROM observations")[0]
    monkeypatch.setattr(pg_lexical, "ESTIMATE_ABOVE", 50)
    monkeypatch.setattr(pg_lexical, "SAMPLE_ROWS", 60)
    asked: list[str] = []
    real = memory.store.lexical_stats._query
    monkeypatch.setattr(memory.store.lexical_stats, "_query",
                        lambda sql, params: asked.append(sql) or real(sql, params))
    rows, mean = memory.store.lexical_stats._collection("observations", "tsv_raw")
    assert any("TABLESAMPLE" in sql for sql in asked) and not any("count(*)" in sql for sql in asked)
    assert abs(rows - exact_rows) <= 0.1 * exact_rows
    assert abs(float(mean) - float(exact_len)) <= 0.25 * float(exact_len)
    memory.store.lexical_stats._cache.clear()
    found = search.faro(memory, None, query="kappa lambda row 9", scope="observations", format="verbose")
    assert found["results"][0]["content"].endswith("row 9")


def _index_state(url: str, name: str) -> str | None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (name,)).fetchone()
    return None if row is None else ("valid" if row[0] else "invalid")


def test_postgres_builds_a_large_missing_vector_index_in_the_background(memory, monkeypatch):
    """Opening never waits for a large index build; a server builds it CONCURRENTLY while another
    process's build lock is honoured, and searches answer meanwhile."""
    if memory.store.backend == "sqlite":
        pytest.skip("the embedded store's vector index is in-process")
    import psycopg

    from cuba_memorys.storage.postgres import vector_index as pg_vector_index
    from cuba_memorys.storage.postgres.store import PgStore

    url = memory.settings.database_url
    rows = observations.batch_add(memory, None, [
        {"entity_name": "svc", "content": f"Service {i} listens on port {8000 + i}"} for i in range(5)])
    assert memory.wait_for_embeddings(120)  # the vectors come from the background embedding queue
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute("DROP INDEX observations_hnsw_384")
    monkeypatch.setattr(pg_vector_index, "INLINE_BUILD_ROWS", 3)
    monkeypatch.setattr(pg_vector_index, "LOCK_POLL_SECONDS", 0.05)
    with psycopg.connect(url, autocommit=True) as other:  # another process holds the build lock
        other.execute("SELECT pg_advisory_lock(%s)", (pg_vector_index._lock_key("observations_hnsw_384"),))
        store = PgStore(url, 384)
        assert store.index_builds()["missing"] == ["observations_hnsw_384"]  # a one-shot open builds nothing
        store.build_indexes_in_background()
        assert store.index_builds()["building"] == ["observations_hnsw_384"]
        assert not store.vector_indexes.wait(0.3)  # waiting for the other process
        assert _index_state(url, "observations_hnsw_384") is None
        hits = store.vector_candidates("observation", memory.embedder.embed_query("which port does service 3 use"),
                                       5, SearchFilter())
        assert rows["ids"][3] in [h.id for h in hits]  # exact scan meanwhile
    assert store.vector_indexes.wait(60)
    assert _index_state(url, "observations_hnsw_384") == "valid"
    assert store.index_builds() == {"missing": [], "building": [], "failed": {}}
    store.close()


def test_postgres_rebuilds_an_invalid_vector_index(memory):
    """A failed concurrent build leaves an INVALID index that IF NOT EXISTS would keep forever."""
    if memory.store.backend == "sqlite":
        pytest.skip("the embedded store's vector index is in-process")
    import psycopg

    from cuba_memorys.storage.postgres.store import PgStore

    url = memory.settings.database_url
    observations.add(memory, None, entity_name="svc", content="The gateway terminates TLS")
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'observations_hnsw_384'::regclass")
    assert _index_state(url, "observations_hnsw_384") == "invalid"
    PgStore(url, 384).close()  # a small table: rebuilt at once
    assert _index_state(url, "observations_hnsw_384") == "valid"
