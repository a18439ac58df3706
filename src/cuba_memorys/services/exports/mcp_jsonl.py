"""The official MCP memory server's JSONL (memory.jsonl), out and in.

Lines are ``{"type":"entity","name","entityType","observations":[...]}`` and
``{"type":"relation","from","to","relationType"}``. Out: every entity of the scope with its live
observations, every relation. In: the whole file is parsed and checked first (a bad line is
reported with its number and nothing is written); with ``apply`` the observations are written as
one batch write (secrets refused, near-duplicates merged; embedded before the transaction, or by
the background queue as batch_add's rows are) and each relation through graph.relations.create,
then one audit event records the import, all in one transaction (a failure half-way leaves the
memory as it was). An entity type outside
ours becomes ``concept``; a relation type outside ours becomes ``related_to`` and the original is
kept as a context observation on the source entity ("mcp relation: <type> → <target>").

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from evaluated
annotations.)
"""

import json
from pathlib import Path
from typing import Any, TypedDict

from cuba_memorys.errors import Conflict, InvalidInput
from cuba_memorys.models import ENTITY_TYPES, RELATION_TYPES
from cuba_memorys.services import audit, validate
from cuba_memorys.services.graph import relations as relations_svc
from cuba_memorys.services.graph.entities import ensure_entity
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write

MAX_LINE_ERRORS = 20


class JsonlWritten(TypedDict):
    action: str
    path: str
    entities: int
    relations: int


class JsonlImported(TypedDict):
    action: str
    path: str
    dry_run: bool
    entities: int
    observations: int
    relations: int
    mapped_relation_types: dict[str, int]
    written: dict[str, int]


def export(mem: Memory, client: str | None, *, path: object, apply: bool = False) -> JsonlWritten:
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise InvalidInput("path", "no file given", "pass the JSONL file to write")
    target = Path(path).expanduser()
    if target.is_dir():
        raise InvalidInput("path", f"{target} is a directory", "pass a file name such as memory.jsonl")
    if target.exists() and not apply:
        raise Conflict(f"{target} exists: pass --apply to overwrite it")
    scope = mem.scope(client)
    entities = mem.store.offline_entities(scope)
    by_entity: dict[str, list[str]] = {e["id"]: [] for e in entities}
    for o in reversed(mem.store.offline_observations(scope)):  # oldest first, as the MCP server appends
        by_entity.setdefault(o["entity_id"], []).append(o["content"])
    relations = mem.store.offline_relations(scope)
    lines = [{"type": "entity", "name": e["name"], "entityType": e["type"], "observations": by_entity[e["id"]]}
             for e in sorted(entities, key=lambda e: e["name"])]
    lines += [{"type": "relation", "from": r["from"], "to": r["to"], "relationType": r["type"]} for r in relations]
    target.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return {"action": "export", "path": str(target.resolve()), "entities": len(entities), "relations": len(relations)}


def _text(line: dict, key: str, number: int) -> str:
    value = line.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"line {number}: '{key}' must be a non-empty string")
    return value.strip()


def _entity(line: dict, number: int, allow_secret: bool) -> dict[str, Any]:
    name = _text(line, "name", number)
    observations = line.get("observations", [])
    if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
        raise ValueError(f"line {number}: 'observations' must be a list of strings")
    kind = line.get("entityType")
    kind = kind.strip().lower() if isinstance(kind, str) else ""
    kept = [o.strip() for o in observations if o.strip()]
    for text in kept:
        try:
            validate.text("content", text)
            validate.no_secret("content", text, allow_secret)
        except Exception as exc:  # reported with its line; nothing is written
            raise ValueError(f"line {number}: {exc}") from None
    return {"name": name, "type": kind if kind in ENTITY_TYPES else "concept", "observations": kept}


