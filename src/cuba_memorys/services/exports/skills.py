"""`cuba-memorys skills DIR`: recipes (cuba_receta) as agent skills, one folder with a SKILL.md each.

The front matter carries the name and a description (the recipe's trigger), the body is the
recipe's checklist (procedures.markdown: preconditions, steps, verification, reliability = the
Wilson lower bound). A skill folder is written only when it is new or an earlier skills export
wrote it (its SKILL.md starts with our marker comment); any other folder is refused, whole, before
anything is written.

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from evaluated
annotations.)
"""

import json
from pathlib import Path
from typing import TypedDict

from cuba_memorys.errors import Conflict, InvalidInput
from cuba_memorys.services.exports.files import safe_name
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.workflow.procedures import markdown, recipe_view

WRITTEN_BY = "<!-- written by cuba-memorys skills: edits are overwritten by the next export -->"


class SkillsWritten(TypedDict):
    action: str
    path: str
    written: list[str]
    skipped_below_reliability: int
    min_reliability: float


def skill_text(recipe: dict) -> str:
    slug = recipe["slug"]
    description = recipe["trigger"] or f"Procedure '{recipe['name']}' from cuba-memorys"
    front = ["---", f"name: {json.dumps(slug, ensure_ascii=False)}",
             f"description: {json.dumps(description, ensure_ascii=False)}",
             f"reliability: {recipe['reliability']}", "---", WRITTEN_BY, ""]
    return "\n".join(front) + markdown(recipe)


def _ours(folder: Path) -> bool:
    skill = folder / "SKILL.md"
    if not skill.is_file() or [p.name for p in folder.iterdir()] != ["SKILL.md"]:
        return False
    return WRITTEN_BY in skill.read_text(encoding="utf-8")[:2000]


def _reliability(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise InvalidInput("min_reliability", f"{value!r} is not a number from 0 to 1", "0.0 .. 1.0")
    return float(value)


def export(mem: Memory, client: str | None, *, directory: object, min_reliability: object = 0.0) -> SkillsWritten:
    if not isinstance(directory, (str, Path)) or not str(directory).strip():
        raise InvalidInput("directory", "no directory given", "pass the directory to write the skills into")
    floor = _reliability(min_reliability)
    root = Path(directory).expanduser()
    if root.exists() and not root.is_dir():
        raise InvalidInput("directory", f"{root} is a file", "pass a directory")
    recipes = [recipe_view(row) for row in mem.store.list_procedures(mem.scope(client))]
    kept = sorted((r for r in recipes if r["reliability"] >= floor), key=lambda r: (-r["reliability"], r["name"]))
    taken: set[str] = set()
    for recipe in kept:
        recipe["slug"] = safe_name(recipe["name"].lower().replace(" ", "-"), taken)
    foreign = [r["slug"] for r in kept if (root / r["slug"]).exists() and not _ours(root / r["slug"])]
    if foreign:
        raise Conflict(f"{', '.join(foreign)} in {root} exist and were not written by `cuba-memorys skills`:"
                       " nothing was written; move them or choose another directory")
    for recipe in kept:
        folder = root / recipe["slug"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(skill_text(recipe), encoding="utf-8")
    return {"action": "skills", "path": str(root.resolve()), "written": [r["slug"] for r in kept],
            "skipped_below_reliability": len(recipes) - len(kept), "min_reliability": floor}
