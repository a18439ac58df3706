"""The background embedding queue (issue 18, item 3; services/embedding_queue.py).

Batch writes (cuba_cronica batch_add, cuba_ingesta, cuba_sync import) commit their rows without a
vector and answer ``embedding: "pending"``; the lexical branches find the rows at once, the vector
branch once the queue has embedded them. The queue batches across calls by length, drains on
close, and what a killed server left unembedded is embedded at the next start (kill -9 of a real
`serve` process). A single add still embeds before it answers; without a model nothing is queued.
Every test runs on both backends.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import StoreLocation, settings_for
from cuba_memorys.config import Settings
from cuba_memorys.errors import ConfigError, InvalidInput
from cuba_memorys.models import SearchFilter
from cuba_memorys.services.graph import episodes
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import ingest, write
from cuba_memorys.services.search import faro, hipocampo
from cuba_memorys.services.sync import export, importer
from test_http import Server, call, mcp_session, run

ROWS = [
    ("billing", "Invoices are generated nightly by the cron job in jobs/invoices.py"),
    ("billing", "Stripe webhooks are retried three times with exponential backoff"),
    ("frontend", "The admin dashboard is a React app bundled with Vite"),
]


def items(rows=ROWS) -> list[dict]:
    return [{"entity_name": e, "content": c} for e, c in rows]


def vector_hits(mem: Memory, query: str) -> list[str]:
    """The vector branch alone: ids of the observations nearest to ``query``."""
    vec = mem.loaded_embedder().embed_query(query)
    return [h.id for h in mem.store.vector_candidates("observation", vec, 10, SearchFilter())]


def lexical_hits(mem: Memory, query: str) -> list[str]:
    return [h.id for h in mem.store.text_candidates("observation", query, 10, SearchFilter())]


class Recorder:
    """The memory's embedder, recording the texts of each embed_passages call."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.calls: list[list[str]] = []

    def embed_passages(self, texts):
        self.calls.append(list(texts))
        return self.inner.embed_passages(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def test_batch_add_answers_pending_then_its_rows_become_vector_searchable(memory):
    queue = memory.embedding_queue()
    with queue.hold():
        answer = write.batch_add(memory, None, items())
        ids = answer["ids"]
        assert answer["embedding"] == "pending" and answer["added"] == 3
        assert memory.store.observation_vectors(ids) == {}  # committed, no vector yet
        # the lexical branches find a pending row at once, the vector branch does not yet
        assert ids[1] in lexical_hits(memory, "Stripe webhooks retried")
        assert ids[1] not in vector_hits(memory, "retrying Stripe webhook calls with backoff")
        found = faro.faro(memory, None, query="Stripe webhooks retried", track_access=False)
        assert found["results"][0]["id"] == ids[1] and found["embedding_pending"] == 3
    assert memory.wait_for_embeddings(120)
    assert set(memory.store.observation_vectors(ids)) == set(ids)
    assert vector_hits(memory, "retrying Stripe webhook calls with backoff")[0] == ids[1]
    assert "embedding_pending" not in faro.faro(memory, None, query="Stripe webhooks", track_access=False)
    # "ready" when every row named already has its vector (a repeat of an embedded row)
    again = write.batch_add(memory, None, items(ROWS[:1]))
    assert again["ids"] == ids[:1] and again["deduplicated"] == 1 and again["embedding"] == "ready"


def test_a_single_add_embeds_before_it_answers(memory):
    with memory.embedding_queue().hold():  # the queue is not what embeds it
        added = write.add(memory, None, entity_name="deploy", content="Deploys go out every Tuesday at noon")
        assert added["embedding"] == "ready" and added["embedded"] is True
        assert vector_hits(memory, "when do releases ship")[0] == added["id"]
        assert memory.embeddings_pending() == 0


def test_the_queue_batches_across_calls_by_length(memory):
    recorder = Recorder(memory.embedder)
    memory.embedder = recorder
    queue = memory.embedding_queue()
    queue.batch_size, queue.workers = 4, 1  # one model call at a time (side by side: the next test)
    first = [("ops", "Disk alerts page the on-call engineer after ten minutes above ninety percent"),
             ("ops", "Logs ship to Loki"), ("ops", "Grafana dashboards live in the ops repository")]
    second = [("ops", "Traces are sampled at five percent"),
              ("ops", "The pager rotation changes every Monday morning at nine, in the team calendar"),
              ("ops", "Nodes reboot on Sundays")]
    with queue.hold():
        ids = write.batch_add(memory, None, items(first))["ids"] + write.batch_add(memory, None, items(second))["ids"]
        assert memory.embeddings_pending() == 6 and recorder.calls == []
    assert memory.wait_for_embeddings(120)
    assert queue.passes == 1  # both calls' rows in one pass
    assert [len(c) for c in recorder.calls] == [4, 2]  # at most batch_size texts per model call
    texts = [t for c in recorder.calls for t in c]
    assert [len(t) for t in texts] == sorted(len(t) for t in texts)  # shortest first, across the two calls
    assert {t.split("] ", 1)[1] for t in recorder.calls[0]} >= {"Logs ship to Loki", "Nodes reboot on Sundays"}
    assert set(memory.store.observation_vectors(ids)) == set(ids)


def test_two_workers_embed_interleaved_halves_side_by_side(memory):
    """CUBA_EMBED_QUEUE_THREADS=2: each step hands one batch to each worker, interleaved by length,
    and the two model calls run at the same time."""
    recorder = Recorder(memory.embedder)
    inside, most = [0], [0]
    lock = threading.Lock()

    def embed(texts):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            time.sleep(0.2)  # long enough for the other worker's call to start meanwhile
            return recorder.embed_passages(texts)
        finally:
            with lock:
                inside[0] -= 1

    memory.embedder = type("Both", (), {"name": recorder.name, "dim": recorder.dim,
                                        "embed_passages": staticmethod(embed), "embed_query": recorder.embed_query})()
    queue = memory.embedding_queue()
    queue.batch_size, queue.workers = 3, 2
    rows = [("ops", "x " * n + f"note {n}") for n in range(1, 13)]
    with queue.hold():
        ids = write.batch_add(memory, None, items(rows))["ids"]
    assert memory.wait_for_embeddings(120)
    assert set(memory.store.observation_vectors(ids)) == set(ids)
    assert most[0] == 2  # two calls in flight at once
    assert all(len(c) <= 3 for c in recorder.calls) and sum(len(c) for c in recorder.calls) == 12
    lengths = [[len(t) for t in c] for c in recorder.calls[:2]]
    assert min(lengths[0]) < max(lengths[1]) and min(lengths[1]) < max(lengths[0])  # interleaved, not halves


def test_a_vector_that_decides_a_batch_item_is_computed_before_the_write(memory):
    stored = write.add(memory, None, entity_name="backups",
                       content="Backups of the billing database run nightly and are kept for thirty days")
    with memory.embedding_queue().hold():
        answer = write.batch_add(memory, None, items([
            ("backups", "Backups of the billing database run nightly and are always kept safely offsite for"
                        " thirty days"),  # the same claim in more words: reinforced, as a single add does
            ("backups", "Restores are tested every quarter")]))
    assert answer["reinforced"] == 1 and answer["ids"][0] == stored["id"] and answer["added"] == 1


def test_bad_input_queues_nothing_and_a_bad_setting_is_named(memory, monkeypatch):
    with pytest.raises(InvalidInput, match=r"observations\[1\]"):
        write.batch_add(memory, None, [*items(ROWS[:1]), {"entity_name": "billing"}])
    assert memory.embeddings_pending() == 0 and memory.store.embedding_coverage()["observations"] == 0
    monkeypatch.setenv("CUBA_EMBED_DRAIN_SECS", "soon")
    with pytest.raises(ConfigError, match="CUBA_EMBED_DRAIN_SECS"):
        Settings.from_env()


def test_close_drains_and_the_next_start_embeds_what_was_left(settings):
    mem = Memory.open(settings)
    with mem.embedding_queue().hold():
        drained = write.batch_add(mem, None, items())["ids"]
        mem.close()  # ends the hold and waits for the queue
    mem = Memory.open(replace(settings, embed_drain_secs=0))
    with mem.embedding_queue().hold():
        left = write.batch_add(mem, None, items([("cache", "Redis keys expire after one hour")]))["ids"]
        assert mem.embedding_queue().close(0) == 1  # no time to drain: the row stays committed, unembedded
    mem.close()
    mem = Memory.open(settings)
    try:
        assert set(mem.store.observation_vectors(drained)) == set(drained)
        assert mem.store.observation_vectors(left) == {} and mem.store.get_observation(left[0], mem.scope(None))
        mem.start_embedding_queue()  # a server's start: the catch-up
        assert mem.wait_for_embeddings(120)
        assert set(mem.store.observation_vectors(left)) == set(left)
        assert vector_hits(mem, "cached entries live sixty minutes")[0] == left[0]
    finally:
        mem.close()


def test_without_a_model_nothing_is_queued_and_a_start_with_one_catches_up(settings):
    bare = Memory.open(replace(settings, embed_model="none"))
    try:
        batch = write.batch_add(bare, None, items())
        ingested = ingest.ingest(bare, None, items=items([("queue", "Poison messages go to a dead letter queue")]))
        episode = episodes.add(bare, None, entity_name="billing", content="Migrated the invoice job to the new queue")
        assert batch["embedding"] == "pending" and ingested["embedding"] == "pending"
        assert bare.embedding_queue() is None and bare.embeddings_pending() == 0
    finally:
        bare.close()
    mem = Memory.open(settings)
    try:
        mem.start_embedding_queue()
        assert mem.wait_for_embeddings(120)
        ids = [*batch["ids"], *ingested["ids"]]
        assert set(mem.store.observation_vectors(ids)) == set(ids)
        assert mem.store.embedding_coverage("episode") == {"episodes": 1, "embedded": 1, "missing": 0}
        assert episode["id"]
    finally:
        mem.close()


# -- a search right after a batch write (CUBA_EMBED_SEARCH_WAIT_MS) ---------------------------
MEANING = "when are the bills produced each day"  # ROWS[0] by meaning: no word in common with it


def test_a_search_right_after_a_batch_add_waits_and_finds_the_rows_by_meaning(memory):
    """No hold: the search comes while the queue embeds; it waits for the vectors (up to 10 s by
    default; longer here, so a loaded machine cannot fail the test) and the vector branch finds
    a row that shares no word with the query."""
    mem = replace_settings(memory, embed_search_wait_ms=60_000)
    ids = write.batch_add(mem, None, items())["ids"]
    assert ids[0] not in lexical_hits(mem, MEANING)  # only the vector branch can find it
    found = faro.faro(mem, None, query=MEANING, track_access=False)
    assert found["results"][0]["id"] == ids[0] and "embedding_pending" not in found
    assert mem.embeddings_pending() == 0
    ids2 = write.batch_add(mem, None, items([("billing", "Refunds are approved by the finance lead")]))["ids"]
    listed = json.loads(hipocampo.search(mem, None, query="who signs off on giving money back", format="json"))
    assert listed["results"][0]["id"] == ids2[0]


def test_the_search_wait_is_bounded_and_can_be_turned_off(open_memory):
    """A queue that takes long (the test hook's pause before each pass): the search waits its
    bound, then answers with what is embedded and says how many rows are still pending."""
    mem = open_memory(embed_queue_test_delay_secs=60, embed_search_wait_ms=300)
    ids = write.batch_add(mem, None, items())["ids"]
    found = faro.faro(mem, None, query="Stripe webhooks retried", track_access=False)
    assert found["results"][0]["id"] == ids[1] and found["embedding_pending"] == 3  # lexically, at once
    assert mem.store.observation_vectors(ids) == {}
    queue = mem.embedding_queue()
    assert queue is not None and queue.wait_handed(0.05) is False
    off = open_memory(embed_queue_test_delay_secs=60, embed_search_wait_ms=0)
    write.batch_add(off, None, items([("ops", "Backups run at 03:00 UTC")]))
    assert faro.faro(off, None, query="backups", track_access=False)["embedding_pending"] == 1


class Gated(Recorder):
    """A Recorder whose first call from the queue's thread waits until the test opens the gate."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.gate, self.entered = threading.Event(), threading.Event()

    def embed_passages(self, texts):
        if threading.current_thread().name == "cuba-embed" and not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(120)
        return super().embed_passages(texts)


def test_a_waiting_search_gets_handed_rows_before_the_catch_up(settings):
    """A start's catch-up pass of 24 rows (4 per batch) is under way when a batch_add hands 1
    row and a search waits: after the batch in progress the handed row goes next, and the
    catch-up then finishes the rows it left."""
    old = [("archive", f"Archived note number {i} about the {w} migration") for i, w in
           enumerate(["billing", "search", "auth", "deploy", "cache", "queue"] * 4)]
    mem = Memory.open(replace(settings, embed_drain_secs=0))
    with mem.embedding_queue().hold():
        left = write.batch_add(mem, None, items(old))["ids"]
        mem.embedding_queue().close(0)
    mem.close()
    mem = Memory.open(settings)
    try:
        gated = Gated(mem.embedder)
        mem.embedder = gated
        queue = mem.embedding_queue()
        queue.batch_size, queue.workers = 4, 1  # one call at a time: the gate holds the one in progress
        queue.start(catch_up=True)
        assert gated.entered.wait(120)  # the catch-up's first batch is being embedded
        new = write.batch_add(mem, None, items([("ops", "The pager rotation changes every Monday")]))["ids"]
        waited = threading.Thread(target=queue.wait_handed, args=(120,))
        waited.start()
        deadline = time.monotonic() + 60
        while not queue._searching and time.monotonic() < deadline:
            time.sleep(0.01)
        gated.gate.set()
        waited.join(120)
        assert set(mem.store.observation_vectors(new)) == set(new)
        texts = [t for call in gated.calls for t in call]
        assert any("pager rotation" in t for t in gated.calls[1])  # right after the batch in progress
        assert sum("Archived note" in t for t in texts) < len(old)  # before the catch-up was done
        assert mem.wait_for_embeddings(120)
        assert set(mem.store.observation_vectors(left)) == set(left)  # the rows it left are embedded after all
    finally:
        mem.close()


def test_the_search_wait_stays_within_half_the_call_limit(open_memory):
    """CUBA_EMBED_SEARCH_WAIT_MS above half of CUBA_HANDLER_TIMEOUT_SECS: the search still answers,
    after half the limit (1 s of 2), with the rows found by keyword and the pending count."""
    mem = open_memory(embed_queue_test_delay_secs=60, embed_search_wait_ms=60_000, handler_timeout_secs=2)
    ids = write.batch_add(mem, None, items())["ids"]
    began = time.monotonic()
    found = faro.faro(mem, None, query="Stripe webhooks retried", track_access=False)
    assert time.monotonic() - began < 30  # not the 60 s asked for
    assert found["results"][0]["id"] == ids[1] and found["embedding_pending"] == 3


def test_the_search_wait_setting(monkeypatch):
    monkeypatch.delenv("CUBA_EMBED_SEARCH_WAIT_MS", raising=False)
    monkeypatch.delenv("CUBA_EMBED_QUEUE", raising=False)
    assert Settings.from_env().embed_search_wait_ms == 1_000 and Settings.from_env().embed_queue is True
    monkeypatch.setenv("CUBA_EMBED_SEARCH_WAIT_MS", "0")
    assert Settings.from_env().embed_search_wait_ms == 0
    monkeypatch.setenv("CUBA_EMBED_SEARCH_WAIT_MS", "-5")
    assert Settings.from_env().embed_search_wait_ms == 0  # clamped, as every CUBA_* integer
    monkeypatch.setenv("CUBA_EMBED_SEARCH_WAIT_MS", "soon")
    with pytest.raises(ConfigError, match="CUBA_EMBED_SEARCH_WAIT_MS"):
        Settings.from_env()


def replace_settings(mem: Memory, **changes) -> Memory:
    mem.settings = replace(mem.settings, **changes)
    return mem


def test_with_the_queue_off_batch_writes_embed_before_answering(open_memory):
    mem = open_memory(embed_queue=False)
    answer = write.batch_add(mem, None, items())
    assert answer["embedding"] == "ready" and mem.embedding_queue() is None
    assert set(mem.store.observation_vectors(answer["ids"])) == set(answer["ids"])


def test_ingest_and_sync_import_hand_their_rows_to_the_queue(memory, tmp_path):
    queue = memory.embedding_queue()
    with queue.hold():
        got = ingest.ingest(memory, None, items=[*items(ROWS[:2]), {"entity_name": "x"}])
        assert got["embedding"] == "pending" and got["added"] == 2 and got["skipped_invalid"] == 1
    assert memory.wait_for_embeddings(120)
    assert set(memory.store.observation_vectors(got["ids"][:2])) == set(got["ids"][:2])

    other = Memory.open(settings_for(StoreLocation("sqlite", tmp_path / "a")))
    try:
        theirs = write.batch_add(other, None, items([("auth", "Tokens expire after fifteen minutes"),
                                                     ("auth", "Refresh tokens rotate on every use")]))["ids"]
        episodes.add(other, None, entity_name="auth", content="Moved the session store to Redis")
        export.export(other, None, dir=str(tmp_path / "bundle"), scope="all")
    finally:
        other.close()
    with queue.hold():
        imported = importer.import_bundle(memory, None, dir=str(tmp_path / "bundle"))
        assert imported["embeddings_queued"] == 3 and imported["embeddings_computed"] == 0
        assert imported["embedding"] == "pending" and "embedded in the background" in imported["note"]
        assert theirs[0] in lexical_hits(memory, "Tokens expire fifteen minutes")
    assert memory.wait_for_embeddings(120)
    assert set(memory.store.observation_vectors(theirs)) == set(theirs)
    assert memory.store.embedding_coverage("episode")["missing"] == 0


def wait_embedded(where: StoreLocation, ids: list[str], timeout: float = 120.0) -> dict[str, np.ndarray]:
    """Poll the store (as another process) until every id has its vector."""
    mem = Memory.open(replace(settings_for(where), embed_model="none"), check_model=False)
    try:
        deadline = time.monotonic() + timeout
        while True:
            found = mem.store.observation_vectors(ids)
            if len(found) == len(ids) or time.monotonic() > deadline:
                return found
            time.sleep(0.1)
    finally:
        mem.close()


def test_a_killed_server_loses_no_acknowledged_row(location: StoreLocation, tmp_path: Path):
    rows = [("fleet", f"Truck {n} left the Oslo depot with {n * 3} pallets of blue tiles") for n in range(1, 41)]
    rows[6] = ("fleet", "Truck 7 left the Oslo depot with a crate of saffron")
    # the test hook holds the queue, so the kill comes before any row is embedded
    server = Server(location, tmp_path / "first.log", CUBA_TEST_EMBED_QUEUE_DELAY_SECS="600").start()
    try:
        async def write_rows():
            async with mcp_session(server.url) as session:
                answers = [await call(session, "cuba_cronica", {"action": "batch_add", "observations": items(chunk)})
                           for chunk in (rows[:20], rows[20:])]
                found = await call(session, "cuba_faro", {"query": "saffron crate", "limit": 3,
                                                          "track_access": False})
                return answers, found

        answers, found = run(write_rows)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        assert server.proc.returncode == -signal.SIGKILL
    finally:
        server.stop()
    ids = [i for a in answers for i in a["ids"]]
    assert [a["embedding"] for a in answers] == ["pending", "pending"] and len(set(ids)) == 40
    assert found["embedding_pending"] == 40 and found["results"][0]["id"] == ids[6]  # by keyword, while pending
    assert wait_embedded(location, ids, timeout=0) == {}  # killed before the queue embedded anything

    again = Server(location, tmp_path / "second.log").start()
    try:
        vectors = wait_embedded(location, ids)

        async def read_back():
            async with mcp_session(again.url) as session:
                return await call(session, "cuba_cronica", {"action": "list", "entity_name": "fleet"})

        listed = run(read_back)
    finally:
        again.stop()
    assert set(vectors) == set(ids)  # every acknowledged row embedded by the restart's catch-up
    assert {o["id"]: o["content"] for o in listed["observations"]} == {i: c for i, (_, c) in zip(ids, rows)}


def test_a_search_waits_only_when_its_own_projects_rows_are_pending(open_memory):
    """On a shared daemon one agent's large import must not slow another project's searches: the
    bounded wait applies when the searched scope holds rows without a vector."""
    from cuba_memorys.services.embedding_queue import wait_before_search
    from cuba_memorys.services.graph import projects

    mem = open_memory(embed_queue_test_delay_secs=60, embed_search_wait_ms=400)
    projects.switch(mem, "importer", name="alpha")
    projects.switch(mem, "reader", name="beta")
    write.batch_add(mem, "importer", items())  # stays pending: the queue pauses 60 s before each pass
    assert wait_before_search(mem, mem.scope("reader")) == 0.0  # beta holds nothing to wait for
    assert wait_before_search(mem, mem.scope("importer")) >= 0.39  # alpha waits its bound
    own = faro.faro(mem, "importer", query="Stripe webhooks retried", track_access=False)
    assert own["embedding_pending"] == 3 and own["results"]  # found by keyword after the wait
    assert faro.faro(mem, "reader", query="Stripe webhooks retried", track_access=False)["results"] == []


class TwoGates(Recorder):
    """A Recorder whose first two calls from the queue's thread each wait for their own gate."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.gates = [threading.Event(), threading.Event()]
        self.entered = [threading.Event(), threading.Event()]
        self.queue_calls = 0

    def embed_passages(self, texts):
        if threading.current_thread().name.startswith("cuba-embed") and self.queue_calls < 2:
            n, self.queue_calls = self.queue_calls, self.queue_calls + 1
            self.entered[n].set()
            assert self.gates[n].wait(120)
        return super().embed_passages(texts)


def test_a_search_waits_for_the_rows_handed_before_it_not_for_those_handed_meanwhile(memory):
    """On a shared daemon other agents keep writing while a search waits: it waits for the rows
    that were pending when it began and answers once those are embedded, though rows handed over
    since are still being embedded (before, it waited its whole bound whenever writes went on)."""
    gated = TwoGates(memory.embedder)
    memory.embedder = gated
    queue = memory.embedding_queue()
    queue.workers = 1
    first = write.batch_add(memory, None, items())["ids"]
    assert gated.entered[0].wait(120)  # the first rows are being embedded
    answer: list[bool] = []
    waiting = threading.Thread(target=lambda: answer.append(queue.wait_handed(120)))
    waiting.start()
    deadline = time.monotonic() + 60
    while not queue._searching and time.monotonic() < deadline:
        time.sleep(0.01)
    later = write.batch_add(memory, None, items([("ops", "The pager rotation changes every Monday")]))["ids"]
    gated.gates[0].set()
    assert gated.entered[1].wait(120)  # the later row's pass has begun and is held
    waiting.join(60)
    try:
        assert answer == [True]  # answered while the later row is still being embedded
        assert set(memory.store.observation_vectors(first)) == set(first)
        assert memory.store.observation_vectors(later) == {} and memory.embeddings_pending() == 1
    finally:
        gated.gates[1].set()
    assert memory.wait_for_embeddings(120)
    assert set(memory.store.observation_vectors(later)) == set(later)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_the_queue_runs_below_the_calls_agents_wait_on(open_memory):
    """CUBA_EMBED_QUEUE_NICE (10 by default): the queue's thread runs that many nice steps below
    the process, so on a busy daemon a search's model call takes the CPU first; 0 leaves it level."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    for setting, expected in ((10, min(19, base + 10)), (0, base)):
        mem = open_memory(embed_queue_nice=setting)
        queue = mem.embedding_queue()
        assert queue is not None
        queue.start()
        write.batch_add(mem, None, items())
        assert mem.wait_for_embeddings(120)
        assert queue._thread is not None and queue._thread.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, queue._thread.native_id) == expected
    with pytest.raises(ConfigError, match="CUBA_EMBED_QUEUE_NICE"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("CUBA_EMBED_QUEUE_NICE", "low")
            Settings.from_env()
