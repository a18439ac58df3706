"""The calibration tool: cuba_calibrar (verify's confidence checked against outcomes, and the
trust of each observation source).

Signature only: the tool's input schema. The catalogue routes each action to its service
(services/calibration.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

from cuba_memorys.server.tools.schema import Choice


def cuba_calibrar(
    action: Annotated[Literal["stats", "history", "resolve", "trust", "metrics"], Field()],
    verify_id: Opt[str | None, Field(description="resolve: the verify call's id (cuba_calibrar action=history)")
                   ] = None,
    outcome: Opt[str | None, Choice(("correct", "incorrect"), nullable=True),
                 Field(description="resolve: whether the verify call's verdict turned out right")] = None,
    limit: Opt[int | None, Field(description="history: newest verify calls (default 20, 1-100)")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
