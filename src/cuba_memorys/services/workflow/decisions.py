"""cuba_decreto: record, query and list decisions.

A decision is an observation of type ``decision`` (the original has no decisions table), so
it is searchable with cuba_faro like any other fact, deduplicated on write and embedded.

Where it lives: on one entity per project named ``architecture_decisions``, type concept, as
the original keeps them (created in the active project when missing), so a bundle from the
original and ``cuba_alma get architecture_decisions`` find them where this records them.
Earlier versions used an entity named ``decisions``: legacy_decisions.py moves it, and keeps
that name as an alias. An entity per title would put one node per decision into the graph,
and the title is already the first line of the text. query and list read every decision
observation in scope, including ones written with cuba_cronica observation_type=decision on
any entity.

Decisions never decay: NEVER_DECAYS is the list a decay or prune pass must skip (the
original exempts decisions and lessons from both).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import MAX_CONTENT_CHARS, MAX_NAME_CHARS
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.workflow import legacy_decisions
from cuba_memorys.storage.rows import TypedObservationRow
from cuba_memorys.text import trigrams

# Importing legacy_decisions also registers its move of the earlier versions' entity on every open.
DECISIONS_ENTITY, LEGACY_DECISIONS_ENTITY = legacy_decisions.DECISIONS_ENTITY, legacy_decisions.LEGACY_DECISIONS_ENTITY
NEVER_DECAYS = ("decision", "lesson")
QUERY_LIMIT = 10
MIN_SIMILARITY = 0.2
LIST_LIMIT = 20
# How many of the newest decisions a query compares against (each project has far fewer).
QUERY_POOL = 2000


def _fields(title: object, context: object, alternatives: object, chosen: object,
            rationale: object, allow_secret: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "title": validate.text("title", "Untitled" if title is None or title == "" else title,
                               high=MAX_NAME_CHARS).strip(),
        "context": validate.optional_text("context", context),
        "alternatives": validate.string_list("alternatives", alternatives),
        "chosen": validate.optional_text("chosen", chosen),
        "rationale": validate.optional_text("rationale", rationale),
    }
    for i, alternative in enumerate(fields["alternatives"]):
        validate.text(f"alternatives[{i}]", alternative, high=MAX_NAME_CHARS * 5)
    # A call naming nothing but the default title is a mistake (often a misspelt parameter),
    # not a decision worth keeping.
    if fields["title"] == "Untitled" and not any(fields[k] for k in ("context", "chosen", "rationale")):
        raise InvalidInput("chosen", "a decision needs a title, context, chosen or rationale")
    for param in ("title", "context", "chosen", "rationale"):
        if fields[param]:
            validate.no_secret(param, fields[param], allow_secret)
    for i, alternative in enumerate(fields["alternatives"]):
        validate.no_secret(f"alternatives[{i}]", alternative, allow_secret)
    return fields


def decision_text(fields: dict) -> str:
    """One readable block: the title first, so list and search rows say what was decided."""
    lines = [f"Decision: {fields['title']}"]
    if fields["context"]:
        lines.append(f"Context: {fields['context']}")
    if fields["alternatives"]:
        lines.append("Alternatives: " + "; ".join(fields["alternatives"]))
    if fields["chosen"]:
        lines.append(f"Chosen: {fields['chosen']}")
    if fields["rationale"]:
        lines.append(f"Rationale: {fields['rationale']}")
    return "\n".join(lines)


def record(mem: Memory, client: str | None, *, title: object = None, context: object = None,
           alternatives: object = None, chosen: object = None, rationale: object = None,
           allow_secret: bool = False) -> dict:
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    fields = _fields(title, context, alternatives, chosen, rationale, allow_secret)
    content = decision_text(fields)
    if len(content) > MAX_CONTENT_CHARS:
        longest = max(("context", "rationale", "chosen", "alternatives"),
                      key=lambda k: len(str(fields[k] or "")))
        raise InvalidInput(longest, f"the decision would be {len(content)} characters",
                           f"title, context, alternatives, chosen and rationale together ≤ {MAX_CONTENT_CHARS}")
    # Secrets were checked per field above, naming the field; the observation gate is not repeated.
    added = observations.add(mem, client, entity_name=DECISIONS_ENTITY, content=content,
                             observation_type="decision", source="agent", allow_secret=True)
    result = {"action": "record", "id": added["id"], "title": fields["title"],
              "entity_name": DECISIONS_ENTITY}
    if added.get("triggered_reminders"):
        result["triggered_reminders"] = added["triggered_reminders"]
    if added.get("deduplicated") or added.get("prediction_error"):
        result["deduplicated"] = True
        result["message"] = "This decision was already recorded; the existing one was kept."
    return result


def _trigram_share(query: str, content: str) -> float:
    """Share of the query's trigrams found in the decision (like pg_trgm's word_similarity):
    plain trigram Jaccard of a short query against a long decision stays under 0.2 even when
    the decision is exactly what was asked for."""
    wanted = trigrams(query)
    return len(wanted & trigrams(content)) / len(wanted) if wanted else 0.0


def _similarities(mem: Memory, query: str, rows: list[TypedObservationRow]) -> tuple[list[float], str]:
    """One score per row and the measure used: e5 cosine, or trigrams without a model (a row
    not embedded yet is scored by trigrams too)."""
    if mem.embedder is None:
        return [_trigram_share(query, r["content"]) for r in rows], "trigram"
    query_vec = mem.embedder.embed_query(query)
    vectors = mem.store.observation_vectors([r["id"] for r in rows])
    scores = [float(np.dot(vectors[r["id"]], query_vec)) if r["id"] in vectors
              else _trigram_share(query, r["content"]) for r in rows]
    return scores, "cosine"


def query(mem: Memory, client: str | None, query: object) -> dict:
    query = validate.text("query", query)
    rows = mem.store.observations_of_type("decision", mem.scope(client), QUERY_POOL)
    scores, method = _similarities(mem, query, rows)
    ranked = sorted(((s, r) for s, r in zip(scores, rows) if s > MIN_SIMILARITY),
                    key=lambda pair: -pair[0])[:QUERY_LIMIT]
    results = [{"id": r["id"], "content": r["content"], "similarity": round(s, 4)} for s, r in ranked]
    answer = {"action": "query", "query": query, "results": results, "count": len(results),
              "similarity_method": method}
    if method == "trigram":
        answer["degraded"] = True
        answer["degraded_reason"] = ("no embedding model is loaded; similarity is the share of the"
                                     f" query's trigrams found in each decision ({mem.embedder_status.reason})")
    return answer


def list_recent(mem: Memory, client: str | None) -> dict:
    rows = mem.store.observations_of_type("decision", mem.scope(client), LIST_LIMIT)
    decisions = [{"id": r["id"], "content": r["content"], "entity_name": r["entity_name"],
                  "created_at": r["created_at"]} for r in rows]
    return {"action": "list", "decisions": decisions, "count": len(decisions)}
