"""The official MCP memory server's JSONL (memory.jsonl), out and in.

Lines are ``{"type":"entity","name","entityType","observations":[...]}`` and
``{"type":"relation","from","to","relationType"}``. Out: every entity of the scope with its live
observations, every relation. In: the whole file is parsed and checked first (a bad line is
reported with its number and nothing is written); with ``apply`` the observations are written as
one batch write (secrets refused, near-duplicates merged; embedded before the transaction, or by
the background queue as batch_add's rows are) and each relation not stored yet through
graph.relations.create, then one audit event records the import, all in one transaction (a
failure half-way leaves the memory as it was). Importing the same file again changes nothing.

Our types are a closed set, so a foreign one is mapped and the original kept as a ``context``
observation, a type note: an entity type outside ours becomes ``concept`` and the entity gets
"mcp entity type: <type>"; a relation type outside ours becomes ``related_to`` and the source
entity gets "mcp relation: <type> → <target>" (one per original type: two foreign types between
one pair share one related_to relation). An observation is the least surprising place: it is
what the agent reads about the entity, sync and every export carry it, and no schema change is
needed. Export reads the notes back: the entity's line has its original entityType, the pair's
related_to relation becomes one line per original type, and the notes themselves are left out
of the observations, so export(import(file)) gives the file back.

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from evaluated
annotations.)
"""

import json
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from cuba_memorys.errors import Conflict, InvalidInput
from cuba_memorys.models import ENTITY_TYPES, RELATION_TYPES, Scope
from cuba_memorys.services import audit, validate
from cuba_memorys.services.graph import relations as relations_svc
from cuba_memorys.services.graph.entities import ensure_entity
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write

MAX_LINE_ERRORS = 20
ENTITY_NOTE = "mcp entity type: "
RELATION_NOTE = "mcp relation: "
ARROW = " → "
NOTE_TYPE = "context"  # an import's type note: a user's fact that happens to read alike is not one
LOOKUP_CHUNK = 500  # entity ids per relations_of query (under every SQL parameter limit)
ALL_ROWS = 1_000_000  # observations_of's limit when every row of an entity must be seen


class JsonlWritten(TypedDict):
    action: str
    path: str
    entities: int
    relations: int  # relation lines written (a related_to relation holding n original types gives n)
    original_types_restored: int  # entityType / relationType lines given back from an import's type notes
    quarantined_left_out: int  # untrusted rows: the format cannot say so, and an import would trust them


class Mapping(TypedDict):
    to: str  # our type
    count: int  # entities (relation lines) of the file with that type


class JsonlImported(TypedDict):
    action: str
    path: str
    dry_run: bool
    entities: int
    observations: int
    relations: int  # relation lines
    relation_rows: int  # relations they make: lines whose types both became related_to share one
    type_notes: int  # context observations keeping the original types (before those stored already)
    mapped_entity_types: dict[str, Mapping]
    mapped_relation_types: dict[str, Mapping]
    written: dict[str, int]


# -- export ------------------------------------------------------------------------------------
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
    rows, quarantined = _trusted_rows(mem, scope)
    kinds, relation_notes, used = _read_notes(rows)
    relations, restored = _relation_lines(mem.store.offline_relations(scope), relation_notes, used)
    by_entity: dict[str, list[str]] = {e["id"]: [] for e in entities}
    for o in rows:
        if o["id"] not in used:
            by_entity.setdefault(o["entity_id"], []).append(o["content"])
    lines = [{"type": "entity", "name": e["name"], "entityType": kinds.get(e["id"], e["type"]),
              "observations": by_entity[e["id"]]} for e in sorted(entities, key=lambda e: e["name"])]
    target.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines + relations),
                      encoding="utf-8")
    return {"action": "export", "path": str(target.resolve()), "entities": len(entities),
            "relations": len(relations), "original_types_restored": len(kinds) + restored,
            "quarantined_left_out": quarantined}


def _trusted_rows(mem: Memory, scope: Scope) -> tuple[list[dict], int]:
    """The live observations to write, oldest first (as the MCP server appends), and how many
    quarantined ones were left out: the format has no trust, so written out they would come
    back trusted."""
    rows = list(reversed(mem.store.offline_observations(scope)))
    kept = [o for o in rows if o["trust"] != "quarantined"]
    return kept, len(rows) - len(kept)


