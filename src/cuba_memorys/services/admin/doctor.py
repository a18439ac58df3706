"""`cuba-memorys doctor`: what state is this memory in, and what should the user act on?"""

from __future__ import annotations

import platform

from cuba_memorys import __version__
from cuba_memorys.embed import KNOWN_MODELS
from cuba_memorys.judge import judge_warnings, judges, list_models, model_warnings, resource_plan
from cuba_memorys.services.lifecycle.rem import status as rem_status
from cuba_memorys.services.memory import Memory


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
    rem = rem_status(mem)
    warnings.extend(rem_warnings(rem))
    models = list_models(mem.settings, status, deep=deep)  # a missing reranker/NLI is no warning
    warnings.extend(model_warnings(models))
    warnings.extend(judge_warnings(mem.settings))
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
        "consolidation": rem,
        "database_role": role,
        "project_filter": mem.settings.project_filter,
        "models": models,
        "judges": judges(mem.settings, models),
        "resource_plan": resource_plan(mem.settings, models),
        "ok": not warnings,
        "warnings": warnings,
    }


def rem_warnings(rem: dict) -> list[str]:
    """The consolidation cycle's problems: overdue while a server was up, or its last one failed."""
    found = []
    last = rem["last_cycle"]
    if rem["stale"]:
        when = f"the last one finished at {last['finished_at']}" if last else "none has ever run"
        found.append(f"no consolidation cycle ran for {rem['stale_after_hours']:g} h while a server was up"
                     f" ({when}; server up since {rem['server_up_since']}): run `cuba-memorys rem` and check"
                     " the server's log")
    if last is not None and last["error"]:
        found.append(f"the last consolidation cycle ({last['started_at']}) failed: {last['error']}")
    return found
