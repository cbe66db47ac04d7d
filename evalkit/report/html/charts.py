"""Inline SVG charts for the HTML reports, in pure Python (no JS library, no network).

Every builder returns `markupsafe.Markup` that is a well-formed SVG element, so templates
can put it in the page as is. Every text that goes in (labels, titles, series names) is
escaped here; numbers are formatted by us. Missing values (None, NaN, ±inf) are skipped,
never drawn as 0. Empty input gives a small chart that says "no data".

    bar(value, lo=0, hi=1)                 one bar for a table cell ("tables with bars")
    bar_chart(labels, {series: values})    horizontal bar rows, one or more series
    line_chart(x_labels, {series: values}, markers=[(x_index, label)], set_apart=[(x_index, kind, note)],
               join_gaps=False)            points joined by lines over an ordered x axis;
                                           marker labels never overlap (rows, then merged or
                                           cut); runs set apart sit in a strip under the plot
    interval_chart([Interval(label, estimate, low, high)])
                                           estimates with CI whiskers around a zero line
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
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


# Advance widths (em) of DejaVu Sans, a wide font (Debian's default sans): a label laid out
# with them also fits in the narrower fonts of other systems. Other characters count 1 em.
_EM_GROUPS = (
    (0.32, " 'ijlIJ,.:;/\\|"), (0.4, "-()[]tfr!"), (0.53, '"*_`sz?'), (0.6, "cLFkvxyPT"),
    (0.64, "Yaoeébdghnpqu$0123456789{}ES"), (0.71, "KVΔBRXZCA"), (0.8, "UHNDG&OQw"),
)
_EM = {ch: w for w, chars in _EM_GROUPS for ch in chars}
_MARKER_ROW_H = 13
_MARKER_ROWS = 3
_MARKER_MERGE_PX = 36  # markers closer than this share one label ("3 changes")
_MARKER_MIN_PX = 30  # a label cut shorter than this is left out (its lines' tooltip says it)
_MARKER_SEP = 10  # px between two labels of a row, so that they do not read as one


def _text_w(text: str, size: float = 11) -> float:
    """The width of `text` at `size` px, estimated from above (`_EM`)."""
    return size * sum(_EM.get(ch, 1.0) for ch in text)


def _fit(text: str, room: float, size: float = 11, *, middle: bool = False) -> str:
    """`text`, cut with "…" to fit `room` px (in the middle: run ids differ at their end);
    "" when not even one character fits."""
    if _text_w(text, size) <= room:
        return text
    for keep in range(len(text) - 1, 0, -1):
        head = text[: (keep + 1) // 2] if middle else text[:keep]
        tail = text[len(text) - keep // 2:] if middle else ""
        if _text_w(head + "…" + tail, size) <= room:
            return head + "…" + tail
    return ""


def _room(spans: list[tuple[float, float]], p: float, end: bool, width: float) -> float:
    """Free px in a row of label spans from `p` rightwards (or leftwards when `end`)."""
    if end:
        before = [b for a, b in spans if a - _MARKER_SEP < p]
        if any(b + _MARKER_SEP > p for b in before):
            return 0.0
        return p - max([2.0, *(b + _MARKER_SEP for b in before)])
    after = [a for a, b in spans if b + _MARKER_SEP > p]
    if any(a - _MARKER_SEP < p for a in after):
        return 0.0
    return min([width - 2, *(a - _MARKER_SEP for a in after)]) - p


def _layout_markers(groups: Sequence[tuple[float, float, str]], width: float) -> list[tuple[int, str, float, str] | None]:
    """(row, anchor, text x, shown text) of each marker group's label, from (first x, last x,
    text), left to right. A label starts at its first line (a group's may slide right above
    its bracket, up to its last line), or ends at its last line when there is more room on
    the left; it goes on the first of `_MARKER_ROWS` rows where it overlaps no label; when
    none has room, it is cut ("…") to the most room found, or left out (None)."""
    rows: list[list[tuple[float, float]]] = [[] for _ in range(_MARKER_ROWS)]
    out: list[tuple[int, str, float, str] | None] = []
    for first, last, text in groups:
        w = _text_w(text)
        end = w > width - 2 - (first + 3) and (last - 5) > width - 2 - (first + 3)
        slots = []  # (room, row, text x)
        for r, spans in enumerate(rows):
            if end:
                slots.append((_room(spans, last - 3, True, width), r, last - 3))
                continue
            lo, hi = first + 3, max(first + 3, last - 3 - w)
            for x in sorted({lo, *(b + _MARKER_SEP for _, b in spans if lo < b + _MARKER_SEP <= hi)}):
                slots.append((_room(spans, x, False, width), r, x))
        fits = [slot for slot in slots if slot[0] >= w]
        room, row, x = min(fits, key=lambda t: (t[1], t[2])) if fits else max(slots, key=lambda t: (t[0], -t[1]))
        shown = _fit(text, room) if room >= _MARKER_MIN_PX else ""
        if not shown:
            out.append(None)
            continue
        sw = _text_w(shown)
        rows[row].append((x - sw, x) if end else (x, x + sw))
        out.append((row, "end" if end else "start", x, shown))
    return out


def line_chart(
    x_labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    markers: Sequence[tuple[int, str]] = (),
    set_apart: Sequence[tuple[int, str, str]] = (),
    y_min: float | None = None,
    y_max: float | None = None,
    width: int = 760,
    height: int = 300,
    fmt: Callable[[float], str] = _fmt,
    join_gaps: bool = False,
) -> Markup:
    """Points joined by lines over an ordered x axis (e.g. runs in time order).

    Every text stays inside the picture: y tick labels widen the left margin, x labels are
    cut to their spacing and kept off the edges, marker labels never overlap.

    Args:
        x_labels: one label per x position (a run id), left to right.
        series: name -> one value per x position; None where the series has no point: a
            gap in its line, or with `join_gaps` the line goes on to its next point (the
            trend page: runs of another eval set version sit between a series' runs).
        title: the chart's accessible title.
        markers: (x index, label): a dashed vertical line, its label above the plot on up
            to 3 rows; markers closer than 36 px share one label ("3 changes"); a label
            with no room is cut ("…"). The full labels are the tooltip.
        set_apart: (x index, kind, note): runs drawn apart from the lines, in a strip under
            the plot (kind "failed": a red ×, any other kind: a hollow circle), the note as
            tooltip, each kind said in the legend. Their values in `series` are not drawn.
        y_min, y_max: fix the y range (0 and 1 for rates); default: the data's.
        width, height: size in px (marker rows, the strip and legend lines are added).
        fmt: formats y tick labels and point tooltips.
        join_gaps: draw each series as one line through its points, across None.
    """
    n = len(x_labels)
    names = list(series)
    apart = {i: (str(kind), str(note)) for i, kind, note in set_apart if isinstance(i, int) and 0 <= i < n}
    points = {name: [None if i in apart else _finite(v) for i, v in enumerate(list(series[name])[:n])] for name in names}
    present = [v for vs in points.values() for v in vs if v is not None]
    if n == 0 or not (present or apart):
        return _no_data(title, width)
    lo, hi = _nice_range(present or [y_min or 0.0, 1.0 if y_max is None else y_max], y_min, y_max)
    ticks = [lo + (hi - lo) * t / 4 for t in range(5)]
    left = max(58.0, math.ceil(max(_text_w(fmt(v)) for v in ticks) + 12))
    right, bottom = 56, 40
    plot = _Plot(n, left, width - left - right, lo, hi)

    groups = _marker_groups(plot, markers)
    texts = [g[0][1] if len(g) == 1 else f"{len(g)} changes" for g in groups]
    placed = _layout_markers([(plot.px(g[0][0]), plot.px(g[-1][0]), t) for g, t in zip(groups, texts)], width)
    n_rows = max((p[0] + 1 for p in placed if p), default=0)
    top_pad = 14 + _MARKER_ROW_H * n_rows
    # the legend: series, then each kind of run set apart; wrapped to the width
    legend = [(PALETTE[s % len(PALETTE)], _short(str(name), 40)) for s, name in enumerate(names)]
    legend += [(kind, f"{kind} run (not on the lines)") for kind in dict.fromkeys(k for k, _ in apart.values())]
    legend_at, lines = _legend_layout(legend, left, width)
    legend_h = 22 + 16 * lines
    strip_h = 26 if apart else 0
    plot_h = height - 14 - bottom - 22
    height = top_pad + plot_h + strip_h + bottom + legend_h
    plot = replace(plot, top=top_pad, plot_h=plot_h)

    body = _y_grid(plot, ticks, fmt)
    body += _x_axis_labels(plot, x_labels, width, y=plot.bottom + strip_h + 16)
    body += _marker_lines(plot, groups, placed, x_labels)
    if apart:
        body += _apart_strip(plot, apart, x_labels)
    for s, name in enumerate(names):
        body += _series_line(plot, name, points[name], PALETTE[s % len(PALETTE)], x_labels, fmt, join_gaps=join_gaps)
    body += _legend(legend_at, height - legend_h)
    return _svg(width, height, title, body)


@dataclass(frozen=True)
class _Plot:
    """A line chart's plot area: where x index i and value v land in the picture.
    `top` and `plot_h` are known once the marker rows above the plot are laid out."""

    n: int
    left: float
    plot_w: float
    lo: float
    hi: float
    top: float = 0.0
    plot_h: float = 0.0

    def px(self, i: int) -> float:
        return self.left + (self.plot_w / 2 if self.n == 1 else i * self.plot_w / (self.n - 1))

    def py(self, v: float) -> float:
        return self.top + self.plot_h - (min(max(v, self.lo), self.hi) - self.lo) / (self.hi - self.lo) * self.plot_h

    @property
    def bottom(self) -> float:
        return self.top + self.plot_h


def _marker_groups(plot: _Plot, markers: Sequence[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """The markers in x order, those closer than _MARKER_MERGE_PX to the previous one in one group."""
    shown = sorted((i, str(label)) for i, label in markers if isinstance(i, int) and 0 <= i < plot.n)
    groups: list[list[tuple[int, str]]] = []
    for i, label in shown:
        if groups and plot.px(i) - plot.px(groups[-1][-1][0]) < _MARKER_MERGE_PX:
            groups[-1].append((i, label))
        else:
            groups.append([(i, label)])
    return groups


def _legend_layout(legend: Sequence[tuple[str, str]], left: float, width: float) -> tuple[list[tuple[str, str, float, int]], int]:
    """(swatch, label, x, line) of each legend item, wrapped to the width; and the last line's index."""
    legend_at, lx, line = [], left, 0
    for swatch, label in legend:
        item_w = 14 + _text_w(label, 12)
        if lx > left and lx + item_w > width - 2:
            lx, line = left, line + 1
        legend_at.append((swatch, label, lx, line))
        lx += item_w + 16
    return legend_at, line


def _y_grid(plot: _Plot, ticks: Sequence[float], fmt: Callable[[float], str]) -> list[str]:
    """A grid line and a label per y tick."""
    body: list[str] = []
    for v in ticks:
        body.append(_el("line", x1=_c(plot.left), x2=_c(plot.left + plot.plot_w), y1=_c(plot.py(v)), y2=_c(plot.py(v)), stroke=_GRID))
        body.append(_el("text", fmt(v), x=_c(plot.left - 6), y=_c(plot.py(v) + 4), text_anchor="end", fill=_MUTED, font_size="11"))
    return body


def _x_axis_labels(plot: _Plot, x_labels: Sequence[str], width: float, *, y: float) -> list[str]:
    """Every step-th x label, cut to its spacing and kept inside the picture."""
    body: list[str] = []
    n, plot_w = plot.n, plot.plot_w
    step = max(1, math.ceil(n / max(1, plot_w // 70)))
    spacing = plot_w if n == 1 else step * plot_w / (n - 1)
    for i in range(0, n, step):
        # half the spacing each side, less near an edge: the first and last labels stay whole
        # and, shifted inwards, clear of their neighbours
        side = max(spacing - 8, 30) / 2
        text = _fit(str(x_labels[i]), min(side, plot.px(i) - 2) + min(side, width - 2 - plot.px(i)), middle=True)
        half = _text_w(text) / 2
        x = min(max(plot.px(i), 2 + half), width - 2 - half)
        body.append(_el("text", text, class_="x-label", x=_c(x), y=_c(y), text_anchor="middle", fill=_MUTED,
                        font_size="11"))
    return body


def _marker_lines(
    plot: _Plot, groups: Sequence[Sequence[tuple[int, str]]], placed: Sequence[tuple[int, str, float, str] | None],
    x_labels: Sequence[str],
) -> list[str]:
    """Each marker group's dashed lines, then the labels on white, above every line."""
    body: list[str] = []
    labels: list[str] = []
    for group, spot in zip(groups, placed):
        tip = group[0][1] if len(group) == 1 else "\n".join(f"{x_labels[i]}: {label}" for i, label in group)
        y_text = 12 + spot[0] * _MARKER_ROW_H if spot else 0
        y_top = y_text + 3 if spot else plot.top - 4
        body.append(f'<g class="marker">{_el("title", tip)}')
        for i, _ in group:
            body.append(_el("line", x1=_c(plot.px(i)), x2=_c(plot.px(i)), y1=_c(y_top), y2=_c(plot.bottom), stroke=_MUTED,
                            stroke_dasharray="4 3"))
        if spot and len(group) > 1:
            body.append(_el("line", x1=_c(plot.px(group[0][0])), x2=_c(plot.px(group[-1][0])), y1=_c(y_top), y2=_c(y_top),
                            stroke=_MUTED))
        body.append("</g>")
        if spot:  # drawn after every line, on white: other markers' lines pass behind it
            _, anchor, x, label = spot
            w = _text_w(label)
            labels.append(f'<g class="marker-text">{_el("title", tip)}'
                          + _el("rect", x=_c(x - w if anchor == "end" else x), y=_c(y_text - 10), width=_c(w), height="13", fill="#fff")
                          + _el("text", label, class_="marker-label", x=_c(x), y=_c(y_text), text_anchor=anchor, fill=_TEXT, font_size="11")
                          + "</g>")
    return body + labels


def _apart_strip(plot: _Plot, apart: Mapping[int, tuple[str, str]], x_labels: Sequence[str]) -> list[str]:
    """The strip under the plot with the runs set apart, each with its note as tooltip."""
    y = plot.bottom + 14
    body = [
        _el("line", x1=_c(plot.left), x2=_c(plot.left + plot.plot_w), y1=_c(y), y2=_c(y), stroke=_TRACK),
        _el("text", "apart", x=_c(plot.left - 6), y=_c(y + 4), text_anchor="end", fill=_MUTED, font_size="10", font_style="italic"),
    ]
    for i, (kind, note) in sorted(apart.items()):
        body.append(f'<g class="apart" data-kind="{escape(kind)}">{_el("title", f"{x_labels[i]}: {note}")}')
        body.append(_apart_mark(kind, plot.px(i), y))
        body.append("</g>")
    return body


def _series_line(
    plot: _Plot, name: str, values: Sequence[float | None], color: str, x_labels: Sequence[str],
    fmt: Callable[[float], str], *, join_gaps: bool,
) -> list[str]:
    """One series: its line (broken at a gap unless `join_gaps`) and a point per value."""
    coords = [(i, v) for i, v in enumerate(values) if v is not None]
    body = [f'<g class="series">{_el("title", str(name))}']
    runs: list[list[tuple[int, float]]] = [[]]
    for i, v in enumerate(values):
        if v is not None:
            runs[-1].append((i, v))
        elif not join_gaps and runs[-1]:
            runs.append([])
    for run in runs:
        if len(run) > 1:
            body.append(_el("polyline", points=" ".join(f"{_c(plot.px(i))},{_c(plot.py(v))}" for i, v in run), fill="none",
                            stroke=color, stroke_width="2"))
    for i, v in coords:
        body.append(f'<circle cx="{_c(plot.px(i))}" cy="{_c(plot.py(v))}" r="3.5" fill="{color}">'
                    f"{_el('title', f'{name} · {x_labels[i]}: {fmt(v)}')}</circle>")
    body.append("</g>")
    return body


def _legend(legend_at: Sequence[tuple[str, str, float, int]], top: float) -> list[str]:
    """The legend's items from `top`: a colour square per series, a mark per kind of run set apart."""
    body: list[str] = []
    for swatch, label, x, line in legend_at:
        ly = top + 14 + 16 * line
        if swatch.startswith("#"):
            body.append(_el("rect", x=_c(x), y=_c(ly - 9), width="10", height="10", fill=swatch))
        else:
            body.append(_apart_mark(swatch, x + 5, ly - 4))
        body.append(_el("text", label, x=_c(x + 14), y=_c(ly), fill=_TEXT))
    return body


def _apart_mark(kind: str, x: float, y: float) -> str:
    """A run drawn apart: a red × when it failed, else a hollow circle."""
    if kind == "failed":
        return "".join(_el("line", x1=_c(x - 4), x2=_c(x + 4), y1=_c(y - 4 * s), y2=_c(y + 4 * s), stroke=_BAD, stroke_width="2")
                       for s in (1, -1))
    return _el("circle", cx=_c(x), cy=_c(y), r="4", fill="#fff", stroke=_MUTED, stroke_width="1.5")


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
