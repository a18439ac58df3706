"""doctor (what state is this memory in?) and reembed (fill in missing embeddings)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator

from cuba_memorys import __version__
from cuba_memorys.config import Settings
from cuba_memorys.embed import KNOWN_MODELS
from cuba_memorys.errors import ConfigError, ModelUnavailable
from cuba_memorys.judge import list_models, model_warnings, resource_plan
from cuba_memorys.services.memory import Memory, passage_text
from cuba_memorys.storage import is_postgres_url

REEMBED_BATCH = 64
EMBEDDED_KINDS = ("observation", "episode")


def doctor(mem: Memory, deep: bool = False) -> dict:
    """A health report; ``warnings`` lists what a user should act on.

    ``deep`` also runs one real inference per available model (embedder, reranker, NLI).
    """
    warnings: list[str] = []
    applied, pending = mem.store.migration_status()
    if pending:
        warnings.append(f"{len(pending)} migration(s) pending: {', '.join(pending)}")
    status = mem.embedder_status
    stored_name, stored_dim = mem.stored_model()
    model = {
        "requested": status.requested,
        "loaded": status.embedder.name if status.embedder else None,
        "dimension": status.embedder.dim if status.embedder else None,
        "reason": status.reason,
        "stored_model": stored_name,
        "stored_dimension": stored_dim,
        "known_models": KNOWN_MODELS,
    }
    if status.embedder is None:
        warnings.append(f"no embedding model loaded ({status.reason}); search is lexical only (degraded)")
    else:
        problem = mem.model_problem()
        model["matches_stored"] = problem is None
        if problem:
            warnings.append(problem + " Fix: set CUBA_EMBED_MODEL to the stored model, or run"
                            " `cuba-memorys reembed --all`.")
    coverage = mem.store.embedding_coverage()
    episodes = mem.store.embedding_coverage("episode")
    for what, cov in (("observation", coverage), ("episode", episodes)):
        if cov["missing"]:
            warnings.append(f"{cov['missing']} {what}(s) have no embedding: run `cuba-memorys reembed`")
    builds = mem.store.index_builds()
    for name in builds["missing"]:
        warnings.append(f"the vector index {name} is missing: vector search scans every row until a running"
                        " server (cuba-memorys serve, or any stdio server) builds it in the background")
    for name, why in builds["failed"].items():
        warnings.append(f"building the vector index {name} failed: {why}")
    role = mem.store.runtime_role()
    if role and (role["superuser"] or role["bypass_rls"]):
        kind = "a superuser" if role["superuser"] else "a BYPASSRLS role"
        warnings.append(f"the server runs as {role['role']}, {kind}: row-level security does not"
                        " separate projects. Fix: run `cuba-memorys secure` once.")
    models = list_models(mem.settings, status, deep=deep)  # a missing reranker/NLI is no warning
    warnings.extend(model_warnings(models))
    return {
        "version": __version__,
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "backend": mem.store.backend,
        "location": mem.store.location,
        "read_only": mem.store.read_only,
        "index_builds": builds,
        "migrations": {"applied": applied, "pending": pending},
        "model": model,
        "embedding_coverage": coverage,
        "episode_embedding_coverage": episodes,
        "counts": mem.store.counts(),
        "database_role": role,
        "project_filter": mem.settings.project_filter,
        "models": models,
        "resource_plan": resource_plan(mem.settings, models),
        "ok": not warnings,
        "warnings": warnings,
    }


def reembed(mem: Memory, *, everything: bool = False,
            progress: Callable[[int], None] | None = None) -> dict:
    """Embed every observation that has no embedding (or all of them with ``everything``).

    Works in batches, committing each, so an interrupted run keeps its progress.
    """
    embedder = mem.embedder
    if embedder is None:
        raise ModelUnavailable(f"cannot re-embed: {mem.embedder_status.reason}",
                               hint="Install or select a model (CUBA_EMBED_MODEL), then run reembed again.")
    if everything:
        mem.store.clear_embeddings()
    mem.store.set_meta("embedding_model", embedder.name)
    mem.store.set_meta("embedding_dim", str(embedder.dim))
    total = sum(mem.store.embedding_coverage(kind)["missing"] for kind in EMBEDDED_KINDS)
    updated = 0
    for kind in EMBEDDED_KINDS:
        for batch in _missing_batches(mem, kind):
            texts = [_passage(label, content) for _, content, label in batch]
            vectors = embedder.embed_passages(texts)
            mem.store.set_embeddings(kind, [(seq, vec) for (seq, _, _), vec in zip(batch, vectors)],
                                     embedder.name)
            updated += len(batch)
            if progress:
                progress(len(batch))
    return {"action": "reembed", "total_missing": total, "updated": updated, "model": embedder.name,
            "dim": embedder.dim}


def _passage(label: str, content: str) -> str:
    name, _, entity_type = label.rpartition("|")
    return passage_text(name, entity_type, content)


def _missing_batches(mem: Memory, kind: str) -> Iterator[list[tuple[int, str, str]]]:
    last = 0
    while True:
        batch = mem.store.rows_missing_embedding(kind, REEMBED_BATCH, after_seq=last)
        if not batch:
            return
        yield batch
        last = batch[-1][0]


def secure(settings: Settings, role: str, password: str | None) -> dict:
    """Create the non-superuser, no-BYPASSRLS role the PostgreSQL server runs as."""
    if not is_postgres_url(settings.database_url):
        raise ConfigError("`secure` sets up a PostgreSQL role; the embedded SQLite store has no"
                          " database roles (projects are separated by the server's own checks).",
                          hint="Set DATABASE_URL=postgresql://… to secure a PostgreSQL memory.")
    from cuba_memorys.storage.postgres.roles import create_app_role
    from cuba_memorys.storage.postgres.store import PgStore

    PgStore(settings.database_url, None).close()  # migrations first: the grants cover every table
    return create_app_role(settings.database_url, role, password)
