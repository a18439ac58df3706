"""cuba_forget: an entity and everything about it gone, everywhere, in one transaction.

Gone means: no row (the entity, its observations, episodes, relations, facts, aliases and the
judgments of its observations; the errors, verify-log rows, working-memory notes,
compaction snapshots and reminders that name it: storage/sql/forget.py; work sessions that
name it keep their other contents but lose its mention), no lexical index
entry, no vector in the vector index or the embedding cache (CUBA_EMBED_CACHE), and no
readable copy left in freed space where the backend can promise it (``scrub_freed_space``:
SQLite zeroes and truncates; PostgreSQL vacuums). The audit log keeps that a forget happened
(the entity's id and the counts), never the name or any content.

Undo files (CUBA_UNDO_DIR) holding rows of the entity are removed too: they are copies.

Not touched: observations of *other* entities whose text mentions the name (they are about
those entities; the answer's note says how to find them), procedures, and audit events that
other actions recorded earlier (the log cannot be changed; events carry ids, not content).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from cuba_memorys.embed.cache import CachedEmbedder
from cuba_memorys.errors import CubaError, InvalidInput, NotFound
from cuba_memorys.models import ID_PATTERN, MAX_NAME_CHARS, Entity, Scope
from cuba_memorys.services import audit, validate
from cuba_memorys.services.graph.entities import find_entity
from cuba_memorys.services.memory import Memory, passage_text
from cuba_memorys.storage.rows import ForgetCounts

log = logging.getLogger(__name__)
EVERY_ROW = 1_000_000_000  # no limit: every observation and episode of the entity
GDPR = ("Erased as the right to erasure (GDPR art. 17) asks: the entity, its observations, episodes, relations,"
        " facts and aliases, and the errors, verify-log rows, notes, snapshots and reminders that name it, were"
        " deleted in one transaction, with their search-index entries and vectors; the work sessions that named it"
        " were purged of it (their name, goals and summary). The audit log"
        " records that a forget happened (the entity's id and these counts), never the name or any content.")
FREED = {
    "sqlite": "zeroed: deleted cells and pages are overwritten (secure_delete), the full-text indexes were"
              " rewritten without the deleted rows, and the write-ahead log was checkpointed and truncated.",
    "postgresql": "vacuumed: the dead rows and their index entries were removed. Their bytes can remain in the"
                  " table files and in WAL segments until PostgreSQL reuses the space; VACUUM FULL rewrites the"
                  " tables when that matters.",
}
NOTE = ("Observations of other entities that mention the name are kept (they belong to those entities): find them"
        " with cuba_faro and correct or delete them.")


def forget(mem: Memory, client: str | None, *, entity_name: object, confirm: object = None) -> dict[str, Any]:
    name = validate.text("entity_name", entity_name, high=MAX_NAME_CHARS)
    if not validate.flag("confirm", confirm, False):
        raise InvalidInput("confirm", "must be true: forgetting deletes the entity and everything that names it,"
                                      " and cannot be undone (no undo file is kept). Nothing was deleted",
                           "true, to forget it")
    entity = _entity(mem, client, name)
    _refuse_if_shared(mem, client, entity)
    copies, copied = _undo_copies(mem, entity)
    # the embedding cache's keys, read while the rows exist (and from undo files: deleted rows)
    passages = list(dict.fromkeys(_passages(mem, entity) + copied))
    with mem.store.transaction():
        counts = mem.store.forget_entity(entity.id, entity.name, mem.scope(client))
        audit_id = audit.record(mem, client, "memory.forget", {"entity_id": entity.id, "counts": dict(counts)})
    mem.reload_sessions()  # a client's open session may have been renamed
    cached = _uncache(mem, passages)
    undone = _remove(copies)
    return {
        "action": "forget", "entity_name": entity.name, "entity_deleted": True,
        "cascaded": {"observations": counts["observations"], "episodes": counts["episodes"],
                     "relations": "via FK CASCADE", "errors_purged": counts["errors_purged"],
                     "sessions_purged": counts["sessions_purged"]},
        "also_purged": {**_also_purged(counts, cached), "undo_files": undone},
        "gdpr_compliance": GDPR, "freed_space": _scrub(mem), "audit_id": audit_id, "note": NOTE,
    }


def _entity(mem: Memory, client: str | None, name: str) -> Entity:
    try:
        return find_entity(mem, client, name)
    except NotFound:
        raise NotFound(f"Entity '{name}' not found, so nothing was forgotten.",
                       hint="Names are exact and per project: check it with cuba_alma action=get, and the active"
                            " project with cuba_proyecto action=current.") from None


def _refuse_if_shared(mem: Memory, client: str | None, entity: Entity) -> None:
    """With a project active, refuse to forget an entity that has rows beyond it (an entity of no
    project, or rows other projects wrote on it): deleting the entity cascades to every one of them,
    past the caller's scope and, on PostgreSQL, past row-level security."""
    scope = mem.scope(client)
    if scope.unrestricted:
        return
    # Counted as the store's owner would see them: the caller's own view would miss exactly the
    # rows the cascade would reach. Only a count leaves this block.
    with mem.store.bind_project(None), mem.store.bind_access(None, None):
        rows = [o.project_id for o in mem.store.observations_of(entity.id, Scope(), include_superseded=True,
                                                                 limit=EVERY_ROW)]
        rows += [e["project_id"] for e in mem.store.episodes_of(entity.id, Scope(), EVERY_ROW)]
    beyond = sum(1 for project in [entity.project_id, *rows] if project != scope.project_id)
    if beyond:
        raise InvalidInput("entity_name", f"'{entity.name}' is shared beyond the active project ({beyond} of its rows,"
                                          " or the entity itself, belong to another project or to none); forgetting"
                                          " it would delete those too. Nothing was deleted",
                           "forget it with no project active (cuba_proyecto action=switch name='*'), which sees"
                           " every row it would delete")


