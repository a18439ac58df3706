"""Shared mode (CUBA_MODE=red): several server processes on one memory.

Two real `cuba-memorys` processes (MCP over stdio, as two agents' servers would run) write
and search at the same time. Every write must be searchable from the other process at once,
nothing may be lost, and each row records the node that wrote it."""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from conftest import SERVER_BIN, settings_for
from cuba_memorys.services.memory import Memory
from mcp_helpers import Agent, embeddings_settled

ROUNDS, PER_ROUND = 6, 5


@asynccontextmanager
async def agent_on(where, node: str):
    env = where.env(CUBA_MODE="red", CUBA_NODE_NAME=node)
    params = StdioServerParameters(command=str(SERVER_BIN), args=[], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield Agent(session)


def _facts(node: str, round_no: int) -> list[dict]:
    return [{"entity_name": f"{node}-service-{i}",
             "content": f"Node {node} round {round_no} item {i}: the {node} cache shard {round_no * 10 + i} is warm"}
            for i in range(PER_ROUND)]


async def _writer_and_reader(me: Agent, node: str, other: str, seen: dict, written: dict) -> None:
    """Write a batch, then look for the other node's latest batch; repeat."""
    for round_no in range(ROUNDS):
        batch = await me.call("cuba_cronica", action="batch_add", observations=_facts(node, round_no))
        written[node].extend(batch["ids"])
        found = await me.call("cuba_faro", query=f"{other} cache shard warm", scope="observations",
                              limit=50, track_access=False)
        seen[node].update(row["id"] for row in found["results"])
        await anyio.sleep(0)


def test_two_server_processes_share_one_memory(location):
    written: dict[str, list[str]] = {"a": [], "b": []}
    seen: dict[str, set[str]] = {"a": set(), "b": set()}

    async def main():
        async with agent_on(location, "a") as a, agent_on(location, "b") as b:
            async with anyio.create_task_group() as group:
                group.start_soon(_writer_and_reader, a, "a", "b", seen, written)
                group.start_soon(_writer_and_reader, b, "b", "a", seen, written)
            # once both are done and each queue has embedded its batches, each process finds every
            # row the other wrote (before that, a row still pending is found by keyword only and may
            # rank below the 50 already embedded: each server knows only its own queue)
            await embeddings_settled(a)
            await embeddings_settled(b)
            final = {}
            for me, other in ((a, "b"), (b, "a")):
                ids = set()
                for round_no in range(ROUNDS):
                    found = await me.call("cuba_faro", query=f"node {other} round {round_no} cache shard",
                                          scope="observations", limit=50, track_access=False)
                    ids.update(row["id"] for row in found["results"])
                final[other] = ids
            return final

    final = anyio.run(main)
    assert len(written["a"]) == len(written["b"]) == ROUNDS * PER_ROUND
    assert set(written["b"]) <= final["b"] and set(written["a"]) <= final["a"]
    # while both were writing, each already saw some of the other's rows
    assert seen["a"] & set(written["b"]) and seen["b"] & set(written["a"])

    mem = Memory.open(settings_for(location))
    try:
        assert mem.store.counts()["observations"] == 2 * ROUNDS * PER_ROUND  # nothing lost or doubled
        origins = {r[0]: r[1] for r in mem.store._q(
            "SELECT origin_node, count(*) FROM observations GROUP BY origin_node")}
        assert origins == {"a": ROUNDS * PER_ROUND, "b": ROUNDS * PER_ROUND}
    finally:
        mem.close()
