"""What tools/list shows a model, at a cost it can afford (issue 32).

Every listed tool costs tokens on each turn of an agent that has the server configured, so the
listing is the schema the SDK generates with its overhead taken out, and nothing an agent needs
to call a tool right (types, enums, defaults, required, bounds) left out:

- ``title`` on every property and on the schema itself (pydantic's, repeating the name);
- ``anyOf: [T, {"type": "null"}]`` for an optional value, which becomes T: the ``default``
  beside it (null) still says the parameter may be left out, and ``required`` says which may not;
- ``additionalProperties: true``, which JSON Schema assumes anyway.

A ``memory_*`` alias is listed beside its tool, as the original lists both names, but as a pointer:
its description names the tool and its schema is an open object, because repeating the whole
schema under a second name would double the listing for no new information. The registered
tools keep their full schema: it is what validates a call (server/app.py).
"""

from __future__ import annotations

from typing import Any

NULL = {"type": "null"}
ALIAS_SCHEMA: dict[str, Any] = {"type": "object"}
# Keywords whose value is a map of names to schemas (a property may itself be named "title").
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains")


def alias_description(tool: str) -> str:
    """The original prefixes an alias's description with "[alias of cuba_x]"; here that is all of it."""
    return f"[alias of {tool}]"


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its overhead (module docstring); the input is left unchanged."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "additionalProperties" and value is True):
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: compact_schema(sub) if isinstance(sub, dict) else sub for name, sub in value.items()}
        elif key in SCHEMA_LISTS and isinstance(value, list):
            out[key] = [compact_schema(sub) if isinstance(sub, dict) else sub for sub in value]
        elif key in SCHEMA_VALUES and isinstance(value, dict):
            out[key] = compact_schema(value)
        else:
            out[key] = value
    return _without_null_branch(out)


def _without_null_branch(node: dict[str, Any]) -> dict[str, Any]:
    """anyOf [T, null] as T, anyOf [A, B, null] as anyOf [A, B] (not ``type: [a, b]``, which
    some model APIs' schema subsets refuse). The node's own keys (default, description) win over T's."""
    branches = node.get("anyOf")
    if not isinstance(branches, list) or NULL not in branches:
        return node
    rest = [b for b in branches if b != NULL]
    node = {k: v for k, v in node.items() if k != "anyOf"}
    if len(rest) == 1 and isinstance(rest[0], dict):
        return {**rest[0], **node}
    return {"anyOf": rest, **node}
