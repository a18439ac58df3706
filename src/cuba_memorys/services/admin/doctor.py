"""`cuba-memorys doctor`: what state is this memory in, and what should the user act on?"""

from __future__ import annotations

import ipaddress
import platform

from cuba_memorys import __version__
from cuba_memorys.config import Settings
from cuba_memorys.embed import KNOWN_MODELS, engine_details, engine_report
from cuba_memorys.judge import judge_warnings, judges, list_models, model_warnings, resource_plan
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.admin.reembed import agreement_warning, stored_vector_agreement
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
    engine, engine_note, engine_warning = engine_report(status)  # as it is now (a background build may be done)
    stored_name, stored_dim = mem.stored_model()
    model = {
        "requested": status.requested,
        "loaded": status.embedder.name if status.embedder else None,
        "dimension": status.embedder.dim if status.embedder else None,
        "reason": status.reason,
        "engine": engine,  # what computes the vectors (CUBA_EMBED_ENGINE), and why that one
        "engine_setting": mem.settings.embed_engine,
        "engine_note": engine_note,
        # the ONNX variant, its cache in the models folder, the checks it passed (embed/e5_engine.py)
        "engine_details": engine_details(status, mem.settings.models_dir),
        "stored_model": stored_name,
        "stored_dimension": stored_dim,
        "known_models": KNOWN_MODELS,
    }
    if status.embedder is None:
        warnings.append(f"no embedding model loaded ({status.reason}); search is lexical only (degraded)")
    elif engine_warning:  # the faster engine could not be used and a fallback runs
        warnings.append(engine_warning)
    if status.embedder is not None:
        problem = mem.model_problem()
        model["matches_stored"] = problem is None
        if problem:
            warnings.append(problem + " Fix: set CUBA_EMBED_MODEL to the stored model, or run"
                            " `cuba-memorys reembed --all`.")
        else:
            agreement = stored_vector_agreement(mem)
            model["stored_vectors"] = agreement
            if agreement and not agreement["agrees"]:
                warnings.append(agreement_warning(agreement))
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
    peers = peer_block(mem)
    warnings.extend(peer_token_warnings(mem.settings) + peer_warnings(peers["peers"]))
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
        "peers": peers,
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


MIN_PEER_TOKEN_CHARS = 32  # as serve requires of a token that guards a network bind (server/app.py)


def peer_block(mem: Memory) -> dict:
    """Read-only sync peers (docs/sync.md "Peers"): whether this node has a peer token, its default
    peer URL and name, and the peers it fetched from (with their last error)."""
    settings = mem.settings
    return {"token_set": bool(settings.peer_token), "url": settings.peer_url or None, "node_name": settings.node_name,
            "peers": mem.store.peer_list(50)}


def peer_token_warnings(settings: Settings) -> list[str]:
    """What is wrong with CUBA_PEER_TOKEN before serve refuses it, or lets it restrict nothing."""
    token = settings.peer_token
    if not token:
        return []
    found = []
    if token == settings.http_token:
        found.append("CUBA_PEER_TOKEN equals CUBA_HTTP_TOKEN: serve refuses to start (a peer would hold the"
                     " operator's every grant). Fix: give the peer a secret of its own.")
    owner = TokenRegistry(settings.tokens_file).principal(token) if settings.tokens_file else None
    if owner is not None:
        found.append(f"CUBA_PEER_TOKEN is principal {owner}'s token: serve refuses to start. Fix: give the peer a"
                     f" secret of its own, or `cuba-memorys principal token {owner}`.")
    if len(token) < MIN_PEER_TOKEN_CHARS and not _loopback(settings.http_addr):
        found.append(f"CUBA_PEER_TOKEN has {len(token)} characters: serve refuses it on {settings.http_addr}, a"
                     f" non-loopback bind (at least {MIN_PEER_TOKEN_CHARS}). Fix: e.g. $(openssl rand -hex 32).")
    if not settings.http_token and settings.tokens_file is None:
        found.append("CUBA_PEER_TOKEN is set but neither CUBA_HTTP_TOKEN nor CUBA_TOKENS_FILE: serve then takes"
                     " any request without a token as the operator's (loopback only), so the peer token"
                     " restricts nothing. Fix: set CUBA_HTTP_TOKEN too.")
    return found


def peer_warnings(peers: list[dict]) -> list[str]:
    return [f"the last fetch from peer {p['name']} ({p['url']}) failed: {p['last_error']}"
            for p in peers if p.get("last_error")]


def _loopback(addr: str) -> bool:
    """Whether CUBA_HTTP_ADDR names this machine only (serve checks the address it is given)."""
    host = addr.rpartition(":")[0].strip("[]") if ":" in addr else addr
    if host in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
