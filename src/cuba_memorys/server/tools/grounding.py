"""Grounding tools: cuba_juez (judge stored observation pairs) and cuba_contradiccion (scan).

Signatures only: each is the tool's input schema. Both use the verify judge chain (an installed
NLI model, else the client's model through sampling, else the conservative heuristic); the
catalogue passes the client's model to the service (services/grounding.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field


def cuba_juez(
    action: Annotated[Literal["judge_pair", "scan_entity"], Field(description="What to judge")],
    observation_a: Opt[str | None, Field(description="judge_pair: first observation id")] = None,
    observation_b: Opt[str | None, Field(description="judge_pair: second observation id")] = None,
    entity_name: Opt[str | None, Field(description="scan_entity: entity whose ambiguous pairs to judge")] = None,
    max_pairs: Opt[int | None, Field(description="scan_entity: pairs to judge (default CUBA_JUEZ_MAX_PAIRS or 5;"
                                                 " clamped to 1-50)")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_contradiccion(
    action: Opt[Literal["scan"], Field(description="scan")] = "scan",
    entity_name: Opt[str | None, Field(description="Entity to scan; omit to scan the most important entities")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
