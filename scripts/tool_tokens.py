"""Print what tools/list costs a model under each CUBA_TOOL_PROFILE, in cl100k_base tokens.

    .venv/bin/python scripts/tool_tokens.py            # one line per profile
    .venv/bin/python scripts/tool_tokens.py --tools    # and each tool's cost, dearest first

A tool costs what a model is shown of it: its name, its description and its inputSchema as JSON
(``json.dumps`` with the default separators), counted exactly with tiktoken's cl100k_base (the
offline copy, search/tokens.py). The listing is read from a real server, as a client reads it
(the in-memory MCP client over an empty store in a temporary folder). tests/test_tool_tokens.py
holds full and lean to their budgets; docs/benchmarks.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client

from cuba_memorys.config import TOOL_PROFILES, Settings
from cuba_memorys.search.tokens import count_tokens
from cuba_memorys.server.app import create_app
from cuba_memorys.services.memory import Memory


def tool_cost(tool: Any) -> int:
    """Tokens of one listed tool (an mcp Tool): name + description + inputSchema."""
    return (count_tokens(tool.name) + count_tokens(tool.description or "")
            + count_tokens(json.dumps(tool.input_schema)))


def open_memory(data_dir: Path) -> Memory:
    """An empty store without a model: the listing does not depend on what is stored."""
    settings = replace(Settings.from_env(), data_dir=data_dir, database_url="", embed_model="none",
                       embed_queue=False)
    return Memory.open(settings, check_model=False)


async def _listing(memory: Memory) -> list[Any]:
    async with Client(create_app(memory)) as client:
        return list((await client.list_tools()).tools)


def listings(memory: Memory, profiles: tuple[str, ...] = TOOL_PROFILES) -> dict[str, list[Any]]:
    """{profile: tools/list as a client receives it from a server on ``memory`` with that profile}."""
    found: dict[str, list[Any]] = {}
    before = memory.settings
    try:
        for profile in profiles:
            memory.settings = replace(before, tool_profile=profile, tool_profile_unknown="")
            found[profile] = anyio.run(_listing, memory)
    finally:
        memory.settings = before
    return found


def costs(data_dir: Path) -> dict[str, dict[str, int]]:
    """{profile: {tool name: tokens}} for each profile, read from a server on ``data_dir``."""
    memory = open_memory(data_dir)
    try:
        return {profile: {t.name: tool_cost(t) for t in tools} for profile, tools in listings(memory).items()}
    finally:
        memory.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", action="store_true", help="also each tool's cost, dearest first")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cuba-tool-tokens-") as folder:
        found = costs(Path(folder))
    for profile, tools in found.items():
        print(f"{profile:<9} {len(tools):>3} tools  {sum(tools.values()):>6} tokens")
        if args.tools:
            for name, tokens in sorted(tools.items(), key=lambda item: -item[1]):
                print(f"    {name:<24} {tokens:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
