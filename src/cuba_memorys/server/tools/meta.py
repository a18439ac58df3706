"""Tool discovery: cuba_tools (search the catalogue, load a schema on demand) and cuba_call
(invoke any tool by name).

With CUBA_TOOL_PROFILE=lean the server advertises only a core set of tools; these two keep
every other tool one call away. The list comes from the catalogue (server/catalog.py), the
schemas from the registered tools. cuba_call goes through the server's own ``call_tool`` —
the same argument checks, the same function, the same error conversion as a direct
tools/call — so a proxied call cannot behave differently from a direct one. It refuses the two
meta tools (a cuba_call that calls cuba_call only recurses).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from cuba_memorys.errors import InvalidInput
from cuba_memorys.server import catalog
from cuba_memorys.server.catalog import Tool
from cuba_memorys.services import validate

log = logging.getLogger("cuba_memorys")

HINT = ("Call any of them with cuba_call {\"tool\": \"<name>\", \"args\": {...}}; detail=full shows the exact"
        " input schema. Every cuba_* tool also answers as memory_* (memory_faro = cuba_faro).")


def _annotations(tool: Tool) -> dict[str, bool]:
    if tool.read_only:
        return {"readOnlyHint": True}
    return {"readOnlyHint": False, "destructiveHint": tool.destructive}


def _entry(tool: Tool, detail: str, schema: dict[str, Any] | None) -> Any:
    if detail == "names":
        return tool.name
    entry: dict[str, Any] = {"name": tool.name, "description": tool.description, "read_only": tool.read_only}
    if detail == "full":
        entry["inputSchema"] = schema
        entry["annotations"] = _annotations(tool)
    return entry


def build(app: Any) -> dict[str, Callable[..., Any]]:
    """The two meta tool functions of ``app`` (a server.app.CubaServer), by name."""

    async def cuba_tools(
        query: Opt[str | None, Field(description="Filter: text found in a tool's name or description"
                                                 " (case-insensitive); omit to list every tool")] = None,
        detail: Opt[Literal["names", "summary", "full"], Field(description="names: just the names (cheapest);"
                                                                          " summary: name, description, read_only;"
                                                                          " full: plus the input schema and"
                                                                          " annotations")] = "summary",
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        try:  # a NUL matches no tool: the answer would be an empty list that says nothing of why
            validate.no_nul("query", query or "", "text found in a tool's name or description")
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None
        everything = catalog.catalogue()
        needle = (query or "").strip().lower()
        matched = [t for t in everything if not needle or needle in t.name.lower() or needle in t.description.lower()]
        return {"count": len(matched), "total_tools": len(everything), "detail": detail, "profile": app.profile,
                "tools": [_entry(t, detail, app.listed_schema(t.name)) for t in matched], "hint": HINT}

    async def cuba_call(
        tool: Annotated[str, Field(description="Name of the tool to invoke, e.g. cuba_alma (find names with"
                                               " cuba_tools)")],
        args: Opt[dict[str, Any] | None, Field(description="The tool's own arguments, as its input schema declares"
                                                           " them (default {})")] = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        target = catalog.tool(tool)
        if target is not None and target.family == "meta":
            raise ToolError(str(InvalidInput("tool", f"{tool} cannot be invoked through cuba_call; call it directly")))
        if target is None:
            names = ", ".join(t.name for t in catalog.catalogue())
            raise ToolError(str(InvalidInput("tool", f"unknown tool {tool!r}", f"{names}; each cuba_* tool also"
                                                                               " as memory_*")))
        try:
            # Our tools never ask the client for input, so the SDK answers a CallToolResult.
            return cast(CallToolResult, await app.call_tool(tool, args or {}, ctx))
        except ToolError as exc:
            # What a direct tools/call of that tool answers: its error, as a tool error result.
            log.info("tool %r (through cuba_call) failed: %r", tool, str(exc))
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    return {"cuba_tools": cuba_tools, "cuba_call": cuba_call}
