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
from cuba_memorys.services.graph import entities, projects, relations
from cuba_memorys.services.lifecycle import feedback
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from test_http import Server

CHROMIUM = Path("/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
if not CHROMIUM.exists():
    pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run does)", allow_module_level=True)

SEEDED_ENTITIES = 6
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "panel"


def seed_small(where: StoreLocation) -> str:
    """Six entities in project alpha, related, one quarantined observation (its id returned)."""
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
            shot(page, name)
        watched.open(server.base + "/panel/search?query=checkout+redis")
        bars = page.locator("svg.score-bars")
        assert bars.count() >= 2
        assert page.locator("svg.score-bars rect.bar").first.get_attribute("width") not in (None, "0.0")
        watched.open(server.base + "/panel/graph")
        page.wait_for_selector("#graph-status:has-text('drawn')")
        assert page.locator("#graph-status").get_attribute("data-drawn") == str(SEEDED_ENTITIES)
        shot(page, "graph")
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
        page.wait_for_selector("#graph-status:has-text('drawn')", timeout=60_000)
        loaded = time.monotonic() - started
        status = page.locator("#graph-status").text_content() or ""
        drawn = int(page.locator("#graph-status").get_attribute("data-drawn") or 0)
        assert "communities of 10000 entities" in status and 1 < drawn < 1000, status
        # responsive: a zoom redraws at once (the page is not busy)
        box = page.locator("#graph").bounding_box()
        page.mouse.move(box["x"] + 100, box["y"] + 100)
        before = time.monotonic()
        page.mouse.wheel(0, -200)
        page.locator("#graph-status").text_content()
        assert time.monotonic() - before < 1.0
        assert watched.problems == [], watched.problems
        print(f"10k-entity graph page drawn in {loaded:.2f} s")
    finally:
        watched.close()
        server.stop()