def _passages(mem: Memory, entity: Entity) -> list[str]:
    """Every passage text of the entity that may have been embedded: each observation (and each
    earlier version of it) and each episode, in the form services/memory.py embeds them."""
    if not isinstance(mem.embedder, CachedEmbedder):
        return []
    texts: list[str] = []
    for obs in mem.store.observations_of(entity.id, Scope(), include_superseded=True, limit=EVERY_ROW):
        texts.append(obs.content)
        texts.extend(v["content"] for v in obs.previous_versions or [] if isinstance(v, dict) and v.get("content"))
    texts.extend(e["content"] for e in mem.store.episodes_of(entity.id, Scope(), EVERY_ROW))
    # rows a dedupe merge moved here were embedded under the name they had then (now an alias)
    names = [entity.name, *mem.store.aliases_of(entity.id)]
    return [passage_text(name, entity.entity_type, t) for name in names for t in texts]


def _uncache(mem: Memory, passages: list[str]) -> int:
    embedder = mem.embedder
    return embedder.forget_passages(passages) if isinstance(embedder, CachedEmbedder) and passages else 0


def _undo_copies(mem: Memory, entity: Entity) -> tuple[list[Path], list[str]]:
    """The undo files that hold rows of the entity — an undo file is a full copy of what a
    delete or a merge changed — found by the ids of the entity and of its rows (rows a dedupe
    merge moved here keep their ids, while the file names the entity they came from), and the
    passages of the observations and episodes in them (the embedding cache may hold them)."""
    folder = mem.settings.undo_dir
    ids = {entity.id} | _row_ids(mem, entity)
    paths: list[Path] = []
    passages: list[str] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            raw = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not ids & set(ID_PATTERN.findall(raw)):
            continue
        paths.append(path)
        try:
            document = json.loads(raw)
        except ValueError:
            continue
        passages += _copied_passages(document, entity, ids)
    return paths, passages


def _row_ids(mem: Memory, entity: Entity) -> set[str]:
    observations = mem.store.observations_of(entity.id, Scope(), include_superseded=True, limit=EVERY_ROW)
    return {o.id for o in observations} | {e["id"] for e in mem.store.episodes_of(entity.id, Scope(), EVERY_ROW)}


def _copied_passages(document: Any, entity: Entity, ids: set[str]) -> list[str]:
    """Passages of the entity's observations and episodes in an undo file, each under the name of
    the entity it belonged to when the file was written."""
    parts = document.get("snapshots", []) if isinstance(document, dict) else []
    names = {r.get("id"): (r.get("name"), r.get("entity_type")) for p in parts if p.get("table") == "entities"
             for r in p.get("rows", [])}
    found = []
    for part in parts:
        if part.get("table") not in ("observations", "episodes"):
            continue
        for row in part.get("rows", []):
            if (row.get("id") in ids or row.get("entity_id") == entity.id) and isinstance(row.get("content"), str):
                name, kind = names.get(row.get("entity_id"), (entity.name, entity.entity_type))
                found.append(passage_text(name or entity.name, kind or entity.entity_type, row["content"]))
    return found


def _remove(paths: list[Path]) -> int:
    removed = 0
    for path in paths:
        try:
            path.unlink()
            removed += 1
        except OSError:  # the forget is committed: say so in the log rather than fail the answer
            log.warning("could not remove the undo file %s, which holds rows of a forgotten entity", path)
    return removed


def _also_purged(counts: ForgetCounts, cached: int) -> dict[str, int]:
    return {"relations": counts["relations"], "facts": counts["facts"], "aliases": counts["aliases"],
            "judgments": counts["judgments_purged"], "verify_log": counts["verify_log_purged"],
            "notes": counts["notes_purged"], "snapshots": counts["snapshots_purged"],
            "triggers": counts["triggers_purged"], "embedding_cache": cached}


def _scrub(mem: Memory) -> str:
    """Scrub freed space after the commit; the forget stands even when this fails, so the
    answer says what did not happen instead of failing the call."""
    try:
        mem.store.scrub_freed_space()
    except CubaError as exc:
        return f"not scrubbed ({exc}); the rows are deleted, but copies may remain in freed space."
    return FREED.get(mem.store.backend, "scrubbed")
