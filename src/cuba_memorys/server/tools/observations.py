"""Observation tools: cuba_cronica (observations, episodes, timeline) and cuba_ingesta (bulk).

Signatures only: each is the tool's input schema. The catalogue routes every action to its
service (services/observations/, and services/graph/episodes.py for cronica's episodes).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field, WithJsonSchema

from cuba_memorys.models import SOURCES, TRUST_LEVELS, WRITABLE_OBSERVATION_TYPES
from cuba_memorys.server.tools.schema import ANCHORS, INGEST_ITEM, OBSERVATION_ITEM, Choice, Items

SECRET = "Store text that looks like a credential anyway"


def cuba_cronica(
    action: Annotated[Literal["add", "delete", "list", "batch_add", "episode_add", "episode_list", "timeline"],
                      Field()],
    entity_name: Opt[str | None, Field(description="The entity it is about (auto-created)")] = None,
    content: Opt[str | None, Field(description="add/episode_add: the text (1-10000 chars)")] = None,
    observation_type: Opt[str, Choice(WRITABLE_OBSERVATION_TYPES), Field(description="add: the kind of knowledge")]
    = "fact",
    source: Opt[str, Choice(SOURCES), Field(description="add: where it came from")] = "agent",
    observation_id: Opt[str | None, Field(description="delete: the observation's id")] = None,
    id: Opt[str | None, Field(description="delete: alias of observation_id")] = None,
    observations: Opt[list[Any] | None, Items(OBSERVATION_ITEM, ("entity_name", "content")),
                      Field(description="batch_add: up to 100, all validated before any is written; ids in"
                                        " input order; vectors follow in the background (embedding: pending)")]
                      = None,
    actors: Opt[list[str] | None, Field(description="episode_add: who took part")] = None,
    artifacts: Opt[list[str] | None, Field(description="episode_add: files, PRs, links involved")] = None,
    created_at: Opt[str | None, Field(description="add/episode_add: ISO 8601 time it was true or happened;"
                                                  " default now")] = None,
    trust: Opt[str | None, Choice(TRUST_LEVELS, nullable=True),
               Field(description="add: default trusted; quarantined is never searched until promoted")]
    = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    anchors: Opt[list[Any] | None, WithJsonSchema(ANCHORS),
                 Field(description="add: the code this is about; each read says if it is fresh, moved,"
                                   " changed or missing")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_ingesta(
    action: Annotated[Literal["ingest", "parse", "auto_extract"], Field()],
    items: Opt[list[Any] | None, Items(INGEST_ITEM, ("entity_name", "content")),
               Field(description="ingest: 1-200 items; invalid ones are reported by index, the others stored")]
    = None,
    entity_name: Opt[str | None, Field(description="parse: the entity the paragraphs are about")] = None,
    text: Opt[str | None, Field(description="parse: each blank-line separated paragraph becomes a typed"
                                            " observation; auto_extract: what your model reads")] = None,
    entity_hint: Opt[str | None, Field(description="auto_extract: entity for facts the model does not place")] = None,
    supersede_conflicts: Opt[bool, Field(description="auto_extract: mark superseded the entity's stored facts"
                                                     " that a new fact contradicts or replaces")] = False,
    untrusted: Opt[bool, Field(description="Store all quarantined (never searched until promoted);"
                                           " auto_extract then writes no relations")] = False,
    budget_secs: Opt[int | None, Field(description="auto_extract: seconds your model may take (1-60,"
                                                   " default 60)")] = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
