"""`cuba-memorys sync …`: the memory as a bundle that travels with the code through git
(services/sync/; the agents' side is cuba_sync). For now export and status; import, diff and
the peer verbs come with the rest of issue 17."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import main, open_memory, print_json
from cuba_memorys.services.sync import export as sync_svc

HELP = {"help_option_names": ["-h", "--help"]}
DIR_HELP = "The bundle's folder (default: $CUBA_SYNC_DIR, else .cuba-memorys/ at the git repository's top)."


@main.group(name="sync", context_settings=HELP)
def sync() -> None:
    """Sync the memory between machines through git: a bundle of JSON files in the repository."""


@sync.command(name="export", context_settings=HELP)
@click.option("--dir", "folder", default=None, help=DIR_HELP)
@click.option("--scope", default="project", show_default=True,
              help="project (the active project's rows only) or all.")
@click.option("--with-embeddings", is_flag=True, help="Also write embeddings.bin.zst (zstd-compressed vectors).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def export_cmd(folder: str | None, scope: str, with_embeddings: bool, as_json: bool) -> None:
    """Write the bundle: only files whose content changed are rewritten, so an export after no
    writes changes nothing (manifest.json included)."""
    with open_memory(check_model=False) as mem:
        result = sync_svc.export(mem, None, dir=folder, scope=scope, with_embeddings=with_embeddings)
    if as_json:
        print_json(result)
        return
    if result["unchanged"]:
        click.echo(f"Bundle in {result['dir']} is up to date (manifest {result['manifest_hash'][:12]}).")
        return
    counts = ", ".join(f"{n} {k}" for k, n in result["counts"].items())
    click.echo(f"Exported to {result['dir']}: {counts}; {result['tombstones']} tombstones.")
    click.echo(f"{len(result['files_written'])} files written, {len(result['files_removed'])} removed;"
               f" manifest {result['manifest_hash'][:12]}.")
    if "warning" in result:
        click.echo(f"warning: {result['warning']}")


@sync.command(name="status", context_settings=HELP)
@click.option("--dir", "folder", default=None, help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def status_cmd(folder: str | None, as_json: bool) -> None:
    """The bundle in the sync folder, whether it waits to be imported, recent imports and peer notices."""
    with open_memory(check_model=False) as mem:
        result = sync_svc.status(mem, None, dir=folder)
    if as_json:
        print_json(result)
        return
    manifest = result["current_manifest"]
    if manifest is None:
        click.echo(f"No bundle in {result['dir']} (run `cuba-memorys sync export`).")
    else:
        click.echo(f"Bundle in {result['dir']}: manifest {str(manifest.get('manifest_hash'))[:12]}, written by"
                   f" node {manifest.get('node_id')} at {manifest.get('exported_at')}"
                   f"{'; waiting to be imported' if result['pending_import'] else ''}.")
    click.echo(f"This node: {result['node_id']}; {len(result['recent_imports'])} recent imports,"
               f" {len(result['peer_notices'])} open peer notices.")
