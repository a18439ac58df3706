"""`cuba-memorys project …`: whole-project operations for the local operator."""

from __future__ import annotations

from typing import Any

import click

from cuba_memorys.cli.app import main, open_memory, print_json
from cuba_memorys.services.graph import projects as project_svc


@main.group(name="project", context_settings={"help_option_names": ["-h", "--help"]})
def project() -> None:
    """Projects as a whole (the agents' side is cuba_proyecto)."""


@project.command(name="backfill", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name")
@click.option("--apply", "do_it", is_flag=True, help="Move the rows (default: only count them per table).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def backfill(name: str, do_it: bool, as_json: bool) -> None:
    """Give every row of no project the existing project NAME (grants of no project, which mean
    every project, stay as they are). An entity of no project whose name NAME already uses is
    merged into NAME's. With --apply the change is audited and an undo file records it:
    `cuba-memorys undo FILE` moves the rows back."""
    with open_memory(check_model=False) as mem:
        result = project_svc.backfill(mem, None, name=name, confirm=do_it)
    if as_json:
        print_json(result)
        return
    _show(result)


def _show(result: dict[str, Any]) -> None:
    counts = result["would_move" if result["dry_run"] else "moved"]
    listed = ", ".join(f"{n} {t}" for t, n in counts.items() if n) or "nothing"
    if result["dry_run"]:
        click.echo(f"Would move into '{result['project']}': {listed}.")
        if result["entities_to_merge"]:
            click.echo(f"Would merge into its own entities of the same name: {', '.join(result['entities_to_merge'])}")
        click.echo("Run again with --apply to move them; an undo file will record the move.")
        return
    click.echo(f"Moved into '{result['project']}': {listed}.")
    if result["entities_merged"]:
        click.echo(f"Merged into its own entities of the same name: {', '.join(result['entities_merged'])}")
    click.echo(f"undo file: {result['undo_file']}")
