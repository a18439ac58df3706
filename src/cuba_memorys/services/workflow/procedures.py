"""cuba_receta: procedures (recipes) the agent can repeat, ranked by how reliably they work.

Reliability is the lower bound of the Wilson 95% score interval of successes / uses: it
ranks 47/50 (0.84) above 1/1 (0.21), and an unused recipe at 0. A recipe belongs to the
active project (one per name and project); without an active project it is unscoped.
"""

from __future__ import annotations

import math
from typing import Any, cast

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import MAX_CONTENT_CHARS, MAX_NAME_CHARS
from cuba_memorys.services import validate
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.rows import ProcedureFields, ProcedureRow, ProcedureStep
from cuba_memorys.text import analyze, trigram_similarity

Z = 1.96
MAX_STEPS = 100
STEP_KEYS = ("do", "run", "expect")
SEARCH_LIMIT = (1, 25, 5)  # (min, max, default)
LIST_LIMIT = (1, 100, 20)
# A name or trigger this trigram-similar to the query matches even without a shared term.
NAME_MATCH = 0.3


def wilson_lower_bound(successes: int, failures: int, z: float = Z) -> float:
    n = successes + failures
    if n == 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def recipe_view(row: ProcedureRow) -> dict[str, Any]:
    return {
        "id": row["id"], "name": row["name"], "trigger": row["trigger_context"], "steps": row["steps"],
        "preconditions": row["preconditions"], "verification": row["verification"],
        "successes": row["success_count"], "failures": row["failure_count"],
        "reliability": round(wilson_lower_bound(row["success_count"], row["failure_count"]), 4),
        "last_outcome": row["last_outcome"], "last_used_at": row["last_used_at"],
        "created_at": row["created_at"], "updated_at": row["updated_at"],
    }


def markdown(recipe: dict) -> str:
    """The recipe as a checklist an agent (or a person) can follow."""
    lines = [f"# {recipe['name']}", ""]
    if recipe["trigger"]:
        lines += [f"**When:** {recipe['trigger']}", ""]
    lines += [f"**Reliability:** {recipe['reliability']:.2f} ({recipe['successes']} succeeded,"
              f" {recipe['failures']} failed)", ""]
    if recipe["preconditions"]:
        lines += ["## Preconditions", "", recipe["preconditions"], ""]
    lines += ["## Steps", ""]
    for number, step in enumerate(recipe["steps"], 1):
        lines.append(f"{number}. {step['do']}")
        if step.get("run"):
            lines += ["   ```sh", *(f"   {line}" for line in step["run"].splitlines()), "   ```"]
        if step.get("expect"):
            lines.append(f"   Expect: {step['expect']}")
    if recipe["verification"]:
        lines += ["", "## Verification", "", recipe["verification"]]
    return "\n".join(lines).rstrip() + "\n"


# -- validation ----------------------------------------------------------------------------
def _name(name: object) -> str:
    return validate.text("name", name, high=MAX_NAME_CHARS).strip()


def _steps(steps: object, allow_secret: bool) -> list[ProcedureStep]:
    if not isinstance(steps, list) or not steps:
        raise InvalidInput("steps", "is required: a non-empty array of {do, run?, expect?}")
    if len(steps) > MAX_STEPS:
        raise InvalidInput("steps", f"has {len(steps)} steps", f"1..{MAX_STEPS}")
    return [_step(step, f"steps[{i}]", allow_secret) for i, step in enumerate(steps)]


def _step(step: object, where: str, allow_secret: bool) -> ProcedureStep:
    if not isinstance(step, dict):
        raise InvalidInput(where, "must be an object {do, run?, expect?}")
    unknown = sorted(set(step) - set(STEP_KEYS))
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", "is not a step field", ", ".join(STEP_KEYS))
    clean = {"do": validate.text(f"{where}.do", step.get("do"))}
    for key in ("run", "expect"):
        value = validate.optional_text(f"{where}.{key}", step.get(key))
        if value is not None:
            clean[key] = value
    for key, value in clean.items():
        validate.no_secret(f"{where}.{key}", value, allow_secret)
    return cast(ProcedureStep, clean)  # "do", and "run" / "expect" when given


def _optional(param: str, value: object, allow_secret: bool) -> str | None:
    value = validate.optional_text(param, value, high=MAX_CONTENT_CHARS)
    if value is not None:
        validate.no_secret(param, value, allow_secret)
    return value


def _find(mem: Memory, client: str | None, name: object) -> ProcedureRow:
    name = _name(name)
    row = mem.store.get_procedure(name, mem.scope(client))
    if row is None:
        raise NotFound(f"Procedure '{name}' not found.",
                       hint="List procedures with cuba_receta action=list, or add it with action=add.")
    return row


