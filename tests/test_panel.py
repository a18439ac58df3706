"""serve's web panel (/panel, issue 20): its walls, its login and CSRF, and its pages over a
seeded store, on both backends, through the real Starlette app (`http_app`) in process."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from conftest import StoreLocation, settings_for
from cuba_memorys.errors import ConfigError
from cuba_memorys.server.app import http_app
from cuba_memorys.server.panel import cache, graphview, shown, svg
from cuba_memorys.server.panel.security import COOKIE, CSP, FORWARDING_HEADERS
from cuba_memorys.services import incidents
from cuba_memorys.services.admin import principals
from cuba_memorys.services.admin.principals import TokenRegistry
from cuba_memorys.services.graph import analysis as graph_analysis
from cuba_memorys.services.graph import entities, episodes, projects, relations
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.sync import conflicts, export, importer
from cuba_memorys.services.workflow import decisions
from test_http import SERVER_BIN

HOSTILE = "Redis <script>alert(1)</script>"
TOKEN = "t" * 40
PEER = "p" * 40
EXPECTED_HEADERS = {"content-security-policy": CSP, "x-frame-options": "DENY", "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "cache-control": "no-store"}


@pytest.fixture(scope="module")
def seeded(module_location: StoreLocation, tmp_path_factory) -> Iterator[tuple[Memory, dict[str, str], Path]]:
    """One store per backend: project alpha (a hostile name, a relation, a quarantined row), project
    beta (a secret alpha's reader must never see), principals rita (alpha=reader) and root (*=admin)."""
    mem = Memory.open(replace(settings_for(module_location), panel=True, peer_token=PEER))
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.json"
    projects.switch(mem, None, name="beta")
    write.add(mem, None, entity_name="BetaSecret", content="the beta launch code is kept in vault nine")
    projects.switch(mem, None, name="alpha")
    entities.create(mem, None, name=HOSTILE, entity_type="technology")
    write.add(mem, None, entity_name=HOSTILE, content="Redis caches <b>sessions</b> for the checkout API")
    write.add(mem, None, entity_name="Postgres", content="Postgres stores the orders of the checkout")
    relations.create(mem, None, from_entity=HOSTILE, to_entity="Postgres", relation_type="depends_on")
    decisions.record(mem, None, title="Use Redis <for> sessions", context="checkout is slow",
                     alternatives=["memcached"],
                     chosen="redis", rationale="it is there already")
    keys = {name: principals.add(mem, tokens, name, grants)["token"]
            for name, grants in {"rita": ["alpha=reader"], "root": ["*=admin"]}.items()}
    projects.switch(mem, None, name="*")
    yield mem, keys, tokens
    mem.close()


@contextmanager
def panel(mem: Memory, *, host: str = "127.0.0.1", token: str = "", tokens: Path | None = None,
          public: bool = False, on: bool = True, name: str | None = None) -> Iterator[TestClient]:
    """A TestClient over serve's app, the panel on or off (the settings are read when the app is made)."""
    before = mem.settings
    mem.settings = replace(before, panel=on, panel_public=public)
    try:
        app = http_app(mem, host, token, TokenRegistry(tokens) if tokens else None)
    finally:
        mem.settings = before
    with TestClient(app, base_url=f"http://{name or host}:8787", follow_redirects=False) as client:
        yield client


def csrf_of(page: str) -> str:
    return json.loads(re.search(r'<script type="application/json" id="panel-data">(.*?)</script>', page)[1])["csrf"]


def login(client: TestClient, token: str) -> None:
    done = client.post("/panel/login", data={"token": token})
    assert done.status_code == 303 and done.headers["location"] == "/panel", done.text


def test_the_panel_is_off_unless_cuba_panel_is_set(seeded) -> None:
    mem, _, _ = seeded
    with panel(mem, on=False) as client:
        assert client.get("/panel").status_code == 404
        assert client.get("/panel/static/panel.css").status_code == 404


def test_every_page_renders_with_the_strict_headers_and_escapes_names(seeded) -> None:
    mem, _, _ = seeded
    with panel(mem) as client:
        pages = {"/panel": "Needs attention", "/panel/search?query=redis+sessions+checkout": "score-bars",
                 f"/panel/entity?name={HOSTILE}": "depends_on", "/panel/review": "Quarantined",
                 "/panel/graph": 'id="graph"', "/panel/calibration": 'id="source-trust"',
                 "/panel/timeline": "Use Redis &lt;for&gt; sessions"}
        for path, expected in pages.items():
            got = client.get(path)
            assert got.status_code == 200, (path, got.text[:500])
            assert {k: got.headers.get(k) for k in EXPECTED_HEADERS} == EXPECTED_HEADERS, path
            assert expected in got.text, path
            assert "<" not in re.search(r"<title>(.*?)</title>", got.text, re.S)[1], path  # a plain title
            assert "<script>alert(1)" not in got.text and "<b>sessions" not in got.text, path
            assert "style=" not in got.text and "<script>" not in got.text.replace(
                '<script type="application/json" id="panel-data">', "").replace(
                '<script src="/panel/static/panel.js" defer></script>', ""), path
        entity = client.get("/panel/entity", params={"name": HOSTILE}).text
        assert "Redis &lt;script&gt;alert(1)&lt;/script&gt;" in entity and "Postgres" in entity
        assert "Redis caches &lt;b&gt;sessions&lt;/b&gt;" in entity
        assert client.get("/panel/entity", params={"name": "Nobody Here"}).status_code == 404
        for asset in ("panel.css", "panel.js"):
            got = client.get(f"/panel/static/{asset}")
            assert got.status_code == 200 and got.headers["x-content-type-options"] == "nosniff"
        assert client.get("/panel/static/../config.py").status_code == 404


def test_search_draws_a_bar_per_channel_with_the_services_scores(seeded) -> None:
    mem, _, _ = seeded
    with panel(mem) as client:
        page = client.get("/panel/search", params={"query": "redis sessions checkout", "scope": "observations"}).text
    first = page[page.index('<li class="result">'):]
    first = first[:first.index("</li>")]
    assert "Redis caches" in first
    for label in ("final", "fusion", "text", "BM25", "vector"):
        assert f">{label}</text>" in first
    widths = [float(w) for w in re.findall(r'<rect class="bar bar-score" x="52" y="\d+" width="([\d.]+)"', first)]
    assert widths and 0 < widths[0] <= 160
    with panel(mem) as client:
        bad = client.get("/panel/search", params={"query": "redis", "limit": "many"})
    assert bad.status_code == 200 and "limit: &#39;many&#39; is not a whole number" in bad.text


def test_forwarding_headers_are_refused_unless_the_panel_is_public(seeded) -> None:
    mem, _, _ = seeded
    with panel(mem) as client:
        for header in (*FORWARDING_HEADERS, "x-forwarded-prefix"):
            got = client.get("/panel", headers={header: "203.0.113.9"})
            assert got.status_code == 403 and header in got.text, header
            assert got.headers["x-frame-options"] == "DENY"
        assert client.post("/panel/login", data={"token": TOKEN}, headers={"forwarded": "for=1.2.3.4"}
                           ).status_code == 403
    with panel(mem, public=True) as client:
        assert client.get("/panel", headers={"x-forwarded-for": "203.0.113.9"}).status_code == 200


def test_a_network_bind_needs_cuba_panel_public_and_a_tokenless_one_only_local_names(seeded) -> None:
    mem, _, _ = seeded
    with pytest.raises(ConfigError, match="CUBA_PANEL_PUBLIC"), panel(mem, host="0.0.0.0", token=TOKEN):
        pass
    with panel(mem, host="0.0.0.0", token=TOKEN, public=True) as client:
        assert client.get("/panel").status_code == 303  # to the login form: the token is still needed
    with panel(mem, name="rebound.example") as client:  # DNS rebinding against a tokenless loopback daemon
        assert client.get("/panel").status_code == 403


def test_the_token_login_sets_a_session_cookie_and_every_post_needs_its_csrf(seeded) -> None:
    mem, keys, tokens = seeded
    with panel(mem, token=TOKEN) as client:
        first = client.get("/panel")
        assert first.status_code == 303 and first.headers["location"] == "/panel/login"
        assert client.post("/panel/project", data={"name": "alpha"}).status_code == 401
        form = client.get("/panel/login")
        assert form.status_code == 200 and 'type="password"' in form.text
        for wrong in ("not-the-token", PEER, ""):
            refused = client.post("/panel/login", data={"token": wrong})
            assert refused.status_code == 401 and COOKIE not in refused.headers.get("set-cookie", "")
        done = client.post("/panel/login", data={"token": TOKEN})
        cookie = done.headers["set-cookie"]
        assert done.status_code == 303 and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert TOKEN not in cookie and "Path=/panel" in cookie
        page = client.get("/panel")
        assert page.status_code == 200 and "as operator" in page.text
        csrf = csrf_of(page.text)
        for data in ({"name": "alpha"}, {"name": "alpha", "csrf": "forged"}):
            assert client.post("/panel/project", data=data).status_code == 403
        assert client.post("/panel/ticket").status_code == 403
        assert client.post("/panel/project", data={"name": "alpha", "csrf": csrf},
                           headers={"origin": "http://evil.example"}).status_code == 403
        ticket = client.post("/panel/ticket", headers={"x-csrf-token": csrf})
        assert ticket.status_code == 200 and ticket.json()["ticket"]
        assert client.post("/panel/logout", data={"csrf": csrf}).status_code == 303
        assert client.get("/panel").status_code == 303  # the session is gone server-side
    with panel(mem, tokens=tokens) as client:  # principals alone also need the login
        assert client.get("/panel").status_code == 303
        login(client, keys["root"])
        assert "as root" in client.get("/panel").text


def test_the_login_refuses_a_form_sent_from_another_site(seeded) -> None:
    mem, _, _ = seeded
    with panel(mem, token=TOKEN) as client:
        for origin in ("http://evil.example", "http://127.0.0.1:9999"):
            refused = client.post("/panel/login", data={"token": TOKEN}, headers={"origin": origin})
            assert refused.status_code == 403 and "another site" in refused.text, origin
            assert COOKIE not in refused.headers.get("set-cookie", ""), origin
        assert client.get("/panel").status_code == 303  # not logged in
        same = client.post("/panel/login", data={"token": TOKEN}, headers={"origin": "http://127.0.0.1:8787"})
        assert same.status_code == 303 and same.headers["location"] == "/panel"


def test_another_projects_rows_never_appear(seeded) -> None:
    mem, keys, tokens = seeded
    with panel(mem, tokens=tokens) as client:
        login(client, keys["rita"])
        page = client.get("/panel")
        assert "beta" not in page.text and "BetaSecret" not in page.text
        csrf = csrf_of(page.text)
        refused = client.post("/panel/project", data={"name": "beta", "csrf": csrf})
        assert refused.status_code == 400 and "rita" in refused.text
        assert client.post("/panel/project", data={"name": "alpha", "csrf": csrf}).status_code == 303
        found = client.get("/panel/search", params={"query": "launch code vault checkout redis"}).text
        assert "Redis caches" in found and "vault nine" not in found and "BetaSecret" not in found
        assert client.get("/panel/entity", params={"name": "BetaSecret"}).status_code == 404
        assert "vault nine" not in client.get("/panel/review").text
        # a reader may look but not promote (admin on alpha is needed): refused, nothing changed
        review = client.post("/panel/review/promote", data={"csrf": csrf, "kind": "observation", "id": "x" * 36})
        assert review.status_code == 400


def test_promote_and_reject_go_through_cuba_eco_and_are_audited(seeded) -> None:
    mem, _, _ = seeded
    projects.switch(mem, None, name="alpha")
    held = write.add(mem, None, entity_name="Postgres", content="an untrusted claim about replication lag")["id"]
    other = write.add(mem, None, entity_name="Postgres", content="another untrusted claim about vacuum")["id"]
    for obs in (held, other):
        feedback.quarantine(mem, None, observation_id=obs)
    projects.switch(mem, None, name="*")
    with panel(mem) as client:
        page = client.get("/panel/review").text
        assert "replication lag" in page and "vacuum" in page
        assert f'name="id" value="{held}"' in page and f'name="observation_id" value="{other}"' in page
        csrf = csrf_of(page)
        assert client.post("/panel/review/promote", data={"kind": "observation", "id": held}).status_code == 403
        done = client.post("/panel/review/promote", data={"csrf": csrf, "kind": "observation", "id": held})
        assert done.status_code == 303 and done.headers["location"].startswith("/panel/review?done=")
        assert client.post("/panel/review/reject", data={"csrf": csrf, "observation_id": other}).status_code == 303
        assert client.post("/panel/review/nothing", data={"csrf": csrf}).status_code == 404
        assert "replication lag" not in client.get("/panel/review").text
    assert mem.store.get_observation(held, mem.scope(None)).trust == "trusted"
    promoted = [r for r in mem.store.audit_rows(0, 100_000) if r["action"] == "memory.promote"]
    assert any(json.loads(r["payload"]).get("id") == held for r in promoted)


def test_a_sync_conflict_is_resolved_from_the_review_page(seeded, tmp_path: Path) -> None:
    mem, _, _ = seeded
    theirs = Memory.open(settings_for(StoreLocation("sqlite", tmp_path / "theirs")))
    try:
        projects.switch(theirs, None, name="alpha")
        obs = write.add(theirs, None, entity_name="Billing", content="invoices go out on the first")["id"]
        export.export(theirs, None, dir=str(tmp_path / "b1"), scope="all")
        importer.import_bundle(mem, None, dir=str(tmp_path / "b1"))
        feedback.correct(theirs, None, observation_id=obs, correction="invoices go out on the fifth")
        projects.switch(mem, None, name="alpha")
        feedback.correct(mem, None, observation_id=obs, correction="invoices go out on the second")
        export.export(theirs, None, dir=str(tmp_path / "b2"), scope="all")
        assert importer.import_bundle(mem, None, dir=str(tmp_path / "b2"))["conflicts_opened"] == 1
    finally:
        theirs.close()
        projects.switch(mem, None, name="*")
    (conflict,) = [c for c in conflicts.conflicts(mem, None)["conflicts"] if c["theirs"].endswith("fifth")]
    with panel(mem) as client:
        page = client.get("/panel/review").text
        assert "invoices go out on the fifth" in page and "resolve-theirs" in page
        done = client.post("/panel/review/resolve", data={"csrf": csrf_of(page), "id": conflict["id"],
                                                          "keep": "theirs"})
        assert done.status_code == 303
        again = client.post("/panel/review/resolve", data={"csrf": csrf_of(page), "id": conflict["id"],
                                                           "keep": "theirs"})
        assert again.status_code == 400 and "resolved already" in again.text
    assert mem.store.get_observation(obs, mem.scope(None)).content == "invoices go out on the fifth"
    assert mem.store.sync_conflict(conflict["id"])["resolution"] == "theirs"


def test_the_graph_json_holds_the_callers_entities_and_clusters_a_large_graph(seeded) -> None:
    mem, keys, tokens = seeded
    with panel(mem) as client:
        page = client.get("/panel/graph")
        assert page.status_code == 200 and 'data-source="/panel/graph.json"' in page.text
        whole = client.get("/panel/graph.json").json()
        assert client.get("/panel/graph.json", params={"community": "x"}).status_code == 400
    names = {n["name"] for n in whole["nodes"]}
    assert {HOSTILE, "Postgres", "BetaSecret"} <= names and whole["clustered"] is False
    assert all(0 <= n["x"] <= 1 and 0 <= n["y"] <= 1 for n in whole["nodes"])
    index = {n["name"]: i for i, n in enumerate(whole["nodes"])}
    assert sorted([index[HOSTILE], index["Postgres"]]) in [sorted(e) for e in whole["edges"]]
    with panel(mem, tokens=tokens) as client:
        login(client, keys["rita"])
        client.post("/panel/project", data={"name": "alpha", "csrf": csrf_of(client.get("/panel").text)})
        hers = client.get("/panel/graph.json").json()
    assert HOSTILE in {n["name"] for n in hers["nodes"]} and "BetaSecret" not in {n["name"] for n in hers["nodes"]}
    clustered = graphview.graph_json(mem, None, cluster_above=2)
    assert clustered["clustered"] is True and clustered["entities"] == len(whole["nodes"])
    assert sum(int(n["name"].split("(")[1].split()[0]) for n in clustered["nodes"]) == len(whole["nodes"])
    community = whole["nodes"][index[HOSTILE]]["community"]
    inside = graphview.graph_json(mem, None, community=community)
    assert HOSTILE in {n["name"] for n in inside["nodes"]} and inside["count"] < len(whole["nodes"])


def test_the_templates_and_scripts_are_in_the_wheel() -> None:
    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["cuba_memorys"]
    package = root / "src" / "cuba_memorys"
    shipped = {p for pattern in data for p in package.glob(pattern)}
    panel = package / "server" / "panel"
    wanted = [*(panel / "templates").glob("*.html"), *(panel / "static").iterdir()]
    assert len(wanted) >= 10 and all(p in shipped for p in wanted)


def test_the_reliability_diagram_is_svg_with_a_bar_per_bin_and_no_style_attributes() -> None:
    bins = [{"bin_lo": 0.2, "bin_hi": 0.3, "n": 4, "accuracy": 0.25, "confidence": 0.26},
            {"bin_lo": 0.8, "bin_hi": 0.9, "n": 10, "accuracy": 0.9, "confidence": 0.84}]
    drawn = str(svg.reliability_diagram(bins))
    heights = [float(h) for h in re.findall(r'<rect class="bin" x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"',
                                            drawn)]
    assert heights == [60.0, 216.0] and "style=" not in drawn and "n 10" in drawn
    assert 'class="diagonal"' in str(svg.reliability_diagram([]))


def test_the_entity_page_shows_its_stored_pagerank_and_community(seeded) -> None:
    mem, _, _ = seeded
    with panel(mem) as client:
        before = client.get("/panel/entity", params={"name": "Postgres"}).text
        assert "not computed yet" in before
        graph_analysis.pagerank(mem, None)
        graph_analysis.communities(mem, None)
        after = client.get("/panel/entity", params={"name": "Postgres"}).text
    shown = re.search(r'<p id="entity-metrics">PageRank (0\.\d{4}) · community (\d+)</p>', after)
    assert shown and 0 < float(shown[1]) < 1


def test_serve_refuses_a_public_panel_before_touching_the_data(tmp_path: Path) -> None:
    where = StoreLocation("sqlite", tmp_path / "data")
    done = subprocess.run([str(SERVER_BIN), "serve", "0.0.0.0:18999"], capture_output=True,
                          text=True, timeout=120, env=where.env(CUBA_PANEL="1", CUBA_HTTP_TOKEN=TOKEN))
    assert done.returncode != 0 and "CUBA_PANEL_PUBLIC=1" in done.stderr
    assert not where.data_dir.exists()


def test_near_duplicates_merge_through_dedupe_audited_with_its_undo_and_only_the_callers_pairs(seeded) -> None:
    mem, keys, tokens = seeded
    projects.switch(mem, None, name="beta")
    for name in ("Beta Gateway", "beta-gateway"):
        write.add(mem, None, entity_name=name, content=f"{name} fronts the beta launch")
    projects.switch(mem, None, name="alpha")
    write.add(mem, None, entity_name="Auth Service", content="Auth Service signs the checkout tokens")
    write.add(mem, None, entity_name="Auth Service", content="Auth Service rotates keys weekly")
    write.add(mem, None, entity_name="auth-service", content="auth-service runs on port 9000")
    projects.switch(mem, None, name="*")
    with panel(mem, tokens=tokens) as client:
        login(client, keys["rita"])
        csrf = csrf_of(client.get("/panel").text)
        client.post("/panel/project", data={"name": "alpha", "csrf": csrf})
        page = client.get("/panel/review").text
        assert 'id="duplicates"' in page and "auth-service" in page
        assert "Beta Gateway" not in page and "beta-gateway" not in page
        refused = client.post("/panel/review/merge", data={"csrf": csrf, "loser": "auth-service",
                                                           "winner": "Auth Service"})
        assert refused.status_code == 400 and "needs admin" in refused.text
        assert "cuba-memorys principal grant rita alpha=admin" in refused.text  # the CLI's verb, filled in
        sneaky = client.post("/panel/review/merge", data={"csrf": csrf, "loser": "beta-gateway",
                                                          "winner": "Beta Gateway"})
        assert sneaky.status_code == 400 and "not one you can see" in sneaky.text
    assert {"auth-service", "beta-gateway"} <= {r["name"] for r in mem.store.entity_names(mem.scope(None))}
    with panel(mem) as client:
        page = client.get("/panel/review").text
        csrf = csrf_of(page)
        assert "Beta Gateway" in page  # the operator reads every project
        assert client.post("/panel/review/merge", data={"loser": "auth-service", "winner": "Auth Service"}
                           ).status_code == 403  # no CSRF token: nothing merged
        done = client.post("/panel/review/merge", data={"csrf": csrf, "loser": "auth-service",
                                                        "winner": "Auth Service"})
        assert done.status_code == 303, done.text
        after = client.get(done.headers["location"]).text
        assert "merged &#39;auth-service&#39; into &#39;Auth Service&#39;" in after and 'id="undo-merge"' in after
        undo_file = re.search(r'name="undo_file" value="([^"]+)"', after)[1]
        names = {r["name"] for r in mem.store.entity_names(mem.scope(None))}
        assert "auth-service" not in names and "Auth Service" in names
        merged = [json.loads(r["payload"]) for r in mem.store.audit_rows(0, 100_000)
                  if r["action"] == "memory.dedupe_merge"]
        assert merged and merged[-1]["undo_file"] == undo_file
        assert client.post("/panel/review/undo", data={"csrf": csrf, "undo_file": "../../etc/passwd"}
                           ).status_code == 400
        back = client.post("/panel/review/undo", data={"csrf": csrf, "undo_file": undo_file})
        assert back.status_code == 303 and "undone" in back.headers["location"]
        assert client.post("/panel/review/undo", data={"csrf": csrf, "undo_file": undo_file}).status_code == 400
    assert {"auth-service", "Auth Service"} <= {r["name"] for r in mem.store.entity_names(mem.scope(None))}
    assert any(r["action"] == "memory.undo" for r in mem.store.audit_rows(0, 100_000))


def test_the_timeline_shows_episodes_errors_decisions_and_filters_by_kind(seeded) -> None:
    mem, keys, tokens = seeded
    projects.switch(mem, None, name="alpha")
    episodes.add(mem, None, entity_name="Postgres", content="migrated the <orders> table to partitions")
    incidents.report(mem, None, error_type="TimeoutError", error_message="checkout timed out after 30 s")
    projects.switch(mem, None, name="beta")
    incidents.report(mem, None, error_type="BetaError", error_message="the beta vault refused the launch code")
    projects.switch(mem, None, name="*")
    with panel(mem, tokens=tokens) as client:
        login(client, keys["rita"])
        client.post("/panel/project", data={"name": "alpha", "csrf": csrf_of(client.get("/panel").text)})
        page = client.get("/panel/timeline").text
        assert "migrated the &lt;orders&gt; table" in page and "checkout timed out" in page
        assert "Use Redis &lt;for&gt; sessions" in page and "unresolved" in page
        assert "beta vault" not in page and "BetaError" not in page
        lanes = page[page.index('id="timeline-chart"'):page.index("</svg>", page.index('id="timeline-chart"'))]
        assert 'class="mark mark-error"' in lanes and 'class="mark mark-episode"' in lanes
        errors_only = client.get("/panel/timeline", params={"kind": "error"}).text
        listed = errors_only[errors_only.index('id="timeline"'):]
        assert "checkout timed out" in listed and "migrated the" not in listed and "Use Redis" not in listed
        assert client.get("/panel/timeline", params={"kind": "nonsense"}).status_code == 200  # all kinds again


def test_the_entity_page_shows_trust_evidence_versions_and_facts_over_time(seeded) -> None:
    mem, _, _ = seeded
    projects.switch(mem, None, name="alpha")
    obs = write.add(mem, None, entity_name="Kafka", content="Kafka keeps events for 7 days")["id"]
    feedback.correct(mem, None, observation_id=obs, correction="Kafka keeps events for 14 days")
    held = write.add(mem, None, entity_name="Kafka", content="Kafka might lose events on failover")["id"]
    feedback.quarantine(mem, None, observation_id=held)
    projects.switch(mem, None, name="*")
    with panel(mem) as client:
        page = client.get("/panel/entity", params={"name": "Kafka"}).text
    row = page[page.index("for 14 days"):]
    row = row[:row.index("</tr>")]
    assert "1 earlier version" in row and "Kafka keeps events for 7 days" in row and "v2" in row
    assert 'class="trust trust-trusted">trusted' in row and 'class="evidence">asserted' in row
    facts = page[page.index('id="facts"'):]
    facts = facts[:facts.index("</table>")]
    assert re.search(r'<tr class="closed"><td>\w+</td><td>Kafka keeps events for 7 days</td><td>[^<]+</td><td>\d{4}-',
                     facts), facts
    assert '<tr class="current"><td>' in facts and "for 14 days</td>" in facts
    chart = page[page.index('id="facts-chart"'):]
    assert chart.count('class="fact fact-closed"') >= 1 and chart.count('class="fact fact-current"') >= 1


def test_the_graph_filters_by_project_type_and_community_and_samples_a_big_filtered_set(seeded) -> None:
    mem, keys, tokens = seeded
    projects.switch(mem, None, name="alpha")
    entities.create(mem, None, name="Grafana", entity_type="person")
    projects.switch(mem, None, name="*")
    with panel(mem) as client:
        page = client.get("/panel/graph", params={"project": "alpha", "type": "person"}).text
        assert 'data-source="/panel/graph.json?project=alpha&amp;type=person"' in page
        alpha = client.get("/panel/graph.json", params={"project": "alpha"}).json()
        tools = client.get("/panel/graph.json", params={"project": "alpha", "type": "person"}).json()
        beta = client.get("/panel/graph.json", params={"project": "beta"}).json()
        assert client.get("/panel/graph.json", params={"project": "nowhere"}).status_code == 400
    alpha_names = {n["name"] for n in alpha["nodes"]}
    assert {HOSTILE, "Postgres", "Grafana"} <= alpha_names and "BetaSecret" not in alpha_names
    assert "BetaSecret" in {n["name"] for n in beta["nodes"]} and HOSTILE not in {n["name"] for n in beta["nodes"]}
    assert {n["name"] for n in tools["nodes"]} == {"Grafana"} and {"person", "technology"} <= set(alpha["types"])
    community = next(n["community"] for n in alpha["nodes"] if n["name"] == HOSTILE)
    inside = graphview.graph_json(mem, None, community=community, project_id=mem.store.get_project("alpha")["id"])
    assert HOSTILE in {n["name"] for n in inside["nodes"]} and all(n["community"] == community for n in inside["nodes"])
    sampled = graphview.graph_json(mem, None, cluster_above=1, entity_type="concept")
    assert sampled["sampled"] is True and sampled["count"] == 1 and sampled["matched"] >= 2
    top = sorted((n["importance"] for n in mem.store.panel_graph_nodes(mem.scope(None)) if n["type"] == "concept"),
                 reverse=True)[:1]
    assert sorted(n["size"] for n in sampled["nodes"]) == sorted(round(t, 3) for t in top)
    with panel(mem, tokens=tokens) as client:
        login(client, keys["rita"])
        assert client.get("/panel/graph.json", params={"project": "alpha"}).status_code == 200
        refused = client.get("/panel/graph.json", params={"project": "beta"})
        assert refused.status_code == 403 and "BetaSecret" not in refused.text


def test_a_cached_answer_is_served_while_a_fresh_one_is_computed_in_the_background() -> None:
    now = [0.0]
    fresh = cache.Fresh(10.0, clock=lambda: now[0])
    calls: list[int] = []
    release = threading.Event()

    def compute() -> int:
        calls.append(1)
        if len(calls) > 1:
            release.wait(5)
        return len(calls)

    assert fresh.get("k", compute) == (1, 0.0)  # the first read waits for it
    now[0] = 5.0
    assert fresh.get("k", compute) == (1, 5.0) and len(calls) == 1  # young: reused
    now[0] = 11.0
    assert fresh.get("k", compute) == (1, 11.0)  # stale: still served, one refresh started
    assert fresh.get("k", compute)[0] == 1 and len(calls) == 2  # no second refresh while one runs
    release.set()
    for _ in range(100):
        if fresh.get("k", compute)[0] == 2:
            break
        time.sleep(0.02)
    assert fresh.get("k", compute) == (2, 0.0)
    fresh.forget()
    assert fresh.get("k", compute)[0] == 3


def test_a_failed_first_computation_is_not_cached() -> None:
    fresh = cache.Fresh(10.0)
    with pytest.raises(ConfigError):
        fresh.get("k", lambda: (_ for _ in ()).throw(ConfigError("broken")))
    assert fresh.get("k", lambda: "fine") == ("fine", 0.0)


def test_a_page_shows_times_ages_counts_and_durations_in_words() -> None:
    assert shown.when("2026-12-03T11:12:36.991329+00:00") == "2026-12-03 11:12 UTC"
    assert shown.when("2026-12-03T12:12:36+01:00") == "2026-12-03 11:12 UTC" and shown.when(None) == "—"
    assert shown.when("not a time") == "not a time"
    now = 1_800_000_000.0
    assert [shown.ago(now - s, now) for s in (5, 600, 7300, 3 * 86400, 86400)] == [
        "just now", "10 min ago", "2 h ago", "3 days ago", "1 day ago"]
    assert shown.ago(None) == "—" and shown.number(12345) == "12,345" and shown.number(None) == "—"
    assert [shown.duration(ms) for ms in (15, 2300, 240_000, None)] == ["15 ms", "2.3 s", "4 min", "—"]
