"""Server-rendered SVG: the search page's score bars, the reliability diagram, the timeline's lanes
and an entity's facts over time. Sizes are attributes (width=, x=), never
style= attributes, which the panel's CSP (style-src 'self') blocks; all text is escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from markupsafe import Markup, escape

BAR_WIDTH = 160  # px of a full bar
ROW_HEIGHT = 14
LABELS = {"score": "final", "fused_score": "fusion", "text_score": "text", "bm25_score": "BM25",
          "vector_score": "vector"}


def score_bars(scores: dict[str, object], top: dict[str, float] | None = None) -> Markup:
    """One bar per channel score; the number shows the value as given. A channel with no upper
    bound (BM25) is drawn relative to ``top[key]``, the largest in the result list; the others are
    0-1, clamped. A channel that did not score the row (None) says so instead of an empty bar."""
    rows = []
    for i, (key, value) in enumerate(scores.items()):
        y = i * ROW_HEIGHT
        label = escape(LABELS.get(key, key))
        if isinstance(value, int | float) and not isinstance(value, bool):
            scale = (top or {}).get(key) or 1.0
            width = round(max(0.0, min(1.0, float(value) / max(scale, 1.0))) * BAR_WIDTH, 1)
            shown = f"{float(value):.3f}"
            bar = f'<rect class="bar bar-{escape(key)}" x="52" y="{y + 2}" width="{width}" height="10"></rect>'
        else:
            shown, bar = "none", ""
        rows.append(f'<g><text class="bar-label" x="0" y="{y + 11}">{label}</text>'
                    f'<rect class="bar-track" x="52" y="{y + 2}" width="{BAR_WIDTH}" height="10"></rect>{bar}'
                    f'<text class="bar-value" x="{56 + BAR_WIDTH}" y="{y + 11}">{shown}</text></g>')
    height = len(rows) * ROW_HEIGHT
    return Markup(f'<svg class="score-bars" role="img" aria-label="scores per channel" width="{BAR_WIDTH + 110}"'
                  f' height="{height}" viewBox="0 0 {BAR_WIDTH + 110} {height}" xmlns="http://www.w3.org/2000/svg">'
                  + "".join(rows) + "</svg>")


DIAGRAM = 240  # px square of the reliability diagram


def reliability_diagram(bins: list[dict[str, object]]) -> Markup:
    """Accuracy against confidence per bin (cuba_calibrar metrics): a bar per non-empty bin from
    its confidence range, its height the accuracy, over the diagonal of perfect calibration."""
    pad, size = 28, DIAGRAM
    parts = [f'<line class="diagonal" x1="{pad}" y1="{pad + size}" x2="{pad + size}" y2="{pad}"></line>',
             f'<rect class="frame" x="{pad}" y="{pad}" width="{size}" height="{size}"></rect>']
    for b in bins:
        lo, hi, acc = (float(str(b.get(k, 0))) for k in ("bin_lo", "bin_hi", "accuracy"))
        height = round(max(0.0, min(1.0, acc)) * size, 1)
        parts.append(f'<rect class="bin" x="{pad + round(lo * size, 1)}" y="{pad + size - height}"'
                     f' width="{round((hi - lo) * size - 2, 1)}" height="{height}"><title>{escape(lo)}-{escape(hi)}:'
                     f' accuracy {escape(acc)}, n {escape(b.get("n"))}</title></rect>')
    for tick in (0, 0.5, 1):
        parts.append(f'<text class="tick" x="{pad + tick * size - 6}" y="{pad + size + 14}">{tick}</text>'
                     f'<text class="tick" x="2" y="{pad + size - tick * size + 4}">{tick}</text>')
    parts.append(f'<text class="axis" x="{pad + size / 2 - 30}" y="{pad + size + 26}">confidence</text>')
    total = size + 2 * pad
    return Markup(f'<svg class="reliability" id="reliability" role="img" aria-label="reliability diagram"'
                  f' width="{total}" height="{total}" viewBox="0 0 {total} {total}"'
                  f' xmlns="http://www.w3.org/2000/svg">' + "".join(parts) + "</svg>")


LANE_WIDTH, LANE_HEIGHT, LANE_LABEL = 720, 22, 70  # px: the timeline page's chart


def _when(value: object) -> datetime | None:
    try:
        found = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _span(times: list[datetime]) -> tuple[datetime, float]:
    start, end = min(times), max(times)
    return start, max((end - start).total_seconds(), 1.0)


def _label(at: datetime, seconds: float) -> str:
    """A date, or a date and time when the whole span is under two days."""
    return at.strftime("%Y-%m-%d %H:%M") if seconds < 2 * 86400 else at.date().isoformat()


def timeline_lanes(items: list[dict[str, object]], kinds: list[str]) -> Markup:
    """One lane per kind (session, decision, episode, error), a mark per item at its time (a
    session or an episode with an end drawn as a bar to it); the first and last dates below."""
    times = [t for i in items for t in (_when(i.get("at")), _when(i.get("end"))) if t is not None]
    height = len(kinds) * LANE_HEIGHT + 18
    parts = []
    for n, kind in enumerate(kinds):
        parts.append(f'<text class="lane-label" x="0" y="{n * LANE_HEIGHT + 15}">{escape(kind)}</text>'
                     f'<line class="lane" x1="{LANE_LABEL}" y1="{n * LANE_HEIGHT + 11}" x2="{LANE_LABEL + LANE_WIDTH}"'
                     f' y2="{n * LANE_HEIGHT + 11}"></line>')
    if times:
        start, seconds = _span(times)
        lane = {kind: n for n, kind in enumerate(kinds)}
        for item in items:
            at, end, row = _when(item.get("at")), _when(item.get("end")), lane.get(str(item.get("kind")))
            if at is None or row is None:
                continue
            x = LANE_LABEL + round((at - start).total_seconds() / seconds * LANE_WIDTH, 1)
            width = max(3.0, round(((end or at) - at).total_seconds() / seconds * LANE_WIDTH, 1))
            tip = escape(f"{item.get('at')} {item.get('title') or ''}")
            parts.append(f'<rect class="mark mark-{escape(item.get("kind"))}" x="{x - 1.5}" y="{row * LANE_HEIGHT + 5}"'
                         f' width="{width}" height="12"><title>{tip}</title></rect>')
        last = start + timedelta(seconds=seconds)
        parts.append(f'<text class="tick" x="{LANE_LABEL}" y="{height - 2}">{escape(_label(start, seconds))}</text>'
                     f'<text class="tick" x="{LANE_LABEL + LANE_WIDTH - 96}" y="{height - 2}">'
                     f'{escape(_label(last, seconds))}</text>')
    total = LANE_LABEL + LANE_WIDTH + 8
    return Markup(f'<svg class="lanes" id="timeline-chart" role="img" aria-label="timeline by kind" width="{total}"'
                  f' height="{height}" viewBox="0 0 {total} {height}" xmlns="http://www.w3.org/2000/svg">'
                  + "".join(parts) + "</svg>")


def fact_spans(facts: list[dict[str, object]], now: datetime | None = None) -> Markup:
    """The entity's facts as bars from valid_from to valid_to (still current: to now), one row
    each, oldest first; the text of each fact in its tooltip and beside its bar."""
    now = now or datetime.now(UTC)
    starts = [t for f in facts if (t := _when(f.get("valid_from"))) is not None]
    if not starts:
        return Markup('<p id="facts-chart" class="note">No facts recorded for this entity (CUBA_BITEMPORAL off, or'
                      ' nothing written since it was turned on).</p>')
    start, seconds = _span([*starts, now])
    rows = []
    for n, fact in enumerate(facts):
        begin = _when(fact.get("valid_from"))
        if begin is None:
            continue
        end = _when(fact.get("valid_to")) or now
        x = round((begin - start).total_seconds() / seconds * LANE_WIDTH / 2, 1)
        width = max(2.0, round((end - begin).total_seconds() / seconds * LANE_WIDTH / 2, 1))
        state = "current" if fact.get("is_current") else "closed"
        text = str(fact.get("object") or "")
        label = escape(f"{fact.get('predicate')}: {text[:70]}{'…' if len(text) > 70 else ''}")
        tip = escape(f"{fact.get('valid_from')} → {fact.get('valid_to') or 'now'}: {text}")
        rows.append(f'<g><rect class="fact fact-{state}" x="{x}" y="{n * ROW_HEIGHT + 2}" width="{width}"'
                    f' height="10"><title>{tip}</title></rect><text class="fact-label" x="{LANE_WIDTH / 2 + 8}"'
                    f' y="{n * ROW_HEIGHT + 11}">{label}</text></g>')
    height = len(rows) * ROW_HEIGHT + 16
    rows.append(f'<text class="tick" x="0" y="{height - 2}">{escape(_label(start, seconds))}</text>'
                f'<text class="tick" x="{LANE_WIDTH / 2 - 30}" y="{height - 2}">now</text>')
    return Markup(f'<svg class="facts" id="facts-chart" role="img" aria-label="facts over time"'
                  f' width="{LANE_WIDTH + 40}" height="{height}" viewBox="0 0 {LANE_WIDTH + 40} {height}" xmlns="http://www.w3.org/2000/svg">'
                  + "".join(rows) + "</svg>")
