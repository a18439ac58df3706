"""`cuba-memorys sync …`: the memory as a bundle that travels with the code through git
(services/sync/; the agents' side is cuba_sync): export, status, import, diff, conflicts,
resolve, and fetch from a peer."""

from __future__ import annotations

import contextlib
import os

import click

from cuba_memorys.cli.app import main, open_memory, print_json
from cuba_memorys.cli.progress import vectors_line, wait_for_vectors
from cuba_memorys.errors import Conflict, CubaError
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync import conflicts as conflicts_svc
from cuba_memorys.services.sync import export as sync_svc
from cuba_memorys.services.sync import hooks as hooks_svc
from cuba_memorys.services.sync import importer as import_svc

HELP = {"help_option_names": ["-h", "--help"]}
DIR_HELP = ("The bundle's folder (default: $CUBA_SYNC_DIR, else .cuba-memorys/ at the git repository's top, or"
            " .memory-industry/ when only that one is there).")
NOTICE_FD_HELP = ("When refused, also write one line (what, why, the way out) to this file descriptor: what the git"
                  " hooks pass, whose output goes to their log, so the line reaches git's terminal.")


@main.group(name="sync", context_settings=HELP)
def sync() -> None:
    """Sync the memory between machines through git: a bundle of JSON files in the repository."""


@sync.command(name="export", context_settings=HELP)
@click.option("--dir", "-d", "folder", default=None, help=DIR_HELP)
@click.option("--scope", default="project", show_default=True,
              help="project (the active project's rows only) or all.")
@click.option("--with-embeddings", is_flag=True, help="Also write embeddings.bin.zst (zstd-compressed vectors).")
@click.option("--unless-pending", is_flag=True,
              help="Write nothing while an import of the bundle in the folder was refused (e.g. by the wipe guard)"
                   " and those files still wait: what the post-commit hook runs, after its import.")
@click.option("--force", is_flag=True, help="Write even when the bundle would lose at least 25 observations (and over"
                                            " 10%) that this memory does not have and never deleted (an empty or"
                                            " new store exporting over a shared bundle is refused without it).")
