"""Schema-driven fuzzing of every tool, for the reliability suite (bench/reliability.py).

Each case is built from a tool's advertised input schema: a plausible call (values of the
right type, enum values, the required parameters), or one broken on purpose (a wrong type, an
unknown parameter, a missing required one, a NUL, a huge string), or a line that is not a
valid message at all (truncated JSON, a lone surrogate escape, deep nesting, params that are not
an object). What is checked of every reply: that it came; that it never shows internal text
(a traceback, "internal error"); that a broken call is refused, never a success; and that a
refusal names what was wrong (a parameter of the tool, or the JSON-RPC error it is).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

WORDS = ["auth", "cache", "redis", "deploy", "ci", "billing", "sesión", "configuración", "gateway", "🙂",
         "port 8443", "the retry loop", "x"]
BROKEN_LINES = ["truncated", "surrogate", "deep", "params_not_object"]


@dataclass
class Tally:
    calls: int = 0
    unanswered: int = 0
    crashes: int = 0
    internal_text: int = 0
    success_on_invalid: int = 0
    unnamed_refusals: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def note(self, problem: str, detail: str) -> None:
        setattr(self, problem, getattr(self, problem) + 1)
        if len(self.examples) < 20:
            self.examples.append(f"{problem}: {detail[:300]}")


def value_for(schema: dict[str, Any], rng: random.Random) -> Any:
    """A plausible value of a property's schema."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return value_for(rng.choice(options), rng) if options else None
    kind = schema.get("type", "string")
    if kind == "integer":
        return rng.choice([0, 1, 3, 5, 10, 50, 100])
    if kind == "number":
        return rng.choice([0.0, 0.5, 0.7, 1.0])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items", {"type": "string"})
        return [value_for(items, rng) for _ in range(rng.randint(1, 3))]
    if kind == "object":
        props = schema.get("properties", {})
        return {k: value_for(v, rng) for k, v in props.items()} if props else {"note": rng.choice(WORDS)}
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))


def plausible(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    props = schema.get("properties", {})
    args = {name: value_for(props[name], rng) for name in schema.get("required", [])}
    for name in rng.sample(list(props), k=min(len(props), rng.randint(0, 3))):
        args.setdefault(name, value_for(props[name], rng))
    return args


WRONG = {"string": 12345, "integer": "many", "number": "lots", "boolean": "yes", "array": "not a list",
         "object": "not an object"}


def broken(schema: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any], str | None]:
    """(how it is broken, the arguments, the parameter whose value was spoilt or None)."""
    args = plausible(schema, rng)
    props = schema.get("properties", {})
    how = rng.choice(["wrong_type", "unknown_param", "missing_required", "nul", "huge"])
    name: str | None = None
    if how == "missing_required" and schema.get("required"):
        args.pop(rng.choice(schema["required"]))
    elif how == "wrong_type" and props:
        name = rng.choice(list(props))
        kind = props[name].get("type") or next((s.get("type") for s in props[name].get("anyOf", [])
                                                if s.get("type") != "null"), "string")
        args[name] = WRONG.get(kind, 12345)
    elif how in ("nul", "huge") and any(p.get("type") == "string" for p in props.values()):
        name = rng.choice([n for n, p in props.items() if p.get("type") == "string"])
        args[name] = "\x00" + value_for(props[name], rng) if how == "nul" else "long " * 30_000
    else:
        how = "unknown_param"
        args["colour_" + str(rng.randint(0, 99))] = "blue"
    return how, args, name


def broken_line(kind: str, request_id: int) -> str:
    call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "cuba_proyecto", "arguments": {"action": "list"}}}
    if kind == "truncated":
        return json.dumps(call)[:-7]
    if kind == "surrogate":
        return json.dumps(call).replace('"list"}', '"list", "name": "\\ud800"}')
    if kind == "deep":
        return json.dumps({**call, "params": {"name": "cuba_faro", "arguments": {"query": "x", "tags": "x"}}})[:-2] \
            + ', "z": ' + "[" * 400 + "]" * 400 + "}}"
    return json.dumps({**call, "params": [1, 2]})


def names_something(text: str, schema: dict[str, Any]) -> bool:
    """Does a refusal say what was wrong: a parameter of the tool, or a kind of error an agent
    can act on (not found, refused as a secret, no grant, a time limit)?"""
    lowered = text.lower()
    if any(name in text for name in schema.get("properties", {})):
        return True
    return any(word in lowered for word in ("not found", "refusing", "unknown tool", "is not a parameter",
                                            "did not finish", "needs ", "no grant", "already"))