def _read_notes(rows: list[dict]) -> tuple[dict[str, str], dict[tuple[str, str], list[tuple[str, str]]], set[str]]:
    """The type notes an import wrote: the original entity type by entity id (the newest note
    wins), the original relation types by (source entity id, target name) as (type, note id),
    and the ids of the entity type notes (left out of the observations)."""
    kinds: dict[str, str] = {}
    relations: dict[tuple[str, str], list[tuple[str, str]]] = {}
    used: set[str] = set()
    for o in rows:
        if o["type"] != NOTE_TYPE:
            continue
        text = o["content"]
        if text.startswith(ENTITY_NOTE) and text[len(ENTITY_NOTE):].strip():
            kinds[o["entity_id"]] = text[len(ENTITY_NOTE):].strip()
            used.add(o["id"])
        elif text.startswith(RELATION_NOTE) and ARROW in text:
            kind, _, target = text[len(RELATION_NOTE):].partition(ARROW)
            if kind.strip() and target.strip():
                relations.setdefault((o["entity_id"], target.strip()), []).append((kind.strip(), o["id"]))
    return kinds, relations, used


def _relation_lines(stored: list[dict], notes: dict[tuple[str, str], list[tuple[str, str]]],
                    used: set[str]) -> tuple[list[dict], int]:
    """One line per stored relation, except a related_to relation with type notes: one line per
    original type noted (its notes are added to ``used``). A note whose relation is gone is no
    type of anything now: it stays an observation. Returns the lines and how many were restored."""
    lines: list[dict] = []
    restored = 0
    for r in stored:
        noted = notes.get((r["from_id"], r["to"]), []) if r["type"] == "related_to" else []
        kinds = list(dict.fromkeys(kind for kind, _ in noted)) or [r["type"]]
        used.update(note_id for _, note_id in noted)
        restored += len(kinds) if noted else 0
        lines += [{"type": "relation", "from": r["from"], "to": r["to"], "relationType": k} for k in kinds]
    return lines, restored


# -- parse -------------------------------------------------------------------------------------
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
    original = line.get("entityType")
    original = original.strip() if isinstance(original, str) else ""
    kept = [o.strip() for o in observations if o.strip()]
    for text in kept:
        try:
            validate.text("content", text)
            validate.no_secret("content", text, allow_secret)
        except Exception as exc:  # reported with its line; nothing is written
            raise ValueError(f"line {number}: {exc}") from None
    ours = original.lower() if original.lower() in ENTITY_TYPES else "concept"
    return {"name": name, "type": ours, "original_type": original, "observations": kept}


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


# -- import ------------------------------------------------------------------------------------
def _ours(relation_type: str) -> str:
    return relation_type if relation_type in RELATION_TYPES else "related_to"


def _mapped(pairs: list[tuple[str, str]]) -> dict[str, Mapping]:
    """{original: {to, count}} for the (original, ours) pairs that differ."""
    out: dict[str, Mapping] = {}
    for original, ours in pairs:
        if original and original != ours:
            out.setdefault(original, {"to": ours, "count": 0})["count"] += 1
    return out


def _type_notes(entities: list[dict], relations: list[dict]) -> list[write.ObservationInput]:
    """The context observations keeping the file's original types, once each. When a pair has a
    foreign type, its native related_to (if the file has one too) is noted as well: export gives
    a noted relation back as its notes' types only."""
    texts = [(e["name"], ENTITY_NOTE + e["original_type"]) for e in entities
             if e["original_type"] and e["original_type"] != e["type"]]
    foreign = {(r["from"], r["to"]) for r in relations if r["type"] not in RELATION_TYPES}
    texts += [(r["from"], f"{RELATION_NOTE}{r['type']}{ARROW}{r['to']}") for r in relations
              if r["type"] not in RELATION_TYPES or (r["type"] == "related_to" and (r["from"], r["to"]) in foreign)]
    return [write.ObservationInput(name, text, NOTE_TYPE, "user", None, dedup=False)
            for name, text in dict.fromkeys(texts)]