@click.option("--notice-fd", type=int, default=None, help=NOTICE_FD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def export_cmd(folder: str | None, scope: str, with_embeddings: bool, unless_pending: bool, force: bool,
               notice_fd: int | None, as_json: bool) -> None:
    """Write the bundle: only files whose content changed are rewritten, so an export after no
    writes changes nothing (manifest.json included). A plain export overwrites a bundle that waits
    to be imported (another machine's): that is how to drop it on purpose."""
    with open_memory(load_model=False) as mem:  # export embeds nothing (vectors are read as stored)
        refused = sync_svc.refused_pending(mem, folder) if unless_pending else None
        if refused is not None:
            reason = (f"the import of the bundle in the folder was refused ({refused['refused_at']}:"
                      f" {refused['reason']}), and exporting now would overwrite it. Way out: {refused['way_out']}")
            if as_json:
                print_json({"action": "export", "dir": str(sync_svc.sync_dir(mem, folder)), "exported": False,
                            "reason": reason, "refused_import": refused})
            else:
                click.echo(f"Not exported: {reason}.")
            _tell(notice_fd, hooks_svc.notice(
                "the memory was not exported", "the import of the bundle waiting in the folder was refused"
                f" ({hooks_svc.notice_reason(refused['reason'])}), and an export would overwrite it",
                sync_svc.WAY_OUT[refused["kind"]]))
            return
        try:
            result = sync_svc.export(mem, None, dir=folder, scope=scope, with_embeddings=with_embeddings,
                                     force=force)
        except Conflict as exc:  # the export's wipe guard
            _tell(notice_fd, hooks_svc.notice("the memory export was refused", str(exc), hooks_svc.EXPORT_WAY_OUT))
            raise
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
@click.option("--dir", "-d", "folder", default=None, help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def status_cmd(folder: str | None, as_json: bool) -> None:
    """The bundle in the sync folder, whether it waits to be imported, recent imports and peer notices."""
    with open_memory(load_model=False) as mem:
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
    refused = result["last_refused_import"]
    if refused is not None and refused["still_pending"]:
        click.echo(f"The last import of this bundle was refused ({refused['refused_at']}): {refused['reason']}")
        click.echo(f"Way out: {refused['way_out']}.")


@sync.command(name="import", context_settings=HELP)
@click.option("--dir", "-d", "folder", default=None, help=DIR_HELP)
@click.option("--conflict", default="merge", show_default=True,
              help="merge (a later edit is taken, rows changed on both sides become conflicts), skip (only new"
                   " rows) or overwrite (incoming wins, ours kept in previous_versions).")
@click.option("--confirm", is_flag=True, help="Apply the deletions even when they would remove at least 25 rows and"
                                              " more than 10% of the observations.")
@click.option("--withhold-deletes", is_flag=True, help="Apply none of the bundle's deletions.")
@click.option("--if-pending", is_flag=True,
              help="Only when the folder's bundle waits to be imported and no import of it was refused already;"
                   " else say so and do nothing: what the post-commit hook runs.")
@click.option("--no-wait", is_flag=True, help="Do not wait for the imported rows' vectors before exiting (found by"
                                              " keyword at once; the next server start embeds them).")
@click.option("--notice-fd", type=int, default=None, help=NOTICE_FD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def import_cmd(folder: str | None, conflict: str, confirm: bool, withhold_deletes: bool, if_pending: bool,
               no_wait: bool, notice_fd: int | None, as_json: bool) -> None:
    """Import the bundle in the sync folder: once per bundle (by the hash of its files), in one
    transaction, with an undo file and an audit event. Then it waits, showing the progress, until
    the imported rows are embedded (Ctrl-C or --no-wait: the next server start embeds them)."""
    left = 0
    try:
        with open_memory(load_model=False) as mem:  # a hook imports after every commit: skip without a model
            if if_pending and _not_now(mem, folder, as_json):
                return
            skipped = import_svc.skip_reason(mem, folder)
            result = import_svc.import_bundle(mem, None, dir=folder) if skipped else None
        if result is None:
            with open_memory() as mem:
                result = import_svc.import_bundle(mem, None, dir=folder, conflict=conflict, confirm=confirm,
                                                  deletes="withhold" if withhold_deletes else None)
                left = wait_for_vectors(mem, wait=not no_wait and not if_pending)
    except CubaError as exc:  # kept for `sync status`: a hook's refusal has no one watching
        kind = "other"
        try:
            with open_memory(load_model=False) as mem:
                sync_svc.remember_refused_import(mem, folder, exc)
                kept = sync_svc.refused_pending(mem, folder)
                kind = kept["kind"] if kept is not None else kind
        except CubaError:  # e.g. the store cannot be opened: the import's own error is what matters
            pass
        _tell(notice_fd, hooks_svc.notice("the memory import was refused", str(exc), sync_svc.WAY_OUT[kind]))
        raise
    if as_json:
        print_json({**result, "vectors_pending": left})
        return
    if result["skipped"]:
        click.echo(f"Skipped {result['dir']}: {result.get('reason')}.")
        return
    click.echo(f"Imported {result['dir']} (from node {result['from_node']}): {result['rows_inserted']} rows"
               f" inserted, {result['rows_updated']} updated, {result['diverged']} diverged"
               f" ({result['conflicts_opened']} conflicts opened), {result['tombstones_applied']} deletions applied,"
               f" {result['tombstones_withheld']} withheld, {result['quarantined']} quarantined.")
    note = result.get("note")
    if note and not left:  # the rows the note says "are being embedded" were, before this command ended
        note = import_svc.without_queue_note(note)
    if note and note != ".":
        click.echo(note)
    if line := vectors_line(left):
        click.echo(line)
    if result.get("undo_file"):
        click.echo(f"Undo: cuba-memorys undo {result['undo_file']}")
    else:
        click.echo("Nothing changed: no undo file was needed.")


def _tell(fd: int | None, line: str) -> None:
    """Write ``line`` to the file descriptor a git hook passed (``--notice-fd``: git's stderr,
    while the command's own output goes to the hooks' log); a closed one is no reason to fail."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, (line + "\n").encode("utf-8", errors="replace"))


def _not_now(mem: Memory, folder: str | None, as_json: bool) -> bool:
    """--if-pending: whether there is nothing to import now (said so): no bundle waits, or one
    whose import was refused already waits for a person (trying again would load the model on
    every commit and be refused again)."""
    refused = sync_svc.refused_pending(mem, folder)
    if refused is not None:
        text = (f"the import of this bundle was refused already ({refused['refused_at']}), not tried again."
                f" Way out: {refused['way_out']}")
    elif not sync_svc.pending_import(mem, folder):
        text = "no bundle waits to be imported"
    else:
        return False
    if as_json:
        print_json({"action": "import", "dir": str(sync_svc.sync_dir(mem, folder)),
                    "skipped": True, "reason": text})
    else:
        click.echo(f"Nothing imported: {text}.")
    return True


@sync.command(name="diff", context_settings=HELP)
@click.option("--dir", "-d", "folder", default=None, help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def diff_cmd(folder: str | None, as_json: bool) -> None:
    """Compare the bundle in the sync folder with this memory, row by row; writes nothing."""
    with open_memory(load_model=False) as mem:
        result = conflicts_svc.diff(mem, None, dir=folder)
    if as_json:
        print_json(result)
        return
    click.echo(f"{result['common_count']} rows in both ({result['observations_differing']} observations differ),"
               f" {result['only_in_disk_count']} only in {result['dir']}, {result['only_in_db_count']} only in the"
               f" memory{'; already imported' if result['already_imported'] else ''}.")
    for side, rows in (("disk", result["only_in_disk"]), ("memory", result["only_in_db"])):
        for row in rows[:20]:
            click.echo(f"  only in {side}: {row['table']} {row['id']}")


@sync.command(name="conflicts", context_settings=HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def conflicts_cmd(as_json: bool) -> None:
    """The open conflicts: rows both sides changed to different text."""
    with open_memory(load_model=False) as mem:
        result = conflicts_svc.conflicts(mem, None)
    if as_json:
        print_json(result)
        return
    click.echo(f"{result['total_open']} open conflicts.")
    for c in result["conflicts"]:
        click.echo(f"- {c['id']} (observation {c['observation_id']}, from {c['their_node']}):\n"
                   f"    ours:   {c['ours'][:200]}\n    theirs: {c['theirs'][:200]}")


@sync.command(name="resolve", context_settings=HELP)
@click.argument("conflict_id")
@click.option("--keep", default="both", show_default=True,
              help="ours, theirs (their text replaces ours, ours kept in previous_versions) or both (ours stays,"
                   " theirs kept in previous_versions).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def resolve_cmd(conflict_id: str, keep: str, as_json: bool) -> None:
    """Settle one open conflict."""
    with open_memory() as mem:
        result = conflicts_svc.resolve(mem, None, id=conflict_id, keep=keep)
    if as_json:
        print_json(result)
        return
    click.echo(f"Resolved {result['id']}: kept {result['kept']}. {result['note']}")


# -- read-only peers (services/sync/peers.py) ---------------------------------------------------
@sync.command(name="fetch", context_settings=HELP)
@click.option("--peer", default="default", show_default=True,
              help="The peer's name (its inbox folder .peer-inbox/NAME; its url and last bundle are remembered).")
@click.option("--url", default=None, help="The peer's serve, http://HOST:PORT (default: the stored peer's, else"
                                          " $CUBA_PEER_URL).")
@click.option("--conflict", default="merge", show_default=True,
              help="merge (a later edit is taken, rows changed on both sides become conflicts), skip (only new"
                   " rows) or overwrite (incoming wins, ours kept in previous_versions).")
@click.option("--confirm", is_flag=True, help="Apply the deletions even when they would remove at least 25 rows and"
                                              " more than 10% of the observations.")
@click.option("--withhold-deletes", is_flag=True, help="Apply none of the bundle's deletions.")
@click.option("--no-wait", is_flag=True, help="Do not wait for the imported rows' vectors before exiting.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")
def fetch_cmd(peer: str, url: str | None, conflict: str, confirm: bool, withhold_deletes: bool,
              no_wait: bool, as_json: bool) -> None:
    """Pull a peer's bundle over HTTP with $CUBA_PEER_TOKEN and import it; stops after the first
    page when the peer's bundle is the one taken last time. Then it waits for the imported rows'
    vectors, showing the progress (Ctrl-C or --no-wait: the next server start embeds them)."""
    from cuba_memorys.services.sync import peers as peers_svc

    with open_memory() as mem:
        result = peers_svc.fetch(mem, None, peer=peer, url=url, conflict=conflict, confirm=confirm,
                                 deletes="withhold" if withhold_deletes else None)
        left = wait_for_vectors(mem, wait=not no_wait)
    if as_json:
        print_json({**result, "vectors_pending": left})
        return
    click.echo(f"Peer {result['peer']} ({result['url']}): {result['note']}")
    if line := vectors_line(left):
        click.echo(line)
    imported = result["imported"]
    if imported and not imported.get("skipped"):
        click.echo(f"{imported['rows_inserted']} rows inserted, {imported['rows_updated']} updated,"
                   f" {imported['diverged']} diverged, {imported['tombstones_applied']} deletions applied,"
                   f" {imported['tombstones_withheld']} withheld; {result['notices_closed']} notices closed.")
        if imported.get("undo_file"):
            click.echo(f"Undo: cuba-memorys undo {imported['undo_file']}")