def _limit(clamps: validate.Clamps, value: object, bounds: tuple[int, int, int]) -> int:
    low, high, default = bounds
    return clamps.integer("limit", value, low, high, default)  # the original clamps


# -- actions -------------------------------------------------------------------------------
def add(mem: Memory, client: str | None, *, name: object, steps: object, trigger: object = None,
        preconditions: object = None, verification: object = None, allow_secret: bool = False) -> dict:
    """Add a procedure, or replace the text of the one of that name (its counts stay)."""
    allow_secret = validate.flag("allow_secret", allow_secret, False)
    name = _name(name)
    validate.no_secret("name", name, allow_secret)
    fields: ProcedureFields = {
        "trigger_context": _optional("trigger", trigger, allow_secret),
        "steps": _steps(steps, allow_secret),
        "preconditions": _optional("preconditions", preconditions, allow_secret),
        "verification": _optional("verification", verification, allow_secret),
    }
    row, existed = mem.store.save_procedure(name, mem.client(client).project_id, fields)
    return {"action": "add", **recipe_view(row), "updated": existed}


def get(mem: Memory, client: str | None, name: object) -> dict:
    recipe = recipe_view(_find(mem, client, name))
    return {"action": "get", **recipe, "markdown": markdown(recipe)}


def _step_text(step: ProcedureStep) -> str:
    return " ".join(cast(dict[str, str], step).values())  # every field of a step is text


def _relevance(query_terms: set[str], query: str, row: ProcedureRow) -> float:
    """Share of the query's terms in the recipe's text; a close name or trigger counts too."""
    text = " ".join([row["name"], row["trigger_context"] or "", row["preconditions"] or "",
                     row["verification"] or "", *(_step_text(s) for s in row["steps"])])
    share = len(query_terms & set(analyze(text))) / len(query_terms) if query_terms else 0.0
    close = max(trigram_similarity(query, row["name"]), trigram_similarity(query, row["trigger_context"] or ""))
    return max(share, close if close > NAME_MATCH else 0.0)


def search(mem: Memory, client: str | None, query: object, limit: object = None) -> dict:
    """Recipes matching the query (any shared term, or a close name/trigger), most reliable first."""
    query = validate.text("query", query)
    clamps = validate.Clamps()
    limit = _limit(clamps, limit, SEARCH_LIMIT)
    terms = set(analyze(query))
    scored = [(_relevance(terms, query, row), recipe_view(row)) for row in mem.store.list_procedures(mem.scope(client))]
    matches = sorted(((rel, r) for rel, r in scored if rel > 0),
                     key=lambda pair: (-pair[1]["reliability"], -pair[0], pair[1]["name"]))[:limit]
    procedures = [{**r, "relevance": round(rel, 4)} for rel, r in matches]
    return clamps.note({"action": "search", "query": query, "count": len(procedures), "procedures": procedures})


def outcome(mem: Memory, client: str | None, name: object, success: object) -> dict:
    if success is None:
        raise InvalidInput("success", "is required for action=outcome", "true | false")
    success = validate.flag("success", success, False)
    row = mem.store.record_procedure_outcome(_find(mem, client, name)["id"], success)
    recipe = recipe_view(row)
    answer = {"action": "outcome", **recipe}
    hint = _hint(recipe, success)
    if hint:
        answer["hint"] = hint
    return answer


def _hint(recipe: dict, success: bool) -> str | None:
    """Said only when a recipe fails more often than it works: it is time to fix it."""
    if success or recipe["failures"] < 2 or recipe["failures"] <= recipe["successes"]:
        return None
    return (f"'{recipe['name']}' has failed {recipe['failures']} of {recipe['successes'] + recipe['failures']}"
            " times: revise its steps (add it again under the same name; its counts are kept) or delete it.")


def list_all(mem: Memory, client: str | None, limit: object = None) -> dict:
    clamps = validate.Clamps()
    limit = _limit(clamps, limit, LIST_LIMIT)
    recipes = [recipe_view(row) for row in mem.store.list_procedures(mem.scope(client))]
    recipes.sort(key=lambda r: (-r["reliability"], r["name"]))
    return clamps.note({"action": "list", "count": len(recipes[:limit]), "procedures": recipes[:limit]})


def delete(mem: Memory, client: str | None, name: object) -> dict:
    row = _find(mem, client, name)
    mem.store.delete_procedure(row["id"])
    return {"action": "delete", "name": row["name"], "deleted": True}
