"""Graph tools: cuba_alma (entities), cuba_puente (relations), cuba_proyecto (projects).

Signatures only: each is the tool's input schema. The catalogue routes every action to its
service (services/graph/).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.models import ENTITY_TYPES, RELATION_TYPES
from cuba_memorys.server.tools.schema import Choice


def cuba_alma(
    action: Annotated[Literal["create", "update", "delete", "get"], Field(description="What to do with the entity")],
    name: Annotated[str, Field(description="Entity name (1-200 chars)")],
    entity_type: Opt[str, Choice(ENTITY_TYPES), Field(description="create: the entity's kind")] = "concept",
    new_name: Opt[str | None, Field(description="update: the new name (1-200 chars)")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_puente(
    action: Annotated[Literal["create", "delete", "traverse", "infer", "predict"], Field()],
    from_entity: Opt[str | None, Field(description="create/delete: source entity")] = None,
    to_entity: Opt[str | None, Field(description="create/delete: target entity")] = None,
    relation_type: Opt[str | None, Choice(RELATION_TYPES, nullable=True),
                       Field(description="create: the edge's kind (default related_to); delete: only edges"
                                         " of this kind (default: every kind between the two)")] = None,
    bidirectional: Opt[bool, Field(description="create: the edge can be walked both ways")] = False,
    start_entity: Opt[str | None, Field(description="traverse/infer: where the walk starts; predict: used"
                                                    " when entity_name is not given")] = None,
    max_depth: Opt[int, Field(description="traverse/infer: hops to walk (clamped to 1-5)")] = 3,
    limit: Opt[int | None, Field(description="traverse/infer: at most this many entities, in the order"
                                             " found (clamped to 1-50; default every one reached);"
                                             " predict: predictions returned (default 10, clamped to 1-50)")] = None,
    entity_name: Opt[str | None, Field(description="predict: the entity to predict links for")] = None,
    persist: Opt[bool, Field(description="predict: write the predictions as related_to edges with"
                                         " provenance predicted (existing edges are never changed)")] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_proyecto(
    action: Annotated[Literal["list", "current", "switch", "stats", "rename", "merge", "backfill"],
                      Field()],
    name: Opt[str | None, Field(description="switch: project to switch to (created if new; '*' clears the active"
                                            " project); stats: project to count (default the active one);"
                                            " rename/merge: the project renamed / merged away; backfill: the"
                                            " existing project that receives every row of no project")] = None,
    to: Opt[str | None, Field(description="rename: the new name (must be free); merge: the existing project"
                                          " that receives every row")] = None,
    confirm: Opt[bool, Field(description="backfill: move the rows (default: only count them)")] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_vigia(
    metric: Opt[Literal["summary", "health", "drift", "communities", "bridges", "structural"],
                Field(description="What to report")] = "summary",
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_reflexion(
    action: Opt[Literal["analyze"], Field()] = "analyze",
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_hipotesis(
    action: Annotated[Literal["explain"], Field()],
    effect: Annotated[str, Field(description="The entity whose possible causes to find")],
    max_depth: Opt[int, Field(description="Hops to walk backwards (clamped to 1-5)")] = 3,
    limit: Opt[int, Field(description="Hypotheses returned, most plausible first (clamped to 1-50)")] = 10,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
