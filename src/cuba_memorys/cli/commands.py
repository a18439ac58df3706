"""The CLI verbs: serve, search, save, doctor, reembed, secure."""

from __future__ import annotations

from typing import Any

import click

from cuba_memorys.cli.app import command, open_memory, print_json
from cuba_memorys.cli.progress import Progress
from cuba_memorys.config import Settings
from cuba_memorys.errors import StoreUnreadable
from cuba_memorys.models import OBSERVATION_TYPES
from cuba_memorys.services.admin import doctor as doctor_svc
from cuba_memorys.services.admin import reembed as reembed_svc
from cuba_memorys.services.admin import secure as secure_svc
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search


@command
@click.argument("addr", required=False)
def serve(addr: str | None) -> None:
    """Serve MCP over streamable HTTP at /mcp (default 127.0.0.1:8787, or CUBA_HTTP_ADDR).

    ADDR is HOST:PORT ([::1]:PORT for IPv6), or PORT alone for 127.0.0.1:PORT. Binding a
    non-loopback address requires CUBA_HTTP_TOKEN; clients then send
    `Authorization: Bearer <token>`. GET /health answers without a token. Ctrl-C (or SIGTERM)
    stops it and closes the store; a second one stops without waiting for open requests.
    """
    from cuba_memorys.server.http import run_http

    run_http(addr)


@command(name="search")
@click.argument("query", nargs=-1, required=True)
@click.option("--limit", "-n", default=10, show_default=True, type=click.IntRange(1, 50), help="Max results.")
@click.option("--format", "fmt", type=click.Choice(["compact", "verbose"]), default="compact", show_default=True)
@click.option("--associative", is_flag=True, help="Also follow the graph from the entities the query names"
                                                  " (cuba_faro associative).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON response.")
def search_cmd(query: tuple[str, ...], limit: int, fmt: str, associative: bool, as_json: bool) -> None:
    """Hybrid search, as cuba_faro does it. The words of QUERY are one query (quoting is optional)."""
    with open_memory() as mem:
        result = search.faro(mem, None, query=" ".join(query), limit=limit, format=fmt, track_access=False,
                             associative=associative)
    if as_json:
        print_json(result)
        return
    if result.get("degraded"):
        click.echo(f"(degraded: {result['degraded_reason']})", err=True)
    if not result["results"]:
        click.echo("No results.")
    for n, row in enumerate(result["results"], 1):
        entity, content, score = _compact(row) if fmt == "compact" else _verbose(row)
        stale = f" [{row['freshness']}: its code changed]" if row.get("stale") else ""
        click.echo(f"{n:2}. [{entity}] {content}  (score {score:.4f}, id {row['id']}){stale}")


def _compact(row: dict[str, Any]) -> tuple[str, str, float]:
    """(entity, text, score) of a compact row: keys e, c, s (search/format.py compact_row)."""
    return row["e"] or "", row["c"], row["s"]


def _verbose(row: dict[str, Any]) -> tuple[str, str, float]:
    """(entity, text, score) of a verbose row, whose keys depend on its type."""
    if row["type"] == "entity":
        return row["name"], row["entity_type"], row["fused_score"]
    if row["type"] == "error":
        return row["error_type"], row["error_message"], row["fused_score"]
    return row["entity_name"], row["content"], row["fused_score"]



@command
@click.argument("entity")
@click.argument("content", nargs=-1, required=True)
@click.option("--type", "-t", "obs_type", type=click.Choice(OBSERVATION_TYPES), default="fact", show_default=True)
@click.option("--allow-secret", is_flag=True, help="Store text that looks like a credential anyway.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON response.")
@click.option("--anchor", "anchors", multiple=True, metavar="PATH[:SYMBOL|:A-B]",
              help="Code the observation is about (repeatable): a file of the repository, optionally a symbol"
                   " in it (parse_config, Class.method) or lines (12-30); searches then say whether it changed.")
