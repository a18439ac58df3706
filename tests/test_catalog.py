"""The tool catalogue is consistent with the signatures it registers and the services it calls,
and the server serves exactly what it lists."""

from __future__ import annotations

import inspect
import typing

import pytest

from cuba_memorys.config import TOOL_PROFILES
from cuba_memorys.server import catalog
from mcp_helpers import run_stdio

ROUTED = [t for t in catalog.TOOLS if t.signature is not None]


def signature_params(tool: catalog.Tool) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in inspect.signature(tool.signature).parameters.items() if n != "ctx"}


def selector_values(tool: catalog.Tool) -> set[str]:
    hints = typing.get_type_hints(tool.signature, include_extras=True)
    literal = typing.get_args(hints[tool.selector])[0]
    return set(typing.get_args(literal))


@pytest.mark.parametrize("tool", ROUTED, ids=lambda t: t.name)
def test_actions_match_the_signatures_selector(tool: catalog.Tool):
    if not tool.selector:
        assert len(tool.actions) == 1 and tool.actions[0].name == ""
        return
    assert {a.name for a in tool.actions} == selector_values(tool)


@pytest.mark.parametrize("tool", ROUTED, ids=lambda t: t.name)
def test_every_parameter_belongs_to_an_action_and_every_service_takes_its_parameters(tool: catalog.Tool):
    params = signature_params(tool)
    used = {p for a in tool.actions for p in a.params} | ({tool.selector} if tool.selector else set())
    assert used == set(params), f"parameters no action reads: {set(params) - used}; unknown: {used - set(params)}"
    for action in tool.actions:
        assert set(action.required) <= set(action.params)
        assert set(action.needs) <= set(catalog.NEEDS)
        accepted = inspect.signature(action.service).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        for name in (*action.params, *action.needs):
            assert takes_any or name in accepted, f"{action.service.__qualname__} does not take {name}"


def test_profiles_name_only_known_profiles_and_lean_is_the_originals():
    for tool in catalog.TOOLS:
        assert tool.profiles <= set(TOOL_PROFILES) - {"full"}, tool.name
    assert len(catalog.advertised("lean") - set(catalog.META_TOOLS)) == 10
    assert len(catalog.advertised("agent")) == 14
    assert catalog.advertised("agent") < catalog.advertised("standard")
    assert catalog.advertised("full") is None


def test_names_and_aliases_are_unique_and_resolve():
    names = [n for t in catalog.TOOLS for n in (t.name, t.alias_name) if n]
    assert len(names) == len(set(names))
    for tool in catalog.TOOLS:
        assert catalog.tool(tool.name) is tool
        if tool.alias_name:
            assert (tool.alias_name == "memory_" + tool.name.removeprefix("cuba_")
                    and catalog.tool(tool.alias_name) is tool)
    assert catalog.tool("search_hipocampo").alias_name is None


def test_the_server_registers_exactly_the_catalogue(location):
    async def body(agent):
        listed = (await agent.session.list_tools()).tools
        found = await agent.call("cuba_tools", detail="full")
        return listed, found

    listed, found = run_stdio(location, body)
    expected = {n for t in catalog.TOOLS for n in (t.name, t.alias_name) if n}
    assert {t.name for t in listed} == expected
    by_name = {t.name: t for t in listed}
    for tool in catalog.TOOLS:
        annotations = by_name[tool.name].annotations
        assert annotations.read_only_hint is tool.read_only
        assert tool.read_only or annotations.destructive_hint is tool.destructive
    assert [t["name"] for t in found["tools"]] == [t.name for t in catalog.catalogue()]
    assert found["total_tools"] == len(catalog.catalogue())
    for entry in found["tools"]:
        assert entry["inputSchema"] == by_name[entry["name"]].input_schema
