"""`cuba-memorys anchors check`: which memories about code no longer match their code
(services/code/check.py; docs/code-anchors.md)."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import main, open_memory, print_json
from cuba_memorys.services.code import check as check_svc

HELP = {"help_option_names": ["-h", "--help"]}


@main.group(name="anchors", context_settings=HELP)
def anchors() -> None:
    """Memories anchored to code: whether that code still says what it said."""


@anchors.command(name="check", context_settings=HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON report.")
@click.option("--record", is_flag=True, help="Store each anchor's status (what the post-commit hook runs).")
@click.option("--quiet", is_flag=True, help="Print nothing unless a memory is stale.")
def check_cmd(as_json: bool, record: bool, quiet: bool) -> None:
    """Check every anchored memory against the working tree; list the stale ones (code changed
    or gone) with the diff of their span since they were written. Moved code is followed (the
    anchor is updated, audited)."""
    with open_memory(load_model=False) as mem:  # nothing here embeds
        report = check_svc.check_all(mem, None, record=record)
    if as_json:
        print_json(report)
        return
    if quiet and not report["stale"]:
        return
    counts = ", ".join(f"{n} {status}" for status, n in report["counts"].items() if n)
    click.echo(f"{report['checked']} anchors checked" + (f": {counts}" if counts else "") + "."
               + (" Statuses recorded." if report["recorded"] else ""))
    for entry in report["stale"]:
        where = f"{entry['path']}" + (f" {entry['symbol']}" if entry["symbol"] else "")
        since = f" since {entry['changed_since'][:12]}" if entry["changed_since"] else ""
        click.echo(f"\n[{entry['status']}{since}] {entry['entity']}: {entry['content']}"
                   f"  (id {entry['observation_id']})")
        click.echo(f"  {where} lines {entry['lines'][0]}-{entry['lines'][1]}"
                   + (f": {entry['detail']}" if entry["detail"] else ""))
        if entry.get("diff"):
            click.echo("\n".join(f"  {line}" for line in entry["diff"].splitlines()))
