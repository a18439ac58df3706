"""The consolidation ("REM") cycle (spec §4c): the memory's periodic upkeep.

Every server process (stdio and `serve`) runs :class:`RemScheduler`: the first cycle after
CUBA_REM_FIRST_DELAY_SECS (300 s), then one every 4 h; `cuba-memorys rem` runs one now. Only
one cycle runs at a time across every process sharing a store (``store.exclusive("rem")``: a
PostgreSQL advisory lock, a file lock on SQLite); a process that finds it held skips its turn.

The steps, in the spec's order: protection (entities written in the last 8 h while a work
session is open are not decayed), stratified decay of observations, power-law decay of episodes,
NPMI autolink (unless CUBA_REM_AUTOLINK is off), embedding backfill (CUBA_REM_BACKFILL_LIMIT
rows), ANALYZE of stale tables (after the commit), PageRank blended into importance (its failure
fails the cycle), Leiden communities (a failure is only noted), statistics and the
duplicate-candidate count. The two that need an LLM (relation scan, auto-extraction) are listed
under ``skipped_steps``; chunk backfill and quantization have no work in this build
(``not_applicable_steps``).

A cycle changes nothing half-way: what it reads and embeds is done first, then every write
(and its ``rem_cycles`` row) commits in one transaction. When any step fails that transaction
rolls back and the cycle is recorded with zero counts and its ``error``.

"A server was up" is known from a heartbeat: the scheduler writes ``rem_server_seen_at`` to
the store's meta when it starts and at least every 10 minutes, and ``rem_server_up_since``
when it finds the previous beat older than 25 minutes (no server was up in between). doctor
warns when that stretch of uptime held 5 h without a cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.code import check as code_check
from cuba_memorys.services.graph import aliases, analysis, link, reflexion, reports
from cuba_memorys.services.lifecycle import decay
from cuba_memorys.services.memory import Memory, passage_text
from cuba_memorys.storage.rows import RemCycleRow

log = logging.getLogger(__name__)

INTERVAL_SECS = 4 * 3600.0
BEAT_SECS = 600.0
BEAT_GAP = timedelta(minutes=25)  # a longer silence between beats means no server was up
STALE_AFTER = timedelta(hours=5)
LOCK = "rem"
CLIENT = "cuba-rem"  # a client with no active project: the cycle works on every project
EMBEDDED_KINDS = ("observation", "episode")
SEEN_KEY, SINCE_KEY = "rem_server_seen_at", "rem_server_up_since"
COUNTS = ("decayed_count", "episodes_decayed", "protected_entities", "embeddings_backfilled",
          "duplicate_candidates", "autolink_edges", "entities_scanned", "facts_extracted", "communities",
          "relation_scan_failed", "extraction_failed")
# The two steps that need a language model to read text and write what it understood; the cycle
# runs offline (a background thread of every server, with no client to sample and no model it
# may call on its own), so they never run here. Every other step of spec §4c runs, or has no
# work in this build (NOT_APPLICABLE).
SKIPPED = {
    "relation_scan": "needs an LLM: the original has one read an isolated entity's observations and name the"
                     " relations it should have; offline, `cuba-memorys link` (NPMI, step 4 of this cycle) and"
                     " cuba_puente predict propose edges from the graph instead",
    "auto_extraction": "needs an LLM: the original has one extract facts from observations not yet read (always"
                       " quarantined); the cycle calls none, and cuba_ingesta extracts when asked",
}
NOT_APPLICABLE = {
    "chunk_backfill": "no chunk table in this build: an observation is embedded whole, so no chunk is missing",
    "quantization": "no halfvec column to fill: vectors are stored as float32 (the HNSW accelerator keeps its"
                    " own 8-bit copy)",
}


def run_cycle(mem: Memory, *, trigger: str = "cli", now: datetime | None = None) -> dict[str, Any]:
    """One cycle, unless another process is running one (then ``skipped``, nothing written).
    ``now`` is the cycle's clock (decay ages rows against it; a test can age a store)."""
    with mem.store.exclusive(LOCK) as held:
        if not held:
            return {"action": "rem", "skipped": True,
                    "reason": "another consolidation cycle is running on this store"}
        return _cycle(mem, trigger, _aware(now or utc_now()))


