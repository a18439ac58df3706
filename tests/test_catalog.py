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


AGENT_TOOLS = {"cuba_whoami", "cuba_artefacto", "cuba_contexto"}  # what the newest original added to each profile
OLD_LEAN = {"cuba_faro", "cuba_expediente", "cuba_decreto", "cuba_jornada", "cuba_cronica", "cuba_ingesta",
            "cuba_alarma", "cuba_remedio", "cuba_receta", "cuba_pizarra"}
OLD_AGENT = OLD_LEAN | {"cuba_alma", "cuba_puente", "cuba_proyecto", "cuba_pre_compact"}
STANDARD_SIX = {"cuba_eco", "cuba_reflexion", "cuba_hipotesis", "cuba_contradiccion", "cuba_centinela",
                "cuba_calibrar"}


def test_profiles_name_only_known_profiles_and_are_the_newest_originals():
    for tool in catalog.TOOLS:
        assert tool.profiles <= set(TOOL_PROFILES) - {"full"}, tool.name
    listed = {p: catalog.advertised(p) for p in ("lean", "agent", "standard")}
    # each listed under its own name and its memory_* alias, as the newest original lists them
    lean, agent, standard = ({n for n in names if not n.startswith("memory_")} for names in listed.values())
    assert lean == OLD_LEAN | AGENT_TOOLS | set(catalog.META_TOOLS) and len(lean) == 13 + 2
    assert agent == OLD_AGENT | AGENT_TOOLS and len(agent) == 17
    assert standard == agent | STANDARD_SIX and len(standard) == 23
    for profile, names in listed.items():
        tools = {n for n in names if not n.startswith("memory_")}
        assert names == tools | {catalog.tool(n).alias_name for n in tools}, profile
        assert len(names) == 2 * len(tools), profile  # every tool of these profiles has an alias
    for name in lean | agent | standard:  # a name this build lacks is never listed
        assert catalog.tool(name) is not None and catalog.tool(name).name == name, name
    assert catalog.advertised("full") is None


def test_cuba_tools_says_how_many_tools_there_are():
    described = catalog.tool("cuba_tools").description
    domain = len(catalog.catalogue())
    assert f"({len(catalog.TOOLS)} tools: {domain} plus cuba_tools and cuba_call)" in described
    assert len(catalog.TOOLS) == domain + len(catalog.META_TOOLS)


# The newest original's special-case aliases (spec original-0.27.md §2): listed under the first,
# callable under the others too.
# the spec's two special cases: an English alias listed, the Spanish one callable but not listed
SPECIAL_ALIASES = {"cuba_artefacto": ("memory_artifact", "memory_artefacto"),
                   "cuba_contexto": ("memory_context", "memory_contexto")}


def test_names_and_aliases_are_unique_and_resolve():
    names = [n for t in catalog.TOOLS for n in (t.name, t.alias_name, *t.hidden_aliases) if n]
    assert len(names) == len(set(names))
    for tool in catalog.TOOLS:
        assert catalog.tool(tool.name) is tool
        if tool.name in SPECIAL_ALIASES:
            assert (tool.alias_name, *tool.hidden_aliases) == SPECIAL_ALIASES[tool.name]
        else:
            assert not tool.hidden_aliases
            if tool.alias_name:
                assert tool.alias_name == "memory_" + tool.name.removeprefix("cuba_")
        for alias in filter(None, (tool.alias_name, *tool.hidden_aliases)):
            assert catalog.tool(alias) is tool
    assert catalog.tool("search_hipocampo").alias_name is None
    assert sorted(catalog.HIDDEN) == ["memory_artefacto", "memory_contexto"]


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
