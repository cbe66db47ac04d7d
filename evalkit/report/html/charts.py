"""Inline SVG charts for the HTML reports, in pure Python (no JS library, no network).

Every builder returns `markupsafe.Markup` that is a well-formed SVG element, so templates
can put it in the page as is. Every text that goes in (labels, titles, series names) is
escaped here; numbers are formatted by us. Missing values (None, NaN, ±inf) are skipped,
never drawn as 0. Empty input gives a small chart that says "no data".

    bar(value, lo=0, hi=1)                 one bar for a table cell ("tables with bars")
    bar_chart(labels, {series: values})    horizontal bar rows, one or more series
    line_chart(x_labels, {series: values}, markers=[(x_index, label)], join_gaps=False)
                                           points joined by lines over an ordered x axis;
                                           marker labels that would overlap go on rows
    interval_chart([Interval(label, estimate, low, high)])
                                           estimates with CI whiskers around a zero line
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from markupsafe import Markup, escape

__all__ = ["PALETTE", "Interval", "bar", "bar_chart", "interval_chart", "line_chart"]

# Colour-blind-safe (Okabe-Ito), first colour the same blue as report.css's --bar.
PALETTE = ("#4c8bf5", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")
_TEXT, _MUTED, _GRID, _TRACK = "#1f2328", "#59636e", "#d1d9e0", "#eaeef2"
_GOOD, _BAD = "#1a7f37", "#cf222e"
_CHAR_W = 6.6  # average width of a 12px sans-serif character, for laying out labels
_LABEL_MAX_CHARS = 34


@dataclass(frozen=True)
class Interval:
    """One row of an interval chart: a point estimate and its interval (e.g. a delta with
    its 95% CI). `tone` colours it: "good", "bad" or None (neutral)."""

    label: str
    estimate: float | None
    low: float | None = None
    high: float | None = None
    tone: Literal["good", "bad"] | None = None


def _finite(v: object) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    return f"{v:.3f}" if a < 10 else f"{v:.2f}"


def _c(x: float) -> str:
    """A coordinate: 2 decimals, no '-0'."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _attrs(attrs: Mapping[str, object]) -> str:
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items() if v is not None)


def _el(tag: str, text: str | None = None, **attrs: object) -> str:
    if text is None:
        return f"<{tag}{_attrs(attrs)}/>"
    return f"<{tag}{_attrs(attrs)}>{escape(text)}</{tag}>"


def _short(label: str, limit: int = _LABEL_MAX_CHARS) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _svg(width: float, height: float, title: str, body: list[str], css_class: str = "chart") -> Markup:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(css_class)}" width="{_c(width)}" height="{_c(height)}" '
        f'viewBox="0 0 {_c(width)} {_c(height)}" role="img" aria-label="{escape(title)}" '
        f'font-family="system-ui, sans-serif" font-size="12">'
    )
    return Markup(head + _el("title", title) + "".join(body) + "</svg>")


def _no_data(title: str, width: float, height: float = 40) -> Markup:
    return _svg(width, height, title, [_el("text", "no data", x=_c(width / 2), y=_c(height / 2 + 4), text_anchor="middle", fill=_MUTED)])


def _nice_range(values: Sequence[float], lo: float | None = None, hi: float | None = None) -> tuple[float, float]:
    """An axis range covering `values` (and 0 when it is near), never of zero width."""
    vmin = min(values) if lo is None else lo
    vmax = max(values) if hi is None else hi
    if vmin == vmax:
        pad = abs(vmin) * 0.1 or 1.0
        return (vmin - pad if lo is None else vmin), (vmax + pad if hi is None else vmax + pad)
    return vmin, vmax


