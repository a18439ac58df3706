"""The panel in a real browser: Debian's /usr/bin/chromium driven by Playwright (which downloads
nothing here), against a real `cuba-memorys serve` with CUBA_PANEL=1. One browser for the module.
SQLite only: the pages' data per backend is test_panel.py's; this checks what only a browser sees
(console errors, CSP violations, the canvas, the forms)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import StoreLocation, settings_for
from cuba_memorys.services import incidents
from cuba_memorys.services.admin import principals
from cuba_memorys.services.graph import entities, episodes, projects, relations
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.workflow import decisions
from test_http import Server

CHROMIUM = Path("/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
if not CHROMIUM.exists():
    pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run does)", allow_module_level=True)

SEEDED_ENTITIES = 6
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "panel"


def seed_small(where: StoreLocation) -> str:
    """Six technologies in project alpha, related, one quarantined observation (its id returned);
    a near-duplicate pair in alpha and one in beta, a corrected observation, an episode, an error
    and a decision."""
    mem = Memory.open(settings_for(where))
    try:
        projects.switch(mem, None, name="alpha")
        names = ["Checkout API", "Redis", "Postgres", "Billing", "Auth Service", "Queue <script>x</script>"]
        for name in names:
            entities.create(mem, None, name=name, entity_type="technology")
            write.add(mem, None, entity_name=name, content=f"{name} is part of the checkout path")
        for a, b in [(0, 1), (0, 2), (3, 2), (4, 0), (5, 3)]:
            relations.create(mem, None, from_entity=names[a], to_entity=names[b], relation_type="depends_on")
        held = write.add(mem, None, entity_name="Redis", content="an untrusted note about eviction")["id"]
        feedback.quarantine(mem, None, observation_id=held)
        # the review page's near-duplicates, the entity page's versions and facts, the timeline's kinds
        write.add(mem, None, entity_name="auth-service", content="auth-service signs the session tokens")
        corrected = write.add(mem, None, entity_name="Checkout API", content="Checkout API answers in 80 ms")["id"]
        feedback.correct(mem, None, observation_id=corrected, correction="Checkout API answers in 120 ms")
        episodes.add(mem, None, entity_name="Billing", content="the March invoices were sent twice")
        incidents.report(mem, None, error_type="TimeoutError", error_message="checkout timed out after 30 s")
        decisions.record(mem, None, title="Retry invoices once", context="duplicates", alternatives=["never"],
                         chosen="once", rationale="idempotent keys")
        projects.switch(mem, None, name="beta")
        for name in ("Beta Gateway", "beta-gateway"):
            write.add(mem, None, entity_name=name, content=f"{name} fronts the beta launch")
        projects.switch(mem, None, name="*")
        return held
    finally:
        mem.close()


def seed_large(where: StoreLocation, count: int = 10_000, groups: int = 20) -> None:
    """``count`` entities in ``groups`` dense clusters, written straight into a fresh SQLite store
    (the services would take minutes; the graph page reads only these two tables)."""
    Memory.open(settings_for(where)).close()  # the schema
    now = "2026-12-01T00:00:00+00:00"
    ids = [str(uuid.uuid4()) for _ in range(count)]
    rng = random.Random(20)
    edges = set()
    for i in range(count):
        group = i % groups
        for _ in range(2):
            j = rng.randrange(group, count, groups)
            if j != i:
                edges.add((ids[i], ids[j]))
    with sqlite3.connect(where.data_dir / "memory.db") as db:
        db.executemany("INSERT INTO entities(id, name, importance, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                       [(e, f"entity {i}", rng.random(), now, now) for i, e in enumerate(ids)])
        db.executemany("INSERT INTO relations(id, from_entity_id, to_entity_id, created_at) VALUES (?, ?, ?, ?)",
                       [(str(uuid.uuid4()), a, b, now) for a, b in edges])


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with playwright_api.sync_playwright() as p:
        found = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield found
        found.close()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Iterator[tuple[Server, str]]:
    where = StoreLocation("sqlite", tmp_path_factory.mktemp("small") / "data")
    held = seed_small(where)
    server = Server(where, where.data_dir.parent / "server.log", CUBA_PANEL="1", CUBA_EMBED_MODEL="none",
                    CUBA_REM_FIRST_DELAY_SECS="3600").start()
    yield server, held
    server.stop()


class Watched:
    """A page that records console errors and CSP violations (Chromium reports both on the console)."""

    def __init__(self, browser) -> None:
        self.context = browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("console", lambda m: self.problems.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_load_state("load")

    def close(self) -> None:
        self.context.close()


def painted(page) -> int:
    """How many of the graph canvas's pixels are drawn on (0: a blank canvas)."""
    return page.evaluate("""() => {
        const c = document.getElementById("graph"), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")


def shot(page, name: str) -> None:
    """docs/panel/<name>.png, when PANEL_SCREENSHOTS=1 (a normal run leaves the docs alone)."""
    if os.environ.get("PANEL_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def test_every_page_loads_clean_search_draws_bars_and_the_graph_draws_the_seeded_nodes(browser, small) -> None:
    server, _ = small
    watched = Watched(browser)
    page = watched.page
    try:
        for path, name in (("/panel", "overview"), ("/panel/search?query=checkout+redis", "search"),
                           ("/panel/entity?name=Checkout%20API", "entity"), ("/panel/review", "review"),
                           ("/panel/calibration", "calibration"), ("/panel/timeline", "timeline")):
            watched.open(server.base + path)
            page.wait_for_selector("#live-status")
            if name not in ("overview", "review"):  # test_panel_seen.py shoots those on a fuller store
                shot(page, name)
        watched.open(server.base + "/panel/entity?name=Checkout%20API")
        page.locator("details.versions summary").first.click()
        assert page.locator("details.versions li").first.is_visible()
        assert page.locator("#facts-chart rect.fact-closed").count() >= 1
        assert page.locator("#facts-chart rect.fact-current").count() >= 1
        watched.open(server.base + "/panel/timeline")
        for kind in ("session", "decision", "episode", "error"):
            assert page.locator(f"#timeline-chart text.lane-label:has-text('{kind}')").count() == 1
        assert page.locator("#timeline-chart rect.mark-error").count() == 1
        page.locator("form.kinds input[value='decision']").uncheck()
        page.locator("form.kinds input[value='episode']").uncheck()
        page.locator("form.kinds input[value='session']").uncheck()
        page.locator("form.kinds button").click()
        page.wait_for_url("**/panel/timeline?kind=error")
        assert "checkout timed out" in page.locator("#timeline").inner_text()
        assert "March invoices" not in page.locator("#timeline").inner_text()
        watched.open(server.base + "/panel/search?query=checkout+redis")
        bars = page.locator("svg.score-bars")
        assert bars.count() >= 2
        assert page.locator("svg.score-bars rect.bar").first.get_attribute("width") not in (None, "0.0")
        watched.open(server.base + "/panel/graph?project=alpha&type=technology")
        page.wait_for_selector("#graph[data-ready='1']")
        assert page.locator("#graph-status").get_attribute("data-drawn") == str(SEEDED_ENTITIES)
        assert page.locator("#graph-type option").all_text_contents()[:1] == ["(every type)"]
        assert "concept" in page.locator("#graph-type option").all_text_contents()  # offered from the data
        watched.open(server.base + "/panel/graph")
        page.wait_for_selector("#graph[data-ready='1']")
        assert int(page.locator("#graph-status").get_attribute("data-drawn") or 0) > SEEDED_ENTITIES
        assert painted(page) > 0
        page.wait_for_selector("#live-status:has-text('connected')", timeout=10_000)
        assert watched.problems == [], watched.problems
    finally:
        watched.close()


def test_promote_from_the_review_page_is_done_and_audited(browser, small) -> None:
    server, held = small
    watched = Watched(browser)
    page = watched.page
    try:
        watched.open(server.base + "/panel/review")
        row = page.locator("#quarantined tr", has_text="eviction")
        row.locator("button.promote").click()
        page.wait_for_selector("p.done")
        assert "eviction" not in page.content()
        assert watched.problems == [], watched.problems
    finally:
        watched.close()
    mem = Memory.open(settings_for(server.where))
    try:
        rows = [r for r in mem.store.audit_rows(0, 10_000) if r["action"] == "memory.promote"]
        assert any(json.loads(r["payload"])["id"] == held for r in rows)
        assert mem.store.get_observation(held, mem.scope(None)).trust == "trusted"
    finally:
        mem.close()


def test_a_ten_thousand_entity_graph_is_clustered_and_stays_responsive(browser, tmp_path: Path) -> None:
    where = StoreLocation("sqlite", tmp_path / "data")
    seed_large(where)
    server = Server(where, tmp_path / "server.log", CUBA_PANEL="1", CUBA_EMBED_MODEL="none",
                    CUBA_REM_FIRST_DELAY_SECS="3600").start()
    watched = Watched(browser)
    page = watched.page
    try:
        started = time.monotonic()
        watched.open(server.base + "/panel/graph")
        page.wait_for_selector("#graph[data-ready='1']", timeout=60_000)
        loaded = time.monotonic() - started
        status = page.locator("#graph-status").text_content() or ""
        drawn = int(page.locator("#graph-status").get_attribute("data-drawn") or 0)
        assert "communities of 10000 entities" in status and 1 < drawn < 1000, status
        assert painted(page) > 0  # never blank
        # responsive: a zoom redraws at once (the page is not busy)
        box = page.locator("#graph").bounding_box()
        page.mouse.move(box["x"] + 100, box["y"] + 100)
        before = time.monotonic()
        page.mouse.wheel(0, -200)
        page.locator("#graph-status").text_content()
        assert time.monotonic() - before < 1.0
        # a filter that still matches thousands draws the most important ones, not a blank canvas
        watched.open(server.base + "/panel/graph?type=concept")
        page.wait_for_selector("#graph[data-ready='1']", timeout=60_000)
        status = page.locator("#graph-status").text_content() or ""
        assert "most important of 10000 matching entities" in status, status
        assert painted(page) > 0
        before = time.monotonic()
        page.mouse.wheel(0, -200)
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
        assert time.monotonic() - before < 1.0
        assert watched.problems == [], watched.problems
        print(f"10k-entity graph page drawn in {loaded:.2f} s")
    finally:
        watched.close()
        server.stop()


def test_a_near_duplicate_merge_from_the_review_page_is_audited_undone_and_shows_no_other_project(
        browser, tmp_path: Path) -> None:
    where = StoreLocation("sqlite", tmp_path / "data")
    seed_small(where)
    tokens = tmp_path / "tokens.json"
    mem = Memory.open(settings_for(where))
    try:
        token = principals.add(mem, tokens, "ada", ["alpha=admin"])["token"]
    finally:
        mem.close()
    server = Server(where, tmp_path / "server.log", CUBA_PANEL="1", CUBA_EMBED_MODEL="none",
                    CUBA_REM_FIRST_DELAY_SECS="3600", CUBA_TOKENS_FILE=str(tokens)).start()
    watched = Watched(browser)
    page = watched.page
    try:
        watched.open(server.base + "/panel/review")
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_url("**/panel")
        page.select_option("header select[name=name]", "alpha")
        page.click("header form.project button")
        page.wait_for_load_state("load")
        watched.open(server.base + "/panel/review")
        table = page.locator("#duplicates")
        assert "auth-service" in table.inner_text() and "Auth Service" in table.inner_text()
        assert "beta" not in page.content().lower().replace("alpha", "")  # neither beta's pair nor its name
        shot(page, "review-duplicates")
        table.locator("tr", has_text="auth-service").locator("button.merge").click()
        page.wait_for_selector("p.done")
        assert "merged 'auth-service' into 'Auth Service'" in page.locator("p.done").inner_text()
        assert "auth-service" not in page.locator("body").inner_text().replace(
            page.locator("p.done").inner_text(), "")
        page.click("#undo-merge")
        page.wait_for_selector("p.done:has-text('undone')")
        assert "auth-service" in page.locator("#duplicates").inner_text()
        assert watched.problems == [], watched.problems
    finally:
        watched.close()
        server.stop()
    mem = Memory.open(settings_for(where))
    try:
        actions = [r["action"] for r in mem.store.audit_rows(0, 10_000)]
        assert "memory.dedupe_merge" in actions and "memory.undo" in actions
        assert {"auth-service", "Auth Service"} <= {r["name"] for r in mem.store.entity_names(mem.scope(None))}
    finally:
        mem.close()
