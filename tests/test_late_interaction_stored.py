"""Late interaction paid at write time (issue 31): the embedding queue stores each observation's
token vectors beside its vector, a search reranks its fused top rows from them without running the
model on the passages, a changed text loses them, and `reembed` gives them to an older store.
The real e5 model and the real all-MiniLM-L6-v2 int8 reranker, on each backend."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cuba_memorys.judge.late_interaction import decode_tokens, encode_tokens, maxsim
from cuba_memorys.services.admin import doctor, reembed
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import faro

ROWS = [
    ("billing", "Stripe webhooks are retried five times with exponential backoff before they are dropped."),
    ("billing", "Invoices are generated on the first day of each month from the usage ledger."),
    ("billing", "Refunds above 500 euros need a second approval from the finance team."),
    ("deploy", "Production deploys run every Tuesday after the change review meeting."),
    ("deploy", "Rollbacks use the previous container image tag kept in the registry."),
    ("search", "The search service keeps its BM25 index in SQLite FTS5 tables."),
    ("search", "Query embeddings are cached for five minutes to save model calls."),
    ("auth", "Access tokens expire after fifteen minutes; refresh tokens after thirty days."),
    ("auth", "Passwords are hashed with argon2id using a memory cost of 64 MiB."),
    ("ops", "Disk alerts page the on-call engineer after ten minutes above ninety percent."),
    ("ops", "Logs are shipped to Loki and kept for fourteen days."),
    ("ops", "Backups of the primary database run nightly and are kept for thirty days."),
]


@pytest.fixture
def mem(open_memory):
    return open_memory(reranker_kind="late-interaction")


def batch(mem, rows=ROWS) -> list[str]:
    ids = write.batch_add(mem, None, [{"entity_name": e, "content": c} for e, c in rows])["ids"]
    assert mem.wait_for_embeddings(120)
    return ids


class Counting:
    """Counts the texts the reranker's model reads (forward), to see what a search computes."""

    def __init__(self, model) -> None:
        self.model, self.texts = model, []
        self._forward = model.forward

    def __enter__(self):
        def forward(texts):
            self.texts.extend(texts)
            return self._forward(texts)

        self.model.forward = forward
        return self

    def __exit__(self, *exc) -> None:
        self.model.forward = self._forward


