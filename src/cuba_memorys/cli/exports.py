"""The offline export verbs: dashboard (one HTML file), export (Obsidian vault, MCP memory JSONL),
import (MCP memory JSONL) and skills (recipes as agent skills)."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import command, open_memory, print_json, usage_error
from cuba_memorys.cli.progress import Progress, vectors_line, wait_for_vectors
from cuba_memorys.services.exports import dashboard as dashboard_svc
from cuba_memorys.services.exports import mcp_jsonl, obsidian
from cuba_memorys.services.exports import skills as skills_svc

FORMATS = ("obsidian", "mcp-jsonl")


@command
@click.argument("out", required=False, default=dashboard_svc.DEFAULT_OUT)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def dashboard(out: str, as_json: bool) -> None:
    """Write a self-contained offline HTML dashboard (health, counts, connectivity, top entities,
    a filter over the latest observations) to OUT (default cuba-dashboard.html)."""
    with open_memory(check_model=False) as mem:  # as doctor does: the model's state is part of the health
        result = dashboard_svc.write(mem, None, out=out)
    if as_json:
        print_json(result)
        return
    click.echo(f"Dashboard written to {result['path']} ({result['verdict']})")


@command
@click.argument("target")
@click.option("--obsidian", "as_vault", is_flag=True, help="Same as --format obsidian (the default).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="obsidian (the default, as the original's): a vault in the directory TARGET; mcp-jsonl: the"
                   " official MCP memory server's JSONL in the file TARGET.")
@click.option("--apply", "do_it", is_flag=True, help="Write into a non-empty vault an earlier export made"
                                                     " (or over an existing JSONL file).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def export(target: str, as_vault: bool, fmt: str | None, do_it: bool, as_json: bool) -> None:
    """Export the memory: an Obsidian vault (one note per entity, README index; the default) or
    MCP memory JSONL. A non-empty directory (an existing file) is refused unless --apply."""
    if as_vault and fmt not in (None, "obsidian"):
        usage_error("--obsidian and --format mcp-jsonl contradict each other: pass one")
    fmt = fmt or "obsidian"
    with open_memory(load_model=False) as mem:
        if fmt == "obsidian":
            result: dict = dict(obsidian.export(mem, None, directory=target, apply=do_it))
        else:
            result = dict(mcp_jsonl.export(mem, None, path=target, apply=do_it))
    if as_json:
        print_json(result)
    elif fmt == "obsidian":
        click.echo(f"Vault written to {result['path']}: {result['notes']} note(s), {result['communities']}"
                   f" communit(ies), {result['isolated']} isolated entit(ies)")
    else:
        restored = (f" ({result['original_types_restored']} original type(s) given back from the import's type"
                    " notes)" if result["original_types_restored"] else "")
        click.echo(f"Wrote {result['entities']} entit(ies) and {result['relations']} relation(s) to"
                   f" {result['path']}{restored}")


@command(name="import")
@click.argument("source")
@click.option("--format", "fmt", type=click.Choice(["mcp-jsonl"]), required=True,
              help="mcp-jsonl: the official MCP memory server's memory.jsonl.")
@click.option("--project", default=None, help="Write into this project (created when missing).")
@click.option("--apply", "do_it", is_flag=True, help="Write (default: only show the plan).")
@click.option("--no-wait", is_flag=True, help="Do not wait for the rows' vectors before exiting (found by keyword"
                                              " at once; the next server start embeds them).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def import_(source: str, fmt: str, project: str | None, do_it: bool, no_wait: bool, as_json: bool) -> None:
    """Import the official MCP memory server's JSONL: a plan by default, written with --apply through
    the normal write path (secrets refused, duplicates skipped, embeddings made, audited). With
    --apply it waits, showing the progress, until every row is embedded (Ctrl-C stops waiting)."""
    with open_memory(check_model=do_it, load_model=do_it) as mem:
        bar = Progress("importing")
        result = mcp_jsonl.import_file(mem, None, path=source, project=project, apply=do_it, progress=bar)
        if do_it:
            bar.close("written")
        left = wait_for_vectors(mem, wait=not no_wait) if do_it else 0
    if as_json:
        print_json({**result, "vectors_pending": left})
        return
    for line in _import_lines(result):
        click.echo(line)
    if not result["dry_run"] and (waiting := vectors_line(left)):
        click.echo(waiting)


def _import_lines(result: mcp_jsonl.JsonlImported) -> list[str]:
    """The import's plan (or what it wrote) and every type it mapped, one readable line each."""
    lines = [f"{result['path']}: {result['entities']} entit(ies), {result['observations']} observation(s),"
             f" {result['relations']} relation line(s)"]
    if result["dry_run"]:
        lines += ["Would write:",
                  f"  {result['entities']} entit(ies) (created when missing)",
                  f"  {result['observations']} observation(s) (those already stored are skipped)",
                  f"  {result['relation_rows']} relation(s) (those already stored are skipped; lines whose"
                  " types both became related_to share one)",
                  f"  {result['type_notes']} type note(s) (context observations keeping the original types,"
                  " which export gives back)"]
    else:
        done = result["written"]
        lines += ["Written:",
                  f"  {done['entities']} entit(ies) (created when missing)",
                  f"  {done['observations']} observation(s) added, {done['merged_or_skipped']} already stored"
                  " (skipped or merged)",
                  f"  {done['relations']} relation(s) created, {done['relations_already_present']} already stored",
                  f"  {done['type_notes']} type note(s) added, {done['type_notes_already_stored']} already stored"]
    lines += _mapping_lines("Entity types mapped:", result["mapped_entity_types"], "entit(ies)")
    lines += _mapping_lines("Relation types mapped:", result["mapped_relation_types"], "line(s)")
    if result["dry_run"]:
        lines.append("Nothing written: pass --apply to import.")
    return lines


def _mapping_lines(title: str, mapped: dict[str, mcp_jsonl.Mapping], unit: str) -> list[str]:
    if not mapped:
        return []
    return [title] + [f"  {original} → {m['to']} ({m['count']} {unit})" for original, m in sorted(mapped.items())]


@command
@click.argument("directory")
@click.option("--min-reliability", type=float, default=0.0, show_default=True,
              help="Only recipes whose reliability (Wilson lower bound) is at least this.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def skills(directory: str, min_reliability: float, as_json: bool) -> None:
    """Export recipes (cuba_receta) as agent skills: one folder with a SKILL.md each in DIRECTORY."""
    with open_memory(load_model=False) as mem:
        result = skills_svc.export(mem, None, directory=directory, min_reliability=min_reliability)
    if as_json:
        print_json(result)
        return
    click.echo(f"{len(result['written'])} skill(s) written to {result['path']};"
               f" {result['skipped_below_reliability']} below reliability {result['min_reliability']}")
