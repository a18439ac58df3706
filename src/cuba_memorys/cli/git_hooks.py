"""`cuba-memorys hook …`: the git side of sync — install | uninstall the hooks that export and
import the bundle (services/sync/hooks.py), and the three-way merge driver git calls for the
bundle's files (cli/merge_driver.py, services/sync/merge.py)."""

from __future__ import annotations

from pathlib import Path

import click

from cuba_memorys.cli.app import main, print_json
from cuba_memorys.config import Settings, default_data_dir
from cuba_memorys.services.admin import setup as setup_svc
from cuba_memorys.services.sync import hooks as hooks_svc

HELP = {"help_option_names": ["-h", "--help"]}


@main.group(name="hook", context_settings=HELP)
def hook() -> None:
    """Git hooks and the merge driver that keep the sync bundle in step with the repository."""


@hook.command(name="install", context_settings=HELP)
@click.option("--with-codegraph", is_flag=True, help="post-commit also runs `codegraph build` of the repository,"
                                                     " then `anchors check --record --quiet`, in the background"
                                                     " (the commit does not wait).")
@click.option("--project", default=None, help="With --with-codegraph: the project the build writes into, pinned in"
                                               " the hook (default: the repository folder's name).")
@click.option("--dir", "folder", default=None,
              help="The bundle's folder the hooks pin (default: $CUBA_SYNC_DIR, else .cuba-memorys/ at the"
                   " repository's top).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON report.")
def install_cmd(with_codegraph: bool, project: str | None, folder: str | None, as_json: bool) -> None:
    """Install the git hooks that keep the sync bundle and this memory in step, and the merge driver.

    post-commit exports (importing first whenever the folder holds a bundle not imported here:
    a merge, a `git reset --hard`, a folder checked out), post-checkout (a branch checkout),
    post-merge and post-rewrite (after a rebase) import. Each hook gets a marked block pinning
    the sync folder and this program; your own hook lines are kept, and running it again
    replaces only its blocks. Hooks never stop git: their output goes to
    <git dir>/cuba-memorys-hooks.log. The merge driver is registered in the repository's config
    and .gitattributes when the folder is inside the repository.
    """
    settings = Settings.from_env()
    # CUBA_DATA_DIR is pinned only when it names another folder than the default
    data_dir = settings.data_dir.absolute() if settings.data_dir != default_data_dir() else None
    result = hooks_svc.install(Path.cwd(), setup_svc.executable(), dir=folder, configured_dir=settings.sync_dir,
                               data_dir=data_dir, database_url_set=bool(settings.database_url),
                               with_codegraph=with_codegraph, project=project)
    if as_json:
        print_json(result)
        return
    click.echo(f"Hooks installed in {result['hooks_dir']} (sync folder {result['sync_dir']}):")
    for row in result["hooks"]:
        how = "created" if row["created"] else "block replaced" if row["replaced"] else "block added"
        click.echo(f"  {row['hook']}: {how}")
    driver = result["merge_driver"]
    if driver["installed"]:
        click.echo(f"Merge driver: git config merge.cuba-memorys.driver = {driver['driver']}")
        click.echo(f"  {driver['attributes_file']}: {driver['line']}")
    click.echo(f"Store the hooks use: {result['store']}.")
    click.echo(f"Hook output goes to {result['log']}.")
    for note in result["notes"]:
        click.echo(f"note: {note}")


@hook.command(name="uninstall", context_settings=HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON report.")
def uninstall_cmd(as_json: bool) -> None:
    """Remove what `hook install` wrote: its hook blocks (and hook files left empty), the merge
    driver's config and its .gitattributes line. Your own hook lines and attributes stay."""
    result = hooks_svc.uninstall(Path.cwd())
    if as_json:
        print_json(result)
        return
    changed = [r for r in result["hooks"] if r["block_removed"]]
    for row in changed:
        click.echo(f"{row['path']}: {'file removed' if row['file_removed'] else 'block removed'}")
    for key in result["config_removed"]:
        click.echo(f"git config: {key} removed")
    for line in result["attributes_removed"]:
        click.echo(f".gitattributes: {line!r} removed{' (file removed)' if result['attributes_file_removed'] else ''}")
    if not changed and not result["config_removed"] and not result["attributes_removed"]:
        click.echo(f"No cuba-memorys hooks or merge driver in {result['repository']}; nothing to remove.")
