"""`cuba-memorys hook merge-driver %O %A %B %P` (registered on the `hook` group of
cli/git_hooks.py; the merge itself is services/sync/merge.py).

git runs it for every bundle file both sides changed, when `.gitattributes` says
`<dir>/** merge=cuba-memorys` and `merge.cuba-memorys.driver` names this command. It opens no
memory (no store, no model): reading, merging and writing one file is all it does. Exit status
0 means the merge is in %A; anything else (a refusal is reported as one `error: …` line on
stderr by the command group) leaves %A as it was, and git keeps the conflict.
"""

from __future__ import annotations

import click

from cuba_memorys.cli.git_hooks import hook
from cuba_memorys.services.sync import merge

HELP = {"help_option_names": ["-h", "--help"]}


@hook.command(name="merge-driver", context_settings=HELP)
@click.argument("base", metavar="%O")
@click.argument("ours", metavar="%A")
@click.argument("theirs", metavar="%B")
@click.argument("path", metavar="%P")
def merge_driver(base: str, ours: str, theirs: str, path: str) -> None:
    """Three-way merge of one sync-bundle file, as git's merge driver.

    %O is the common ancestor (empty when the file was added on both sides), %A ours (the
    merge is written there), %B theirs, %P the file's path in the work tree, which decides how
    it merges. An observation changed on both sides keeps ours and records theirs in the file's
    "conflicts" list, which `sync import` opens as a conflict. A file it cannot read, or has no
    rule for, is refused: %A is left alone and git keeps its conflict.
    """
    done = merge.merge_driver(base, ours, theirs, path)
    if done["conflicts"]:
        click.echo(f"cuba-memorys: {path}: {done['conflicts']} observation(s) changed on both sides; ours kept,"
                   " theirs recorded under \"conflicts\" (imported as open conflicts)", err=True)
