"""The open memory: settings, store, embedding model and per-client state, wired once.

Every service function takes a :class:`Memory` and a client id. Clients (agents) are told
apart so that two agents on one HTTP daemon keep their own active project.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cuba_memorys import deadline, locks
from cuba_memorys.config import Settings
from cuba_memorys.embed import EmbedderStatus, load_for
from cuba_memorys.embed.base import Embedder, passage_text
from cuba_memorys.embed.cache import CachedEmbedder
from cuba_memorys.errors import ModelMismatch
from cuba_memorys.judge import ModelStatus, model_location, resource_plan
from cuba_memorys.judge import load as load_judge_model
from cuba_memorys.judge.chain import JudgeChain
from cuba_memorys.judge.cli_judge import load_cli_judge
from cuba_memorys.models import Scope
from cuba_memorys.services.events import EventBus
from cuba_memorys.storage import Store, open_store, prepare_location
from cuba_memorys.storage.rows import ProjectRow

if TYPE_CHECKING:
    from cuba_memorys.services.embedding_queue import EmbeddingQueue

DEFAULT_CLIENT = "default"
log = logging.getLogger(__name__)


def _logged(fn: Callable[..., Any], *args: Any) -> None:
    try:
        with deadline.limit(None):  # the answer is out: this bookkeeping has no call's time limit
            fn(*args)
    except Exception:  # bookkeeping after an answer must not fail a later call
        log.exception("background work %s failed", getattr(fn, "__name__", fn))


# Steps that move rows an earlier version wrote to where this one reads them, run by Memory.open.
# The module owning a step adds it when imported (services/workflow/legacy_decisions.py, imported by
# cuba_decreto's and sync import's modules, so by the server and the CLI alike): this module imports
# none of them, as they all import it.
ROW_UPGRADES: list[Callable[[Memory], object]] = []

# How often a client's cached project id is checked against the store (another process may
# have re-keyed it): often enough to follow a hook's import, rare enough to cost nothing.
PROJECT_RECHECK_SECS = 2.0


@dataclass
class ClientState:
    project_id: str | None = None
    project_name: str | None = None
    session_id: str | None = None  # the client's open work session (cuba_jornada), if any
    project_checked: float = 0.0  # time.monotonic() when project_id was last checked against the store




class Memory:
    def __init__(self, settings: Settings, store: Store, embedder_status: EmbedderStatus) -> None:
        self.settings = settings
        self.store = store
        self.embedder_status = embedder_status
        self.embedder = embedder_status.embedder
        self._clients: dict[str, ClientState] = {}
        # A leaf (cuba_memorys/locks.py): never held while the store is read or a model loads.
        self._lock = locks.lock("memory clients", "memory")
        self._models_lock = locks.lock("judge models", "models")  # a model loads once, under this
        self._nli: tuple[Any, str | None] | None = None
        self._cli: tuple[Any] | None = None
        self._reranker: Any = None  # the reranker's ModelStatus once looked for
        self._background: ThreadPoolExecutor | None = None  # after_answer's thread, made on first use
        self._embedding_queue: EmbeddingQueue | None = None  # batch writes' vectors, made on first use
        self.caches: dict = {}  # per-memory state that services keep between calls (e.g. the OOD fit)
        self.events = EventBus()  # what happened in this process, for `serve`'s /events (services/events.py)
        self.started_at = time.time()
        self.clients_seen: dict[str, float] = {}  # client id → last call (time.time()), for whoami and /health

    @classmethod
    def open(cls, settings: Settings, *, check_model: bool = True) -> Memory:
        prepare_location(settings)  # a folder or file the store cannot use is said before the model loads
        status = load_for(settings)  # the model, and the engine that runs it (CUBA_EMBED_ENGINE)
        if status.embedder is not None and settings.embed_cache:
            status = replace(status, embedder=CachedEmbedder(status.embedder, settings.embed_cache))
        dim = status.embedder.dim if status.embedder else None
        store = open_store(settings, dim)
        memory = cls(settings, store, status)
        if check_model and status.embedder is not None:
            memory.check_model()
        memory.upgrade_rows()
        return memory

    def upgrade_rows(self) -> None:
        """Bring rows an earlier version wrote to where this one reads them (the schema itself
        is migrated by the store): each step of ROW_UPGRADES. A failure is logged, not raised:
        the rows stay as they were, readable, and the next open tries again; a memory that
        cannot open over it would help nobody."""
        for step in list(ROW_UPGRADES):
            try:
                step(self)
            except Exception:
                log.exception("upgrading the rows of an earlier version (%s) failed; it is retried on the next open",
                              getattr(step, "__qualname__", step))

    def close(self) -> None:
        if self._embedding_queue is not None:
            left = self._embedding_queue.close(self.settings.embed_drain_secs)
            if left:
                log.warning("%d rows are stored without their embedding yet (the drain ran out of time or was cut"
                            " short);"
                            " the next server start embeds them", left)
        if self._background is not None:
            self._background.shutdown(wait=True)  # what was answered is also counted
        self.store.close()

    # -- work done after the answer --------------------------------------------------------
    def after_answer(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on one background thread, in order, with the caller's context
        (the project bound for row-level security). For bookkeeping that the answer does not
        depend on; a failure is logged, never raised into a later call."""
        with self._lock:
            if self._background is None:
                self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cuba-after")
            self._background.submit(contextvars.copy_context().run, _logged, fn, *args)

    def settle(self) -> None:
        """Wait until the work queued by :meth:`after_answer` so far is done."""
        locks.before_waiting("the after-answer thread")
        if self._background is not None:
            self._background.submit(lambda: None).result()

    # -- the background embedding queue (services/embedding_queue.py) -------------------------
    @property
    def queues_embeddings(self) -> bool:
        """Whether batch writes leave their vectors to the background queue: a model is loaded,
        CUBA_EMBED_QUEUE is on and the store takes writes."""
        return self.embedder is not None and self.settings.embed_queue and not self.store.read_only

    def embedding_queue(self) -> EmbeddingQueue | None:
        """The queue (made on first use), or None when batch writes embed before answering."""
        if not self.queues_embeddings:
            return None
        with self._lock:
            if self._embedding_queue is None:
                from cuba_memorys.services.embedding_queue import EmbeddingQueue  # it imports this module

                self._embedding_queue = EmbeddingQueue(self, delay=self.settings.embed_queue_test_delay_secs,
                                                       workers=queue_workers(self.settings))
            return self._embedding_queue

    def start_embedding_queue(self) -> None:
        """A server's start: run the queue now and embed what earlier processes left without a
        vector (killed before their queue drained, or run without a model). Short CLI commands
        do not: their queue starts when they hand it rows, and only for those."""
        queue = self.embedding_queue()
        if queue is not None:
            queue.start(catch_up=True)

    def queue_embeddings(self, kind: str, ids: list[str]) -> None:
        """Hand committed rows (observation or episode ids) to the queue for their vectors."""
        queue = self.embedding_queue()
        if queue is not None and ids:
            queue.add(kind, ids)

    def queue_tokens(self, ids: list[str]) -> None:
        """Hand committed observations that have their vector (a single add) to the queue for
        their late-interaction token vectors only (nothing when no such reranker is in use)."""
        queue = self.embedding_queue()
        if queue is not None and ids:
            queue.add_tokens(ids)

    def hurry_embedding_drain(self) -> None:
        """Closing stops waiting for the queue after its batch in progress (the rest: next start)."""
        if self._embedding_queue is not None:
            self._embedding_queue.hurry()

    def embeddings_pending(self) -> int:
        """Rows handed to the queue and not embedded yet (0 when there is no queue)."""
        queue = self._embedding_queue
        return queue.pending() if queue is not None else 0

    def embedding_queue_busy(self) -> bool:
        """Whether the queue has work waiting (vectors or token vectors), e.g. agents writing now."""
        queue = self._embedding_queue
        return queue is not None and queue.busy()

    def embeddings_eta(self) -> float | None:
        """Seconds until the queue has embedded what it holds, at its recent rate (None: unknown)."""
        queue = self._embedding_queue
        return queue.eta() if queue is not None else None

    def wait_for_embeddings(self, timeout: float | None = None) -> bool:
        """Wait until the queue has embedded every row handed to it; False on timeout."""
        queue = self._embedding_queue
        return queue.wait(timeout) if queue is not None else True

    # -- the model recorded with the data ----------------------------------------------------
    def stored_model(self) -> tuple[str | None, int | None]:
        name = self.store.get_meta("embedding_model")
        dim = self.store.get_meta("embedding_dim")
        return name, int(dim) if dim else None

    def model_problem(self) -> str | None:
        """Why the loaded model cannot be used with the stored vectors, or None. Reads only."""
        embedder = self.embedder
        name, dim = self.stored_model()
        embedded = sum(self.store.embedding_coverage(kind)["embedded"] for kind in ("observation", "episode"))
        if embedder is None or name is None or embedded == 0:
            return None
        if dim != embedder.dim or name != embedder.name:
            return (f"this memory's {embedded} embeddings were made by {name} ({dim}-d), but the loaded"
                    f" model is {embedder.name} ({embedder.dim}-d); their vectors cannot be compared.")
        return None

    def check_model(self) -> None:
        """Refuse to mix vector spaces; record the model with the data when nothing is embedded yet."""
        problem = self.model_problem()
        if problem:
            name, _ = self.stored_model()
            raise ModelMismatch(
                problem,
                hint=f"Set CUBA_EMBED_MODEL={name} to keep using it, or run"
                     " `cuba-memorys reembed --all` to re-embed every row with the new model.",
            )
        embedder = self.loaded_embedder()
        if self.stored_model() != (embedder.name, embedder.dim) and not self.store.read_only:
            self.store.set_meta("embedding_model", embedder.name)
            self.store.set_meta("embedding_dim", str(embedder.dim))

    def loaded_embedder(self) -> Embedder:
        """The embedding model, for code that runs only with one loaded (it holds a vector the
        model made, or was called because a model is loaded)."""
        assert self.embedder is not None, "no embedding model is loaded"
        return self.embedder

    # -- clients -------------------------------------------------------------------------
    def client(self, client_id: str | None) -> ClientState:
        """The client's state, read from the store the first time it is seen. The store is read
        with no lock held (a thread inside a write transaction asks for its client too: reading
        under this lock would wait for that thread while it waits for this lock)."""
        key = client_id or DEFAULT_CLIENT
        with self._lock:
            state = self._clients.get(key)
            recheck = (state is not None and state.project_name is not None
                       and time.monotonic() - state.project_checked > PROJECT_RECHECK_SECS)
            if recheck and state is not None:
                state.project_checked = time.monotonic()  # one thread rechecks; the others carry on
        if state is None:
            fresh = self._load_client(key)
            with self._lock:
                return self._clients.setdefault(key, fresh)
        if recheck:
            self._recheck_project(state)
        return state

    def _load_client(self, key: str) -> ClientState:
        state = ClientState()
        saved = self.store.get_meta(f"active_project:{key}")
        if saved:
            project = self.store.get_project(saved)
            if project:
                state.project_id, state.project_name = project["id"], project["name"]
        state.session_id = self.store.get_meta(f"active_session:{key}") or None
        state.project_checked = time.monotonic()
        return state

    def _recheck_project(self, state: ClientState) -> None:
        """Follow the client's active project when another process re-keyed it (a git hook's sync
        import merging a project made on two machines): the project is kept by name, so the name
        finds its id now. Checked at most every PROJECT_RECHECK_SECS, not on every call."""
        project = self.store.get_project(state.project_name or "")
        if project is not None and project["id"] != state.project_id:
            state.project_id = project["id"]

    def set_project(self, client_id: str | None, project: ProjectRow | None) -> None:
        state = self.client(client_id)
        state.project_id = project["id"] if project else None
        state.project_name = project["name"] if project else None
        self.store.set_meta(f"active_project:{client_id or DEFAULT_CLIENT}", project["name"] if project else "")

    def set_session(self, client_id: str | None, session_id: str | None) -> None:
        """Make ``session_id`` the client's open session (None: it has none); kept across restarts."""
        self.client(client_id).session_id = session_id
        self.store.set_meta(f"active_session:{client_id or DEFAULT_CLIENT}", session_id or "")

    def reload_sessions(self) -> None:
        """Re-read every known client's open session from the store, where another operation
        (cuba_forget deleting a session) may have cleared it."""
        with self._lock:
            known = list(self._clients.items())
        for key, state in known:  # read with no lock held (see client)
            state.session_id = self.store.get_meta(f"active_session:{key}") or None

    def move_projects(self, moved: dict[str, str]) -> None:
        """Clients whose active project was re-keyed (old id -> new id: a sync import merging a
        project made on two machines) now name the new id; the stored active project is its name,
        which stays, so only this process's cached ids change."""
        with self._lock:
            for state in self._clients.values():
                if state.project_id in moved:
                    state.project_id = moved[state.project_id]

    def scope(self, client_id: str | None, include_unscoped: bool = False) -> Scope:
        """What the client reads: its active project's rows, not those of no project (the
        original's rule since 0.26, every tool alike); ``include_unscoped`` is cuba_faro's
        parameter adding them back. No project active (or CUBA_PROJECT_FILTER=off): every row."""
        if not self.settings.project_filter:
            return Scope()
        return Scope(self.client(client_id).project_id, include_unscoped)

    def project_scoped(self, client_id: str | None) -> bool:
        """Whether the client's reads are narrowed to a project (the answers' ``project_scoped``)."""
        return self.scope(client_id).project_id is not None

    def judge_chain(self, sampler: Any = None) -> JudgeChain:
        """The judges for verify, juez and contradiccion: the NLI model when one is installed,
        else ``sampler`` (the MCP client's model, when it can sample), else the CLI judge, else
        the text rules (which also stand beside whichever judge decides)."""
        model, name = self.nli_model()
        return JudgeChain(model, name, sampler, self.cli_judge())

    def cli_judge(self) -> Any:
        """The CLI judge of CUBA_JUEZ_CLI (judge/cli_judge.py), looked up once; None when there is none."""
        with self._models_lock:
            if self._cli is None:
                self._cli = (load_cli_judge(self.settings),)
            return self._cli[0]

    def nli_model(self) -> tuple[Any, str | None]:
        """(NLI model, its name), loaded once on first use; (None, None) when none is installed."""
        with self._models_lock:
            if self._nli is None:
                self._nli = load_nli(self.settings)
            return self._nli

    def reranker(self) -> Any:
        """The cross-encoder reranker, loaded once on first use; None when none is installed."""
        with self._models_lock:
            if self._reranker is None:
                self._reranker = load_planned("reranker", self.settings)
            return self._reranker.model

    def token_model(self) -> Any:
        """The late-interaction reranker when it is the reranker in use (CUBA_RERANKER auto with no
        cross-encoder installed, or late-interaction): the one whose token vectors the embedding
        queue stores at write time (issue 31); None otherwise."""
        model = self.reranker()
        return model if getattr(model, "reads_stored_tokens", False) else None

    def reranker_reason(self) -> str | None:
        """Why no reranker is loaded (None when one is, or none was looked for yet)."""
        return self._reranker.reason if self._reranker is not None else None

    def acting_for(self, client_id: str | None):
        """Bind the client's project for the storage's row-level security (PostgreSQL) while
        one call runs; the scope conditions in every query say the same thing."""
        return self.store.bind_project(self.scope(client_id).project_id)

    # -- embeddings ----------------------------------------------------------------------
    def embed_passages(self, items: list[tuple[str, str, str]]) -> list[np.ndarray | None]:
        """Embeddings for (entity_name, entity_type, content) items, or Nones without a model."""
        if self.embedder is None or not items:
            return [None] * len(items)
        locks.before_waiting("the embedding model")  # never inside a transaction: it would hold the store
        with deadline.not_counted():  # the call's time limit bounds waiting, not the model's work
            return list(self.embedder.embed_passages([passage_text(*item) for item in items]))


def queue_workers(settings: Settings) -> int:
    """Model calls the embedding queue runs side by side: CUBA_EMBED_QUEUE_THREADS, else one per
    core up to 2 (docs/benchmarks.md, issue 29: two 1-thread calls side by side outran one
    2-thread call on long texts)."""
    return settings.embed_queue_threads or max(1, min(2, os.cpu_count() or 1))


def load_planned(kind: str, settings: Settings) -> ModelStatus:
    """Load a judge model unless the resource plan leaves no memory for it (the governor: the
    embedder first, then the reranker, then NLI; a model the user set explicitly always loads)."""
    step = resource_plan(settings)["models"][kind]
    if step.get("fits") is False and not step["set_by_user"]:
        path, _ = model_location(kind, settings)
        return ModelStatus(None, kind, path, f"not loaded by the resource plan: {step['reason']}"
                                             " (set its CUBA_*_PATH to load it anyway)")
    return load_judge_model(kind, settings)


def load_nli(settings: Settings) -> tuple[Any, str | None]:
    """The NLI model of CUBA_NLI_PATH or the models folder; (None, None) when none loads."""
    status = load_planned("nli", settings)
    return (status.model, status.model.name) if status.model is not None else (None, None)