def save(entity: str, content: tuple[str, ...], obs_type: str, allow_secret: bool, as_json: bool,
         anchors: tuple[str, ...]) -> None:
    """Write one observation about ENTITY (created if new); the words of CONTENT are its text."""
    with open_memory() as mem:
        result = observations.add(mem, None, entity_name=entity, content=" ".join(content),
                                  observation_type=obs_type, allow_secret=allow_secret,
                                  anchors=[_anchor(a) for a in anchors] or None)
    if as_json:
        print_json(result)
    elif result.get("deduplicated"):
        click.echo(f"Already known (id {result['id']}); nothing written.")
    else:
        click.echo(f"Saved {result['id']} on '{entity}'.")
        for a in result.get("anchors", []):
            click.echo(f"  anchored to {a['path']}" + (f" {a['symbol']}" if a["symbol"] else "")
                       + f" lines {a['lines'][0]}-{a['lines'][1]}")
        for a in result.get("proposed_anchors", []):
            click.echo(f"  (it names {a['path']}" + (f" {a['symbol']}" if a.get("symbol") else "")
                       + ": anchor it with --anchor)")


def _anchor(spec: str) -> dict[str, Any]:
    """``path``, ``path:symbol`` or ``path:12-30`` as an anchor object."""
    path, _, rest = spec.partition(":")
    if not rest:
        return {"path": spec}
    if rest.replace("-", "").isdigit():
        return {"path": path, "lines": rest}
    return {"path": path, "symbol": rest}


@command
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON report.")
@click.option("--deep", is_flag=True, help="Also run one real inference per available model, timed.")
def doctor(as_json: bool, deep: bool) -> None:
    """Check the database, migrations, embedding model and coverage, the local models
    (embedder, reranker, NLI) and the memory plan for them; an embedded store's file is read
    whole (a damaged one is diagnosed, with the ways out, and left as it is)."""
    try:
        with open_memory(check_model=False) as mem:
            report = doctor_svc.doctor(mem, deep=deep, check_file=True)
    except StoreUnreadable as exc:  # the diagnosis itself, not a failure of doctor
        report = doctor_svc.unreadable_report(Settings.from_env(), exc)
    if as_json:
        print_json(report)
    elif report.get("readable") is False:
        _print_unreadable(report)
    else:
        _print_doctor(report)
    if not report["ok"]:
        raise SystemExit(1)


def _print_doctor(r: dict) -> None:
    m, cov = r["model"], r["embedding_coverage"]
    click.echo(f"cuba-memorys {r['version']} on {r['machine']}")
    click.echo(f"store:      {r['backend']} at {r['location']}")
    if r["database_role"]:
        role = r["database_role"]
        click.echo(f"role:       {role['role']} (superuser: {role['superuser']}, bypass RLS: {role['bypass_rls']})")
    click.echo(f"migrations: {len(r['migrations']['applied'])} applied, {len(r['migrations']['pending'])} pending")
    loaded = f"{m['loaded']} ({m['dimension']}-d)" if m["loaded"] else f"none: {m['reason']}"
    click.echo(f"model:      {loaded}; stored data: {m['stored_model']} ({m['stored_dimension']}-d)")
    if m.get("engine"):
        click.echo(f"engine:     {m['engine']}: {m['engine_note']}")
    click.echo(f"embeddings: {cov['embedded']}/{cov['observations']} observations embedded")
    click.echo("counts:     " + ", ".join(f"{k} {v}" for k, v in r["counts"].items()))
    _print_models(r["models"], r["resource_plan"])
    _print_judges(r["judges"])
    _print_cycle(r.get("consolidation") or {})
    for warning in r["warnings"]:
        click.echo(f"WARNING: {warning}")
    click.echo("OK" if r["ok"] else "Problems found (see warnings).")


def _print_unreadable(r: dict) -> None:
    click.echo(f"cuba-memorys {r['version']} on {r['machine']}")
    click.echo(f"store:      {r['backend']} at {r['location']}: UNREADABLE")
    click.echo(f"problem:    {r['message']}")
    found = r["backups"]
    bundle = (f"a sync bundle at {found['sync_bundle']}" if found["sync_bundle"]
              else f"no sync bundle in {found['sync_dir']}")
    click.echo(f"backups:    {bundle}; {found['undo_files']} undo file(s) in {found['undo_dir']}")
    click.echo("ways out, in order (nothing was changed or deleted):")
    for n, step in enumerate(r["ways_out"], 1):
        click.echo(f"  {n}. {step}")
    click.echo("Problems found (see above).")


