"""cuba_contexto: the context an agent should see at the start of a turn, in one call and
within ``budget_chars``.

Four layers, each read in the caller's scope (its active project plus rows of no project, as
every read here), nothing written and nothing fired:
- ``working_memory``: up to 20 unexpired cuba_pizarra notes of this client (and of its open
  session, as cuba_pizarra keys them), newest first;
- ``agent_notes``: up to 10 armed cuba_centinela reminders of condition on_session_start whose
  ``entity_pattern`` is exactly this client's id — notes another agent left for this one — not
  expired, newest first (reading them does not fire them);
- ``artifacts``: the 30 most recently updated shared artifacts (cuba_artefacto), path, version
  and content hash only;
- ``top_recall``: up to 15 observations, in priority order and without repeats (by entity and
  snippet, case-insensitive): up to 8 written in this session (newest first), up to 8 about
  entities the working memory names (names of 4 characters or more, as whole words), then the
  project's most important. Only live, trusted rows: quarantined text never enters an agent's
  context from here, as search never returns it.

The budget holds for the whole answer as the agent receives it: the text content the MCP
server sends is the answer serialized by ``pydantic_core.to_json(..., indent=2)``
(mcp.server.mcpserver.utilities.func_metadata), so that is what is measured. Over budget,
``layers`` becomes ``{truncated, budget_chars, preview, note}``: ``preview`` is the layers'
compact JSON cut to the longest prefix that keeps the whole answer within the budget.

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from
evaluated annotations.)
"""

import json
from typing import Any, NotRequired, TypedDict, cast

import pydantic_core

from cuba_memorys.models import Scope, SearchFilter, iso, utc_now
from cuba_memorys.services import validate
from cuba_memorys.services.agents import artifacts
from cuba_memorys.services.agents.whoami import open_session_id
from cuba_memorys.services.answers import Clamped
from cuba_memorys.services.memory import DEFAULT_CLIENT, Memory
from cuba_memorys.storage.agent_rows import RecallRow
from cuba_memorys.text import STOPWORDS, words

DEFAULT_BUDGET, MIN_BUDGET, MAX_BUDGET = 12_000, 1_000, 100_000
WORKING_MEMORY, AGENT_NOTES, ARTIFACTS = 20, 10, 30
SESSION_RECALL, MENTION_RECALL, TOP_RECALL, RECALL = 8, 8, 15, 15
MIN_MENTION_CHARS = 4  # shorter names ("db", "api") match too much text by accident
MENTION_TERMS = 200  # distinct words of the working memory looked up as entity names
MENTION_CANDIDATES = 200  # entities sharing those words, checked as whole-word phrases
TRUNCATED_NOTE = ("the layers did not fit in budget_chars: raise budget_chars (up to 100000), or read them one by"
                  " one (cuba_pizarra read, cuba_centinela list, cuba_artefacto list, cuba_faro)")


class Contexto(TypedDict):
    action: str
    client_id: str
    session_id: str | None
    project_id: str | None
    budget_chars: int
    truncated: bool
    layers: dict[str, Any]
    clamped: NotRequired[dict[str, Clamped]]


def serialized_chars(answer: Any) -> int:
    """How long ``answer`` is as the agent receives it (the SDK's text content of a tool result)."""
    return len(pydantic_core.to_json(answer, fallback=str, indent=2).decode())


# -- the layers ------------------------------------------------------------------------------
def _working_memory(mem: Memory, client: str | None, session_id: str | None, scope: Scope) -> list[dict[str, Any]]:
    rows = mem.store.working_memory_entries(client or DEFAULT_CLIENT, session_id, scope, None, iso(utc_now()),
                                            WORKING_MEMORY)
    return [{"content": r["content"], "tag": r["tag"]} for r in rows]


def _agent_notes(mem: Memory, client: str | None, scope: Scope) -> list[dict[str, Any]]:
    me, now = client or DEFAULT_CLIENT, iso(utc_now())
    notes = [t for t in mem.store.armed_triggers("on_session_start", scope)
             if t["entity_pattern"] == me and (t["expires_at"] is None or t["expires_at"] > now)
             and (t["max_fires"] < 0 or t["fire_count"] < t["max_fires"])]
    notes.sort(key=lambda t: (t["created_at"], t["id"]), reverse=True)
    return [{"message": t["message"], "from_agent": t["from_agent"]} for t in notes[:AGENT_NOTES]]


def _artifacts(mem: Memory, client: str | None) -> list[dict[str, Any]]:
    return [{"path": a["path"], "version": a["version"], "content_hash": a["content_hash"]}
            for a in artifacts.index(mem, client, ARTIFACTS)]