def _cycle(mem: Memory, trigger: str, now: datetime) -> dict[str, Any]:
    clock = time.monotonic()
    missing_before = _missing(mem)
    counts = dict.fromkeys(COUNTS, 0)
    notes: dict[str, str] = {}
    statistics: dict[str, int] = {}
    error: str | None = None
    try:
        vectors = _embed_missing(mem, notes)  # the model runs before the write transaction
        counts["duplicate_candidates"] = aliases.duplicate_candidates(mem)
        with mem.store.transaction():
            decayed = decay.decay_observations(mem, CLIENT, now=now, protect=True)
            counts["decayed_count"] = decayed["decayed"]
            counts["protected_entities"] = decayed["protected_entities"]
            counts["episodes_decayed"] = decay.decay_episodes(mem, CLIENT, now=now)["decayed"]
            if mem.settings.rem_autolink:  # step 4, NPMI autolink (services/graph/link.py)
                counts["autolink_edges"] = link.autolink(mem, mem.scope(CLIENT))
            else:
                notes["autolink"] = "CUBA_REM_AUTOLINK is off"
            counts["embeddings_backfilled"] = _write_vectors(mem, vectors)
            # step 11, PageRank blended into importance: an error here fails the cycle
            ranked = analysis.refresh_pagerank(mem, mem.scope(CLIENT))
            notes["pagerank"] = f"{ranked['updated']} entities blended, {ranked['energy_refreshed']} stored"
            counts["communities"] = _communities(mem, notes)  # step 12: a failure is only noted
            statistics = mem.store.counts()
            cycle_id = mem.store.add_rem_cycle(_row(now, clock, counts, None, trigger))
    except Exception as exc:  # recorded, not raised: the scheduler's next cycle must still run
        log.exception("consolidation cycle failed")
        error = f"{type(exc).__name__}: {exc}"
        counts = dict.fromkeys(COUNTS, 0)
        cycle_id = mem.store.add_rem_cycle(_row(now, clock, counts, error, trigger))
    anchors: dict[str, int] = {}
    analyzed: list[str] = []
    if error is None:
        analyzed = _analyze(mem, notes)
        _refresh_reports(mem, notes)
        anchors = _check_anchors(mem, notes)
    duration_ms = _elapsed_ms(clock)
    # for serve's /events (services/events.py): the cycle's counts, or its error (counts then zero)
    mem.events.publish("rem.cycle", {"cycle_id": cycle_id, "trigger": trigger, "started_at": iso(now),
                                     "duration_ms": duration_ms, "error": error, **counts})
    return {"action": "rem", "skipped": False, "cycle_id": cycle_id, "trigger": trigger,
            "started_at": iso(now), "duration_ms": duration_ms, "error": error,
            "embeddings_missing_before": missing_before, "embeddings_missing_after": _missing(mem),
            **counts, **anchors, "analyzed": analyzed, "statistics": statistics, "notes": notes,
            "skipped_steps": SKIPPED, "not_applicable_steps": NOT_APPLICABLE}


def _analyze(mem: Memory, notes: dict[str, str]) -> list[str]:
    """Step 10, ANALYZE of the tables whose statistics are stale (storage/sql/rem.py says when),
    after the commit: it describes the rows the cycle left. A failure is only noted."""
    try:
        analyzed = mem.store.refresh_statistics()
    except Exception as exc:
        log.warning("consolidation cycle: ANALYZE failed: %s", exc)
        notes["analyze"] = f"not run: {type(exc).__name__}: {exc}"
        return []
    notes["analyze"] = (f"analyzed {', '.join(analyzed)}" if analyzed
                        else "every table's statistics were current; nothing analyzed")
    return analyzed


def _check_anchors(mem: Memory, notes: dict[str, str]) -> dict[str, int]:
    """Re-check every anchored memory against its code and record the statuses
    (services/code/check.py), after the commit: it reads files and git, and must not hold the
    cycle's write lock. A failure is only noted."""
    try:
        checked = code_check.check_all(mem, CLIENT, record=True, with_diff=False)
    except Exception as exc:
        log.warning("consolidation cycle: checking the anchors failed: %s", exc)
        notes["anchors"] = f"not checked: {type(exc).__name__}: {exc}"
        return {}
    return {"anchors_checked": checked["checked"], "anchors_stale": checked["stale_count"]}


def _refresh_reports(mem: Memory, notes: dict[str, str]) -> None:
    """Store the reports that take seconds on a large graph (services/graph/reports.py), after the
    cycle's commit (they read the graph it left, and must not hold its write lock)."""
    try:
        done = reports.refresh(mem, CLIENT, {"bridges": analysis.vigia_bridges,
                                             "structural": analysis.vigia_structural, "reflexion": reflexion.analyze})
    except Exception as exc:
        log.warning("consolidation cycle: storing the graph reports failed: %s", exc)
        notes["reports"] = f"not stored: {type(exc).__name__}: {exc}"
        return
    if done:
        notes["reports"] = f"{done} graph reports stored for the next calls"


def _communities(mem: Memory, notes: dict[str, str]) -> int:
    """Leiden communities, stored; a failure rolls back only this step and is noted (spec §4c)."""
    try:
        return int(analysis.refresh_communities(mem, mem.scope(CLIENT))["communities"])
    except Exception as exc:
        log.warning("consolidation cycle: community detection failed: %s", exc)
        notes["communities"] = f"failed, the rest of the cycle kept: {type(exc).__name__}: {exc}"
        return 0


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _row(now: datetime, clock: float, counts: dict[str, int], error: str | None, trigger: str) -> RemCycleRow:
    elapsed = _elapsed_ms(clock)
    row: dict[str, Any] = {"started_at": iso(now), "finished_at": iso(now + timedelta(milliseconds=elapsed)),
                           "duration_ms": elapsed, **counts, "error": error, "trigger": trigger}
    return RemCycleRow(**row)  # type: ignore[typeddict-item]


