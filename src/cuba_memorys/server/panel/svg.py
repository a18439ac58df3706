"""Server-rendered SVG: the search page's score bars. Sizes are attributes (width=, x=), never
style= attributes, which the panel's CSP (style-src 'self') blocks; all text is escaped."""

from __future__ import annotations

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
