"""The web panel's speed (issue 20): server time per page at 100k observations, and the graph
page with 10k entities interactive in headless Chromium.

Store: built in-process straight through the SQLite store (seconds, not the hours the services'
embedding would take): ENTITIES entities with two-word names, OBSERVATIONS observations spread
over them (sentences of a fixed word list, random unit vectors labelled as the real model's, so
search embeds its query with the real model and scores real-sized vectors), a fact per
observation, ~2 relations per entity in 40 loose clusters, and some episodes, errors, sessions
and decisions for the timeline. Kept in --store (default: a temporary folder) and reused with
--reuse.

Server time: starlette's TestClient over serve's own app (server/app.http_app, the panel on, no
token), so the number is the handler's time without a socket; each page ``--requests`` times
(default 30) after one warm-up request, p50/p95/max in ms, and the warm-up apart (``first_ms``:
the doctor's checks and the near-duplicate pairs are computed then and reused, server/panel/
cache.py). The graph's JSON is timed cold (first request: community detection and the layout)
and warm (the layout cached).

Browser: a real `cuba-memorys serve` with CUBA_PANEL=1 on the same store, Debian's
/usr/bin/chromium driven by Playwright: navigation to the graph page until graph.js sets
``data-ready`` on the canvas (after the first frame that drew the nodes), ``--loads`` times; also a
zoom's redraw, and the type-filtered view (one of three types: ~3,400 entities drawn one by one).

    .venv/bin/python bench/panel_pages.py                      # build, time, print JSON
    .venv/bin/python bench/panel_pages.py --store /tmp/panel-100k --reuse --out panel.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cuba_memorys.config import Settings  # noqa: E402
from cuba_memorys.models import NewObservation, iso, new_id  # noqa: E402
from cuba_memorys.services.benchmarks.metrics import percentile  # noqa: E402

SERVER = Path(sys.executable).with_name("cuba-memorys")
CHROMIUM = Path("/usr/bin/chromium")
MODEL, DIM = "multilingual-e5-small", 384
ENTITIES, OBSERVATIONS, CLUSTERS = 10_000, 100_000, 40
SEED = 20261202
_WORD_TEXT = ("cache checkout billing invoice queue redis postgres index vector search token session login deploy"
         " build worker retry timeout gateway schema migration replica shard backup metric alert trace span"
         " config secret rotate webhook payment refund ledger report export import sync peer conflict merge"
         " branch commit review test fixture mock latency throughput memory graph node edge community")
WORDS = tuple(_WORD_TEXT.split())


def build(data_dir: Path) -> dict:
    """The store described above, in ``data_dir`` (replaced)."""
    from cuba_memorys.storage.rows import FactRow
    from cuba_memorys.storage.sqlite.store import SqliteStore

    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    rng = random.Random(SEED)
    vectors = np.random.default_rng(SEED)
    store = SqliteStore(data_dir / "memory.db", DIM)
    store.set_meta("embedding_model", MODEL)
    store.set_meta("embedding_dim", str(DIM))
    t0 = time.perf_counter()
    names = sorted({f"{rng.choice(WORDS)} {rng.choice(WORDS)} {n}" for n in range(ENTITIES)})
    start = datetime(2026, 6, 1, tzinfo=UTC)
    entities = []
    with store.transaction():
        for name in names:
            entities.append(store.create_entity(name, rng.choice(("concept", "technology", "pattern")), None))
    for begin in range(0, OBSERVATIONS, 2000):
        with store.transaction():
            for n in range(begin, min(OBSERVATIONS, begin + 2000)):
                entity = entities[n % len(entities)]
                content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) + f" ({n})"
                vec = vectors.standard_normal(DIM).astype(np.float32)
                vec /= np.linalg.norm(vec)
                at = iso(start + timedelta(minutes=3 * n))
                obs_id = store.add_observation(NewObservation(
                    entity_id=entity.id, content=content, observation_type=rng.choice(("fact", "context", "lesson")),
                    importance=rng.random(), created_at=at, embedding=vec.tobytes(), embedding_model=MODEL))
                store.open_fact(FactRow(fact_id=new_id(), subject_entity_id=entity.id, observation_id=obs_id,
                                        project_id=None, subject=entity.name, predicate="fact", object=content,
                                        valid_from=at, valid_to=None, observed_at=at, confidence=0.8,
                                        is_current=True, created_at=at))
    with store.transaction():
        for i, entity in enumerate(entities):
            for _ in range(2):
                j = rng.randrange(i % CLUSTERS, len(entities), CLUSTERS)
                if j != i:
                    store.upsert_relation(entity.id, entities[j].id, "related_to", False, None)
        for n in range(500):
            entity = entities[rng.randrange(len(entities))]
            store.add_episode(entity.id, f"episode {n}: " + " ".join(rng.choice(WORDS) for _ in range(12)), [], [],
                              0.5, None, None, None, created_at=iso(start + timedelta(hours=n)))
            store.add_error(rng.choice(("TimeoutError", "KeyError", "OSError")), f"error {n} in {entity.name}", {},
                            "default", None, None)
        for n in range(100):
            store.start_session(f"session {n}", ["ship the panel"], "bench", None)
    store.close()
    return {"entities": len(entities), "observations": OBSERVATIONS, "seconds": round(time.perf_counter() - t0, 1)}


def settings_for(data_dir: Path) -> Settings:
    from dataclasses import replace

    return replace(Settings.from_env(), data_dir=data_dir, database_url="", undo_dir=data_dir / "undo", panel=True,
                   embed_queue=False)


def time_pages(data_dir: Path, requests: int) -> dict:
    """p50/p95/max ms per page through the app in process."""
    from starlette.testclient import TestClient

    from cuba_memorys.server.app import http_app
    from cuba_memorys.services.memory import Memory

    mem = Memory.open(settings_for(data_dir))
    rng = random.Random(SEED)
    names = [r["name"] for r in mem.store.entity_names(mem.scope(None))]
    pages = {
        "overview": lambda: "/panel",
        "search": lambda: "/panel/search?query=" + "+".join(rng.choice(WORDS) for _ in range(3)),
        "entity": lambda: "/panel/entity?name=" + rng.choice(names).replace(" ", "%20"),
        "graph page": lambda: "/panel/graph",
        "graph.json": lambda: "/panel/graph.json",
        "timeline": lambda: "/panel/timeline",
        "review": lambda: "/panel/review",
        "calibration": lambda: "/panel/calibration",
        "baseline: /health (the app's floor)": lambda: "/health",
    }
    from cuba_memorys.server.events_http import OPERATOR
    from cuba_memorys.server.panel import calls

    def service(tool: str, action: str, **kwargs: object) -> Callable[[], object]:
        return lambda: calls.run(mem, OPERATOR, tool, action, **kwargs)

    # the baseline, measured in the same run: what the services alone cost for the slow pages
    baselines = {
        "cuba_faro hybrid (the search page's call)": lambda: calls.run(
            mem, OPERATOR, "cuba_faro", "hybrid", query=" ".join(rng.choice(WORDS) for _ in range(3)),
            format="verbose", track_access=False),
        "cuba_eco pending (overview, review)": service("cuba_eco", "pending", limit=50),
        "cuba_decreto list (timeline)": service("cuba_decreto", "list"),
    }
    found: dict[str, dict] = {}
    for name, fn in baselines.items():
        fn()
        times = []
        for _ in range(requests):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        found["baseline: " + name] = {"p50_ms": round(statistics.median(times), 1),
                                      "p95_ms": round(percentile(times, 95), 1), "requests": requests}
    try:
        app = http_app(mem, "127.0.0.1", "", None)
        with TestClient(app, base_url="http://127.0.0.1:8787") as client:
            t0 = time.perf_counter()
            cold = client.get("/panel/graph.json")
            found["graph.json cold"] = {"ms": round((time.perf_counter() - t0) * 1000, 1),
                                        "nodes": len(cold.json()["nodes"]), "clustered": cold.json()["clustered"]}
            for name, path in pages.items():
                t0 = time.perf_counter()
                assert client.get(path()).status_code == 200, name  # warm-up: the cold caches, timed apart
                first = (time.perf_counter() - t0) * 1000
                times = []
                for _ in range(requests):
                    url = path()
                    t0 = time.perf_counter()
                    got = client.get(url)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert got.status_code == 200, (url, got.text[:300])
                found[name] = {"p50_ms": round(statistics.median(times), 1),
                               "p95_ms": round(percentile(times, 95), 1), "max_ms": round(max(times), 1),
                               "requests": requests, "first_ms": round(first, 1)}
    finally:
        mem.close()
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_browser(data_dir: Path, loads: int) -> dict:
    """Navigation to the graph page until the canvas's data-ready, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_")}
    env.update(CUBA_DATA_DIR=str(data_dir), CUBA_PANEL="1", CUBA_EMBED_MODEL="none",
               CUBA_REM_FIRST_DELAY_SECS="3600", CUBA_UNDO_DIR=str(data_dir / "undo"))
    log = open(data_dir.parent / "panel-serve.log", "ab")  # noqa: SIM115 (the child holds it)
    proc = subprocess.Popen([str(SERVER), "serve", f"127.0.0.1:{port}"], env=env, stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(600):
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            result: dict = {}
            for label, path in (("whole graph (clustered)", "/panel/graph"),
                                ("type filter (concept)", "/panel/graph?type=concept")):
                times, drawn = [], ""
                for _ in range(loads):
                    t0 = time.perf_counter()
                    page.goto(base + path)
                    page.wait_for_selector("#graph[data-ready='1']", timeout=120_000)
                    times.append(time.perf_counter() - t0)
                    drawn = page.locator("#graph-status").text_content() or ""
                box = page.locator("#graph").bounding_box()
                page.mouse.move(box["x"] + 200, box["y"] + 200)
                t0 = time.perf_counter()
                page.mouse.wheel(0, -200)
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
                zoom = time.perf_counter() - t0
                result[label] = {"first_s": round(times[0], 2), "median_s": round(statistics.median(times), 2),
                                 "max_s": round(max(times), 2), "loads": loads, "status": drawn,
                                 "zoom_redraw_ms": round(zoom * 1000, 1)}
            browser.close()
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, default=None, help="store folder (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="use the store already in --store")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.store or Path(tempfile.mkdtemp(prefix="panel-bench-"))
    data_dir = folder / "data"
    report: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_before": os.getloadavg()}
    report["store"] = {"reused": True} if args.reuse and data_dir.exists() else build(data_dir)
    report["pages"] = time_pages(data_dir, args.requests)
    report["browser"] = time_browser(data_dir, args.loads) if CHROMIUM.exists() else "no /usr/bin/chromium"
    report["load_after"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
