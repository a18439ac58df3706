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
    "path": string("Relative to the repository root (CUBA_CODE_ROOT, else the server's git root)"),
    "symbol": string("Function, class or Class.method defined in the file"),
    "lines": {"description": '"12-30" or [12, 30]; default the symbol\'s, else the whole file',
              "anyOf": [{"type": "string"}, {"type": "integer"},
                        {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}]},
}}
ANCHORS = {"type": "array", "items": ANCHOR_ITEM, "maxItems": 20,
           "description": "The code this is about: each read says whether it still reads the same"}
# Inside an item of a batch, the anchors' shape in words: the whole anchor schema again in every
# item schema would cost a model ~100 tokens per listing each time (issue 32).
ITEM_ANCHORS = {"type": "array", "items": {"type": "object", "required": ["path"]}, "maxItems": 20,
                "description": "[{path, symbol?, lines?}], as cuba_cronica add's anchors"}
OBSERVATION_ITEM = {
    "entity_name": string("Auto-created"),
    "content": string("1-10000 chars"),
    "observation_type": string("Default fact", WRITABLE_OBSERVATION_TYPES),
    "source": string("Default agent", SOURCES),
    "created_at": string("ISO 8601; default now"),
    "anchors": ITEM_ANCHORS,
}
INGEST_ITEM = {**OBSERVATION_ITEM, "trust": string("Default trusted; quarantined is never searched", TRUST_LEVELS)}
