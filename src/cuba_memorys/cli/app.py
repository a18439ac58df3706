"""The `cuba-memorys` command group and what every verb shares.

Commands are thin: open the memory, call a service, print. Errors from the package become a
one-line message on stderr and exit status 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import click

from cuba_memorys import __version__
from cuba_memorys.config import Settings
from cuba_memorys.errors import CubaError
from cuba_memorys.services.memory import Memory


def fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@contextmanager
def open_memory(check_model: bool = True):
    try:
        memory = Memory.open(Settings.from_env(), check_model=check_model)
    except CubaError as exc:
        fail(str(exc))
    try:
        yield memory
    except CubaError as exc:
        fail(str(exc))
    finally:
        memory.close()


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="cuba-memorys")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Long-term memory for AI coding agents (MCP server).

    With no command, serves MCP over stdio: register this program with your MCP client.
    """
    if ctx.invoked_subcommand is None:
        from cuba_memorys.server.stdio import run_stdio

        run_stdio()


def command(fn: Callable | None = None, *, name: str | None = None) -> Callable:
    """Register a subcommand of `main` (usable bare or with a name)."""
    decorator = main.command(name=name, context_settings={"help_option_names": ["-h", "--help"]})
    return decorator(fn) if fn is not None else decorator

