"""Error tools: cuba_alarma (report), cuba_remedio (resolve), cuba_expediente (search, and warn
before repeating an approach that failed).

Signatures only: each is the tool's input schema. The catalogue routes each to its service
(services/incidents.py).
"""

from __future__ import annotations

from typing import Annotated, Any
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

SECRET = "Store text that looks like a credential anyway"


def cuba_alarma(
    error_type: Annotated[str, Field(description="Kind of error, e.g. ImportError, BuildFailure (1-200 chars)")],
    error_message: Annotated[str, Field(description="What went wrong; stored up to 5000 bytes (longer is cut)")],
    context: Opt[dict[str, Any] | None, Field(description="Anything that helps next time: file, command, what was"
                                                          " being tried (key 'approach' or 'tried'), versions")] = None,
    project: Opt[str | None, Field(description="Label stored with the error (default: the active project's"
                                               " name, else \"default\")")] = None,
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_remedio(
    error_id: Annotated[str, Field(description="The error_id cuba_alarma returned")],
    solution: Annotated[str, Field(description="What fixed it (1-10000 chars)")],
    allow_secret: Opt[bool, Field(description=SECRET)] = False,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def cuba_expediente(
    query: Annotated[str, Field(description="The error to look for (message, type, words of it)")],
    project: Opt[str | None, Field(description="Only errors stored with this project label")] = None,
    resolved_only: Opt[bool, Field(description="Only errors that have a solution")] = False,
    proposed_action: Opt[str | None, Field(description="What you are about to try: warns when it resembles an"
                                                       " approach that already failed")] = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...
