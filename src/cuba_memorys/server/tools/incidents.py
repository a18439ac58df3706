"""Error tools: cuba_alarma (report), cuba_remedio (resolve), cuba_expediente (search, and warn
before repeating an approach that failed).

Thin, like the other tools: the signature is the input schema; validation and behaviour live
in services/incidents.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.server.runtime import Runtime
from cuba_memorys.services import incidents

Opt = Annotated  # readability: Opt[type, Field(...)] marks an optional parameter


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    """(name, function, description, annotations) for each error tool."""

    def cuba_alarma(
        error_type: Annotated[str, Field(description="Kind of error, e.g. ImportError, BuildFailure (1-200 chars)")],
        error_message: Annotated[str, Field(description="What went wrong; stored up to 5000 bytes (longer is cut)")],
        context: Opt[dict[str, Any] | None, Field(description="Anything that helps next time: file, command, what was"
                                                              " being tried (key 'approach' or 'tried'), versions")] = None,
        project: Opt[str | None, Field(description="Label stored with the error (default: the active project's"
                                                   " name, else \"default\")")] = None,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda m, c: incidents.report(
            m, c, error_type=error_type, error_message=error_message, context=context, project=project,
            allow_secret=allow_secret))

    def cuba_remedio(
        error_id: Annotated[str, Field(description="The error_id cuba_alarma returned")],
        solution: Annotated[str, Field(description="What fixed it (1-10000 chars)")],
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda m, c: incidents.resolve(
            m, c, error_id=error_id, solution=solution, allow_secret=allow_secret))

    def cuba_expediente(
        query: Annotated[str, Field(description="The error to look for (message, type, words of it)")],
        project: Opt[str | None, Field(description="Only errors stored with this project label")] = None,
        resolved_only: Opt[bool, Field(description="Only errors that have a solution")] = False,
        proposed_action: Opt[str | None, Field(description="What you are about to try: warns when it resembles an"
                                                           " approach that already failed")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda m, c: incidents.search(
            m, c, query=query, project=project, resolved_only=resolved_only, proposed_action=proposed_action))

    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False)
    # Resolving an error again replaces its solution (the answer returns the previous one).
    overwrites = ToolAnnotations(readOnlyHint=False, destructiveHint=True)
    read_only = ToolAnnotations(readOnlyHint=True)
    return [
        ("cuba_alarma", cuba_alarma, "Report an error you hit (type, message, context). Answers how many"
         " similar errors were seen before, known solutions, and a pattern_warning when it recurred 3+ times.",
         writes),
        ("cuba_remedio", cuba_remedio, "Resolve a reported error with the solution that worked; lists similar"
         " errors that are still unresolved.", overwrites),
        ("cuba_expediente", cuba_expediente, "Search past errors and their solutions (up to 20). Pass"
         " proposed_action before trying a fix: it warns when that approach already failed.", read_only),
    ]
