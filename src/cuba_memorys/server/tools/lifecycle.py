"""Lifecycle tools: cuba_zafra (maintenance: decay, prune, merge, summarize, ...), cuba_eco
(feedback, corrections, quarantine) and cuba_forget (an entity gone everywhere).

Signatures only: each is the tool's input schema. The catalogue routes every action to its
service (services/lifecycle/).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

SECRET = "Store text that looks like a credential anyway"
ZAFRA_ACTIONS = Literal["decay", "prune", "merge", "summarize", "stats", "pagerank", "find_duplicates", "export",
                        "reembed", "decay_episodes", "communities"]


def cuba_zafra(
    action: Annotated[ZAFRA_ACTIONS, Field()],
    confirm: Opt[bool, Field(description="prune: delete the rows (without it the answer is a dry run listing"
                                         " what would be deleted)")] = False,
    threshold: Opt[float | None, Field(description="prune: importance below which rows go (default 0.1)")] = None,
    similarity_threshold: Opt[float | None, Field(description="merge: trigram similarity above which two rows of"
                                                              " one entity are the same (default 0.8)")] = None,
    entity_name: Opt[str | None, Field(description="summarize: the entity whose rows the summary replaces")] = None,
    compressed_summary: Opt[str | None, Field(description="summarize: the summary text (1-10000 chars)")] = None,
    halflife_days: Opt[float | None, Field(description="decay: one half-life for every type instead of the"
                                                       " stratified ones (days, > 0)")] = None,
    c: Opt[float | None, Field(description="decay_episodes: the power law's time scale (default 0.1)")] = None,
    beta: Opt[float | None, Field(description="decay_episodes: the power law's exponent (default 0.5)")] = None,
    batch_size: Opt[int | None, Field(description="reembed: rows per batch (default 500, 1-5000)")] = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_eco(
    action: Annotated[Literal["positive", "negative", "correct", "promote", "quarantine", "pending"],
                      Field()],
    kind: Opt[Literal["observation", "episode", "error"], Field(description="promote/quarantine: the kind of row"
                                                                            " (default observation)")] = "observation",
    entity_name: Opt[str | None, Field(description="positive/negative: an entity to reinforce or weaken")] = None,
    observation_id: Opt[str | None, Field(description="positive/negative/correct/promote/quarantine: the"
                                                      " observation")] = None,
    id: Opt[str | None, Field(description="promote/quarantine: the episode's or error's id (falls back to"
                                          " observation_id)")] = None,
    correction: Opt[str | None, Field(description="correct: the observation's new text (the old one is kept in"
                                                  " previous_versions)")] = None,
    limit: Opt[int | None, Field(description="pending: rows per kind (default 20, 1-200)")] = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_forget(
    entity_name: Annotated[str, Field(description="The entity to forget, with everything about it")],
    confirm: Annotated[bool, Field(description="Must be true: forgetting cannot be undone")],
    ctx: Context | None = None,
) -> dict[str, Any]: ...
