"""`make demo`: a short agent session against the real server over MCP stdio.

It starts `.venv/bin/cuba-memorys` in a throw-away data folder (so your own memory is not
touched), remembers a few facts, links two entities, searches, and prints what came back.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

SERVER = Path(sys.executable).with_name("cuba-memorys")

FACTS = [
    {"entity_name": "billing-service",
     "content": "The billing service retries failed Stripe webhooks three times with exponential backoff."},
    {"entity_name": "billing-service",
     "content": "Invoices are generated nightly at 02:00 UTC by a cron job in jobs/invoices.py."},
    {"entity_name": "postgres",
     "content": "Production runs PostgreSQL 16; migrations live in db/migrations and run with alembic."},
    {"entity_name": "auth", "content": "La sesión del panel de administración expira a los 30 minutos de inactividad."},
]
QUESTIONS = [
    "what happens when a webhook fails?",
    "when are invoices created",
    "¿cuánto dura la sesión de admin?",
]


async def call(session: ClientSession, tool: str, args: dict) -> dict:
    result = await session.call_tool(tool, args)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")
    return result.structured_content


async def main() -> None:
    data_dir = tempfile.mkdtemp(prefix="cuba-demo-")
    params = StdioServerParameters(command=str(SERVER), args=[], env={**os.environ, "CUBA_DATA_DIR": data_dir})
    print(f"server: {SERVER}\ndata:   {data_dir} (embedded SQLite)\n")
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        names = [t.name for t in tools.tools if t.name.startswith("cuba_")]
        print(f"tools: {', '.join(names)} (each also as memory_*)")

        added = await call(session, "cuba_cronica", {"action": "batch_add", "observations": FACTS})
        print(f"\nremembered {added['added']} observations, ids in input order:")
        for fact, obs_id in zip(FACTS, added["ids"]):
            print(f"  {obs_id}  [{fact['entity_name']}]")

        link = await call(session, "cuba_puente", {"action": "create", "from_entity": "billing-service",
                                                   "to_entity": "postgres", "relation_type": "depends_on"})
        print(f"\nlinked {link['from']} -{link['relation_type']}-> {link['to']}")

        for question in QUESTIONS:
            found = await call(session, "cuba_faro", {"query": question, "limit": 2})
            print(f"\nQ: {question}")
            for row in found["results"]:
                print(f"   {row['s']:.4f}  [{row['e']}] {row['c']}")
            for ctx in found["graphrag_context"][:1]:
                print("   graph: " + ctx["entity"] + " -> " + json.dumps(ctx["neighbors"]))


if __name__ == "__main__":
    anyio.run(main)
