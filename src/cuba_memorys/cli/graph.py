"""The graph verbs: link (NPMI autolink of entities that share work sessions)."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import command, open_memory, print_json
from cuba_memorys.services.graph import link as link_svc


@command
@click.option("--threshold", type=float, default=link_svc.DEFAULT_THRESHOLD, show_default=True,
              help="Lowest NPMI a pair needs (-1..1).")
@click.option("--min-sessions", type=int, default=link_svc.DEFAULT_MIN_SESSIONS, show_default=True,
              help="Sessions a pair must share.")
@click.option("--show", type=int, default=link_svc.DEFAULT_SHOW, show_default=True,
              help="Pairs to list (strongest first).")
@click.option("--apply", "do_it", is_flag=True, help="Write the edges (default: only list them).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def link(threshold: float, min_sessions: int, show: int, do_it: bool, as_json: bool) -> None:
    """Relate entities written about in the same work sessions: NPMI over (entity, session)
    co-occurrence; a pair sharing at least --min-sessions sessions with NPMI >= --threshold
    becomes a bidirectional related_to edge with provenance 'predicted' (strength = NPMI).
    Existing edges are never changed. Without --apply, only the plan is shown."""
    with open_memory() as mem:
        result = link_svc.link(mem, None, threshold=threshold, min_sessions=min_sessions, show=show, apply=do_it)
    if as_json:
        print_json(result)
        return
    for pair in result["pairs"]:
        click.echo(f"'{pair['a']}' ~ '{pair['b']}': npmi {pair['npmi']:.3f}, {pair['shared_sessions']} sessions")
    click.echo(f"{result['candidates']} pair(s) over {result['sessions']} session(s) qualify"
               f" (threshold {result['threshold']}, min sessions {result['min_sessions']}).")
    if result["dry_run"]:
        click.echo(result["hint"])
    else:
        click.echo(f"created {result['edges_created']} edge(s); {result['already_linked']} pair(s) already linked.")
