"""Graph reports that take seconds at scale (cuba_vigia bridges and structural, cuba_reflexion
analyze), kept between calls.

Above CACHE_ABOVE entities a report is stored in the store's metadata with the graph's
fingerprint (counts, highest ids and sums of what the reports read); a call whose graph has not
changed since is answered from it, saying `computed_at`. The consolidation cycle refreshes them,
so an agent's first call after a cycle is answered at once. Below the threshold they are computed
every time (fast enough, and always current).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cuba_memorys.models import iso, utc_now
from cuba_memorys.services.memory import Memory

CACHE_ABOVE = 20_000  # entities in scope: below, a report is computed on every call
Report = Callable[[Memory, str | None], Any]


def _key(name: str, mem: Memory, client: str | None) -> str:
    scope = mem.scope(client)
    return f"report:{name}:{scope.project_id or '*'}:{int(scope.include_unscoped)}"


def cached(name: str, compute: Report) -> Report:
    """``compute`` served from its stored answer while the graph it read is unchanged."""
    def report(mem: Memory, client: str | None) -> Any:
        scope = mem.scope(client)
        if mem.store.scope_counts(scope)["entities"] < CACHE_ABOVE:
            return compute(mem, client)
        stamp = mem.store.graph_fingerprint(scope)
        raw = mem.store.get_meta(_key(name, mem, client))
        saved = json.loads(raw) if raw else None
        if saved and saved.get("fingerprint") == stamp:
            return {**saved["answer"], "computed_at": saved["computed_at"]}
        return _store(mem, client, name, compute, stamp)

    report.__name__ = compute.__name__
    report.__doc__ = compute.__doc__
    return report


def _store(mem: Memory, client: str | None, name: str, compute: Report, stamp: str) -> Any:
    answer = compute(mem, client)
    at = iso(utc_now())
    if not mem.store.read_only:  # a standby answers live; its primary keeps the stored reports
        mem.store.set_meta(_key(name, mem, client), json.dumps({"fingerprint": stamp, "computed_at": at,
                                                                 "answer": answer}, ensure_ascii=False))
    return {**answer, "computed_at": at}


def refresh(mem: Memory, client: str | None, reports: dict[str, Report]) -> int:
    """Recompute and store every report of a large graph (the consolidation cycle's step)."""
    scope = mem.scope(client)
    if mem.store.scope_counts(scope)["entities"] < CACHE_ABOVE:
        return 0
    stamp = mem.store.graph_fingerprint(scope)
    for name, compute in reports.items():
        _store(mem, client, name, compute, stamp)
    return len(reports)
