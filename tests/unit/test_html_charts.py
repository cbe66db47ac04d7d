"""charts.py: every builder gives well-formed SVG, escapes its labels, and keeps its
coordinates finite and inside the picture on edge cases (no data, one point, all equal,
None and NaN values)."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from evalkit.report.html.charts import Interval, bar, bar_chart, interval_chart, line_chart

EVIL = '<script>alert(1)</script> & "quotes" <img src=x onerror=alert(2)>'
SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: Markup) -> ET.Element:
    assert isinstance(svg, Markup)
    root = ET.fromstring(str(svg))
    assert root.tag == f"{SVG}svg"
    return root


def _coords_inside(root: ET.Element) -> None:
    width, height = float(root.get("width")), float(root.get("height"))
    for el in root.iter():
        for name in ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "height"):
            v = el.get(name)
            if v is not None:
                x = float(v)
                assert math.isfinite(x) and -1 <= x <= max(width, height) + 1, (el.tag, name, v)
        for pair in (el.get("points") or "").split():
            px, py = map(float, pair.split(","))
            assert 0 <= px <= width and 0 <= py <= height, pair


CASES = [
    pytest.param(lambda: bar(0.5), id="bar"),
    pytest.param(lambda: bar(None), id="bar-none"),
    pytest.param(lambda: bar(7.0, hi=5.0), id="bar-clamped"),
    pytest.param(lambda: bar(float("nan")), id="bar-nan"),
    pytest.param(lambda: bar_chart(["a", "b"], {"p50": [1.0, None], "p95": [2.0, 3.0]}, title="t"), id="bars-two-series"),
    pytest.param(lambda: bar_chart(["a"], {"s": [0.0]}, title="t"), id="bars-all-zero"),
    pytest.param(lambda: bar_chart(["a", "b"], {"s": [None, None]}, title="t"), id="bars-all-none"),
    pytest.param(lambda: bar_chart([], {}, title="t"), id="bars-empty"),
    pytest.param(lambda: line_chart(["r1", "r2", "r3"], {"a": [0.1, None, 0.3], "b": [0.5, 0.5, 0.5]}, title="t", markers=[(1, "changed"), (9, "ignored")]), id="line-gap-and-markers"),
    pytest.param(lambda: line_chart(["r1"], {"a": [1.0]}, title="t"), id="line-one-point"),
    pytest.param(lambda: line_chart(["r1", "r2"], {"a": [2.0, 2.0]}, title="t"), id="line-all-equal"),
    pytest.param(lambda: line_chart(["r1", "r2"], {"a": [0.0, 0.0]}, title="t", y_min=0, y_max=0), id="line-zero-range"),
    pytest.param(lambda: line_chart(["r1", "r2"], {"a": [None, float("inf")]}, title="t"), id="line-no-finite-value"),
    pytest.param(lambda: line_chart([], {}, title="t"), id="line-empty"),
    pytest.param(lambda: line_chart(["r1", "r2"], {"a": [5.0, -3.0]}, title="t", y_min=0, y_max=1), id="line-clamped"),
    pytest.param(lambda: interval_chart([Interval("recall", 0.05, -0.01, 0.1, "good"), Interval("mrr", None)], title="t"), id="intervals"),
    pytest.param(lambda: interval_chart([Interval("a", 0.0, 0.0, 0.0)], title="t"), id="intervals-all-zero"),
    pytest.param(lambda: interval_chart([Interval("a", 2.0, 3.0, 1.0, "bad")], title="t"), id="intervals-reversed-bounds"),
    pytest.param(lambda: interval_chart([], title="t"), id="intervals-empty"),
]


@pytest.mark.parametrize("make", CASES)
def test_well_formed_and_inside_the_picture(make) -> None:
    _coords_inside(_parse(make()))


def test_empty_data_says_so() -> None:
    for svg in (bar_chart([], {}, title="t"), line_chart([], {}, title="t"), interval_chart([], title="t")):
        assert "no data" in "".join(_parse(svg).itertext())


@pytest.mark.parametrize(
    "make",
    [
        lambda: bar(0.5, label=EVIL),
        lambda: bar_chart([EVIL], {EVIL: [1.0], "b": [2.0]}, title=EVIL),
        lambda: line_chart([EVIL, "x"], {EVIL: [1.0, 2.0]}, title=EVIL, markers=[(0, EVIL)]),
        lambda: interval_chart([Interval(EVIL, 0.1, 0.0, 0.2)], title=EVIL),
    ],
)
def test_every_label_is_escaped(make) -> None:
    svg = str(make())
    root = _parse(make())
    assert "<script" not in svg and "<img" not in svg
    assert not [el for el in root.iter() if el.tag.endswith(("script", "img", "foreignObject"))]
    assert not [a for el in root.iter() for a in el.attrib if a.lower().startswith("on")]
    # The text survives, as text (possibly shortened with "…" in the visible label).
    assert any("<script>alert(1)" in t for t in root.itertext())


def test_none_is_skipped_not_drawn_as_zero() -> None:
    root = _parse(line_chart(["a", "b", "c"], {"s": [1.0, None, 3.0]}, title="t"))
    assert len([c for c in root.iter(f"{SVG}circle")]) == 2
    assert not list(root.iter(f"{SVG}polyline"))  # a gap: no segment has two points
    joined = _parse(line_chart(["a", "b", "c"], {"s": [1.0, None, 3.0]}, title="t", join_gaps=True))
    (line,) = joined.iter(f"{SVG}polyline")  # the trend page: one line through the series' own points
    assert len(line.get("points").split()) == 2

    bars = _parse(bar_chart(["a", "b"], {"s": [None, 0.5]}, title="t"))
    assert len(list(bars.iter(f"{SVG}rect"))) == 1
    assert "—" in "".join(bars.itertext())


def test_one_point_sits_in_the_middle() -> None:
    root = _parse(line_chart(["only"], {"s": [0.7]}, title="t", width=760))
    (circle,) = root.iter(f"{SVG}circle")
    left, right = 58, 56  # line_chart's margins
    assert float(circle.get("cx")) == pytest.approx(left + (760 - left - right) / 2)


def test_bar_length_is_proportional() -> None:
    def fill(svg: Markup) -> float:
        rects = list(_parse(svg).iter(f"{SVG}rect"))
        return float(rects[1].get("width")) if len(rects) > 1 else 0.0

    assert fill(bar(0.25, width=100)) == pytest.approx(25)  # by hand: 0.25 / 1 * 100
    assert fill(bar(4.0, hi=5.0, width=100)) == pytest.approx(80)  # by hand: 4 / 5 * 100
    assert fill(bar(-1.0, width=100)) == 0  # clamped to the track
    assert re.search(r'aria-label="0\.250"', str(bar(0.25)))
