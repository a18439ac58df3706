"""cuba_ingesta: bulk writes — a list of observations, a text cut into typed paragraphs, or the
facts the client's own model extracts from a text (MCP sampling).

Every path ends in observations.store_batch, so rows are validated, deduplicated and written
exactly as cuba_cronica batch_add writes them, in one transaction, their vectors left to the
background embedding queue (``embedding: "pending"`` until it has stored them; see
services/embedding_queue.py). Unlike batch_add (all
or nothing), an invalid item does not fail the call: it is reported in ``invalid`` with its
index and the reason, and the valid ones are stored. ``ids`` has one entry per input item
(null for an invalid one). With ``untrusted`` every row is stored quarantined: kept, listed by
the entity, never returned by search until promoted; auto_extract then writes no relations.

parse types each paragraph by cue words (English and Spanish), the first family that matches
in this order: decision, lesson, solution, error, preference; otherwise fact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from cuba_memorys.errors import CubaError, InvalidInput
from cuba_memorys.judge.base import Judge
from cuba_memorys.models import (
    OBSERVATION_TYPES,
    RELATION_TYPES,
    TRUST_LEVELS,
)
from cuba_memorys.services import grounding as judging
from cuba_memorys.services import validate
from cuba_memorys.services.code import anchors as code_anchors
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.text import fold

MAX_ITEMS = 200
MIN_PARAGRAPH = 10  # characters; shorter paragraphs (headings, "ok") are not observations
MAX_TEXT_CHARS = 500_000  # parse
MAX_EXTRACT_CHARS = 20_000  # auto_extract: what one model prompt may carry
EXTRACT_MAX_TOKENS = 2000
EXTRACT_TIMEOUT = 60.0  # seconds the client's model gets; past it the answer is out_of_budget

CUES = {  # matched as whole words on the folded (lowercase, accent-free) paragraph
    "decision": r"decided|decide to|decision|we chose|chose to|opted|going with|agreed to|settled on"
                r"|decidimos|decidi|decidio|decision|elegimos|optamos|acordamos|vamos a usar",
    "lesson": r"lessons?|learned|learnt|takeaway|in hindsight|next time|turns out|turned out"
              r"|aprendimos|aprendi|leccion|lecciones|la proxima vez|resulto que|moraleja",
    "solution": r"fixed|fixes|the fix|solved|solution|resolved|workaround"
                r"|solucion|solucionado|solucionamos|arreglado|arreglamos|se resolvio|resuelto|corregido|corregimos",
    "error": r"errors?|exceptions?|failed|fails|failing|failure|crash|crashes|crashed|traceback|bug|broken|panic"
             r"|fallo|falla|fallan|excepcion|se rompe|roto|rota|se cae",
    "preference": r"prefer|prefers|preferred|preference|i like|we like|always use|never use|rather than"
                  r"|prefiero|preferimos|preferencia|me gusta|siempre usar|nunca usar",
}
CUE_PATTERNS = {kind: re.compile(rf"\b(?:{words})\b") for kind, words in CUES.items()}

EXTRACT_SYSTEM = ("You extract durable knowledge for a coding agent's long-term memory. Answer with one JSON"
                  " object and nothing else.")
EXTRACT_PROMPT = (
    "Text:\n{text}\n\nList the facts worth remembering from this text (decisions, lessons, errors and their"
    " solutions, preferences, facts about the code or the project), one short self-contained sentence each,"
    " under the entity (component, tool, person, concept) it is about{hint}. Answer"
    " {{\"facts\": [{{\"entity_name\": \"...\", \"content\": \"...\", \"observation_type\":"
    " \"fact|decision|lesson|error|solution|preference|context|tool_usage\"}}], \"relations\":"
    " [{{\"from\": \"entity\", \"to\": \"entity\","
    " \"relation_type\": \"uses|causes|implements|depends_on|related_to\"}}]}}."
    " Use an empty list when there is nothing to remember.")

Ask = Callable[[str, str, int, float], tuple[str, str | None]]  # (system, prompt, max_tokens, timeout) -> (text, model)


# -- items ---------------------------------------------------------------------------------
def _item(mem: Memory, raw: object, index: int, untrusted: bool,
          allow_secret: bool) -> observations.ObservationInput:
    where = f"items[{index}]"
    item = observations.parse_item(raw, where, allow_secret=allow_secret)
    assert isinstance(raw, dict)  # parse_item refused anything else
    trust = validate.choice(f"{where}.trust", raw.get("trust"), TRUST_LEVELS, default="trusted")
    item.trust = "quarantined" if untrusted else trust
    item.anchors = code_anchors.resolve(mem, f"{where}.anchors", raw.get("anchors"))
    return item


def _store(mem: Memory, client: str | None, raw_items: list, action: str, untrusted: bool,
           allow_secret: bool, embed_now: bool = False, progress: observations.Progress | None = None) -> dict:
    """Validate each item on its own, store the valid ones, report the others (``embed_now``:
    observations.store_batch's)."""
    valid, invalid = [], []
    for index, raw in enumerate(raw_items):
        try:
            valid.append((index, _item(mem, raw, index, untrusted, allow_secret)))
        except CubaError as exc:
            invalid.append({"index": index, "reason": str(exc)})
    stored: dict[str, Any] = (
        observations.store_batch(mem, client, [item for _, item in valid], embed_now, progress) if valid else
        {"added": 0, "deduplicated": 0, "reinforced": 0, "total_processed": 0, "ids": [],
         "embedding": observations.embedding_state(mem, [], [])})
    ids = [None] * len(raw_items)
    for (index, _), obs_id in zip(valid, stored["ids"]):
        ids[index] = obs_id
    answer = {"action": action, **stored, "ids": ids, "skipped_invalid": len(invalid), "invalid": invalid,
              "total_items": len(raw_items)}
    if untrusted:
        answer["trust"] = "quarantined"
        answer["note"] = ("Stored quarantined: kept, and listed by cuba_cronica action=list and cuba_eco"
                          " action=pending, but never returned by search until promoted with cuba_eco"
                          " action=promote.")
    return answer


def _items(items: object) -> list:
    if not isinstance(items, list) or not items:
        raise InvalidInput("items", "is required for action=ingest: a non-empty array of"
                                    " {entity_name, content, observation_type?, source?, trust?}")
    if len(items) > MAX_ITEMS:
        raise InvalidInput("items", f"has {len(items)} items", f"1..{MAX_ITEMS} per call")
    return items


def ingest(mem: Memory, client: str | None, *, items: object = None, untrusted: object = False,
           allow_secret: object = False, progress: observations.Progress | None = None) -> dict:
    untrusted = validate.flag("untrusted", untrusted, False)
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    return _store(mem, client, _items(items), "ingest", untrusted, allow_secret, progress=progress)


# -- parse ---------------------------------------------------------------------------------
def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks longer than MIN_PARAGRAPH characters."""
    blocks = (block.strip() for block in re.split(r"\n[ \t\r\f\v]*\n", text))
    return [block for block in blocks if len(block) > MIN_PARAGRAPH]


def classify(paragraph: str) -> str:
    folded = fold(paragraph)
    for kind, pattern in CUE_PATTERNS.items():
        if pattern.search(folded):
            return kind
    return "fact"


def parse(mem: Memory, client: str | None, *, entity_name: object = None, text: object = None,
          untrusted: object = False, allow_secret: object = False) -> dict:
    entity_name = validate.name("entity_name", entity_name).strip()
    text = validate.text("text", text, high=MAX_TEXT_CHARS)
    untrusted = validate.flag("untrusted", untrusted, False)
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    found = paragraphs(text)
    if not found:
        return {"action": "parse", "entity_name": entity_name, "parsed_count": 0,
                "note": f"no paragraph longer than {MIN_PARAGRAPH} characters (paragraphs are separated"
                        " by blank lines); nothing was stored."}
    if len(found) > MAX_ITEMS:
        raise InvalidInput("text", f"has {len(found)} paragraphs", f"1..{MAX_ITEMS} per call; split the text")
    items = [{"entity_name": entity_name, "content": p, "observation_type": classify(p)} for p in found]
    answer = _store(mem, client, items, "parse", untrusted, allow_secret)
    return {**answer, "entity_name": entity_name, "parsed_count": len(found),
            "parsed": [{"index": i, "observation_type": it["observation_type"], "content": it["content"]}
                       for i, it in enumerate(items)]}


# -- auto_extract ----------------------------------------------------------------------------
def _degraded(reason: str, note: str) -> dict:
    return {"action": "auto_extract", "extracted": 0, "added": 0, "degraded": True, "reason": reason, "note": note}


def _model_json(text: str) -> dict | None:
    found = re.search(r"\{.*\}", text or "", re.S)
    try:
        data = json.loads(found.group(0)) if found else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("facts", []), list) else None


def _fact_item(fact: object, hint: str | None) -> object:
    """A model's fact as an ingest item; an unknown type becomes fact (the model's label is a
    guess, the fact is what matters). Anything malformed is left for validation to report."""
    if not isinstance(fact, dict):
        return fact
    kind = fact.get("observation_type")
    return {"entity_name": fact.get("entity_name") or hint, "content": fact.get("content"),
            "observation_type": kind if kind in OBSERVATION_TYPES else "fact", "source": "inference"}


def _link(mem: Memory, client: str | None, relations: object) -> tuple[int, list[dict]]:
    """Write the model's relations between entities that exist; report the others."""
    linked, skipped = 0, []
    for index, rel in enumerate(relations if isinstance(relations, list) else []):
        rel = rel if isinstance(rel, dict) else {}
        kind = rel["relation_type"] if rel.get("relation_type") in RELATION_TYPES else "related_to"
        start, end = (mem.store.get_entity(str(rel.get(k) or rel.get(f"{k}_entity") or ""), mem.scope(client))
                      for k in ("from", "to"))
        if start is None or end is None or start.id == end.id:
            skipped.append({"index": index, "reason": "needs two different entities that exist in this project"})
            continue
        mem.store.upsert_relation(start.id, end.id, kind, False, mem.client(client).project_id)
        linked += 1
    return linked, skipped


