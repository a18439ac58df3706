"""The review lists read an index, not every observation (migration 0018).

`cuba_eco pending` (quarantined rows) and `cuba_decreto list` (observations of one type) back the
panel's Overview, Review and Timeline; at 100k rows they were full scans (~250 ms each,
docs/benchmarks.md "Web panel"). The plan is read from each backend's own EXPLAIN."""

from __future__ import annotations

import pytest

QUARANTINED = ("SELECT id FROM observations WHERE trust = 'quarantined'"
               " ORDER BY created_at DESC LIMIT 5")
DECISIONS = ("SELECT id FROM observations WHERE observation_type = 'decision'"
             " ORDER BY created_at DESC LIMIT 5")


def _plan(memory, sql: str) -> str:
    store = memory.store
    if memory.settings.database_url:
        store._exec("SET enable_seqscan = off")  # a small table would be scanned whatever the indexes
        rows = store._q("EXPLAIN " + sql)
    else:
        rows = store._q("EXPLAIN QUERY PLAN " + sql)
    return " ".join(" ".join(str(v) for v in dict(r).values()) for r in rows)


@pytest.mark.parametrize(("sql", "index"), [(QUARANTINED, "observations_quarantined"),
                                            (DECISIONS, "observations_type_created")])
def test_the_review_lists_use_their_index(memory, sql, index):
    assert index in _plan(memory, sql)