def _elapsed_ms(clock: float) -> int:
    return int((time.monotonic() - clock) * 1000)


def _missing(mem: Memory) -> int:
    return sum(mem.store.embedding_coverage(kind)["missing"] for kind in EMBEDDED_KINDS)


Embedded = dict[str, list[tuple[int, np.ndarray, str]]]  # kind → (seq, vector, the text it was made from)


def _embed_missing(mem: Memory, notes: dict[str, str]) -> Embedded:
    """Vectors for up to CUBA_REM_BACKFILL_LIMIT rows without one (observations first)."""
    budget = mem.settings.rem_backfill_limit
    embedder = mem.embedder
    if budget <= 0:
        notes["embedding_backfill"] = "CUBA_REM_BACKFILL_LIMIT is 0"
        return {}
    if embedder is None:
        notes["embedding_backfill"] = f"no embedding model loaded ({mem.embedder_status.reason})"
        return {}
    problem = mem.model_problem()
    if problem:  # never mix two models' vectors in one store
        notes["embedding_backfill"] = problem
        return {}
    found: Embedded = {}
    for kind in EMBEDDED_KINDS:
        rows = mem.store.rows_missing_embedding(kind, budget)
        if not rows:
            continue
        texts = [passage_text(*_label(label), content) for _, content, label in rows]
        vectors = embedder.embed_passages(texts)
        found[kind] = [(seq, vector, content) for (seq, content, _), vector in zip(rows, vectors)]
        budget -= len(rows)
        if budget <= 0:
            break
    return found


def _label(label: str) -> tuple[str, str]:
    name, _, entity_type = label.rpartition("|")  # rows_missing_embedding's "name|type"
    return name, entity_type


def _write_vectors(mem: Memory, vectors: Embedded) -> int:
    if vectors:
        embedder = mem.loaded_embedder()
        for kind, rows in vectors.items():
            # only rows still without a vector and still saying what was embedded (the model ran
            # before this transaction; a correction in between must not get the old text's vector)
            mem.store.set_embeddings(kind, [(seq, vec) for seq, vec, _ in rows], embedder.name,
                                     [text for _, _, text in rows])
            if kind == "observation":  # and the reranker's token vectors, in the background (issue 31)
                mem.queue_tokens(mem.store.observation_ids_of([seq for seq, _, _ in rows]))
    return sum(len(rows) for rows in vectors.values())


# -- the schedule ----------------------------------------------------------------------------
class RemScheduler:
    """Runs cycles in a background thread of a server process until :meth:`stop`."""

    def __init__(self, mem: Memory, *, first_delay: float | None = None, interval: float = INTERVAL_SECS,
                 beat: float = BEAT_SECS) -> None:
        self.mem = mem
        self.first_delay = mem.settings.rem_first_delay_secs if first_delay is None else first_delay
        self.interval, self.beat = interval, beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.mem.store.read_only:  # a standby: the primary's servers keep the memory
            return
        self._thread = threading.Thread(target=self._run, name="cuba-rem", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop waiting; a cycle already running is let finish (it is one transaction)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        due = time.monotonic() + self.first_delay
        while True:
            self._guarded(heartbeat, self.mem)
            if self._stop.wait(max(0.0, min(self.beat, due - time.monotonic()))):
                return
            if time.monotonic() >= due:
                self._guarded(run_cycle, self.mem, trigger="schedule")
                due = time.monotonic() + self.interval

    @staticmethod
    def _guarded(fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:  # a broken store must not kill the server's thread; the next turn retries
            log.exception("consolidation scheduler: %s failed", getattr(fn, "__name__", fn))


def heartbeat(mem: Memory, now: datetime | None = None) -> None:
    """Record that a server is up now (and since when, if no server was up a moment ago)."""
    now = _aware(now or utc_now())
    with mem.store.transaction():
        seen = mem.store.get_meta(SEEN_KEY)
        if not seen or now - datetime.fromisoformat(seen) > BEAT_GAP:
            mem.store.set_meta(SINCE_KEY, iso(now))
        mem.store.set_meta(SEEN_KEY, iso(now))


def status(mem: Memory) -> dict[str, Any]:
    """The last cycle and whether cycles are overdue, for doctor."""
    cycles = mem.store.rem_cycles(1)
    last = cycles[0] if cycles else None
    seen, since = mem.store.get_meta(SEEN_KEY), mem.store.get_meta(SINCE_KEY)
    stale = False
    if seen and since:
        start = datetime.fromisoformat(since)
        if last is not None:
            start = max(start, datetime.fromisoformat(last["finished_at"]))
        stale = datetime.fromisoformat(seen) - start > STALE_AFTER
    view = None
    if last is not None:
        view = {"id": last["id"], "started_at": last["started_at"], "finished_at": last["finished_at"],
                "duration_ms": last["duration_ms"], "trigger": last["trigger"], "error": last["error"],
                "counts": {k: last[k] for k in COUNTS if k in last}}  # type: ignore[literal-required]
    return {"last_cycle": view, "server_seen_at": seen or None, "server_up_since": since or None,
            "stale": stale, "stale_after_hours": STALE_AFTER.total_seconds() / 3600}
