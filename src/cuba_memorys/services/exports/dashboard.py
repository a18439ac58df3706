"""`cuba-memorys dashboard`: one self-contained HTML file, readable offline from file://.

Every value goes through Jinja2's autoescape; the observations the page filters are embedded as a
JSON block whose ``<`` are written ``\\u003c`` (so no ``</script>`` can close it); the page's one
inline script and one inline style are allowed by their sha256 in a meta Content-Security-Policy,
so nothing else can run or load (no network at all).

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from evaluated
annotations.)
"""

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, TypedDict

import jinja2
from markupsafe import Markup

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.admin.doctor import doctor
from cuba_memorys.services.memory import Memory

DEFAULT_OUT = "cuba-dashboard.html"
TOP_ENTITIES = 25
RECENT_OBSERVATIONS = 400
MAX_HITS = 60  # the filter shows at most this many matches (the script reads it from the page)
TEMPLATES = Path(__file__).parent / "templates"


class DashboardWritten(TypedDict):
    action: str
    path: str
    verdict: str
    counts: dict[str, int]
    connectivity: dict[str, Any]
    checks: int


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def embedded_json(data: Any) -> Markup:
    """JSON safe inside <script type="application/json">: no ``<`` (hence no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def health_rows(report: dict) -> list[dict[str, str]]:
    """One row per doctor check: (state ok/warn/fail, name, detail, hint)."""
    model = report["model"]
    pending = report["migrations"]["pending"]
    coverage = report["embedding_coverage"]
    rem = report["consolidation"]
    last = rem.get("last_cycle")
    rows = [
        {"state": "fail" if pending else "ok", "name": "migrations",
         "detail": f"{len(report['migrations']['applied'])} applied, {len(pending)} pending",
         "hint": "restart the server to apply them" if pending else ""},
        {"state": "ok" if model["loaded"] else "fail", "name": "embedding model",
         "detail": model["loaded"] or f"none ({model['reason']})",
         "hint": "" if model["loaded"] else "search is lexical only: see `cuba-memorys models`"},
        {"state": "warn" if coverage["missing"] else "ok", "name": "embeddings",
         "detail": f"{coverage['missing']} observation(s) without an embedding",
         "hint": "run `cuba-memorys reembed`" if coverage["missing"] else ""},
        {"state": "warn" if rem.get("stale") or (last and last.get("error")) else "ok", "name": "consolidation",
         "detail": f"last cycle {last['finished_at']}" if last else "no cycle has run",
         "hint": "run `cuba-memorys rem`" if rem.get("stale") else ""},
        {"state": "ok", "name": "backend", "detail": f"{report['backend']} at {report['location']}", "hint": ""},
    ]
    covered = ("migration(s) pending", "no embedding model loaded", "observation(s) have no embedding",
               "no consolidation cycle ran")  # warnings the rows above already show
    rows += [{"state": "warn", "name": "warning", "detail": text, "hint": ""} for text in report["warnings"]
             if not any(part in text for part in covered)]
    return rows


def verdict(rows: list[dict[str, str]]) -> tuple[str, int, int]:
    failures = sum(r["state"] == "fail" for r in rows)
    warnings = sum(r["state"] == "warn" for r in rows)
    label = "degraded" if failures else "working, with warnings" if warnings else "healthy"
    return label, failures, warnings


def dashboard_data(mem: Memory, client: str | None) -> dict[str, Any]:
    """Everything the page shows, computed from the store (the tests compare these numbers)."""
    scope = mem.scope(client)
    entities = mem.store.offline_entities(scope)
    relations = mem.store.offline_relations(scope)
    counts = {"observations": mem.store.scope_counts(scope)["observations"], "entities": len(entities),
              "facts": mem.store.offline_facts_count(scope), "relations": len(relations)}
    connected = sum(e["degree"] > 0 for e in entities)
    connectivity = {"connected": connected, "isolated": len(entities) - connected,
                    "percent": round(100.0 * connected / len(entities), 1) if entities else 0.0}
    recent = [{"entity": o["entity"], "content": o["content"], "type": o["type"], "date": o["created_at"][:10]}
              for o in mem.store.offline_observations(scope, RECENT_OBSERVATIONS) if o["trust"] != "quarantined"]
    rows = health_rows(doctor(mem))
    label, failures, warnings = verdict(rows)
    return {"counts": counts, "connectivity": connectivity, "top": entities[:TOP_ENTITIES], "recent": recent,
            "checks": rows, "verdict": label, "failures": failures, "warnings": warnings,
            "generated_at": iso(utc_now())[:19].replace("T", " ") + " UTC"}


def render(data: dict[str, Any]) -> str:
    script = (TEMPLATES / "dashboard.js").read_text(encoding="utf-8")
    style = (TEMPLATES / "dashboard.css").read_text(encoding="utf-8")
    csp = (f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; img-src data:;"
           " base-uri 'none'; form-action 'none'")
    return _environment().get_template("dashboard.html").render(
        **data, csp=csp, script=Markup(script), style=Markup(style), max_hits=MAX_HITS,
        recent_json=embedded_json(data["recent"]))


def write(mem: Memory, client: str | None, *, out: object = None) -> DashboardWritten:
    target = Path(str(out)).expanduser() if out not in (None, "") else Path(DEFAULT_OUT)
    if target.is_dir():
        raise InvalidInput("out", f"{target} is a directory", "pass a file name such as cuba-dashboard.html")
    if not target.parent.is_dir():
        raise InvalidInput("out", f"the directory {target.parent} does not exist", "create it first")
    data = dashboard_data(mem, client)
    target.write_text(render(data), encoding="utf-8")
    return {"action": "dashboard", "path": str(target.resolve()), "verdict": data["verdict"],
            "counts": data["counts"], "connectivity": data["connectivity"], "checks": len(data["checks"])}
