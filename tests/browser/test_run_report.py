"""The run report in headless chromium: it renders without errors or requests, sorts,
filters and expands, and hostile text from the run shows as text and runs nothing.

The case table is drawn by the page's script (static/cases.js) from packed data: rows are
`tr.case-row`, an expanded case adds a `tr.case-detail-row` after its row.
(tests/browser/test_run_report_scale.py: the same table at 100,000 cases.)"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.browser.hostile import IMG, SCRIPT, make_hostile_run
from tests.support import bundled_lines

N_CASES = 12


@pytest.fixture(scope="module")
def report_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    from concurrent.futures import ThreadPoolExecutor

    from evalkit.report.html.run import write_run_report

    # Playwright's sync API keeps an event loop running in this thread; run_eval starts its
    # own with asyncio.run, so it runs in another thread.
    with ThreadPoolExecutor(1) as pool:
        results, run_id = pool.submit(make_hostile_run, tmp_path_factory.mktemp("hostile"), N_CASES).result()
    return write_run_report(run_id, results_dir=results).resolve().as_uri()


ROWS = "#cases-table tbody tr.case-row"


def _open(watched: Any, url: str) -> Any:
    watched.page.goto(url, wait_until="load")
    watched.page.wait_for_selector("#cases-table[data-ready]")  # the script has drawn the case table
    return watched.page


def _column(page: Any, table: str, index: int) -> list[str]:
    rows = ROWS if table == "cases-table" else f"#{table} tbody tr"
    return page.eval_on_selector_all(
        rows, f"rows => rows.map(r => r.cells[{index}].getAttribute('data-sort') ?? r.cells[{index}].textContent.trim())"
    )


def _header_index(page: Any, table: str, text: str) -> int:
    return page.eval_on_selector_all(f"#{table} thead th", f"ths => ths.findIndex(th => th.textContent.trim() === {text!r})")


def test_renders_with_charts_and_no_errors_dialogs_or_requests(report_page: Any, report_url: str) -> None:
    page = _open(report_page, report_url)
    assert page.title().startswith("Run hostile")
    assert page.locator("svg.chart").count() >= 1  # the latency chart
    assert page.locator("svg.cell-bar").count() > 10  # the bars of the tables
    assert page.locator(ROWS).count() == N_CASES
    assert page.inner_text('[data-filter-count-for="cases-table"]') == f"{N_CASES} of {N_CASES} rows"
    assert report_page.problems() == {k: [] for k in report_page.problems()}


def test_hostile_text_is_text_and_runs_nothing(report_page: Any, report_url: str) -> None:
    page = _open(report_page, report_url)
    row = page.locator(f'{ROWS}[data-id="h-000"]')
    assert SCRIPT in row.locator("td.question").inner_text()  # the question
    row.locator("button.expand").click()
    detail = page.locator(f'{ROWS}[data-id="h-000"] + tr.case-detail-row')
    detail.locator("ol.chunks").wait_for()
    text = detail.inner_text()
    assert SCRIPT in text and IMG in text  # chunk text and answer, shown literally
    assert '"><img src=x onerror=alert(3)>.md' in text  # the file name
    assert row.locator("button.expand").get_attribute("aria-expanded") == "true"
    injected = page.evaluate(
        "() => ({imgs: document.querySelectorAll('img').length,"
        " scripts: document.querySelectorAll('script').length,"
        " handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length})"
    )
    assert injected == {"imgs": 0, "scripts": 1, "handlers": 0}
    assert report_page.problems() == {k: [] for k in report_page.problems()}


def test_clicking_a_header_sorts_numerically_with_blanks_last(report_page: Any, report_url: str) -> None:
    page = _open(report_page, report_url)
    col = _header_index(page, "cases-table", "latency")
    before = _column(page, "cases-table", col)
    page.locator("#cases-table thead th").nth(col).locator("button").click()  # latency: descending first
    after = _column(page, "cases-table", col)
    values = [float(v) for v in after if v]
    assert values == sorted(values, reverse=True) and after != before
    page.locator("#cases-table thead th").nth(col).locator("button").click()
    values = [float(v) for v in _column(page, "cases-table", col) if v]
    assert values == sorted(values)

    rank = _header_index(page, "cases-table", "first gold rank")
    page.locator("#cases-table thead th").nth(rank).locator("button").click()  # ascending, blanks last
    keys = _column(page, "cases-table", rank)
    filled = [k for k in keys if k]
    assert [float(k) for k in filled] == sorted(float(k) for k in filled)
    assert keys == filled + [""] * (len(keys) - len(filled)) and len(filled) < len(keys)


def test_a_breakdown_table_sorts_by_its_cases_column(report_page: Any, report_url: str) -> None:
    page = _open(report_page, report_url)
    page.locator("#by-difficulty thead th").nth(1).locator("button").click()
    counts = [int(v) for v in _column(page, "by-difficulty", 1)]
    assert counts == sorted(counts, reverse=True)
    assert page.locator("#by-difficulty thead th").nth(1).get_attribute("aria-sort") == "descending"


def test_filters_hide_rows_and_say_how_many_are_shown(report_page: Any, report_url: str) -> None:
    page = _open(report_page, report_url)
    page.select_option('select[data-filter-key="category"]', "reasoning")
    cats = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.category)")
    assert cats and set(cats) == {"reasoning"} and len(cats) < N_CASES
    assert page.inner_text('[data-filter-count-for="cases-table"]') == f"{len(cats)} of {N_CASES} rows"

    page.select_option('select[data-filter-key="outcome"]', "hit")  # both filters apply
    both = page.eval_on_selector_all(ROWS, "rows => rows.map(r => [r.dataset.category, r.dataset.outcome])")
    assert all(c == "reasoning" and o == "hit" for c, o in both) and len(both) <= len(cats)

    page.select_option('select[data-filter-key="category"]', "")
    page.select_option('select[data-filter-key="outcome"]', "miss")
    outcomes = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.outcome)")
    assert outcomes and set(outcomes) == {"miss"}

    page.select_option('select[data-filter-key="outcome"]', "")
    page.select_option('select[data-filter-key="abstained"]', "yes")
    assert set(page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.abstained)")) <= {"yes"}
    page.select_option('select[data-filter-key="abstained"]', "")
    page.fill('input[data-filter-for="cases-table"]', "h-003")
    assert page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)") == ["h-003"]
    page.fill('input[data-filter-for="cases-table"]', "")
    assert page.locator(ROWS).count() == N_CASES
    assert report_page.problems() == {k: [] for k in report_page.problems()}


def test_expand_all_opens_every_shown_row_and_collapse_all_closes_them(report_page: Any, report_url: str) -> None:
    page = _open(report_page, report_url)
    page.select_option('select[data-filter-key="category"]', "factual")
    shown = page.locator(ROWS).count()
    page.click('button[data-expand="open"]')
    details = page.locator("#cases-table tr.case-detail-row")
    assert details.count() == shown
    for i in range(details.count()):  # filled once their block is unpacked
        details.nth(i).locator("ol.chunks").wait_for()
    assert page.eval_on_selector_all(f"{ROWS} button.expand", "bs => bs.every(b => b.getAttribute('aria-expanded') === 'true')")
    # each detail row follows its own row and shows that case's question's chunks
    pairs = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.nextElementSibling.classList.contains('case-detail-row'))")
    assert all(pairs)
    page.click('button[data-expand="close"]')
    assert details.count() == 0
    assert report_page.problems() == {k: [] for k in report_page.problems()}


def _png_pixels_vary(png: bytes) -> bool:
    """True when a PNG is not one flat colour: its decompressed scanlines use many byte
    values (a blank page decompresses to one or two, whatever the row filters)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        if kind == b"IDAT":
            idat += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat))) > 16


