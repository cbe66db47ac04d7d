"""The run report and the trend page hold their layout at 1400 and 800 px (issue 28 item 8),
checked by DOM geometry in headless chromium: no card's text runs out of its card, every
table column is on screen or in a box that scrolls sideways (and says so), case ids stay on
one line, every chart text is inside its chart, marker labels do not overlap and stay
readable, and partial and failed runs are not points of the trend lines.

Each test saves a full-page screenshot for review (not compared) under the pytest temp
folder: `<basetemp>/layout-shots/`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.browser.layout_runs import LONG_IDS, long_id, make_dense_trend, make_runs

WIDTHS = (1400, 800)

CARDS = """() => Array.from(document.querySelectorAll('.card')).map(card => {
  const box = card.getBoundingClientRect();
  const out = [];
  for (const el of [card, ...card.querySelectorAll('*')]) {
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth) {
      out.push(`${el.className}: scrollWidth ${el.scrollWidth} > ${el.clientWidth}`);
    }
  }
  const walker = document.createTreeWalker(card, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5) {
        out.push(`"${node.textContent.trim()}" at ${r.left}..${r.right} outside ${box.left}..${box.right}`);
      }
    }
  }
  return {text: card.innerText.replace(/\\s+/g, ' '), right: box.right, problems: out};
})"""

TABLES = """() => {
  const vw = document.documentElement.clientWidth;
  const tables = [];
  for (const table of document.querySelectorAll('main table')) {
    if (!table.offsetParent) continue;
    const row = table.tHead ? table.tHead.rows[0] : table.rows[0];
    if (!row) continue;
    const last = row.cells[row.cells.length - 1];
    let box = table.parentElement;
    while (box !== document.body && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
    const rec = {table: table.id || table.className || 'table', boxed: box !== document.body};
    if (rec.boxed) {
      const b = box.getBoundingClientRect();
      rec.box = [b.left, b.right];
      rec.overflows = box.scrollWidth > box.clientWidth + 1;
      rec.hinted = box.classList.contains('scrolls');
      const keep = box.scrollLeft;
      box.scrollLeft = box.scrollWidth;
      rec.lastRight = last.getBoundingClientRect().right;
      rec.inner = b.left + box.clientLeft + box.clientWidth;
      box.scrollLeft = keep;
    } else {
      rec.lastRight = last.getBoundingClientRect().right;
    }
    tables.push(rec);
  }
  return {vw, overflow: document.documentElement.scrollWidth - vw, tables};
}"""

CHART_TEXT = """() => Array.from(document.querySelectorAll('svg.chart')).map(svg => {
  const s = svg.getBoundingClientRect();
  const rect = el => {
    const r = el.getBoundingClientRect();
    return {text: el.textContent, l: r.left - s.left, r: r.right - s.left, t: r.top - s.top, b: r.bottom - s.top, h: r.height};
  };
  return {
    chart: (svg.closest('figure') || svg).id, w: s.width, h: s.height,
    texts: Array.from(svg.querySelectorAll('text')).map(rect),
    xLabels: Array.from(svg.querySelectorAll('text.x-label')).map(rect),
    markers: Array.from(svg.querySelectorAll('text.marker-label, g.marker text')).map(rect),
  };
})"""


def _make(folder: Path) -> tuple[Path, Path, Path]:
    return make_runs(folder), make_dense_trend(folder), make_dense_trend(folder, 5, "few")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    # Playwright's sync API keeps an event loop in this thread; run_eval starts its own.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_make, tmp_path_factory.mktemp("layout")).result()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.getbasetemp() / "layout-shots"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def trend_pages(made: tuple[Path, Path, Path]) -> dict[str, str]:
    from evalkit.report.html.trend import write_trend_report

    return {name: write_trend_report(folder).as_uri() for name, folder in zip(("runs", "dense", "few"), made)}


def _open(watched: Any, url: str, width: int, shot: Path) -> Any:
    page = watched.page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(url, wait_until="load")
    page.screenshot(path=str(shot), full_page=True)
    return page


def _clean(watched: Any) -> None:
    assert watched.problems() == {k: [] for k in watched.problems()}


def _report(results: Path, run_id: str) -> str:
    return (results / run_id / "report.html").as_uri()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("run_id", ["t6-slow-long-ids", "t1-base"])
def test_card_values_stay_inside_their_cards(report_page: Any, made: tuple[Path, Path, Path], shots: Path, run_id: str, width: int) -> None:
    page = _open(report_page, _report(made[0], run_id), width, shots / f"run-{run_id}-{width}.png")
    cards = page.evaluate(CARDS)
    assert len(cards) >= 8
    assert [(c["text"], c["problems"]) for c in cards if c["problems"]] == []
    assert max(c["right"] for c in cards) <= width
    if run_id.startswith("t6"):  # the card of the issue: "4,294 ms / 4,6" was cut
        latency = next(c["text"] for c in cards if c["text"].startswith("Latency"))
        assert "4,2" in latency and "4,6" in latency and latency.count(" ms") == 2, latency
    _clean(report_page)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("run_id", ["t6-slow-long-ids", "t4-all-failed"])
def test_every_table_column_is_on_screen_or_in_a_box_that_scrolls(
    report_page: Any, made: tuple[Path, Path, Path], shots: Path, run_id: str, width: int
) -> None:
    page = _open(report_page, _report(made[0], run_id), width, shots / f"tables-{run_id}-{width}.png")
    geo = page.evaluate(TABLES)
    _assert_tables_reachable(geo, width)
    cases = next(t for t in geo["tables"] if t["table"] == "cases-table")
    if width >= 1400:  # every column of the case table in view, without scrolling
        assert not cases["overflows"], cases
    _clean(report_page)


def _assert_tables_reachable(geo: dict[str, Any], width: int) -> None:
    assert geo["vw"] == width
    assert geo["overflow"] <= 0, "the page scrolls sideways: something is wider than the window"
    for t in geo["tables"]:
        if t["boxed"]:
            left, right = t["box"]
            assert left >= -0.5 and right <= width + 0.5, t
            assert t["lastRight"] <= t["inner"] + 1, ("the last column cannot be scrolled into the box", t)
            assert t["hinted"] == t["overflows"], ("a box that scrolls sideways is shaded, one that does not is not", t)
        else:
            assert t["lastRight"] <= width + 0.5, ("a column is off-screen, with no box to scroll it into", t)


@pytest.mark.parametrize("width", WIDTHS)
def test_case_ids_stay_on_one_line_with_the_full_id_as_tooltip(report_page: Any, made: tuple[Path, Path, Path], shots: Path, width: int) -> None:
    page = _open(report_page, _report(made[0], "t6-slow-long-ids"), width, shots / f"case-ids-{width}.png")
    cells = page.evaluate("""() => Array.from(document.querySelectorAll('#cases-table tbody tr.case-row')).map(row => {
      const td = row.cells[1], range = document.createRange();
      range.selectNodeContents(td);
      const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size;
      return {text: td.textContent, title: td.title, lines, wrap: getComputedStyle(td).whiteSpace,
              cut: td.scrollWidth > td.clientWidth, ellipsis: getComputedStyle(td).textOverflow};
    })""")
    assert [c["title"] for c in cells] == [long_id(i) for i in range(LONG_IDS)]
    for c in cells:
        assert c["lines"] == 1 and c["wrap"] == "nowrap", c
        assert not c["cut"] or c["ellipsis"] == "ellipsis", c
    # scrolled to its last column, the box keeps # and id in view
    seen = page.evaluate("""() => {
      const box = document.getElementById('cases-scroll');
      box.scrollIntoView();
      box.scrollLeft = box.scrollWidth;
      const td = document.querySelector('#cases-table tbody tr.case-row').cells[1], r = td.getBoundingClientRect();
      return document.elementFromPoint(r.left + 8, r.top + r.height / 2) === td && r.left >= box.getBoundingClientRect().left;
    }""")
    assert seen
    _clean(report_page)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("which", ["runs", "dense", "few"])
def test_trend_chart_text_is_inside_the_chart_and_markers_do_not_overlap(
    report_page: Any, trend_pages: dict[str, str], shots: Path, which: str, width: int
) -> None:
    page = _open(report_page, trend_pages[which], width, shots / f"trend-{which}-{width}.png")
    charts = page.evaluate(CHART_TEXT)
    assert len(charts) >= 5
    for chart in charts:
        for t in chart["texts"]:  # tick, axis, marker and legend labels alike
            assert t["l"] >= -0.5 and t["r"] <= chart["w"] + 0.5 and t["t"] >= -0.5 and t["b"] <= chart["h"] + 0.5, (chart["chart"], t)
        xs = sorted(chart["xLabels"], key=lambda t: t["l"])
        assert xs[0]["text"].rstrip("…") and xs[0]["l"] >= 0, (chart["chart"], xs[0])  # the first x label is whole
        assert all(a["r"] <= b["l"] for a, b in zip(xs, xs[1:])), (chart["chart"], xs)
        marks = chart["markers"]
        assert marks, chart["chart"]
        for j, a in enumerate(marks):
            assert a["h"] >= 12, ("a marker label drawn too small to read", chart["chart"], a)  # 11 px text, not scaled down
            for b in marks[j + 1:]:
                apart = a["r"] <= b["l"] + 0.5 or b["r"] <= a["l"] + 0.5 or a["b"] <= b["t"] + 0.5 or b["b"] <= a["t"] + 0.5
                assert apart, ("marker labels overlap", chart["chart"], a, b)
    if which == "dense":  # 14 changes in a row, 15 px apart: one label with a count, every change in its tooltip
        merged = page.locator("#chart-recall_any g.marker-text", has_text="14 changes")
        assert merged.count() == 1
        tip = (merged.locator("title").text_content() or "").split("\n")
        assert len(tip) == 14 and all(line.endswith(": Δ params.abstain_threshold") for line in tip), tip
    _assert_tables_reachable(page.evaluate(TABLES), width)
    _clean(report_page)


def test_partial_and_failed_runs_are_not_points_of_the_trend_lines(
    report_page: Any, made: tuple[Path, Path, Path], trend_pages: dict[str, str], shots: Path
) -> None:
    from evalkit.report.html.trend import trend_view

    results = made[0]
    status = {r["run_id"]: (r["status"], r["status_note"]) for r in trend_view(results)["runs"]}
    assert status == {
        "t1-base": ("ok", None), "t2-abstain-05": ("ok", None), "t3-limit-4": ("partial", "4 of 66 cases (--limit 4)"),
        "t4-all-failed": ("failed", "the target failed every case (66 of 66)"), "t5-k-10": ("ok", None), "t6-slow-long-ids": ("ok", None),
    }
    page = _open(report_page, trend_pages["runs"], 1400, shots / "trend-apart-1400.png")
    for key in ("recall_any", "mrr", "ndcg", "latency_p95"):
        chart = page.locator(f"#chart-{key} svg.chart")
        points = chart.locator("g.series circle title").all_text_contents()
        assert not [p for p in points if "t3-limit-4" in p or "t4-all-failed" in p], points
        assert len(points) == 4  # t1, t2, t5 on the first eval set, t6 on the second
        (line,) = chart.locator("g.series polyline").all()  # the first eval set's line: t1, t2, t5
        assert len((line.get_attribute("points") or "").split()) == 3
        apart = {g.get_attribute("data-kind"): g.locator("title").text_content() for g in chart.locator("g.apart").all()}
        assert set(apart) == {"partial", "failed"}
        assert apart["partial"].startswith("t3-limit-4: partial run, 4 of 66 cases") and apart["failed"].startswith("t4-all-failed: failed run")
        legend = " ".join(chart.locator("text").all_text_contents())
        assert "partial run (not on the lines)" in legend and "failed run (not on the lines)" in legend
    rows = page.locator("#run-table tbody tr")  # oldest first: t3 and t4 are the third and fourth
    assert rows.nth(2).locator(".run-id").first.text_content() == "t3-limit-4"
    assert rows.nth(2).locator(".run-status").text_content() == "partial"
    assert rows.nth(3).locator(".run-status").text_content() == "failed"
    assert rows.locator(".run-status").count() == 2
    _clean(report_page)
