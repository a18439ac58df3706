"""`cuba-memorys recall`: what an agent should know when its session starts, in a few lines.

An agent's session-start hook runs the command and puts its output into the agent's context:
the active project, how the last session ended, errors still unresolved, reminders left for
the next session, and the most reliable recipes. Reading changes nothing: no access is
counted and no reminder fires (they fire when the agent starts its session with cuba_jornada).

Which project: the one named (``project``), else the caller's active project, else the project
of the most recently started session (what an agent was working on last), else none (every
row is visible). The block is cut to ``max_chars`` (and ``max_tokens`` when given, counted
exactly in cl100k_base), whole lines first in order of priority, with a last line saying so.
"""

from __future__ import annotations

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import MAX_NAME_CHARS, Scope, SearchFilter, iso, utc_now
from cuba_memorys.services import validate
from cuba_memorys.services.code import search as code_search
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.workflow.procedures import recipe_view
from cuba_memorys.storage.rows import ProjectRow, SessionListRow

ERRORS, REMINDERS, RECIPES, SESSIONS = 5, 5, 3, 20
DEFAULT_MAX_CHARS = 2000
MIN_CHARS = 200
LINE_CHARS = 240  # one item never takes more than this
CODEGRAPH_CLIENT = "codegraph"  # services/code/codegraph.CLIENT (not imported: it loads the parsers)


