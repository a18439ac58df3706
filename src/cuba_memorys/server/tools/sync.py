"""Sync tool: cuba_sync (the memory as a bundle that travels with the code through git).

A signature only: it is the tool's input schema. The catalogue routes every action to its
service (services/sync/): export and status (export.py), import, diff, conflicts and resolve
(importer.py, conflicts.py), the peer verbs pull, notify and fetch (peers.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.server.tools.schema import Choice


def cuba_sync(
    action: Annotated[Literal["export", "import", "diff", "status", "pull", "notify", "fetch", "conflicts",
                              "resolve"], Field()],
    dir: Opt[str | None, Field(description="export/import/diff/status: the bundle's folder (default:"
                                           " $CUBA_SYNC_DIR, else .cuba-memorys/ at the git repository's top,"
                                           " else in the current directory)")] = None,
    scope: Opt[str | None, Choice(("project", "all"), nullable=True),
               Field(description="export: project (the active project's rows only; default) or all")] = None,
    with_embeddings: Opt[bool | None, Field(description="export/pull: also carry embeddings.bin.zst"
                                                        " (zstd-compressed vectors; default false on export,"
                                                        " true on pull)")] = None,
    conflict: Opt[str | None, Choice(("merge", "skip", "overwrite"), nullable=True),
                  Field(description="import/fetch: merge (default: local content wins unless the incoming row"
                                    " is a later edit of it; rows changed on both sides are reported as"
                                    " diverged and opened as conflicts), skip (only new rows; differing ones"
                                    " reported and opened as conflicts) or overwrite (incoming wins, the old"
                                    " text kept in previous_versions)")] = None,
    confirm: Opt[bool, Field(description="import/fetch: apply the bundle's deletions even when they would delete"
                                         " at least 25 rows and more than 10% of the local observations")] = False,
    force: Opt[bool, Field(description="export: write even when the bundle would lose at least 25 observations"
                                       " (and over 10%) that this memory does not have and never deleted (an"
                                       " empty or new store over a shared bundle)")] = False,
    deletes: Opt[str | None, Choice(("apply", "withhold"), nullable=True),
                 Field(description="import/fetch: apply (default) or withhold every deletion the bundle"
                                   " carries (reported as tombstones_withheld)")] = None,
    id: Opt[str | None, Field(description="resolve: the conflict's id (from conflicts)")] = None,
    keep: Opt[str | None, Choice(("ours", "theirs", "both"), nullable=True),
              Field(description="resolve: ours (the local text stays), theirs (the incoming text replaces it,"
                                " ours kept in previous_versions) or both (default: the local text stays and"
                                " theirs is kept in previous_versions; nothing is lost)")] = None,
    peer: Opt[str | None, Field(description="fetch: the peer's name (default \"default\")")] = None,
    url: Opt[str | None, Field(description="fetch: the peer's base URL (default: the stored peer's, else"
                                           " $CUBA_PEER_URL)")] = None,
    summary: Opt[str | None, Field(description="notify: what changed, at most 2000 characters")] = None,
    node_id: Opt[str | None, Field(description="notify: the announcing node's id")] = None,
    node_name: Opt[str | None, Field(description="notify: the announcing node's name")] = None,
    manifest_hash: Opt[str | None, Field(description="notify: the manifest hash of the bundle announced; pull:"
                                                     " the hash of the first page (a change mid-way aborts)")] = None,
    limit: Opt[int | None, Field(description="pull: at most this many files a page (≥ 1; a page also stops at"
                                             " 3 MiB)")] = None,
    offset: Opt[int, Field(description="pull: the first file of the page (from next_offset)")] = 0,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
