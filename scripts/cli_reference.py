"""Print docs/cli.md: every `cuba-memorys` verb with its --help, as the installed CLI shows it.

    .venv/bin/python scripts/cli_reference.py > docs/cli.md

tests/test_docs.py fails when docs/cli.md differs from this output, so the reference cannot go
stale. The help is rendered at a fixed width, so the page does not depend on the terminal.
"""

from __future__ import annotations

import click

from cuba_memorys.cli import main

WIDTH = 100


def help_of(command: click.Command, path: list[str]) -> str:
    ctx = click.Context(command, info_name=" ".join(path), terminal_width=WIDTH, max_content_width=WIDTH)
    return command.get_help(ctx)


def sections() -> list[str]:
    out = [help_of(main, ["cuba-memorys"])]
    for name in sorted(main.commands):
        command = main.commands[name]
        out.append(f"## cuba-memorys {name}\n\n```\n{help_of(command, ['cuba-memorys', name])}\n```")
        if isinstance(command, click.Group):
            for sub in sorted(command.commands):
                text = help_of(command.commands[sub], ["cuba-memorys", name, sub])
                out.append(f"## cuba-memorys {name} {sub}\n\n```\n{text}\n```")
    return out


def main_page() -> str:
    first, *rest = sections()
    head = ("# Command-line reference\n\n"
            "Generated from `--help` by `scripts/cli_reference.py` (tests/test_docs.py keeps it current).\n\n"
            f"```\n{first}\n```")
    return "\n\n".join([head, *rest]) + "\n"


if __name__ == "__main__":
    print(main_page(), end="")