def bar(
    value: float | None,
    *,
    lo: float = 0.0,
    hi: float = 1.0,
    width: int = 90,
    height: int = 10,
    label: str | None = None,
    color: str = PALETTE[0],
) -> Markup:
    """One horizontal bar on a grey track, for a table cell: `value` placed between `lo`
    and `hi` (clamped). None draws the empty track only. `label` is the tooltip (escaped)."""
    x = _finite(value)
    title = label if label is not None else ("no value" if x is None else _fmt(x))
    body = [_el("rect", x="0", y="0", width=str(width), height=str(height), rx="2", fill=_TRACK)]
    if x is not None and hi > lo:
        frac = min(max((x - lo) / (hi - lo), 0.0), 1.0)
        body.append(_el("rect", x="0", y="0", width=_c(frac * width), height=str(height), rx="2", fill=color))
    return _svg(width, height, title, body, css_class="cell-bar")


def bar_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    max_value: float | None = None,
    unit: str = "",
    width: int = 640,
    fmt: Callable[[float], str] = _fmt,
) -> Markup:
    """Horizontal bar rows: one row per label, one bar per series in each row.

    Args:
        labels: row labels, top to bottom.
        series: series name -> one value per label (None = no bar, "—" shown).
        title: the chart's accessible title (also its tooltip).
        max_value: the value of a full-width bar (default: the largest value; 1.0 suits rates).
        unit: appended to every value label, e.g. " ms".
        width: total width in px; labels take what they need, up to ~34 characters.
        fmt: formats a value label.
    """
    names = list(series)
    if not labels or not names:
        return _no_data(title, width)
    values = [[_finite(v) for v in series[n]] for n in names]
    present = [v for row in values for v in row if v is not None]
    top = max_value if max_value is not None else (max(present) if present else 1.0)
    top = top if top > 0 else 1.0
    label_w = min(max((len(_short(str(lb))) for lb in labels), default=0) * _CHAR_W + 10, 240)
    value_w = 80
    plot_w = max(width - label_w - value_w, 40)
    bar_h, gap = 14, 8
    legend_h = 20 if len(names) > 1 else 0
    row_h = bar_h * len(names) + gap
    height = legend_h + row_h * len(labels) + 4
    body: list[str] = []
    if legend_h:
        x = label_w
        for i, name in enumerate(names):
            body.append(_el("rect", x=_c(x), y="4", width="10", height="10", fill=PALETTE[i % len(PALETTE)]))
            body.append(_el("text", name, x=_c(x + 14), y="13", fill=_TEXT))
            x += 14 + len(name) * _CHAR_W + 16
    for r, label in enumerate(labels):
        y0 = legend_h + r * row_h
        full = str(label)
        body.append(f"<g>{_el('title', full)}")
        body.append(_el("text", _short(full), x=_c(label_w - 8), y=_c(y0 + row_h / 2 - gap / 2 + 4), text_anchor="end", fill=_TEXT))
        for s, name in enumerate(names):
            v = values[s][r] if r < len(values[s]) else None
            y = y0 + s * bar_h
            if v is not None:
                w = min(max(v / top, 0.0), 1.0) * plot_w
                body.append(_el("rect", x=_c(label_w), y=_c(y + 1), width=_c(w), height=_c(bar_h - 2), fill=PALETTE[s % len(PALETTE)]))
                text, tx = fmt(v) + unit, label_w + w + 4
            else:
                text, tx = "—", label_w + 4
            body.append(_el("text", text, x=_c(tx), y=_c(y + bar_h - 3), fill=_MUTED, font_size="11"))
        body.append("</g>")
    return _svg(width, height, title, body)


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


