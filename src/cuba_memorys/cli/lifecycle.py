"""The lifecycle verbs: delete (with an undo file), undo, dedupe, rem."""

from __future__ import annotations

from typing import Any

import click

from cuba_memorys.cli.app import command, open_memory, print_json
from cuba_memorys.services.graph import aliases
from cuba_memorys.services.lifecycle import rem as rem_svc
from cuba_memorys.services.lifecycle import undo as undo_svc


@command
@click.argument("observation_id")
@click.option("--apply", "do_it", is_flag=True, help="Delete it (default: only show what would be deleted).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def delete(observation_id: str, do_it: bool, as_json: bool) -> None:
    """Delete one observation by id. Without --apply, only the plan is shown; with it, an undo
    file (obs-<id>.json under CUBA_UNDO_DIR) is written first, and `cuba-memorys undo FILE`
    restores the row exactly."""
    with open_memory() as mem:
        result = undo_svc.delete_observation(mem, None, observation_id=observation_id, apply=do_it)
    if as_json:
        print_json(result)
        return
    row = result["would_delete" if result["dry_run"] else "deleted"]
    verb = "Would delete" if result["dry_run"] else "Deleted"
    click.echo(f"{verb} {row['id']} ({row['type']}) of '{row['entity']}': {row['content']}")
    if result["dry_run"]:
        click.echo(result["hint"])
    else:
        click.echo(f"undo file: {result['undo_file']}")


@command
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def undo(file: str, as_json: bool) -> None:
    """Restore what an undo file holds (written by delete --apply, dedupe --apply, cuba_zafra and
    project backfill): its rows come back exactly as they were, the rows its action created are
    removed and the rows it moved to a project go back. The rows this overwrites are saved first
    in a new undo file, so an undo can be undone."""
    with open_memory() as mem:
        result = undo_svc.apply(mem, file)
    if as_json:
        print_json(result)
        return
    restored = ", ".join(f"{n} {t}" for t, n in result["restored"].items() if n) or "nothing"
    removed = ", ".join(f"{n} {t}" for t, n in result["removed"].items() if n) or "nothing"
    moved = ", ".join(f"{n} {t}" for t, n in result.get("moved_back", {}).items() if n)
    click.echo(f"Undid {result['undone']}: restored {restored}; removed {removed}"
               + (f"; moved back {moved}." if moved else "."))
    click.echo(f"to undo this: cuba-memorys undo {result['undo_file']}")


@command
@click.option("--apply", "do_it", is_flag=True, help="Merge (default: only list what would be merged).")
@click.option("--judge", is_flag=True, help="Ask the verify judges whether each probable pair is one entity.")
@click.option("--merge", "merge", default=None, metavar="A", help="Merge the entity named A ...")
@click.option("--into", "into", default=None, metavar="B", help="... into the entity named B (manual merge).")
@click.option("--project", default=None, metavar="NAME", help="Only this project's entities.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def dedupe(do_it: bool, judge: bool, merge: str | None, into: str | None, project: str | None,
           as_json: bool) -> None:
    """Find entities that are one thing under two names and merge them. Exact groups (names equal
    once only letters and digits are kept, lower-cased) merge with --apply; probable pairs (name
    trigram similarity > 0.70, never names that differ only in their numbers, as session_1 and
    session_2) are listed, and merged (with --apply) only when --judge finds them the same
    entity. Each merge keeps the loser's name as an alias and writes an undo file first."""
    with open_memory() as mem:
        result = aliases.dedupe(mem, None, apply=do_it, judge=judge, merge=merge, into=into, project=project)
    if as_json:
        print_json(result)
    elif result.get("manual"):
        _print_manual(result)
    else:
        _print_dedupe(result)


def _print_manual(result: dict[str, Any]) -> None:
    plan = result["would_merge"]
    if result["dry_run"]:
        click.echo(f"Would merge '{plan['loser']['name']}' into '{plan['winner']['name']}'. {result['hint']}")
    for merged in result.get("merged", []):
        _print_merged(merged)


def _print_dedupe(result: dict[str, Any]) -> None:
    for group in result["exact_groups"]:
        losers = ", ".join(f"'{r['name']}' ({r['observations']})" for r in group["losers"])
        click.echo(f"exact:    '{group['winner']['name']}' ({group['winner']['observations']}) <- {losers}")
    for pair in result["probable_pairs"]:
        judged = pair.get("judgment")
        verdict = f"  judge: {judged['verdict']} ({judged['backend']})" if judged else ""
        click.echo(f"probable: '{pair['a']['name']}' ~ '{pair['b']['name']}' ({pair['similarity']:.2f}){verdict}")
    if not result["exact_groups"] and not result["probable_pairs"]:
        click.echo("No duplicate entities found.")
    for merged in result["merged"]:
        _print_merged(merged)
    if result.get("hint"):
        click.echo(result["hint"])


def _print_merged(merged: dict[str, Any]) -> None:
    click.echo(f"merged '{merged['loser']}' into '{merged['winner']}' ({merged['moved']['observations']}"
               f" observations); undo file: {merged['undo_file']}")


@command
def rem() -> None:
    """Run one consolidation cycle now (decay, episode decay, embedding backfill, statistics,
    duplicate count) and print its JSON record. Servers run one every 4 h by themselves."""
    with open_memory() as mem:
        result = rem_svc.run_cycle(mem, trigger="cli")
    print_json(result)
    if result.get("error"):
        raise SystemExit(1)  # recorded in rem_cycles with the error; nothing of it was kept
