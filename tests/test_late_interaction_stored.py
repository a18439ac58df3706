"""Late interaction paid at write time (issue 31): the embedding queue stores each observation's
token vectors beside its vector, a search reranks its fused top rows from them without running the
model on the passages, a changed text loses them, and `reembed` gives them to an older store.
The real e5 model and the real all-MiniLM-L6-v2 int8 reranker, on each backend."""

from __future__ import annotations

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