def _print_cycle(rem: dict) -> None:
    last = rem.get("last_cycle")
    if last is None:
        click.echo("cycle:      no consolidation cycle has run on this store yet")
        return
    counts = ", ".join(f"{k} {v}" for k, v in last["counts"].items() if v)
    outcome = f"FAILED: {last['error']}" if last["error"] else (counts or "nothing to do")
    click.echo(f"cycle:      last {last['started_at']} ({last['trigger']}, {last['duration_ms']} ms): {outcome}")


def _print_models(models: dict, plan: dict) -> None:
    for kind, entry in models.items():
        if entry["loads"]:
            state = "ok"
        else:  # where it was looked for is enough here; `cuba-memorys models` has the full reason
            missing = f"not installed ({entry['path']})" if not entry["present"] else f"fails: {entry['reason']}"
            state = f"{missing}; disables {entry['disables']}"
        deep = entry.get("deep")
        if deep:
            state += {"ok": f"; test inference ok in {deep.get('ms')} ms",
                      "error": f"; test inference FAILED: {deep.get('error')}"}.get(deep["status"], "")
        click.echo(f"{kind + ':':11} {state}")
    click.echo(f"plan:       {plan['summary']}")


def _print_judges(judges: list[dict]) -> None:
    """The verify judges in chain order, one line: which can judge on this machine, and why not."""
    def state(entry: dict) -> str:
        if entry["available"] is None:
            return f"{entry['judge']} (if the client can sample)"
        if entry["available"]:
            return entry["judge"] + (f" ({entry['command']})" if entry.get("command") else "")
        if entry["judge"] == "nli":  # `cuba-memorys models` has the full reason and how to install one
            return "nli no (none loads; `cuba-memorys models` says how to install one)"
        return f"{entry['judge']} no ({entry['reason']})"
    click.echo(f"judges:     {' → '.join(state(e) for e in judges)}")


@command
@click.option("--all", "everything", is_flag=True, help="Re-embed every row (e.g. after changing model).")
@click.option("--batch", default=reembed_svc.REEMBED_BATCH, show_default=True, type=click.IntRange(1, 10_000),
              help="Rows embedded and committed together (an interrupted run keeps every finished batch).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def reembed(everything: bool, batch: int, as_json: bool) -> None:
    """Embed observations that have no embedding yet (or all with --all)."""
    with open_memory(check_model=not everything) as mem:
        key = "total" if everything else "missing"
        total = sum(_coverage(mem, kind)[key] for kind in reembed_svc.EMBEDDED_KINDS)
        bar = Progress("embedding")
        done = [0]

        def step(rows: int) -> None:
            done[0] += rows
            bar(done[0], total)

        result = reembed_svc.reembed(mem, everything=everything, progress=step, batch=batch)
        bar.close()
    if as_json:
        print_json(result)
    else:
        click.echo(f"Embedded {result['updated']} observation(s) with {result['model']}.")


def _coverage(mem, kind: str) -> dict[str, int]:
    cov = mem.store.embedding_coverage(kind)
    return {**cov, "total": cov["embedded"] + cov["missing"]}


__all__ = ["serve", "search_cmd", "save", "doctor", "reembed", "Settings"]


@command
@click.option("--role", default="cuba_app", show_default=True, help="Name of the application role.")
@click.option("--password", default=None, help="Password for a new role (default: a random one, printed once).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def secure(role: str, password: str | None, as_json: bool) -> None:
    """Create the non-superuser, no-BYPASSRLS PostgreSQL role the server runs as, so
    row-level security separates projects (PostgreSQL only; needs DATABASE_URL)."""
    result = secure_svc.secure(Settings.from_env(), role, password)
    if as_json:
        print_json(result)
        return
    click.echo(f"role {result['role']} {'created' if result['created'] else 'already existed; rechecked'}"
               f" and granted this database (login {result['granted_to_login']} may SET ROLE to it)")
    if result["url"]:
        click.echo(f"log in as it directly with: DATABASE_URL={result['url']}")
    click.echo(result["note"])
