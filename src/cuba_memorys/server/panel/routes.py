"""The panel's routes under /panel (spec §4a, issue 20): pages, the login, the review writes.

Every request passes ``gate`` first (forwarding headers, the Host of a tokenless daemon, the
session); every POST also carries the session's CSRF token. Pages render Jinja2 templates
(autoescaped) with the data of ``views``; the live strip's script asks ``/panel/ticket`` for a
single-use /events ticket (events_http.Tickets) and opens the existing event stream with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from cuba_memorys.errors import CubaError
from cuba_memorys.server.events_http import OPERATOR, Auth, Caller, Tickets, local_host
from cuba_memorys.server.panel import calls, dedupe, graphview, review, security, shown, views
from cuba_memorys.server.panel.security import COOKIE, HEADERS, Session, Sessions
from cuba_memorys.services.memory import Memory

log = logging.getLogger(__name__)
STATIC = {"panel.css": "text/css; charset=utf-8", "panel.js": "text/javascript; charset=utf-8",
          "graph.js": "text/javascript; charset=utf-8"}
PAGES = (("overview", "/panel", "Overview"), ("search", "/panel/search", "Search"),
         ("graph", "/panel/graph", "Graph"), ("timeline", "/panel/timeline", "Timeline"),
         ("review", "/panel/review", "Review"),
         ("calibration", "/panel/calibration", "Calibration"))
GRAPH_FILTERS = ("project", "type", "community")  # the graph page's query parameters, passed to graph.json
FOREIGN_ORIGIN = "forbidden: this form was sent from another site."


def templates() -> jinja2.Environment:
    folder = resources.files("cuba_memorys.server.panel").joinpath("templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)  # optional answer keys read as empty
    env.filters.update(shown.FILTERS)  # times, ages and counts in words (never None or microseconds)
    return env


def refused(status: int, message: str) -> HTMLResponse:
    body = f"<!doctype html><meta charset=utf-8><title>cuba-memorys panel</title><p>{escape(message)}</p>"
    return HTMLResponse(body, status_code=status, headers=HEADERS)


class Panel:
    """The handlers over one memory, its tokens (events_http.Auth) and the events' tickets."""

    def __init__(self, memory: Memory, auth: Auth, tickets: Tickets, *, loopback: bool) -> None:
        self.memory, self.auth, self.tickets = memory, auth, tickets
        self.public = memory.settings.panel_public
        self.check_host = loopback and not auth.required
        self.sessions = Sessions()
        self.undoable: dict[str, tuple[str, str | None]] = {}  # a merge's undo file -> (who made it, its project)
        self.rejects = review.Rejects()  # what a reject did leaves no mark on the row: the page shows these
        self.env = templates()
        self.static = {name: resources.files("cuba_memorys.server.panel").joinpath(f"static/{name}").read_bytes()
                       for name in STATIC}

    # -- the walls ---------------------------------------------------------------------------
    def wall(self, request: Request) -> Response | None:
        """Refusals that come before any session: a forwarded request, a foreign Host."""
        header = security.forwarded(request)
        if header is not None and not self.public:
            return refused(403, f"forbidden: this request came through a proxy (it carries {header}); the panel"
                                " answers only direct requests unless CUBA_PANEL_PUBLIC=1 is set.")
        if self.check_host and not local_host(request):
            return refused(403, "forbidden: this daemon has no token and its panel answers only requests addressed"
                                " to localhost, 127.0.0.1 or [::1].")
        return None

    def session(self, request: Request) -> tuple[str, Session] | None:
        sid = request.cookies.get(COOKIE, "")
        found = self.sessions.get(sid) if sid else None
        return None if found is None else (sid, found)

    def gate(self, request: Request) -> tuple[Session, str | None] | Response:
        """The caller's session (and a new session id to set, for a tokenless daemon's first visit)."""
        refusal = self.wall(request)
        if refusal is not None:
            return refusal
        found = self.session(request)
        if found is not None:
            return found[1], None
        if self.auth.required:
            if request.method == "GET":
                return RedirectResponse("/panel/login", status_code=303, headers=HEADERS)
            return refused(401, "unauthorized: log in at /panel/login first.")
        sid, session = self.sessions.open(OPERATOR)  # one local user: a session only to carry the CSRF token
        return session, sid

    def csrf_refusal(self, request: Request, session: Session, given: object) -> Response | None:
        if security.foreign_origin(request):
            return refused(403, FOREIGN_ORIGIN)
        if not security.csrf_ok(session, given):
            return refused(403, "forbidden: the form's CSRF token is missing or wrong; reload the page and try"
                                " again.")
        return None

    def page(self, template: str, session: Session, new_sid: str | None, status: int = 200,
             **context: Any) -> HTMLResponse:
        body = self.env.get_template(template).render(pages=PAGES, csrf=session.csrf, caller=_who(session.caller),
                                                      login=self.auth.required, **context)
        response = HTMLResponse(body, status_code=status, headers=HEADERS)
        if new_sid is not None:
            _set_cookie(response, new_sid)
        return response

    # -- login -------------------------------------------------------------------------------
    async def login_form(self, request: Request) -> Response:
        refusal = self.wall(request)
        if refusal is not None:
            return refusal
        if not self.auth.required:
            return RedirectResponse("/panel", status_code=303, headers=HEADERS)
        return self._login_page(None)

    def _login_page(self, error: str | None, status: int = 200) -> HTMLResponse:
        body = self.env.get_template("login.html").render(error=error)
        return HTMLResponse(body, status_code=status, headers=HEADERS)

    async def login(self, request: Request) -> Response:
        refusal = self.wall(request)
        if refusal is not None:
            return refusal
        if not self.auth.required:
            return RedirectResponse("/panel", status_code=303, headers=HEADERS)
        if security.foreign_origin(request):  # another site logging the browser in as someone (login CSRF)
            return refused(403, FOREIGN_ORIGIN)
        form = await request.form()
        token = str(form.get("token") or "")
        caller = await calls.in_worker(self.auth.caller, token) if token else None
        if caller is None or caller.peer:
            return self._login_page("That token belongs to no one here: use CUBA_HTTP_TOKEN or a principal's"
                                    " token (a sync peer's token does not open the panel).", 401)
        old = self.session(request)
        if old is not None:
            self.sessions.close(old[0])  # a new id at each login: a planted cookie is worth nothing
        sid, _ = self.sessions.open(caller)
        try:
            await calls.in_worker(views.land, self.memory, caller)  # a principal lands in a project it may read
        except CubaError as exc:  # the pages then say what is missing; the login itself stands
            log.warning("the panel could not open a project for %s: %s", _who(caller), exc)
        response = RedirectResponse("/panel", status_code=303, headers=HEADERS)
        _set_cookie(response, sid)
        return response

    async def logout(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        form = await request.form()
        refusal = self.csrf_refusal(request, gated[0], form.get("csrf"))
        if refusal is not None:
            return refusal
        found = self.session(request)
        if found is not None:
            self.sessions.close(found[0])
        response = RedirectResponse("/panel/login" if self.auth.required else "/panel", status_code=303,
                                    headers=HEADERS)
        response.delete_cookie(COOKIE, path="/panel")
        return response

    # -- pages -------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        context = await calls.in_worker(views.overview, self.memory, gated[0].caller)
        return self.page("overview.html", *gated, current="overview", **context)

    async def search(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        form = dict(request.query_params.items())
        context = await calls.in_worker(views.search, self.memory, gated[0].caller, form)
        return self.page("search.html", *gated, current="search", **context)

    async def entity(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        name = request.query_params.get("name", "")
        context = await calls.in_worker(views.entity, self.memory, gated[0].caller, name)
        status = 404 if context["entity"] is None else 200
        return self.page("entity.html", *gated, status=status, current="entity", **context)

    async def graph(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        context = await calls.in_worker(views.projects, self.memory, gated[0].caller)
        chosen = {k: request.query_params.get(k, "") for k in GRAPH_FILTERS}
        asked = {k: v for k, v in chosen.items() if v}
        source = "/panel/graph.json" + ("?" + urlencode(asked) if asked else "")
        return self.page("graph.html", *gated, current="graph", source=source, filters=chosen,
                         community=chosen["community"], **context)

    async def graph_json(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        given = request.query_params.get("community", "")
        if given and not given.isdigit():
            return JSONResponse({"error": f"community: {given!r} is not a community number (use 0, 1, ...)"},
                                status_code=400, headers=HEADERS)
        options: dict[str, Any] = {"community": int(given) if given else None,
                                   "entity_type": request.query_params.get("type") or None}
        project = request.query_params.get("project", "")
        caller = gated[0].caller
        try:
            if project:
                row = await calls.in_worker(self.memory.store.get_project, project)
                if row is None:
                    return JSONResponse({"error": f"project: no project named {project!r}"}, status_code=400,
                                        headers=HEADERS)
                body = await calls.in_worker(lambda: calls.act_as(self.memory, caller, graphview.graph_json, "reader",
                                                                  row["id"], project_id=row["id"], **options))
            else:
                body = await calls.in_worker(lambda: calls.read_as(self.memory, caller, lambda mem, client:
                                                                   graphview.graph_json(mem, client, **options)))
        except CubaError as exc:
            return JSONResponse({"error": str(exc)}, status_code=403, headers=HEADERS)
        return JSONResponse(body, headers=HEADERS)

    async def timeline(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        asked = frozenset(request.query_params.getlist("kind")) & views.TIMELINE_KINDS
        context = await calls.in_worker(views.timeline, self.memory, gated[0].caller, asked or views.TIMELINE_KINDS)
        return self.page("timeline.html", *gated, current="timeline", **context)

    async def calibration(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        context = await calls.in_worker(views.calibration, self.memory, gated[0].caller)
        return self.page("calibration.html", *gated, current="calibration", **context)

    async def review(self, request: Request) -> Response:
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        context = await calls.in_worker(views.review, self.memory, gated[0].caller, self.rejects)
        message = request.query_params.get("done", "")
        undo_file = request.query_params.get("undo", "")
        undo_file = undo_file if self.undoable.get(undo_file, ("",))[0] == _who(gated[0].caller) else ""
        return self.page("review.html", *gated, current="review", done=message, undo_file=undo_file, **context)

    # -- writes ------------------------------------------------------------------------------
    async def switch_project(self, request: Request) -> Response:
        return await self._write(request, "cuba_proyecto", "switch", ("name",), "/panel")

    async def review_action(self, request: Request) -> Response:
        what = request.path_params.get("what", "")
        if what in ("merge", "undo"):
            return await self._dedupe(request, what)
        if what not in review.ACTIONS:
            return refused(404, f"no review action {what!r}: use promote, reject, resolve, merge or undo.")
        tool, action = review.ACTIONS[what]
        params = {"promote": ("kind", "id"), "reject": ("observation_id",), "resolve": ("id", "keep")}[what]
        after = {"reject": self._rejected, "promote": self._promoted}.get(what)
        return await self._write(request, tool, action, params, "/panel/review", after)

    def _rejected(self, session: Session, form: Any) -> str:
        self.rejects.remember(str(form.get("observation_id") or ""), _who(session.caller))
        return ("rejected: its importance was lowered (cuba_eco negative); it stays quarantined, so it is never"
                " searched, and fades as it decays (promote would still trust it).")

    def _promoted(self, session: Session, form: Any) -> None:
        self.rejects.forget(str(form.get("id") or ""))  # trusted now: no longer a rejected row

    async def _write(self, request: Request, tool: str, action: str, params: tuple[str, ...],
                     back: str, after: Callable[[Session, Any], str | None] | None = None) -> Response:
        """A catalogue write from a form; ``after`` (given the session and the form, once the service
        answered) may note what it did instead of the answer's note."""
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, new_sid, form = posted
        args = {p: str(form[p]) for p in params if form.get(p)}
        try:
            answer = await calls.call(self.memory, session.caller, tool, action, **args)
        except CubaError as exc:
            return self.page("error.html", session, new_sid, status=400, current="", message=str(exc), back=back)
        note = (answer.get("note") if isinstance(answer, dict) else None) or f"{tool} {action}: done"
        note = (after(session, form) if after is not None else None) or note
        return self._done(f"{back}?done={_quote(str(note))}" if back != "/panel" else back, new_sid)

    async def _posted(self, request: Request) -> Response | tuple[Session, str | None, Any]:
        """A panel write's gate: the session (or the refusal), then its form with a valid CSRF token."""
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        session, new_sid = gated
        form = await request.form()
        refusal = self.csrf_refusal(request, session, form.get("csrf"))
        return refusal if refusal is not None else (session, new_sid, form)

    async def _dedupe(self, request: Request, what: str) -> Response:
        """A near-duplicate merge (the CLI dedupe's merge), or the undo of one this caller made."""
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, new_sid, form = posted
        who = _who(session.caller)
        try:
            if what == "merge":
                done = await calls.in_worker(lambda: dedupe.merge(self.memory, session.caller,
                                                                  str(form.get("loser") or ""),
                                                                  str(form.get("winner") or "")))
                name = Path(done["undo_file"]).name
                self.undoable[name] = (who, done.get("project_id"))
                note = (f"merged '{done['loser']}' into '{done['winner']}' (audit event {done['audit_id']});"
                        f" undo file {name}")
                return self._done(f"/panel/review?done={_quote(note)}&undo={_quote(name)}", new_sid)
            name = str(form.get("undo_file") or "")
            made = self.undoable.get(name)
            if made is None or made[0] != who:
                return self.page("error.html", session, new_sid, status=400, current="", back="/panel/review",
                                 message=f"undo_file: {name!r} is no merge you made from this panel since it started;"
                                         " `cuba-memorys undo FILE` applies any undo file.")
            await calls.in_worker(lambda: dedupe.undo_merge(self.memory, session.caller, name, made[1]))
            del self.undoable[name]
            return self._done(f"/panel/review?done={_quote(f'undone: {name} applied, both entities are back')}",
                              new_sid)
        except CubaError as exc:
            return self.page("error.html", session, new_sid, status=400, current="", message=str(exc),
                             back="/panel/review")

    def _done(self, location: str, new_sid: str | None) -> Response:
        response = RedirectResponse(location, status_code=303, headers=HEADERS)
        if new_sid is not None:
            _set_cookie(response, new_sid)
        return response

    async def ticket(self, request: Request) -> Response:
        """A single-use /events ticket for the live strip (the page's CSRF token in X-CSRF-Token)."""
        gated = self.gate(request)
        if isinstance(gated, Response):
            return gated
        refusal = self.csrf_refusal(request, gated[0], request.headers.get("x-csrf-token"))
        if refusal is not None:
            return refusal
        # the stream filters by the caller's grants (Caller.sees), so any logged-in caller may have one
        return JSONResponse({"ticket": self.tickets.issue(gated[0].caller)}, headers=HEADERS)

    async def asset(self, request: Request) -> Response:
        name = request.path_params.get("name", "")
        if name not in self.static:
            return Response("not found", status_code=404, headers=HEADERS)
        return Response(self.static[name], media_type=STATIC[name],
                        headers={**HEADERS, "Cache-Control": "no-cache"})


def _who(caller: Caller) -> str:
    return "operator" if caller.principal is None else caller.principal.name


def _quote(text: str) -> str:
    return quote(text[:300], safe="")


def _set_cookie(response: Response, sid: str) -> None:
    response.set_cookie(COOKIE, sid, max_age=security.SESSION_SECS, path="/panel", httponly=True, samesite="strict",
                        secure=False)  # a loopback daemon speaks plain http; a public one sits behind TLS


def register(server: Any, memory: Memory, auth: Auth, tickets: Tickets, *, loopback: bool) -> Panel:
    """Add /panel's routes to ``server`` (an MCPServer, before its app is made)."""
    security.check_public(loopback, memory.settings.panel_public)
    panel = Panel(memory, auth, tickets, loopback=loopback)
    for path, handler, methods in (
            ("/panel", panel.overview, ["GET"]), ("/panel/search", panel.search, ["GET"]),
            ("/panel/entity", panel.entity, ["GET"]), ("/panel/review", panel.review, ["GET"]),
            ("/panel/graph", panel.graph, ["GET"]), ("/panel/graph.json", panel.graph_json, ["GET"]),
            ("/panel/calibration", panel.calibration, ["GET"]), ("/panel/timeline", panel.timeline, ["GET"]),
            ("/panel/login", panel.login_form, ["GET"]), ("/panel/login", panel.login, ["POST"]),
            ("/panel/logout", panel.logout, ["POST"]), ("/panel/project", panel.switch_project, ["POST"]),
            ("/panel/review/{what}", panel.review_action, ["POST"]), ("/panel/ticket", panel.ticket, ["POST"]),
            ("/panel/static/{name}", panel.asset, ["GET"])):
        server.custom_route(path, methods=methods)(handler)
    return panel
