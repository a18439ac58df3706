"""Drive the real `cuba-memorys` binary with the official MCP client, as an agent does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from conftest import SERVER_BIN, StoreLocation


class Agent:
    """A thin wrapper: call a tool, get (is_error, payload-or-message)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, **args: Any) -> dict:
        result = await self.session.call_tool(tool, args)
        if result.is_error:
            raise ToolFailed(result.content[0].text)
        text_payload = json.loads(result.content[0].text)
        assert text_payload == result.structured_content  # text and structured content agree
        return result.structured_content

    async def error(self, tool: str, **args: Any) -> str:
        result = await self.session.call_tool(tool, args)
        assert result.is_error, f"{tool} {args} should have failed but returned {result.content[0].text[:200]}"
        return result.content[0].text


class ToolFailed(AssertionError):
    pass


async def embeddings_settled(agent: Agent, timeout: float = 120.0) -> None:
    """Wait, as an agent can, until the server's background embedding queue has embedded every
    row batch writes handed it: cuba_faro says how many are pending (``embedding_pending``)."""
    with anyio.fail_after(timeout):
        while (await agent.call("cuba_faro", query="pending", limit=1, track_access=False)).get("embedding_pending"):
            await anyio.sleep(0.1)


@asynccontextmanager
async def stdio_agent(where: StoreLocation, **env: str) -> AsyncIterator[Agent]:
    """A server started over stdio on ``where``'s store, as an agent; stopped on leaving."""
    params = StdioServerParameters(command=str(SERVER_BIN), args=[], env=where.env(**env))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield Agent(session)


def run_stdio(where: StoreLocation, body: Callable[[Agent], Awaitable[Any]], **env: str) -> Any:
    """Start the server over stdio on ``where``'s store, run ``body`` with an agent, stop it."""

    async def main():
        async with stdio_agent(where, **env) as agent:
            return await body(agent)

    return anyio.run(main)
