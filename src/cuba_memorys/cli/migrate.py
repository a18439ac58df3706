"""`cuba-memorys migrate --to postgresql://…`: move the embedded memory up to PostgreSQL."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import command, print_json
from cuba_memorys.config import Settings
from cuba_memorys.services.admin import migrate as migrate_service


@command
@click.option("--to", "target", required=True, metavar="URL",
              help="The PostgreSQL database: postgresql://user:password@host/db.")
@click.option("--force", is_flag=True, help="Replace the memory the target already holds (default: refuse).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def migrate(target: str, force: bool, as_json: bool) -> None:
    """Copy the embedded SQLite memory (CUBA_DATA_DIR) into PostgreSQL.

    Every row, id, seq and embedding is copied in one transaction and the row counts are
    verified before it commits: a failed or interrupted run leaves the target as it was.
    Afterwards, set DATABASE_URL to the target to use it.
    """
    def progress(message: str) -> None:  # on stderr, so --json's stdout stays one document
        click.echo(f"  {message}", err=True)

    report = migrate_service.to_postgres(Settings.from_env(), target, force=force, progress=progress)
    if as_json:
        print_json(report)
        return
    total = sum(report["copied"].values())
    click.echo(f"Copied {total} rows into {report['target']} ({report['copy_rows_per_second']} rows/s),"
               f" built its indexes in {report['index_seconds']} s; counts verified"
               f" ({report['seconds']} s in all).")
    if report["replaced"]:
        click.echo(f"Replaced what the target held before (rows in {', '.join(report['replaced'])}).")
    click.echo(f"To use it: DATABASE_URL={report['target']} (with its password).")
