"""tools/list at a cost a model can afford (issue 32), with nothing lost that a call needs.

The listing is read as a client reads it (the in-memory MCP client) and counted as
scripts/tool_tokens.py counts it: name + description + inputSchema in cl100k_base tokens.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuba_memorys.server import catalog
from cuba_memorys.server.app import create_app

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"full": 16_000, "lean": 6_000}  # issue 32's goals, the memory_* aliases included
SCRIPT = importlib.util.spec_from_file_location("tool_tokens", ROOT / "scripts" / "tool_tokens.py")
assert SCRIPT is not None and SCRIPT.loader is not None
tool_tokens = importlib.util.module_from_spec(SCRIPT)
SCRIPT.loader.exec_module(tool_tokens)
# What a call needs to be right, besides the types: kept wherever the generated schema has them.
KEPT = ("enum", "const", "default", "required", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "minItems", "maxItems", "minLength", "maxLength", "pattern", "format")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]]:
    """({profile: the tools listed}, {tool: its whole generated schema, as registered})."""
    memory = tool_tokens.open_memory(tmp_path_factory.mktemp("tokens"))
    try:
        app = create_app(memory)
        generated = {t.name: app.input_schema(t.name) for t in catalog.TOOLS}
        yield tool_tokens.listings(memory), generated
    finally:
        memory.close()


def test_full_and_lean_cost_at_most_their_budgets(served):
    listed, _ = served
    costs = {profile: sum(tool_tokens.tool_cost(t) for t in tools) for profile, tools in listed.items()}
    for profile, budget in BUDGETS.items():
        assert costs[profile] <= budget, f"tools/list under {profile} costs {costs[profile]} tokens (budget {budget})"
    assert costs["lean"] < costs["agent"] < costs["standard"] < costs["full"]


def test_every_profile_lists_each_tools_alias_beside_it(served):
    listed, _ = served
    for profile, tools in listed.items():
        names = {t.name for t in tools}
        for tool in tools:
            row = catalog.tool(tool.name)
            assert row is not None, tool.name
            if row.name == tool.name:  # the tool itself: its alias is listed too
                assert row.alias_name is None or row.alias_name in names, (profile, tool.name)
            else:  # the alias: a pointer to its tool, listed beside it
                assert row.name in names, (profile, tool.name)
                assert tool.description == f"[alias of {row.name}]" and tool.input_schema == {"type": "object"}
        assert not names & catalog.HIDDEN, profile


def facts(schema: dict[str, Any], path: tuple[str, ...] = ()) -> set[tuple[Any, ...]]:
    """What a schema says a call may send, by property path, whatever its layout: each type
    (null as "may be null"), and each KEPT keyword's value."""
    found: set[tuple[Any, ...]] = set()
    kinds = schema.get("type")
    for kind in [kinds] if isinstance(kinds, str) else kinds or []:
        found.add((path, "type", kind))
    for key in KEPT:
        if key in schema:
            found.add((path, key, json.dumps(schema[key], sort_keys=True)))
    for name, sub in schema.get("properties", {}).items():
        found |= facts(sub, (*path, name))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found |= facts(schema[key], (*path, key))
    for branch in schema.get("anyOf", []):
        found |= facts(branch, path)
    return found


def test_the_listed_schemas_keep_every_type_enum_default_bound_and_required(served):
    listed, generated = served
    for tool in listed["full"]:
        if tool.input_schema == {"type": "object"}:
            continue  # an alias (checked above)
        whole, shown = facts(generated[tool.name]), facts(tool.input_schema)
        # "may be null" is said by the default instead: an optional parameter's null default stays
        nullable = {f[0] for f in whole if f[1:] == ("type", "null")}
        assert {f for f in whole if f[1:] != ("type", "null")} == shown, tool.name
        for path in nullable:
            assert (path, "default", "null") in shown, (tool.name, path)
        text = json.dumps(tool.input_schema)
        assert '"title": "' not in text.replace('"title": {', ""), tool.name  # a property may be named title
        assert '{"type": "null"}' not in text, tool.name


def test_the_readme_states_each_profiles_cost(served):
    """README's figures (one line per profile) stay within 10% of what is measured."""
    listed, _ = served
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for profile, tools in listed.items():
        line = re.search(rf"^- `{profile}`: (\d+) tools listed, ([\d,]+) tokens$", readme, re.MULTILINE)
        assert line is not None, f"README has no cost line for {profile}"
        measured = sum(tool_tokens.tool_cost(t) for t in tools)
        stated = int(line[2].replace(",", ""))
        assert int(line[1]) == len(tools), profile
        assert abs(stated - measured) <= measured // 10, f"README says {stated} tokens for {profile}, measured" \
                                                         f" {measured}: run scripts/tool_tokens.py"