def import_file(mem: Memory, client: str | None, *, path: object, project: object = None,
                apply: bool = False, progress: write.Progress | None = None) -> JsonlImported:
    if not isinstance(path, (str, Path)) or not Path(path).expanduser().is_file():
        raise InvalidInput("path", f"{path!r} is not a file", "pass the memory.jsonl to import")
    source = Path(path).expanduser()
    entities, relations = parse(source.read_text(encoding="utf-8"))
    notes = _type_notes(entities, relations)
    answer: JsonlImported = {
        "action": "import", "path": str(source.resolve()), "dry_run": not apply, "entities": len(entities),
        "observations": sum(len(e["observations"]) for e in entities), "relations": len(relations),
        "relation_rows": len({(r["from"], r["to"], _ours(r["type"])) for r in relations}),
        "type_notes": len(notes),
        "mapped_entity_types": _mapped([(e["original_type"], e["type"]) for e in entities]),
        "mapped_relation_types": _mapped([(r["type"], _ours(r["type"])) for r in relations]), "written": {}}
    if not apply:
        return answer
    if project is not None:
        mem.set_project(client, mem.store.get_or_create_project(validate.name("project", project)))
    items = [write.ObservationInput(e["name"], content, "fact", "user", None)
             for e in entities for content in e["observations"]]
    # Embedded (what must be) before the transaction: the model never runs while the store is held.
    batch = write.prepare_batch(mem, client, items + notes, entity_types={e["name"]: e["type"] for e in entities},
                                progress=progress)
    with mem.store.transaction():  # all or nothing: a failure half-way rolls every row back
        ids = {e["name"]: ensure_entity(mem, client, e["name"], e["type"]).id for e in entities}
        written = _write_relations(mem, client, relations, ids)
        first = write.PreparedBatch(items, batch.vectors[:len(items)], batch.queued)
        counts, with_vector, bare = write.commit_batch(mem, client, first, progress)
        fresh, fresh_vectors = _not_stored(mem, client, notes, batch.vectors[len(items):], ids)
        _, noted_with_vector, noted = write.commit_batch(mem, client,
                                                         write.PreparedBatch(fresh, fresh_vectors, batch.queued))
        written = {"entities": len(ids), "observations": counts["added"],
                   "merged_or_skipped": counts["deduplicated"] + counts["reinforced"], **written,
                   "type_notes": len(fresh), "type_notes_already_stored": len(notes) - len(fresh)}
        audit.record(mem, client, "import_mcp_jsonl", {"path": str(source.resolve()), **written,
                                                       "mapped_entity_types": answer["mapped_entity_types"],
                                                       "mapped_relation_types": answer["mapped_relation_types"]})
    write.hand_over(mem, batch, with_vector + noted_with_vector, bare + noted)
    answer["written"] = written
    return answer


def _write_relations(mem: Memory, client: str | None, relations: list[dict], ids: dict[str, str]) -> dict[str, int]:
    """Create the file's relations that are not stored yet, each once: creating a stored one
    would reinforce it, and importing the same file twice must change nothing."""
    stored: set[tuple[str, str, str]] = set()
    wanted = list(dict.fromkeys(ids.values()))
    for start in range(0, len(wanted), LOOKUP_CHUNK):
        stored.update((r["from_entity_id"], r["to_entity_id"], r["relation_type"])
                      for r in mem.store.relations_of(wanted[start:start + LOOKUP_CHUNK]))
    created = 0
    keys = list(dict.fromkeys((r["from"], r["to"], _ours(r["type"])) for r in relations))
    for source, target, kind in keys:
        if (ids[source], ids[target], kind) not in stored:
            relations_svc.create(mem, client, source, target, kind)
            created += 1
    return {"relations": created, "relations_already_present": len(keys) - created}


def _not_stored(mem: Memory, client: str | None, notes: list[write.ObservationInput],
                vectors: list[np.ndarray | None], ids: dict[str, str]
                ) -> tuple[list[write.ObservationInput], list[np.ndarray | None]]:
    """The type notes (with their vectors) whose text their entity does not hold yet: they are
    written without the near-duplicate merge, so the very same text is what makes one stored."""
    held: dict[str, set[str]] = {}
    kept: list[write.ObservationInput] = []
    kept_vectors: list[np.ndarray | None] = []
    for note, vector in zip(notes, vectors):
        entity_id = ids[note.entity_name]
        if entity_id not in held:  # every row of the entity: a note is low in importance, last in the list
            rows = mem.store.observations_of(entity_id, mem.scope(client), limit=ALL_ROWS)
            held[entity_id] = {o.content for o in rows if o.observation_type == NOTE_TYPE and o.trust == "trusted"}
        if note.content not in held[entity_id]:
            kept.append(note)
            kept_vectors.append(vector)
    return kept, kept_vectors
