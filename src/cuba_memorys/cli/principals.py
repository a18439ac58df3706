"""`cuba-memorys principal …`: principals, their grants and their tokens, for a shared `serve`."""

from __future__ import annotations

from typing import Any

import click

from cuba_memorys.cli.app import main, open_memory, print_json
from cuba_memorys.config import Settings
from cuba_memorys.services.admin import principals as principal_svc

JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@main.group(name="principal", context_settings={"help_option_names": ["-h", "--help"]})
def principal() -> None:
    """Who may use a shared `serve`, and with what grants.

    Each principal has a bearer token (its SHA-256 kept in CUBA_TOKENS_FILE, the token shown once)
    and grants of reader, writer or admin on projects (`*`: every project). With a token file,
    `serve` checks every call against the caller's grants; without one, nothing is checked.
    """


def _show(result: dict[str, Any], as_json: bool, line: str) -> None:
    if as_json:
        print_json(result)
    else:
        click.echo(line)


@principal.command(name="add")
@click.argument("name")
@click.option("--grant", "grants", multiple=True, metavar="PROJECT=ROLE",
              help="A grant: ROLE reader, writer or admin; PROJECT a name or * (every project). Repeatable.")
@JSON
def add(name: str, grants: tuple[str, ...], as_json: bool) -> None:
    """Create principal NAME with its grants and a new token (printed once)."""
    with open_memory(check_model=False) as mem:
        result = principal_svc.add(mem, Settings.from_env().tokens_file, name, list(grants))
    granted = ", ".join(f"{g['role']} on {g['project']}" for g in result["grants"]) or "no grants yet"
    _show(result, as_json, f"principal {result['principal']} ({granted}); its token, shown only now:\n"
                           f"{result['token']}")


@principal.command(name="grant")
@click.argument("name")
@click.argument("grant", metavar="PROJECT=ROLE")
@JSON
def grant(name: str, grant: str, as_json: bool) -> None:
    """Give NAME a role on a project (replacing the one it had there)."""
    with open_memory(check_model=False) as mem:
        result = principal_svc.grant(mem, name, grant)
    _show(result, as_json, f"{name}: {result['granted']['role']} on {result['granted']['project']}")


@principal.command(name="revoke")
@click.argument("name")
@click.argument("project")
@JSON
def revoke(name: str, project: str, as_json: bool) -> None:
    """Take NAME's grant on PROJECT (* for its every-project grant) away."""
    with open_memory(check_model=False) as mem:
        result = principal_svc.revoke(mem, name, project)
    _show(result, as_json, f"{name}: grant on {project} {'revoked' if result['revoked'] else 'was not there'}")


@principal.command(name="token")
@click.argument("name")
@JSON
def token(name: str, as_json: bool) -> None:
    """Give NAME a new token (the old one stops working); printed once."""
    with open_memory(check_model=False) as mem:
        result = principal_svc.new_token(mem, Settings.from_env().tokens_file, name)
    _show(result, as_json, f"new token for {name}, shown only now:\n{result['token']}")


@principal.command(name="remove")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Confirm: NAME's grants and token are removed.")
@JSON
def remove(name: str, yes: bool, as_json: bool) -> None:
    """Remove NAME, its grants and its token (what it wrote stays: it belongs to the projects)."""
    if not yes:
        click.confirm(f"Remove principal {name}, its grants and its token?", abort=True, err=True)
    with open_memory(check_model=False) as mem:
        result = principal_svc.remove(mem, Settings.from_env().tokens_file, name)
    _show(result, as_json, f"principal {name} removed")


@principal.command(name="list")
@JSON
def listing(as_json: bool) -> None:
    """The principals, their grants, and whether each has a token in the file."""
    with open_memory(check_model=False) as mem:
        result = principal_svc.listing(mem, Settings.from_env().tokens_file)
    if as_json:
        print_json(result)
        return
    for entry in result["principals"]:
        grants = ", ".join(f"{g['role']} on {g['project']}" for g in entry["grants"]) or "no grants"
        click.echo(f"{entry['principal']}: {grants}{'' if entry['has_token'] else ' (no token)'}")
    if not result["principals"]:
        click.echo("No principals: `cuba-memorys principal add NAME --grant PROJECT=ROLE` makes one.")
