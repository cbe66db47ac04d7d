"""Charts the trend page needs beyond `charts.py`, drawn in the same style (its helpers,
palette and escaping).

    trend_chart(x_labels, {series: values}, markers=[(x, label)])
        like `charts.line_chart`, but a series' line joins its points across the x
        positions of other series (runs on another eval set version sit between them), and
        marker labels that would overlap are put on staggered rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup

from evalkit.report.html.charts import (
    _CHAR_W,
    _GRID,
    _MUTED,
    _TEXT,
    PALETTE,
    _c,
    _el,
    _finite,
    _fmt,
    _nice_range,
    _no_data,
    _short,
    _svg,
)

__all__ = ["trend_chart"]

_MARKER_CHARS = 26
_MARKER_ROW_H = 13


def _label_w(text: str) -> float:
    return len(text) * _CHAR_W * 0.92  # 11px labels


def _marker_rows(spans: list[tuple[float, float]]) -> list[int]:
    """A label row per marker span (x ascending): the first row where it overlaps no label."""
    ends: list[float] = []
    rows = []
    for start, end in spans:
        for r, last in enumerate(ends):
            if start > last + 4:
                ends[r] = end
                rows.append(r)
                break
        else:
            ends.append(end)
            rows.append(len(ends) - 1)
    return rows


def trend_chart(
    x_labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    markers: Sequence[tuple[int, str]] = (),
    y_min: float | None = None,
    y_max: float | None = None,
    width: int = 760,
    height: int = 300,
    fmt: Callable[[float], str] = _fmt,
) -> Markup:
    """Runs over an ordered x axis, one line per series joining that series' points.

    Args:
        x_labels: one label per x position (a run id), left to right.
        series: name -> one value per x position; None where the series has no point (the
            line goes on to its next point).
        title: the chart's accessible title.
        markers: (x index, label): a dashed vertical line, its label above the plot; labels
            that would overlap go on further rows. The full label is the tooltip.
        y_min, y_max: fix the y range (0 and 1 for rates); default: the data's.
        width, height: size in px (the marker rows are added to the height).
        fmt: formats y tick labels and point tooltips.
    """
    n = len(x_labels)
    names = list(series)
    points = {name: [_finite(v) for v in list(series[name])[:n]] for name in names}
    present = [v for vs in points.values() for v in vs if v is not None]
    if n == 0 or not present:
        return _no_data(title, width)
    lo, hi = _nice_range(present, y_min, y_max)
    left, right, bottom, legend_h = 58, 56, 40, 22
    plot_w = width - left - right

    def px(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    shown = sorted((i, str(label)) for i, label in markers if isinstance(i, int) and 0 <= i < n)
    # a label starts at its line, or ends there in the right quarter (so it stays inside)
    right_side = [px(i) > left + plot_w * 0.75 for i, _ in shown]
    spans = []
    for (i, label), end_anchored in zip(shown, right_side):
        w = _label_w(_short(label, _MARKER_CHARS))
        spans.append((px(i) - 3 - w, px(i) - 3) if end_anchored else (px(i) + 3, px(i) + 3 + w))
    rows = _marker_rows(sorted(spans)) if spans else []
    order = sorted(range(len(spans)), key=lambda j: spans[j])
    rows = [rows[order.index(j)] for j in range(len(spans))]
    top_pad = 14 + (_MARKER_ROW_H * (max(rows) + 1) if rows else 0)
    height += top_pad - 14
    plot_h = height - top_pad - bottom - legend_h

    def py(v: float) -> float:
        return top_pad + plot_h - (min(max(v, lo), hi) - lo) / (hi - lo) * plot_h

    body: list[str] = []
    for t in range(5):
        v = lo + (hi - lo) * t / 4
        body.append(_el("line", x1=_c(left), x2=_c(left + plot_w), y1=_c(py(v)), y2=_c(py(v)), stroke=_GRID))
        body.append(_el("text", fmt(v), x=_c(left - 6), y=_c(py(v) + 4), text_anchor="end", fill=_MUTED, font_size="11"))
    step = max(1, math.ceil(n / max(1, plot_w // 70)))
    spacing = plot_w if n == 1 else step * plot_w / (n - 1)
    chars = max(6, min(18, int(spacing / (_CHAR_W * 0.92)) - 1))
    for i in range(0, n, step):
        body.append(_el("text", _short(str(x_labels[i]), chars), x=_c(px(i)), y=_c(top_pad + plot_h + 16), text_anchor="middle",
                        fill=_MUTED, font_size="11"))
    for (i, label), row, end_anchored in zip(shown, rows, right_side):
        x = px(i)
        y_text = 12 + row * _MARKER_ROW_H
        body.append(f'<g class="marker">{_el("title", label)}')
        body.append(_el("line", x1=_c(x), x2=_c(x), y1=_c(y_text + 3), y2=_c(top_pad + plot_h), stroke=_MUTED, stroke_dasharray="4 3"))
        anchor = "end" if end_anchored else "start"
        body.append(_el("text", _short(label, _MARKER_CHARS), x=_c(x - 3 if anchor == "end" else x + 3), y=_c(y_text),
                        text_anchor=anchor, fill=_TEXT, font_size="11"))
        body.append("</g>")
    for s, name in enumerate(names):
        color = PALETTE[s % len(PALETTE)]
        coords = [(i, v) for i, v in enumerate(points[name]) if v is not None]
        body.append(f'<g class="series">{_el("title", str(name))}')
        if len(coords) > 1:
            body.append(_el("polyline", points=" ".join(f"{_c(px(i))},{_c(py(v))}" for i, v in coords), fill="none",
                            stroke=color, stroke_width="2"))
        for i, v in coords:
            body.append(f'<circle cx="{_c(px(i))}" cy="{_c(py(v))}" r="3.5" fill="{color}">'
                        f"{_el('title', f'{name} · {x_labels[i]}: {fmt(v)}')}</circle>")
        body.append("</g>")
    x, ly = float(left), height - 8
    for s, name in enumerate(names):
        label = _short(str(name), 40)
        body.append(_el("rect", x=_c(x), y=_c(ly - 9), width="10", height="10", fill=PALETTE[s % len(PALETTE)]))
        body.append(_el("text", label, x=_c(x + 14), y=_c(ly), fill=_TEXT))
        x += 14 + len(label) * _CHAR_W + 16
    return _svg(width, height, title, body)