def mentioned_entities(mem: Memory, scope: Scope, text: str) -> list[str]:
    """Ids of the visible entities whose names (4+ characters) occur in ``text`` as whole words
    (compared folded: case, accents and punctuation aside). Candidates come from the entities'
    lexical index, so a large graph is never scanned whole."""
    tokens = words(text)
    terms = list(dict.fromkeys(t for t in tokens if t not in STOPWORDS))[:MENTION_TERMS]
    if not terms:
        return []
    hits = mem.store.text_candidates("entity", " ".join(terms), MENTION_CANDIDATES,
                                     SearchFilter(scope=scope, kinds=("entity",)))
    found = mem.store.entities_by_ids([h.id for h in hits])
    padded = f" {' '.join(tokens)} "
    named = []
    for hit in hits:
        entity = found.get(hit.id)
        name_words = words(entity.name) if entity is not None else []
        if entity is not None and len(entity.name.strip()) >= MIN_MENTION_CHARS and name_words \
                and f" {' '.join(name_words)} " in padded:
            named.append(entity.id)
    return named


def _top_recall(mem: Memory, scope: Scope, session_id: str | None, notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    legs: list[tuple[list[RecallRow], int]] = []
    if session_id is not None:
        legs.append((mem.store.recall_observations(scope, SESSION_RECALL, session_id=session_id, newest=True),
                     SESSION_RECALL))
    named = mentioned_entities(mem, scope, "\n".join(n["content"] for n in notes)) if notes else []
    if named:
        legs.append((mem.store.recall_observations(scope, MENTION_RECALL, entity_ids=named), MENTION_RECALL))
    legs.append((mem.store.recall_observations(scope, TOP_RECALL), TOP_RECALL))
    picked: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for rows, cap in legs:
        taken = 0
        for row in rows:
            key = (row["entity"].lower(), row["snippet"].lower())
            if taken == cap or len(picked) == RECALL:
                break
            if key in seen:
                continue
            seen.add(key)
            picked.append({"entity": row["entity"], "snippet": row["snippet"], "importance": row["importance"]})
            taken += 1
    return picked


# -- the budget ------------------------------------------------------------------------------
def _fit(answer: dict[str, Any], budget: int) -> dict[str, Any]:
    """``answer`` as is when it fits in ``budget`` characters; else with ``layers`` replaced by
    the longest preview of their JSON that keeps the whole answer within it."""
    if serialized_chars(answer) <= budget:
        return answer
    full = json.dumps(answer["layers"], ensure_ascii=False, separators=(",", ":"))
    answer["truncated"] = True

    def with_preview(chars: int) -> dict[str, Any]:
        answer["layers"] = {"truncated": True, "budget_chars": budget, "preview": full[:chars],
                            "note": TRUNCATED_NOTE}
        return answer

    low, high = 0, len(full)  # the answer grows with the preview: find the longest that fits
    while low < high:
        middle = (low + high + 1) // 2
        if serialized_chars(with_preview(middle)) <= budget:
            low = middle
        else:
            high = middle - 1
    fitted = with_preview(low)
    if serialized_chars(fitted) > budget:  # the header alone is over (a very long client id): cut it too
        fitted["layers"].pop("note", None)
        while serialized_chars(fitted) > budget and fitted["client_id"]:
            fitted["client_id"] = fitted["client_id"][:len(fitted["client_id"]) // 2]
    return fitted


def contexto(mem: Memory, client: str | None, budget_chars: object = None) -> Contexto:
    clamps = validate.Clamps()
    budget = clamps.integer("budget_chars", budget_chars, MIN_BUDGET, MAX_BUDGET, DEFAULT_BUDGET)
    # strictly the project (as cuba_faro by default): rows of no project stay out of an agent's context
    scope, session_id = mem.scope(client, include_unscoped=False), open_session_id(mem, client)
    notes = _working_memory(mem, client, session_id, scope)
    layers = {
        "working_memory": notes,
        "agent_notes": _agent_notes(mem, client, scope),
        "artifacts": _artifacts(mem, client),
        "top_recall": _top_recall(mem, scope, session_id, notes),
    }
    answer = clamps.note({"action": "contexto", "client_id": client or DEFAULT_CLIENT, "session_id": session_id,
                          "project_id": mem.client(client).project_id, "budget_chars": budget, "truncated": False,
                          "layers": layers})
    return cast(Contexto, _fit(answer, budget))  # the same keys; layers maybe cut to a preview
