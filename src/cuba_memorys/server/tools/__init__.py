"""The MCP tools' signatures, one module per family (graph, observations, search, grounding,
workflow, sessions, incidents, reminders, meta).

A tool function here is its contract and nothing else: its Python signature is the tool's MCP
input schema (types, enums, defaults, descriptions) and its body is empty. ``server/catalog.py``
names the service function each action calls, and ``server/app.py`` registers every tool from
the catalogue in one loop, routing each call through ``server/runtime.py``.
"""