def auto_extract(mem: Memory, client: str | None, ask: Ask | None = None, *, text: object = None,
                 entity_hint: object = None, untrusted: object = False, allow_secret: object = False,
                 supersede_conflicts: object = False, budget_secs: object = None,
                 sampler: Judge | None = None) -> dict:
    """Ask the client's model (``ask``; None when it cannot sample) for the text's facts and
    store them as ingest does (source inference), within ``budget_secs`` (1-60, default 60).
    With supersede_conflicts the judge chain (``sampler`` is the client's model as a judge)
    decides which stored facts the new ones replace (grounding.supersede_by)."""
    text = validate.text("text", text, high=MAX_EXTRACT_CHARS)
    clamps = validate.Clamps()
    budget = clamps.integer("budget_secs", budget_secs, 1, int(EXTRACT_TIMEOUT), int(EXTRACT_TIMEOUT))
    hint = validate.name("entity_hint", entity_hint) if entity_hint not in (None, "") else None
    hint = hint.strip() if hint else None
    untrusted = validate.flag("untrusted", untrusted, False)
    supersede = validate.flag("supersede_conflicts", supersede_conflicts, False)
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    if ask is None:
        return _degraded("no_backend", "The connected client cannot sample (no MCP sampling capability), so no"
                         " model is available to extract facts. Nothing was stored: use action=parse"
                         " (cue-word typing, no model) or action=ingest with the facts you extract.")
    hint_text = f" (when unsure, use the entity \"{hint}\")" if hint else ""
    try:
        answer, model = ask(EXTRACT_SYSTEM, EXTRACT_PROMPT.format(text=text, hint=hint_text),
                            EXTRACT_MAX_TOKENS, float(budget))
    except TimeoutError:
        return _degraded("out_of_budget", f"The client's model did not answer within {budget} s;"
                         " nothing was stored.")
    except Exception as exc:  # the client refused or failed the request
        return _degraded("backend_failed", f"The client's model could not be asked ({type(exc).__name__}:"
                         f" {exc}); nothing was stored.")
    data = _model_json(answer)
    if data is None:
        return _degraded("backend_failed", f"The client's model did not answer the JSON asked for: {answer[:120]!r};"
                         " nothing was stored.")
    facts = data.get("facts", [])
    # supersede_conflicts compares the new rows' vectors with their entity's: embedded before the write
    result = _store(mem, client, [_fact_item(f, hint) for f in facts[:MAX_ITEMS]], "auto_extract", untrusted,
                    allow_secret, embed_now=supersede)
    linked, skipped = (0, []) if untrusted else _link(mem, client, data.get("relations"))
    result.update({"extracted": len(facts[:MAX_ITEMS]), "relations_linked": linked, "backend": "sampling",
                   "model": model})
    if len(facts) > MAX_ITEMS:
        result["facts_beyond_limit"] = len(facts) - MAX_ITEMS  # not stored: extract from a shorter text
    if skipped:
        result["relations_skipped"] = skipped
    if supersede:
        result.update(_supersede(mem, client, sampler, result["ids"], untrusted))
    return clamps.note(result)


def _supersede(mem: Memory, client: str | None, sampler: Judge | None, ids: list, untrusted: bool) -> dict:
    if untrusted:  # quarantined input must not retire trusted memory
        return {"superseded": 0, "supersede_note": "untrusted facts never supersede stored ones"}
    retired = judging.supersede_by(mem, client, mem.judge_chain(sampler), [i for i in ids if i])
    return {"superseded": len(retired), "supersessions": retired}
