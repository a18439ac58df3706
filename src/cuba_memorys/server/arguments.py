"""A refused tool argument, said in one sentence at the MCP boundary (issue 32).

The sentence names the parameter, the value and what is accepted (as the services' own
``observation_type: unknown value 'rumour' (accepted: fact | decision | …)``), never pydantic's
several lines and link: :func:`sentence` converts the SDK's ValidationError once, here.

A number sent as a string (``limit: "5"``) is refused too, with a sentence that says how to send
it. The server validates strictly (server/app.py strict_arguments: ``true`` is not 1, ``"true"``
not true), and the original (Rust, serde_json's ``as_i64``) never reads "5" as 5 either: it takes
such a value as absent and silently uses the default, which is worse than either answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from cuba_memorys.errors import InvalidInput

NUMBER = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?")
TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
              "array": "an array", "object": "an object", "null": "null"}
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<",
          "minItems": "items >=", "maxItems": "items <=", "minLength": "characters >=", "maxLength": "characters <="}
SHOWN_CHARS = 60


def sentence(exc: ValidationError, schema: dict[str, Any]) -> str:
    """pydantic's refusal of a call's arguments as one sentence per parameter (joined by "; "
    in the rare call with several wrong); a union's several errors for one parameter are one."""
    properties = schema.get("properties", {})
    parts: dict[str, str] = {}
    for error in exc.errors():
        loc = error.get("loc") or ()
        name = str(loc[0]) if loc else "arguments"
        where = name + "".join(f"[{part}]" for part in loc[1:] if isinstance(part, int))
        if where not in parts:
            prop = properties.get(name, {})
            parts[where] = str(InvalidInput(where, problem(error), accepted(prop) or None))
    return "; ".join(parts.values())


def problem(error: Any) -> str:
    kind, value = error.get("type", ""), error.get("input")
    if kind == "missing":
        return "is required"
    if kind in ("literal_error", "enum"):
        return f"unknown value {shown(value)}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        if isinstance(value, str) and NUMBER.fullmatch(value.strip()):
            return f"{shown(value)} is a string, not a number: send {value.strip()} without quotes"
        return f"{shown(value)} is {kind_of(value)}"
    message = str(error.get("msg", "is not accepted"))
    if message.startswith("Input should"):
        return f"{shown(value)} should{message.removeprefix('Input should')}"
    return f"{shown(value)} is refused ({message})"


def accepted(prop: dict[str, Any]) -> str:
    """What a property takes, in words: its enum's values, else its types, with bounds and default."""
    words: list[str] = []
    for branch in prop.get("anyOf", [prop]):
        if "enum" in branch:
            words.append(" | ".join(str(v) for v in branch["enum"]))
        elif "const" in branch:
            words.append(json.dumps(branch["const"]))
        else:
            kinds = branch.get("type")
            for kind in [kinds] if isinstance(kinds, str) else kinds or []:
                if kind != "null":
                    words.append(TYPE_WORDS.get(kind, kind) + bounds(branch))
    text = " or ".join(dict.fromkeys(words))
    default = prop.get("default")
    if default is not None:
        text += f"{'; ' if text else ''}default {default if isinstance(default, str) else json.dumps(default)}"
    return text


def bounds(branch: dict[str, Any]) -> str:
    found = [f"{sign} {branch[key]}" for key, sign in BOUNDS.items() if key in branch]
    return f" ({', '.join(found)})" if found else ""


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    for python, word in ((str, "a string"), (int, "an integer"), (float, "a number"), (list, "an array"),
                         (dict, "an object")):
        if isinstance(value, python):
            return word
    return type(value).__name__


def shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"
