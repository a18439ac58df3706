"""Verbs the original has that scripts call by name: `help [COMMAND]`, `version`, and
`cache migrate` (which has nothing to move here: services/admin/cache.py says why)."""

from __future__ import annotations

from pathlib import Path

import click

from cuba_memorys import __version__
from cuba_memorys.cli.app import VERSION_MESSAGE, command, main, print_json, usage_error
from cuba_memorys.config import Settings
from cuba_memorys.services.admin import cache as cache_svc

HELP = {"help_option_names": ["-h", "--help"]}


@command(name="help")
@click.argument("names", nargs=-1)
@click.pass_context
def help_cmd(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Print the help of cuba-memorys, or of COMMAND (`help sync export`), as --help does."""
    at = ctx.find_root()  # each command's help is rendered in its own context, as --help would
    for n, name in enumerate(names):
        sub = at.command.get_command(at, name) if isinstance(at.command, click.Group) else None
        if sub is None:
            usage_error(f"no such command: {' '.join(names[:n + 1])} (`cuba-memorys --help` lists them)")
        at = click.Context(sub, info_name=name, parent=at, **sub.context_settings)
    click.echo(at.command.get_help(at))


@command(name="version")
def version_cmd() -> None:
    """Print the version (as -V / --version does); opens no store."""
    click.echo(VERSION_MESSAGE % {"prog": "cuba-memorys", "version": __version__})


@main.group(name="cache", context_settings=HELP)
def cache() -> None:
    """The original's cache folder verbs (`cache migrate`), for the scripts that call them."""


@cache.command(name="migrate", context_settings=HELP)
@click.option("--apply", "do_it", is_flag=True, help="Accepted as the original's; nothing is moved either way.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def migrate_cmd(do_it: bool, as_json: bool) -> None:
    """Say why there is nothing to move: the original moves ~/.cache/cuba-memorys into
    ~/.cache/memory-industry, and ~/.cache/cuba-memorys is the folder this program reads.
    Changes nothing and exits 0, with or without --apply."""
    result = cache_svc.migrate(Settings.from_env(), Path.home(), apply=do_it)
    if as_json:
        print_json(result)
        return
    state = f"{len(result['entries'])} entr(ies)" if result["cache_dir_exists"] else "not created yet"
    click.echo(f"cache in use: {result['cache_dir']} ({state}); models from {result['reads']['models']}")
    click.echo(result["note"])
    if result.get("newer_note"):
        click.echo(result["newer_note"])