def _clip(text: str | None, limit: int = LINE_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _project(mem: Memory, client: str | None, name: object) -> tuple[ProjectRow | None, str | None]:
    """(project row or None, how it was chosen)."""
    if name is not None and name != "":
        name = validate.text("project", name, high=MAX_NAME_CHARS).strip()
        project = mem.store.get_project(name)
        if project is None:
            raise NotFound(f"Project '{name}' not found.", hint="`cuba-memorys recall` without --project uses the"
                                                             " active one; cuba_proyecto action=list lists them.")
        return project, "named"
    state = mem.client(client)
    if state.project_id and state.project_name:
        return mem.store.get_project(state.project_name), "active"
    for session in _users(mem.store.list_sessions(Scope(), SESSIONS))[:1]:
        project_name = session.get("project_name")
        if project_name:
            return mem.store.get_project(project_name), "last session"
    return None, None


def _users(sessions: list[SessionListRow]) -> list[SessionListRow]:
    """Sessions of agents and people: not those older codegraph builds started (a build starts
    none now), which would otherwise pass for the last thing worked on."""
    return [s for s in sessions if s.get("client_id") != CODEGRAPH_CLIENT]


def _reminders(mem: Memory, scope: Scope) -> list[dict] | None:
    """Armed on_session_start reminders, unfired; None when this store has no reminders."""
    armed = getattr(mem.store, "armed_triggers", None)
    if armed is None or "triggers" not in mem.store.project_tables():
        return None
    now = iso(utc_now())
    return [{"id": t["id"], "entity_pattern": t["entity_pattern"], "message": t["message"]}
            for t in armed("on_session_start", scope)
            if (t.get("expires_at") is None or t["expires_at"] > now)
            and (t["max_fires"] < 0 or t["fire_count"] < t["max_fires"])][:REMINDERS]


def gather(mem: Memory, client: str | None, project: object = None, diff: str | None = None) -> dict:
    """The recall data as JSON-able dict (the text block is ``render``'s). With ``diff`` (the
    working tree's change, `recall --diff`), also ``code_memories``: what the memory knows about
    the code being changed (services/code/search.py)."""
    chosen, how = _project(mem, client, project)
    scope = Scope(chosen["id"]) if chosen and mem.settings.project_filter else Scope()
    with mem.store.bind_project(scope.project_id):
        last = next((s for s in _users(mem.store.list_sessions(scope, SESSIONS)) if s["ended_at"]), None)
        errors = mem.store.unresolved_errors(scope, ERRORS)
        reminders = _reminders(mem, scope)
        recipes = sorted((recipe_view(r) for r in mem.store.list_procedures(scope)),
                         key=lambda r: (-r["reliability"], -r["successes"], r["name"]))[:RECIPES]
        code = (None if diff is None else
                code_search.recall_rows(mem, client, code_search.from_change(mem, [], diff), SearchFilter(scope=scope)))
    return {
        **({"code_memories": code} if code is not None else {}),
        "project": {"id": chosen["id"], "name": chosen["name"], "chosen_by": how} if chosen else None,
        "last_session": {"name": last["name"], "outcome": last["outcome"], "summary": last["summary"],
                         "goals": last["goals"], "ended_at": last["ended_at"]} if last else None,
        "unresolved_errors": [{"id": e["id"], "error_type": e["error_type"], "message": _clip(e["message"], 160)}
                              for e in errors],
        "reminders": reminders,
        "recipes": [{"name": r["name"], "trigger": r["trigger"], "reliability": r["reliability"],
                     "successes": r["successes"], "failures": r["failures"]} for r in recipes],
    }


def _lines(data: dict) -> list[str]:
    project = data["project"]
    lines = ["# Memory (cuba-memorys)", f"Project: {project['name']}" if project else "Project: none active"]
    if data["reminders"]:
        lines += ["Reminders:", *(f"- {_clip(r['message'])}" for r in data["reminders"])]
    if data.get("code_memories"):
        lines += ["About the code you are changing (git diff HEAD):",
                  *(_code_line(m) for m in data["code_memories"])]
    last = data["last_session"]
    if last:
        line = (f"Last session: {_clip(last['name'], 80)} ({last['outcome'] or 'no outcome'},"
                f" ended {last['ended_at'][:16]})")
        lines += [line, *([f"  {_clip(last['summary'])}"] if last["summary"] else [])]
    if data["unresolved_errors"]:
        lines += ["Unresolved errors (check cuba_expediente before retrying a fix):",
                  *(f"- {_clip(e['error_type'], 60)}: {e['message']} [{e['id']}]" for e in data["unresolved_errors"])]
    if data["recipes"]:
        lines += ["Recipes (cuba_receta get NAME):",
                  *(f"- {_clip(r['name'], 80)} (reliability {r['reliability']:.2f}, {r['successes']}/"
                    f"{r['successes'] + r['failures']})" + (f": {_clip(r['trigger'], 120)}" if r["trigger"] else "")
                    for r in data["recipes"])]
    return lines


def _code_line(row: dict) -> str:
    where = ", ".join(f"{a['path']}:{a['lines'][0]}-{a['lines'][1]}" for a in row.get("anchors", [])[:2])
    status = f"[{row['freshness']}] " if row.get("freshness") and row["freshness"] != "fresh" else ""
    label = row.get("entity") or row.get("error_type") or row["kind"]
    return f"- {status}{_clip(label, 60)}: {_clip(row['content'], 160)}" + (f" ({where})" if where else "")


def render(data: dict, max_chars: int = DEFAULT_MAX_CHARS, max_tokens: int | None = None) -> tuple[str, bool]:
    """(text block within the bounds, whether lines were left out)."""
    if max_chars < MIN_CHARS:
        raise InvalidInput("max_chars", f"is {max_chars}", f"at least {MIN_CHARS}")
    if max_tokens is not None and max_tokens < 1:
        raise InvalidInput("max_tokens", f"is {max_tokens}", "a positive number")
    trailer = "(more in memory: cut to fit; search it with cuba_faro)"

    def fits(text: str) -> bool:
        if len(text) > max_chars:
            return False
        if max_tokens is None:
            return True
        from cuba_memorys.search.tokens import count_tokens

        return count_tokens(text) <= max_tokens

    kept: list[str] = []
    lines = _lines(data)
    for number, line in enumerate(lines):
        candidate = "\n".join([*kept, line])
        rest_fits = number == len(lines) - 1 or fits(candidate + "\n" + trailer)
        if not (fits(candidate) and rest_fits):
            while kept and kept[-1].endswith(":") and not kept[-1].startswith(("- ", "  ")):
                kept.pop()  # a section title whose items do not fit
            if fits("\n".join([*kept, trailer])):
                kept.append(trailer)
            return "\n".join(kept), True
        kept.append(line)
    return "\n".join(kept), False


def recall(mem: Memory, client: str | None, project: object = None, max_chars: int = DEFAULT_MAX_CHARS,
           max_tokens: int | None = None, diff: str | None = None) -> dict:
    data = gather(mem, client, project, diff)
    text, truncated = render(data, max_chars, max_tokens)
    return {**data, "text": text, "truncated": truncated, "chars": len(text)}


def is_empty(data: dict) -> bool:
    """Nothing worth showing (for --quiet)."""
    return not (data["last_session"] or data["unresolved_errors"] or data["reminders"] or data["recipes"]
                or data.get("code_memories"))
