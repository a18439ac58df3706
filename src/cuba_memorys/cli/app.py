"""The `cuba-memorys` command group and what every verb shares.

Commands are thin: open the memory, call a service, print. Errors are converted once, here:
:class:`CubaGroup` turns a :class:`CubaError` raised by any command into ``error: …`` on stderr
and exit status 2, so no command catches them itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NoReturn

import click

from cuba_memorys import __version__
from cuba_memorys.config import Settings
from cuba_memorys.errors import CubaError
from cuba_memorys.services.memory import Memory


class CubaGroup(click.Group):
    """A command group whose commands' CubaErrors become one message and exit status 2, and
    whose Ctrl-C is one line and exit status 130 (the commands' own `finally` closed the store)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CubaError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except KeyboardInterrupt:
            click.echo(INTERRUPTED, err=True)
            ctx.exit(130)


INTERRUPTED = "cuba-memorys: interrupted"
# "cuba-memorys X", the shape of the original's "memory-industry X" (-V, --version and `version`)
VERSION_MESSAGE = "%(prog)s %(version)s"


def usage_error(message: str) -> NoReturn:
    """A misuse of the command line that is not any service's business (exit status 2)."""
    raise CubaError(message)


@contextmanager
def open_memory(check_model: bool = True, *, load_model: bool = True,
                overrides: dict[str, Any] | None = None) -> Iterator[Memory]:
    """The memory of this environment; ``load_model=False`` skips loading the embedding model
    (for commands that embed nothing: a git hook's export must be fast). ``overrides`` are
    settings a command's option replaces for this run (calibrate --samples: ood_fit_limit)."""
    settings = replace(Settings.from_env(), **(overrides or {}))
    if not load_model:
        settings = replace(settings, embed_model="none")
        check_model = False
    memory = Memory.open(settings, check_model=check_model)
    try:
        yield memory
    finally:
        memory.close()


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


@click.group(cls=CubaGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="cuba-memorys", message=VERSION_MESSAGE)
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