def test_the_stored_form_keeps_every_token_within_int8_precision():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((37, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    blob = encode_tokens(vectors)
    assert len(blob) == 7 + 37 * (384 + 2)  # 386 bytes a token
    back = decode_tokens(blob)
    cos = (back * vectors).sum(axis=1) / np.linalg.norm(back, axis=1)
    assert back.shape == vectors.shape and cos.min() > 0.999
    assert decode_tokens(b"not a blob") is None and decode_tokens(blob[:-1]) is None


def test_the_queue_stores_token_vectors_beside_the_vectors(mem):
    ids = batch(mem)
    stored = mem.store.token_vectors_of(ids)
    assert set(stored) == set(ids)
    model = mem.token_model()
    query = model.query_vectors("how often are webhooks retried")
    for (_, content), row_id in zip(ROWS, ids):
        computed = model.passage_vectors([content])[0].astype(np.float32)
        assert abs(maxsim(query, decode_tokens(stored[row_id])) - maxsim(query, computed)) < 0.01
    single = write.add(mem, None, entity_name="ops", content="Grafana dashboards live in the ops repository.")["id"]
    assert mem.wait_for_embeddings(120)
    assert single in mem.store.token_vectors_of([single])  # a single add's come from the queue too
    assert mem.embeddings_pending() == 0  # and were never counted as pending embeddings


def test_a_search_reranks_its_top_rows_from_the_stored_vectors_by_default(mem):
    batch(mem)
    model = mem.token_model()
    with Counting(model) as seen:
        found = faro.faro(mem, None, query="how many times is a failed webhook retried", track_access=False)
    assert "reranker_degraded" not in found
    assert seen.texts == ["how many times is a failed webhook retried"]  # the query only: no passage read
    assert found["results"][0]["c"].startswith("Stripe webhooks are retried")
    with Counting(model) as seen:
        plain = faro.faro(mem, None, query="how many times is a failed webhook retried", rerank=False,
                          track_access=False)
    assert seen.texts == [] and len(plain["results"]) == len(found["results"])


def test_a_changed_text_loses_its_token_vectors_and_gets_new_ones(mem):
    ids = batch(mem)
    before = mem.store.token_vectors_of([ids[3]])[ids[3]]
    with mem.embedding_queue().hold():
        feedback.correct(mem, None, observation_id=ids[3], correction="Production deploys run every Thursday.")
        assert mem.store.token_vectors_of([ids[3]]) == {}  # dropped with the old text, whatever changed it
    assert mem.wait_for_embeddings(120)
    after = mem.store.token_vectors_of([ids[3]])[ids[3]]
    assert after != before


def test_reembed_gives_an_older_store_its_token_vectors_and_doctor_says_so(mem):
    ids = batch(mem)
    mem.store.clear_token_vectors()  # a store written before issue 31
    report = doctor.doctor(mem)
    assert report["token_vector_coverage"]["missing"] == len(ids)
    assert any("token vectors" in w and "reembed" in w for w in report["warnings"])
    done = reembed.reembed(mem)
    assert done["token_vectors_updated"] == len(ids)
    assert doctor.doctor(mem)["token_vector_coverage"]["missing"] == 0
    assert set(mem.store.token_vectors_of(ids)) == set(ids)


def test_without_the_late_interaction_reranker_nothing_is_computed(open_memory):
    mem = open_memory(reranker_kind="none")
    ids = batch(mem)
    assert mem.token_model() is None and mem.store.token_vectors_of(ids) == {}
    found = faro.faro(mem, None, query="webhooks retried", track_access=False)
    assert "reranker_degraded" not in found  # not asked to rerank: nothing to report


def test_a_bundle_imported_with_its_embeddings_gets_token_vectors_here(mem, open_memory, tmp_path):
    """A bundle carries vectors but no token vectors (the original's format has no file for them):
    the rows whose vector the bundle gives are queued for their token vectors only."""
    from dataclasses import replace

    from cuba_memorys.services.memory import Memory
    from cuba_memorys.services.sync import export, importer

    ids = batch(mem)
    export.export(mem, None, dir=str(tmp_path / "bundle"), scope="all", with_embeddings=True)
    assert not any(p.name.startswith("token") for p in (tmp_path / "bundle").iterdir())
    here = Memory.open(replace(mem.settings, data_dir=tmp_path / "here", database_url=""))
    try:
        got = importer.import_bundle(here, None, dir=str(tmp_path / "bundle"))
        assert got["embeddings_restored"] == len(ids) and got["embeddings_computed"] == 0
        assert here.wait_for_embeddings(120)
        deadline = time.monotonic() + 120
        while len(here.store.token_vectors_of(ids)) < len(ids) and time.monotonic() < deadline:
            time.sleep(0.1)  # token passes come after every vector and are not counted as pending
        assert set(here.store.token_vectors_of(ids)) == set(ids)
        assert doctor.doctor(here)["token_vector_coverage"]["missing"] == 0
    finally:
        here.close()


def test_forget_leaves_no_copy_of_the_token_vectors_in_the_embedded_store(mem, backend):
    """cuba_forget's byte-level promise holds for the token vectors too: after the forget, no
    file of the data folder holds a run of the forgotten rows' stored token bytes."""
    from cuba_memorys.services.lifecycle import forget

    if backend != "sqlite":
        pytest.skip("the file-level check is the embedded store's; PostgreSQL deletes the row (test_forget)")
    ids = batch(mem)
    doomed = [row_id for (entity, _), row_id in zip(ROWS, ids) if entity == "auth"]
    blobs = [blob for row_id, blob in mem.store.token_vectors_of(doomed).items()]
    assert len(blobs) == 2
    chunks = [blob[100:164] for blob in blobs]  # 64 bytes inside the int8 codes: never a chance match
    folder = mem.settings.data_dir
    def holders() -> list[str]:
        return [str(p) for p in folder.rglob("*") if p.is_file() for chunk in chunks if chunk in p.read_bytes()]

    assert len(holders()) >= 2  # the check can see them: both rows' bytes are in the database or its WAL
    forget.forget(mem, None, entity_name="auth", confirm=True)
    mem.close()
    assert holders() == []


def test_a_prefetched_query_is_computed_once_and_gives_the_same_vectors(mem):
    from concurrent.futures import ThreadPoolExecutor

    model = mem.token_model()
    expected = model.query_vectors("which queue retries the webhooks")
    with ThreadPoolExecutor(max_workers=1) as pool, Counting(model) as seen:
        model.prefetch_query("which queue retries the invoices", pool)
        model.prefetch_query("which queue retries the invoices", pool)  # already running: not again
        got = model.query_vectors("which queue retries the invoices")
        model.prefetch_query("which queue retries the webhooks", pool)  # cached: nothing to run
    assert seen.texts == ["which queue retries the invoices"]
    assert got.shape[1] == expected.shape[1] and not np.allclose(got[: len(expected)], expected[: len(got)])
    again = model.query_vectors("which queue retries the invoices")
    assert again is got


def test_a_script_that_exits_without_closing_gets_its_token_vectors_and_a_clean_exit(mem, settings):
    """A single add queues the row's token vectors in the background; a script that then simply
    ends (no Memory.close) must neither die in the model at interpreter exit (it was SIGABRT) nor
    leave the row without them: the queue finishes at exit."""
    import os
    import subprocess
    import sys
    import textwrap

    for content in ("Events flow through NATS JetStream", "Dead letters are kept for seven days"):
        script = textwrap.dedent(f"""
            from dataclasses import replace
            from pathlib import Path
            from cuba_memorys.config import Settings
            from cuba_memorys.services.memory import Memory
            from cuba_memorys.services.observations import write
            mem = Memory.open(replace(Settings.from_env(), data_dir=Path({str(settings.data_dir)!r}),
                                      reranker_kind="late-interaction"))
            print(write.add(mem, None, entity_name="broker", content={content!r})["id"])
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ},
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        row_id = out.stdout.strip().splitlines()[-1]
        assert row_id in mem.store.token_vectors_of([row_id])


def test_while_the_queue_is_busy_a_search_computes_two_fresh_rows_and_the_rest_keep_their_place(mem):
    """Eight agents writing on two cores keep the queue behind: a search then computes the token
    vectors of at most two observations the queue has not reached (FRESH_TOKENS_PER_SEARCH); the
    other fresh rows keep their fused place. Once the queue is idle, every row is reranked again."""
    ids = batch(mem)
    mem.store.clear_token_vectors()  # as if the queue had not reached any of them yet
    query = "how long are the backups and logs kept"
    plain = [r["id"] for r in faro.faro(mem, None, query=query, rerank=False, track_access=False)["results"]]
    queue = mem.embedding_queue()
    model = mem.token_model()
    with queue.hold():
        queue.add_tokens(ids)  # the queue holds work it has not started: busy
        assert mem.embedding_queue_busy()
        with Counting(model) as seen:
            busy = [r["id"] for r in faro.faro(mem, None, query=query, track_access=False)["results"]]
    passages = [t for t in seen.texts if t != query]
    assert len(passages) == 2
    top = plain[:10]
    computed = {i for i in top if mem.store.get_observation(i, mem.scope(None)).content in passages}
    assert computed == set(top[:2])  # the first two of the fused order
    kept = [n for n, i in enumerate(top) if i not in computed]
    assert [busy[n] for n in kept] == [top[n] for n in kept]  # the others keep their places
    assert set(busy[:2]) == computed  # the two computed may only trade places with each other
    assert mem.wait_for_embeddings(120) and not mem.embedding_queue_busy()
    with Counting(model) as seen:
        faro.faro(mem, None, query=query + "?", track_access=False)
    assert seen.texts == [query + "?"]  # idle again: every row read from its stored vectors