def line_chart(
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
    join_gaps: bool = False,
) -> Markup:
    """Points joined by lines over an ordered x axis (e.g. runs in time order).

    Args:
        x_labels: one label per x position (a run id), left to right.
        series: name -> one value per x position; None where the series has no point: a
            gap in its line, or with `join_gaps` the line goes on to its next point (the
            trend page: runs of another eval set version sit between a series' runs).
        title: the chart's accessible title.
        markers: (x index, label): a dashed vertical line, its label above the plot; labels
            that would overlap go on further rows. The full label is the tooltip.
        y_min, y_max: fix the y range (0 and 1 for rates); default: the data's.
        width, height: size in px (the marker rows are added to the height).
        fmt: formats y tick labels and point tooltips.
        join_gaps: draw each series as one line through its points, across None.
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
        runs: list[list[tuple[int, float]]] = [[]]
        for i, v in enumerate(points[name]):
            if v is not None:
                runs[-1].append((i, v))
            elif not join_gaps and runs[-1]:
                runs.append([])
        for run in runs:
            if len(run) > 1:
                body.append(_el("polyline", points=" ".join(f"{_c(px(i))},{_c(py(v))}" for i, v in run), fill="none",
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


def interval_chart(
    rows: Sequence[Interval],
    *,
    title: str,
    width: int = 640,
    fmt: Callable[[float], str] = _fmt,
) -> Markup:
    """Point estimates with interval whiskers, one row each, around a vertical zero line
    (the compare page: the delta B − A of each metric with its confidence interval).

    Rows whose estimate is missing show "—". The x range covers every estimate and bound
    and always includes 0.
    """
    if not rows:
        return _no_data(title, width)
    nums = [0.0]
    for r in rows:
        nums += [v for v in (_finite(r.estimate), _finite(r.low), _finite(r.high)) if v is not None]
    lo, hi = _nice_range(nums)
    span = hi - lo
    lo, hi = lo - span * 0.05, hi + span * 0.05
    label_w = min(max(len(_short(r.label)) for r in rows) * _CHAR_W + 10, 240)
    value_w = 150
    plot_w = max(width - label_w - value_w, 60)
    row_h, axis_h = 22, 20
    height = axis_h + row_h * len(rows) + 6

    def px(v: float) -> float:
        return label_w + (min(max(v, lo), hi) - lo) / (hi - lo) * plot_w

    body: list[str] = []
    zx = px(0.0)
    body.append(_el("line", x1=_c(zx), x2=_c(zx), y1=_c(axis_h - 4), y2=_c(height - 4), stroke=_MUTED))
    body.append(_el("text", "0", x=_c(zx), y="12", text_anchor="middle", fill=_MUTED, font_size="11"))
    body.append(_el("text", fmt(lo), x=_c(label_w), y="12", text_anchor="start", fill=_MUTED, font_size="11"))
    body.append(_el("text", fmt(hi), x=_c(label_w + plot_w), y="12", text_anchor="end", fill=_MUTED, font_size="11"))
    for r_i, row in enumerate(rows):
        yc = axis_h + r_i * row_h + row_h / 2
        color = {"good": _GOOD, "bad": _BAD}.get(row.tone or "", PALETTE[0])
        est, low, high = _finite(row.estimate), _finite(row.low), _finite(row.high)
        body.append(f"<g>{_el('title', row.label)}")
        body.append(_el("text", _short(row.label), x=_c(label_w - 8), y=_c(yc + 4), text_anchor="end", fill=_TEXT))
        if low is not None and high is not None:
            a, b = px(min(low, high)), px(max(low, high))
            body.append(_el("line", x1=_c(a), x2=_c(b), y1=_c(yc), y2=_c(yc), stroke=color, stroke_width="2"))
            for e in (a, b):
                body.append(_el("line", x1=_c(e), x2=_c(e), y1=_c(yc - 5), y2=_c(yc + 5), stroke=color, stroke_width="2"))
        if est is not None:
            body.append(_el("circle", cx=_c(px(est)), cy=_c(yc), r="4", fill=color))
            text = fmt(est) + (f" [{fmt(low)}, {fmt(high)}]" if low is not None and high is not None else "")
        else:
            text = "—"
        body.append(_el("text", text, x=_c(label_w + plot_w + 8), y=_c(yc + 4), fill=_MUTED, font_size="11"))
        body.append("</g>")
    return _svg(width, height, title, body)