def test_screenshot_is_not_blank(report_page: Any, report_url: str, tmp_path: Path) -> None:
    page = _open(report_page, report_url)
    png = page.screenshot(full_page=False)
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1280, 900)
    assert _png_pixels_vary(png)
    assert not _png_pixels_vary(_blank_png(8, 8))  # the check itself: a flat image is blank


def _blank_png(w: int, h: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\xff\xff" * w for _ in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_a_conversations_turn_shows_the_turns_before_it(report_page: Any, tmp_path: Path) -> None:
    # Issue 40 item 8: an expanded turn says where it sits in its conversation and what it was
    # sent, as text (a hostile answer in the history runs nothing).
    import json
    from concurrent.futures import ThreadPoolExecutor

    from evalkit import run_eval
    from evalkit.report.html.run import write_run_report

    bot = tmp_path / "bot.py"
    bot.write_text(f"def ask(request):\n    return {{'answer': {SCRIPT!r}, 'references': [], 'abstained': False, "
                   "'debug': {'retrieved_chunks': []}}\n")
    (line,) = [x for x in bundled_lines(turns=True) if '"sv-conv-02"' in x]  # two turns
    (tmp_path / "es.jsonl").write_text(line + "\n", encoding="utf-8")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(run_eval, eval_set=str(tmp_path / "es.jsonl"), target=f"python:{bot}:ask", retrieval_only=True,
                    results_dir=str(tmp_path / "r"), run_id="conv", no_probe=True).result()
    page = _open(report_page, write_run_report("conv", results_dir=tmp_path / "r").resolve().as_uri())
    page.click('button[data-expand="open"]')
    details = page.locator("#cases-table tr.case-detail-row")
    assert details.count() == 2
    second = details.nth(1)
    second.locator("ol.chunks, h4").first.wait_for()
    text = second.inner_text()
    question = json.loads(line)["turns"][0]["question"]
    assert "sv-conv-02 · turn 2 of 2" in text and f"you: {question}" in text and f"bot: {SCRIPT[:200]}" in text
    assert report_page.problems() == {k: [] for k in report_page.problems()}
