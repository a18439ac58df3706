"""`cuba-memorys codegraph build`: the repository's symbols, calls and imports as entities and
edges (services/code/codegraph.py; spec §4d)."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import main, open_memory, print_json
from cuba_memorys.code.languages import LANGUAGES
from cuba_memorys.services.code import codegraph as codegraph_svc

HELP = {"help_option_names": ["-h", "--help"]}


@main.group(name="codegraph", context_settings=HELP)
def codegraph() -> None:
    """The code graph: symbols of the repository's source as entities, with call and import edges."""


@codegraph.command(name="build", context_settings=HELP)
@click.option("--path", "-p", "path", default=None, help="The folder to parse (default: the current one); it must be"
                                                          " inside a git repository.")
@click.option("--lang", "languages", multiple=True,
              help=f"Languages to parse, repeatable or comma-separated (default: all of {', '.join(LANGUAGES)}).")
@click.option("--project", default=None, help="The project the symbols belong to (default: the current folder's name).")
@click.option("--dry-run", is_flag=True, help="Parse and count; write nothing.")
@click.option("--full", is_flag=True, help="Re-parse every file, unchanged ones too.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def build_cmd(path: str | None, languages: tuple[str, ...], project: str | None, dry_run: bool, full: bool,
              as_json: bool) -> None:
    """Parse Python, JavaScript, TypeScript, Go and Rust files with tree-sitter: one entity per
    function, method, class, struct, enum, trait, interface or type (entity_type code_symbol)
    with one observed observation (kind, name, file, lines, signature), `uses` edges for calls
    whose callee's name is unique, and `depends_on` edges for imports. Unchanged files (same
    content hash as the last build) are skipped; the observation of a symbol that is gone is
    retired (an undo file is written). Parses only the files git lists (tracked, or untracked and
    not ignored by .gitignore); skips target, node_modules, .git, dist, build, __pycache__,
    .venv, symlinks and file names that are not UTF-8."""
    with open_memory(load_model=False) as mem:
        result = codegraph_svc.build(mem, path=path, languages=languages, project=project, dry_run=dry_run,
                                     full=full)
    if as_json:
        print_json(result)
        return
    head = "dry run: " if result["dry_run"] else ""
    click.echo(f"{head}{result['files_parsed']} file(s) parsed, {result['files_unchanged']} unchanged,"
               f" {result['files_skipped']} skipped, {result['files_deleted']} gone (project {result['project']},"
               f" {result['root']})")
    if result["dry_run"]:
        click.echo(f"  {result['symbols_found']} symbol(s), {result['call_edges_resolved']} call edge(s),"
                   f" {result['import_statements']} import(s)")
    else:
        click.echo(f"  {result['symbols_written']} symbol(s): {result['observations_added']} added,"
                   f" {result['observations_updated']} updated, {result['symbols_retired']} retired;"
                   f" {result['call_edges_written']} call edge(s), {result['import_edges_attempted']} import edge(s)")
        if result["undo_file"]:
            click.echo(f"  undo the retirements with: cuba-memorys undo {result['undo_file']}")
    for item in result["skipped"]:
        click.echo(f"  skipped {item['path']}: {item['reason']}")
