"""Schema pieces the tool signatures share.

``Choice`` advertises an enumerated parameter's values in the JSON schema without having the
SDK enforce them: the service checks the value and, for a wrong one, answers with our message
(which names the parameter and every accepted value) rather than a pydantic dump. ``Items``
does the same for arrays of objects, whose items the services validate one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import WithJsonSchema

from cuba_memorys.models import SOURCES, TRUST_LEVELS, WRITABLE_OBSERVATION_TYPES


def Choice(values: Sequence[str], *, nullable: bool = False) -> WithJsonSchema:
    schema: dict[str, Any] = {"type": "string", "enum": list(values)}
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}]} if nullable else schema)


def Items(properties: dict[str, dict[str, Any]], required: Sequence[str]) -> WithJsonSchema:
    return WithJsonSchema({"type": "array", "items": {
        "type": "object", "properties": properties, "required": list(required)}})


def string(description: str, values: Sequence[str] | None = None) -> dict[str, Any]:
    field: dict[str, Any] = {"type": "string", "description": description}
    if values is not None:
        field["enum"] = list(values)
    return field


# An anchor (docs/code-anchors.md): the code an observation is about, checked at each read.
ANCHOR_ITEM: dict[str, Any] = {"type": "object", "required": ["path"], "properties": {
    "path": string("File path relative to the repository root (CUBA_CODE_ROOT or the server's git root)"),
    "symbol": string("A function, class or method defined in the file (`name`, `Class.method`)"),
    "lines": {"description": 'Lines "12-30" or [12, 30] (default: the symbol\'s, else the whole file)',
              "anyOf": [{"type": "string"}, {"type": "integer"},
                        {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}]},
}}
ANCHORS = {"type": "array", "items": ANCHOR_ITEM, "maxItems": 20,
           "description": "Code this observation is about: each read says whether it still reads the same"}
OBSERVATION_ITEM = {
    "entity_name": string("Entity the observation belongs to (auto-created)"),
    "content": string("The observation (1-10000 chars)"),
    "observation_type": string("Default fact", WRITABLE_OBSERVATION_TYPES),
    "source": string("Default agent", SOURCES),
    "created_at": string("ISO 8601 time the fact was true/recorded; default now"),
    "anchors": ANCHORS,
}
INGEST_ITEM = {**OBSERVATION_ITEM, "trust": string("Default trusted; quarantined is never searched", TRUST_LEVELS)}
