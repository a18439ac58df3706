"""`cuba-memorys doctor`: what state is this memory in, and what should the user act on?"""

from __future__ import annotations

import ipaddress
import platform
from pathlib import Path

from cuba_memorys import __version__
from cuba_memorys.config import TOOL_PROFILES, Settings
from cuba_memorys.embed import KNOWN_MODELS, engine_details, engine_report
from cuba_memorys.errors import StoreUnreadable
from cuba_memorys.judge import judge_warnings, judges, list_models, model_warnings, resource_plan
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.admin.reembed import agreement_warning, stored_vector_agreement
from cuba_memorys.services.lifecycle.rem import status as rem_status
from cuba_memorys.services.memory import Memory


def doctor(mem: Memory, deep: bool = False, check_file: bool = False) -> dict:
    """A health report; ``warnings`` lists what a user should act on.

    ``deep`` also runs one real inference per available model (embedder, reranker, NLI);
    ``check_file`` reads every page of an embedded store (SQLite's quick_check: `cuba-memorys
    doctor` asks, the panel does not). A file too damaged to check raises StoreUnreadable,
    which :func:`unreadable_report` turns into the report.
    """
    warnings: list[str] = []
    file_check = _file_check(mem) if check_file else None
    if file_check and file_check["problems"]:
        warnings.append(f"the memory database {mem.store.location} is damaged (SQLite's quick_check: "
                        f"{'; '.join(file_check['problems'])[:300]}). Ways out, in order: "
                        + " ".join(f"({n}) {step}" for n, step in enumerate(file_check["ways_out"], 1)))
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
    tokens = token_block(mem)
    if tokens and tokens["missing"]:
        warnings.append(f"{tokens['missing']} observation(s) have no token vectors for the late-interaction reranker"
                        " (written before this version, or while no model ran): search reranks them from their"
                        " text, slower. Run `cuba-memorys reembed` once to compute them.")
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
    warnings.extend(profile_warnings(mem.settings))
    peers = peer_block(mem)
    warnings.extend(peer_token_warnings(mem.settings) + peer_warnings(peers["peers"]))
    return {
        "version": __version__,
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "backend": mem.store.backend,
        "location": mem.store.location,
        "read_only": mem.store.read_only,
        "file_check": file_check,
        "index_builds": builds,
        "migrations": {"applied": applied, "pending": pending},
        "model": model,
        "embedding_coverage": coverage,
        "episode_embedding_coverage": episodes,
        "token_vector_coverage": tokens,
        "counts": mem.store.counts(),
        "consolidation": rem,
        "database_role": role,
        "project_filter": mem.settings.project_filter,
        "tool_profile": mem.settings.tool_profile,  # what tools/list serves (full for an unknown value)
        "models": models,
        "judges": judges(mem.settings, models),
        "resource_plan": resource_plan(mem.settings, models),
        "peers": peers,
        "ok": not warnings,
        "warnings": warnings,
    }


def _file_check(mem: Memory) -> dict | None:
    """SQLite's quick_check of the store's file (None on PostgreSQL, which checks its own pages)."""
    check = getattr(mem.store, "integrity_problems", None)  # SqliteStore only
    if check is None:
        return None
    from cuba_memorys.storage.sqlite.files import ways_out

    problems = check()
    steps = ways_out(Path(mem.store.location)) if problems else []
    return {"problems": problems, "ways_out": steps, "backups": backups(mem.settings) if problems else None}


def unreadable_report(settings: Settings, error: StoreUnreadable) -> dict:
    """doctor's report for a store whose file is not a SQLite database or is damaged: what is
    wrong, the ways out in order, and the backups found on this machine. Nothing is touched."""
    return {
        "version": __version__,
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "backend": "sqlite",
        "location": error.path,
        "readable": False,
        "problem": error.kind,  # not_sqlite | damaged
        "message": error.message,
        "wal_beside": Path(error.path + "-wal").is_file(),
        "ways_out": error.ways_out,
        "backups": backups(settings),
        "ok": False,
        "warnings": [str(error)],
    }


def backups(settings: Settings) -> dict:
    """What could rebuild the memory here: undo files, and a sync bundle in the sync folder."""
    from cuba_memorys.services.sync.export import default_dir, git_top

    undo = settings.undo_dir
    undo_files = sorted(undo.glob("*.json")) if undo.is_dir() else []
    folder = settings.sync_dir
    if folder is None or not folder.is_absolute():
        here = Path.cwd()
        top = git_top(here) or here
        folder = default_dir(top) if folder is None else top / folder
    bundle = folder if (folder / "manifest.json").is_file() else None
    return {"undo_dir": str(undo), "undo_files": len(undo_files),
            "sync_bundle": str(bundle) if bundle else None, "sync_dir": str(folder)}


def token_block(mem: Memory) -> dict | None:
    """How many observations have the late-interaction reranker's token vectors (issue 31); None
    when that reranker is not the one in use (nothing to compute)."""
    if mem.store.read_only or mem.token_model() is None:
        return None
    return mem.store.token_coverage()


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


def profile_warnings(settings: Settings) -> list[str]:
    """An unknown CUBA_TOOL_PROFILE does not stop the server (it serves full, as the original): say so here."""
    if not settings.tool_profile_unknown:
        return []
    return [f"CUBA_TOOL_PROFILE={settings.tool_profile_unknown!r} is not a tool profile, so the server lists"
            f" the full profile (every tool). Fix: set it to one of {', '.join(TOOL_PROFILES)}, or unset it."]


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
    if addr.strip().isdigit():  # a port alone is on 127.0.0.1 (server/app.py parse_addr)
        return True
    host = addr.rpartition(":")[0].strip("[]") if ":" in addr else addr
    if host in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