def parse(text: str, allow_secret: bool = False) -> tuple[list[dict], list[dict]]:
    """(entities, relations) of a memory.jsonl; InvalidInput listing every bad line (by number)."""
    entities: list[dict] = []
    relations: list[dict] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            if not isinstance(line, dict):
                raise ValueError(f"line {number}: not a JSON object")
            if line.get("type") == "entity":
                entities.append(_entity(line, number, allow_secret))
            elif line.get("type") == "relation":
                relations.append({"from": _text(line, "from", number), "to": _text(line, "to", number),
                                  "type": _text(line, "relationType", number)})
            else:
                raise ValueError(f"line {number}: 'type' must be \"entity\" or \"relation\"")
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not JSON ({exc.msg})")
        except ValueError as exc:
            problems.append(str(exc))
    known = {e["name"] for e in entities}
    problems += [f"relation {r['from']} → {r['to']}: '{end}' is not an entity of the file"
                 for r in relations for end in (r["from"], r["to"]) if end not in known][:MAX_LINE_ERRORS]
    if problems:
        shown = "; ".join(problems[:MAX_LINE_ERRORS])
        more = f" (and {len(problems) - MAX_LINE_ERRORS} more)" if len(problems) > MAX_LINE_ERRORS else ""
        raise InvalidInput("path", f"{len(problems)} bad line(s): {shown}{more}",
                           "fix them and run again; nothing was written")
    return entities, relations


def import_file(mem: Memory, client: str | None, *, path: object, project: object = None,
                apply: bool = False) -> JsonlImported:
    if not isinstance(path, (str, Path)) or not Path(path).expanduser().is_file():
        raise InvalidInput("path", f"{path!r} is not a file", "pass the memory.jsonl to import")
    source = Path(path).expanduser()
    entities, relations = parse(source.read_text(encoding="utf-8"))
    mapped: dict[str, int] = {}
    for r in relations:
        if r["type"] not in RELATION_TYPES:
            mapped[r["type"]] = mapped.get(r["type"], 0) + 1
    answer: JsonlImported = {
        "action": "import", "path": str(source.resolve()), "dry_run": not apply, "entities": len(entities),
        "observations": sum(len(e["observations"]) for e in entities), "relations": len(relations),
        "mapped_relation_types": mapped, "written": {}}
    if not apply:
        return answer
    if project is not None:
        mem.set_project(client, mem.store.get_or_create_project(validate.name("project", project)))
    written = {"entities": 0, "observations": 0, "merged_or_skipped": 0, "relations": 0}
    items = [write.ObservationInput(e["name"], content, "fact", "user", None)
             for e in entities for content in e["observations"]]
    notes = [write.ObservationInput(r["from"], f"mcp relation: {r['type']} → {r['to']}", "context", "user", None)
             for r in relations if r["type"] not in RELATION_TYPES]
    # Embedded (what must be) before the transaction: the model never runs while the store is held.
    batch = write.prepare_batch(mem, client, items + notes, entity_types={e["name"]: e["type"] for e in entities})
    with mem.store.transaction():  # all or nothing: a failure half-way rolls every row back
        for e in entities:
            ensure_entity(mem, client, e["name"], e["type"])
            written["entities"] += 1
        for r in relations:
            kind = r["type"] if r["type"] in RELATION_TYPES else "related_to"
            relations_svc.create(mem, client, r["from"], r["to"], kind)
            written["relations"] += 1
        counts, _, bare = write.commit_batch(mem, client, write.PreparedBatch(items, batch.vectors[:len(items)],
                                                                              batch.queued))
        written["observations"] = counts["added"]
        written["merged_or_skipped"] = counts["deduplicated"] + counts["reinforced"]
        _, _, noted = write.commit_batch(mem, client, write.PreparedBatch(notes, batch.vectors[len(items):],
                                                                          batch.queued))
        audit.record(mem, client, "import_mcp_jsonl", {"path": str(source.resolve()), **written,
                                                       "mapped_relation_types": mapped})
    if batch.queued:
        mem.queue_embeddings("observation", bare + noted)
    answer["written"] = written
    return answer
