"""Tool discovery: cuba_tools (search the catalogue, load a schema on demand) and cuba_call
(invoke any tool by name).

With CUBA_TOOL_PROFILE=lean the server advertises only a core set of tools; these two keep
every other tool one call away. cuba_call goes through the server's own tool manager — the
same validation, the same function, the same error conversion as a direct tools/call — so a
proxied call cannot behave differently from a direct one.

The catalogue is every registered tool except the ``memory_*`` aliases (each is the cuba_*
tool of the same suffix) and these two meta tools, which cuba_call refuses (a cuba_call that
calls cuba_call only recurses).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import Field

from cuba_memorys.errors import InvalidInput

log = logging.getLogger("cuba_memorys")

Opt = Annotated
META_TOOLS = ("cuba_tools", "cuba_call")
ALIAS_PREFIX = "memory_"
META_NAMES = frozenset({*META_TOOLS, *(ALIAS_PREFIX + n.removeprefix("cuba_") for n in META_TOOLS)})
HINT = ("Call any of them with cuba_call {\"tool\": \"<name>\", \"args\": {...}}; detail=full shows the exact"
        " input schema. Every cuba_* tool also answers as memory_* (memory_faro = cuba_faro).")


def read_only(tool: Tool) -> bool:
    return bool(tool.annotations and tool.annotations.read_only_hint)


def _entry(tool: Tool, detail: str) -> Any:
    if detail == "names":
        return tool.name
    entry = {"name": tool.name, "description": tool.description, "read_only": read_only(tool)}
    if detail == "full":
        entry["inputSchema"] = tool.input_schema
        entry["annotations"] = (tool.annotations.model_dump(by_alias=True, exclude_none=True)
                                if tool.annotations else {})
    return entry


def catalogue(tools: list[Tool]) -> list[Tool]:
    """The tools cuba_tools lists and cuba_call reaches: no aliases, no meta tools."""
    return [t for t in tools if not t.name.startswith(ALIAS_PREFIX) and t.name not in META_NAMES]


def build(app: Any) -> list[tuple[str, Any, str, ToolAnnotations]]:
    """(name, function, description, annotations) for the two meta tools of ``app`` (a
    server.app.CubaServer: ``all_tools()`` lists every registered tool whatever the profile)."""

    async def cuba_tools(
        query: Opt[str | None, Field(description="Filter: text found in a tool's name or description (case-insensitive);"
                                                 " omit to list every tool")] = None,
        detail: Opt[Literal["names", "summary", "full"], Field(description="names: just the names (cheapest);"
                                                                          " summary (default): name, description,"
                                                                          " read_only; full: plus the input schema"
                                                                          " and annotations")] = "summary",
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        everything = catalogue(await app.all_tools())
        needle = (query or "").strip().lower()
        matched = [t for t in everything
                   if not needle or needle in t.name.lower() or needle in (t.description or "").lower()]
        return {"count": len(matched), "total_tools": len(everything), "detail": detail,
                "profile": app.profile, "tools": [_entry(t, detail) for t in matched], "hint": HINT}

    async def cuba_call(
        tool: Annotated[str, Field(description="Name of the tool to invoke, e.g. cuba_alma (find names with cuba_tools)")],
        args: Opt[dict[str, Any] | None, Field(description="The tool's own arguments, as its input schema declares"
                                                           " them (default {})")] = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        known = {t.name for t in await app.all_tools()}
        if tool in META_NAMES:
            raise ToolError(str(InvalidInput("tool", f"{tool} cannot be invoked through cuba_call; call it directly")))
        if tool not in known:
            names = ", ".join(t.name for t in catalogue(await app.all_tools()))
            raise ToolError(str(InvalidInput(
                "tool", f"unknown tool {tool!r}", f"{names}; each cuba_* tool also as memory_*")))
        try:
            return await app.call_tool(tool, args or {}, ctx)
        except ToolError as exc:
            # What a direct tools/call of that tool answers: its error, as a tool error result.
            log.info("tool %r (through cuba_call) failed: %r", tool, str(exc))
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    return [
        ("cuba_tools", cuba_tools, "Find tools and load their schemas on demand. Under CUBA_TOOL_PROFILE=lean"
         " only the everyday core is advertised; every other tool is listed here (query filters by name or"
         " description; detail=names|summary|full) and invoked with cuba_call.",
         ToolAnnotations(readOnlyHint=True)),
        ("cuba_call", cuba_call, "Invoke any tool by name with its arguments object — including tools not"
         " advertised by this server's profile. Same validation and behaviour as calling it directly; its"
         " errors come back as that tool's error. Find names and schemas with cuba_tools.",
         # It reaches every tool, deleting ones included.
         ToolAnnotations(readOnlyHint=False, destructiveHint=True)),
    ]
