"""Time a query implies, and the soft boost it gives."""

from datetime import UTC, datetime

import pytest

from cuba_memorys.search.temporal import implied_window
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("query, start, end", [
    ("what did we change in March 2024?", "2024-03-01", "2024-04-01"),
    ("qué decidimos en diciembre de 2025", "2025-12-01", "2026-01-01"),
    ("bugs fixed in 2023", "2023-01-01", "2024-01-01"),
    ("what broke yesterday", "2026-11-28", "2026-11-29"),
    ("¿qué pasó ayer?", "2026-11-28", "2026-11-29"),
    ("what did we ship last week", "2026-11-22", "2026-11-29"),
    ("notes from October", "2026-10-01", "2026-11-01"),
])
def test_windows(query, start, end):
    window = implied_window(query, NOW)
    assert window is not None and window[0].startswith(start) and window[1].startswith(end)


@pytest.mark.parametrize("query", ["may I deploy on fridays?", "how do we march the migration forward",
                                   "port 2023 is open", "why is the cache slow"])
def test_no_window(query):
    assert implied_window(query, NOW) is None


def test_rows_from_the_named_period_rise(memory):
    observations.batch_add(memory, None, [
        {"entity_name": "db", "content": "Upgraded the database cluster to version 15",
         "created_at": "2024-03-10T10:00:00Z"},
        {"entity_name": "db", "content": "Upgraded the database cluster to version 16",
         "created_at": "2025-06-10T10:00:00Z"},
    ])
    plain = search.faro(memory, None, query="database upgrade", scope="observations", format="verbose")
    dated = search.faro(memory, None, query="database upgrade in March 2024", scope="observations", format="verbose")
    assert dated["results"][0]["created_at"].startswith("2024-03-10")
    assert {r["id"] for r in dated["results"]} == {r["id"] for r in plain["results"]}  # re-weights, never filters
