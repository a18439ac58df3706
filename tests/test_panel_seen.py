"""What a person sees on the panel of a realistic store (issue 30, items 15-17): the overview in
words, the graph with names and a legend, error search rows, a principal's landing and buttons,
a reject that shows, no near-duplicate pairs that differ only in a number. A real `serve` with
principals, Debian's /usr/bin/chromium through Playwright (test_panel_browser.py's browser and
page helpers). PANEL_SCREENSHOTS=1 writes the docs' screenshots of these pages (docs/panel/)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import StoreLocation, settings_for
from cuba_memorys.services import incidents
from cuba_memorys.services.admin import principals
from cuba_memorys.services.graph import entities, episodes, projects, relations
from cuba_memorys.services.lifecycle import feedback, rem
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.workflow import decisions
from test_http import Server
from test_panel_browser import Watched, browser, shot  # noqa: F401  (browser: the module's fixture)

OPERATOR = "o" * 40
WIDE = {"width": 1600, "height": 1000}
TECHNOLOGIES = ["Checkout API", "Redis", "Postgres", "Billing", "Auth Service", "Kafka", "Stripe", "Nginx",
                "Grafana", "Search Index", "Mailer", "Cart", "Inventory", "Payments Gateway", "CDN"]
LINKS = [(0, 1), (0, 2), (3, 2), (4, 0), (5, 3), (6, 3), (7, 0), (8, 2), (9, 2), (10, 3), (11, 0), (12, 11),
         (13, 6), (14, 7), (1, 5), (13, 3), (11, 12), (9, 0)]
# four errors with the word "timeout" (two the same message: two incidents), one that only says "timed out"
TIMEOUTS = ["upstream timeout calling the payments API", "upstream timeout calling the payments API",
            "redis timeout on GET cart:*", "the Kafka consumer hit a timeout while rebalancing"]
OTHER_ERRORS = [("TimeoutError", "checkout timed out after 30 s"), ("KeyError", "missing 'currency' in invoice")]
UNRESOLVED = len(TIMEOUTS) + len(OTHER_ERRORS)  # and one resolved besides


def seed(where: StoreLocation, tokens: Path) -> str:
    """Project shop: 15 technologies with 2-4 observations each and 18 relations, 8 conversation
    sessions in a chain (conv-26:session_1 …), errors (6 unresolved, 1 resolved), a quarantined
    observation, an exact near-duplicate pair, an episode and a decision; project blog: three
    entities. A consolidation cycle has run. Returns the token of rita (shop=reader)."""
    mem = Memory.open(settings_for(where))
    try:
        projects.switch(mem, None, name="shop")
        for n, name in enumerate(TECHNOLOGIES):
            entities.create(mem, None, name=name, entity_type="technology")
            for k in range(2 + n % 3):
                write.add(mem, None, entity_name=name, content=f"{name} fact {k}: part of the checkout path")
        for a, b in LINKS:
            relations.create(mem, None, from_entity=TECHNOLOGIES[a], to_entity=TECHNOLOGIES[b],
                             relation_type="depends_on")
        for s in range(1, 9):
            write.add(mem, None, entity_name=f"conv-26:session_{s}", content=f"session {s} of conversation 26")
            if s > 1:
                relations.create(mem, None, from_entity=f"conv-26:session_{s - 1}",
                                 to_entity=f"conv-26:session_{s}", relation_type="related_to")
        for message in TIMEOUTS:
            incidents.report(mem, None, error_type="TimeoutError", error_message=message)
        for kind, message in OTHER_ERRORS:
            incidents.report(mem, None, error_type=kind, error_message=message)
        fixed = incidents.report(mem, None, error_type="ValueError", error_message="negative quantity in cart")
        incidents.resolve(mem, None, error_id=fixed["error_id"], solution="validate the form")
        held = write.add(mem, None, entity_name="Redis", content="an untrusted note about eviction")["id"]
        feedback.quarantine(mem, None, observation_id=held)
        write.add(mem, None, entity_name="auth-service", content="auth-service signs the session tokens")
        episodes.add(mem, None, entity_name="Billing", content="the March invoices were sent twice")
        decisions.record(mem, None, title="Retry invoices once", context="duplicates", alternatives=["never"],
                         chosen="once", rationale="idempotent keys")
        projects.switch(mem, None, name="blog")
        for name in ("Hugo", "Netlify", "Comments"):
            write.add(mem, None, entity_name=name, content=f"{name} is part of the blog")
        projects.switch(mem, None, name="*")
        rem.run_cycle(mem, trigger="cli")
        return str(principals.add(mem, tokens, "rita", ["shop=reader"])["token"])
    finally:
        mem.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Server, str]]:
    folder = tmp_path_factory.mktemp("seen")
    where = StoreLocation("sqlite", folder / "data")
    tokens = folder / "tokens.json"
    rita = seed(where, tokens)
    server = Server(where, folder / "server.log", CUBA_PANEL="1", CUBA_EMBED_MODEL="none",
                    CUBA_REM_FIRST_DELAY_SECS="3600", CUBA_HTTP_TOKEN=OPERATOR,
                    CUBA_TOKENS_FILE=str(tokens)).start()
    yield server, rita
    server.stop()


def logged_in(browser, server: Server, token: str) -> Watched:  # noqa: F811  (the fixture's value)
    watched = Watched(browser)
    watched.page.set_viewport_size(WIDE)
    watched.open(server.base + "/panel/login")
    watched.page.fill("input[name=token]", token)
    watched.page.click("button[type=submit]")
    watched.page.wait_for_url("**/panel")
    return watched


def text_of(page, selector: str = "main") -> str:
    return page.locator(selector).inner_text()


def test_the_overview_says_in_words_what_the_store_holds_and_what_needs_attention(browser, served) -> None:  # noqa: F811
    server, _ = served
    watched = logged_in(browser, server, OPERATOR)
    page = watched.page
    try:
        shown = text_of(page)
        for raw in (r"\bNone\b", r"\bFalse\b", r"\bTrue\b", r"\{'", r"\d\d:\d\d:\d\d\.\d+", r"\+00:00"):
            assert not re.search(raw, shown), (raw, shown)
        assert "of the whole store" in text_of(page, "h1")
        cards = {label: value for value, label in re.findall(r"([\d,]+)\s+(\w+)", text_of(page, "#counts"))}
        assert cards.get("entities") and cards.get("errors") == str(UNRESOLVED + 1)
        assert text_of(page, "#problem-unresolved-errors").split()[0] == str(UNRESOLVED)
        assert text_of(page, "#problem-quarantined").split()[0] == "1"
        latest = text_of(page, "#unresolved-errors")
        assert "TimeoutError: upstream timeout calling the payments API" in latest and "KeyError" in latest
        assert re.search(r"Last cycle finished (just now|\d+ min ago) \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)",
                         text_of(page, "#consolidation"))
        # the page uses a wide window's width (it stopped at 1,100 px)
        width = page.evaluate("() => document.querySelector('.overview-grid').getBoundingClientRect().width")
        assert width >= 0.9 * WIDE["width"], width
        shot(page, "overview")
        assert watched.problems == [], watched.problems
    finally:
        watched.close()


def test_the_graph_names_its_best_ranked_entities_has_a_legend_and_opens_a_clicked_node(browser, served) -> None:  # noqa: F811
    server, _ = served
    watched = logged_in(browser, server, OPERATOR)
    page = watched.page
    try:
        watched.open(server.base + "/panel/graph?project=shop")
        page.wait_for_selector("#graph[data-ready='1']")
        body = page.request.get(server.base + "/panel/graph.json?project=shop").json()
        best = max(body["nodes"], key=lambda n: n["rank"])
        labels = json.loads(page.locator("#graph").get_attribute("data-labels") or "[]")
        names = [label["name"] for label in labels]
        assert best["name"] in names and len(names) >= 12, names
        boxes = [label["box"] for label in labels]
        for i, (x, y, w, h) in enumerate(boxes):  # readable: no name covers another
            for x2, y2, w2, h2 in boxes[i + 1:]:
                assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, (boxes[i], (x2, y2, w2, h2))
        # the legend says what a colour is, and its swatch is the colour the canvas drew (so it is drawn)
        rows = page.locator("#legend-communities li")
        assert rows.count() >= 3 and "entities" in rows.first.inner_text()
        assert "importance" in text_of(page, "#legend-size")
        top = next(label for label in labels if label["name"] == best["name"])
        drawn = page.evaluate("""([x, y]) => Array.from(document.getElementById("graph").getContext("2d")
            .getImageData(x * devicePixelRatio, y * devicePixelRatio, 1, 1).data.slice(0, 3))""", [top["x"], top["y"]])
        swatch = page.evaluate("""(c) => getComputedStyle(document.querySelector(".swatch-" + c)).backgroundColor""",
                               best["colour"])
        assert f"rgb({drawn[0]}, {drawn[1]}, {drawn[2]})" == swatch, (drawn, swatch)
        # the canvas takes the window's width, the legend sits beside it
        canvas = page.locator("#graph").bounding_box()
        legend = page.locator("#graph-legend").bounding_box()
        assert canvas["width"] >= 0.7 * WIDE["width"] and legend["x"] >= canvas["x"] + canvas["width"], (canvas,
                                                                                                        legend)
        shot(page, "graph")
        page.mouse.click(canvas["x"] + top["x"], canvas["y"] + top["y"])
        page.wait_for_url("**/panel/entity?name=*")
        assert text_of(page, "#entity-name") == best["name"]
        assert watched.problems == [], watched.problems
    finally:
        watched.close()


def test_an_error_search_shows_each_errors_type_and_message_and_finds_all_with_the_word(browser, served) -> None:  # noqa: F811
    server, _ = served
    watched = logged_in(browser, server, OPERATOR)
    page = watched.page
    try:
        watched.open(server.base + "/panel/search?query=timeout&scope=errors")
        results = page.locator("li.result")
        assert results.count() == len(TIMEOUTS), text_of(page)  # the two same messages are two incidents
        for n in range(results.count()):
            row = page.locator("li.result p.error-row").nth(n).inner_text()
            assert row.startswith("TimeoutError: ") and "timeout" in row.removeprefix("TimeoutError: "), row
        assert text_of(page, "ol.results").count("unresolved · reported") == len(TIMEOUTS)
        shot(page, "search-errors")
        assert watched.problems == [], watched.problems
    finally:
        watched.close()


def test_a_principal_lands_in_its_project_and_sees_disabled_what_it_may_not_do(browser, served) -> None:  # noqa: F811
    server, rita = served
    watched = logged_in(browser, server, rita)
    page = watched.page
    try:
        assert "of project shop" in text_of(page, "h1")
        assert "no active project" not in text_of(page) and page.locator("#counts .card").count() >= 5
        assert text_of(page, "#problem-unresolved-errors").split()[0] == str(UNRESOLVED)
        watched.open(server.base + "/panel/review")
        for button in ("button.promote", "button.reject", "button.merge", "button.merge-reverse"):
            found = page.locator(button)
            assert found.count() >= 1 and all(found.nth(n).is_disabled() for n in range(found.count())), button
        why = text_of(page, "#refusal-promote")
        assert "needs admin on project 'shop'" in why and "`cuba-memorys principal grant rita shop=admin`" in why
        assert "principals" not in text_of(page)
        assert "cuba-memorys principal grant rita shop=writer" in text_of(page, "#refusal-reject")
        shot(page, "review-reader")
        assert watched.problems == [], watched.problems
    finally:
        watched.close()


def test_the_review_offers_no_near_duplicate_pair_that_differs_only_in_a_number(browser, served) -> None:  # noqa: F811
    server, _ = served
    watched = logged_in(browser, server, OPERATOR)
    try:
        watched.open(server.base + "/panel/review")
        duplicates = text_of(watched.page, "#duplicates")
        assert "auth-service" in duplicates and "session_" not in duplicates, duplicates  # one merge fused two
        assert watched.problems == [], watched.problems
    finally:
        watched.close()


def test_a_rejected_row_says_it_was_rejected(browser, served) -> None:  # noqa: F811
    server, _ = served
    watched = logged_in(browser, server, OPERATOR)
    page = watched.page
    try:
        watched.open(server.base + "/panel/review")
        row = page.locator("#quarantined tr", has_text="eviction")
        before = row.locator("td").nth(2).inner_text()
        row.locator("button.reject").click()
        page.wait_for_selector("p.done")
        assert "rejected" in text_of(page, "p.done")
        for visit in ("at once", "on the next visit"):
            row = page.locator("#quarantined tr", has_text="eviction")
            assert "rejected" in (row.get_attribute("class") or "") and row.locator(".badge.rejected").count() == 1
            assert row.locator("button.reject").count() == 0 and row.locator("button.promote").is_enabled(), visit
            assert float(row.locator("td").nth(2).inner_text()) < float(before), visit
            if visit == "at once":
                shot(page, "review")
                watched.open(server.base + "/panel/review")
        assert watched.problems == [], watched.problems
    finally:
        watched.close()
