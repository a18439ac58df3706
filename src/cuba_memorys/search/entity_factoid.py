"""The entity-factoid leg (the original's 0.27 ranking signal, behind CUBA_ENTITY_FACTOID).

For a factoid question that names an entity ("When did Melanie paint a sunrise?"), the named
entity's own observations are the likely answer. When the leg applies, the search looks at
observations only (a requested scope of "all" becomes "observations"), and one more branch is
fused: up to 2 × limit trusted, non-superseded observations of the named entities, scored as
the text branch scores ((lexical rank + trigram)·0.7 + importance·0.3). Rows it found carry
``entity_factoid: true``.

Mentions: an entity whose name has at least 4 characters and whose name's words occur, in
order and as whole words, in the query (compared folded). Candidates come from the entity
text index, so nothing lists every entity name per query. The leg and the mentions are
strictly scoped: with a project active, rows without a project are not used.

Fusion weight: the leg is a restriction of the text branch, so it is fused with the text
branch's weight (fusion.BRANCH_WEIGHTS["text"]), fixed before measuring and not tuned.
"""

from __future__ import annotations

from dataclasses import replace

from cuba_memorys.models import Hit, SearchFilter
from cuba_memorys.search.fusion import BRANCH_WEIGHTS
from cuba_memorys.search.query_class import contains_words
from cuba_memorys.storage.protocols import Store
from cuba_memorys.text import words

BRANCH = "entity_factoid"
WEIGHT = BRANCH_WEIGHTS["text"]
MIN_NAME_CHARS = 4
MAX_MENTIONS = 5
MENTION_CANDIDATES = 20  # entity-index matches checked for a whole-word mention
LEG_FACTOR = 2  # observations in the leg: 2 × limit


def strict(flt: SearchFilter) -> SearchFilter:
    """``flt`` without rows of no project when a project is active."""
    return replace(flt, scope=replace(flt.scope, include_unscoped=False))


def mentioned(store: Store, query: str, flt: SearchFilter) -> list[str]:
    """Names of the visible entities the query names (at most MAX_MENTIONS, best match first)."""
    tokens = words(query)
    if not tokens:
        return []
    hits = store.text_candidates("entity", query, MENTION_CANDIDATES, SearchFilter(scope=strict(flt).scope))
    entities = store.entities_by_ids([h.id for h in hits])
    names: list[str] = []
    for hit in hits:
        entity = entities.get(hit.id)
        if entity is None or len(entity.name) < MIN_NAME_CHARS or entity.name in names:
            continue
        if contains_words(tokens, words(entity.name)):
            names.append(entity.name)
        if len(names) == MAX_MENTIONS:
            break
    return names


def leg(store: Store, query: str, names: list[str], limit: int, flt: SearchFilter) -> list[Hit]:
    """The named entities' observations matching the query, best first (up to 2 × limit)."""
    if not names:
        return []
    narrowed = replace(strict(flt), entity_names=tuple(names), kinds=("observation",))
    return store.text_candidates("observation", query, LEG_FACTOR * limit, narrowed)
