"""The run report of a 100,000-case run in headless chromium (issue 27 item 1): every case
is in the table (none cut), only a screenful of rows is in the page, and sorting, filtering
and expanding work across all of them. How fast is measured by bench/report_bench.py
(bench/README.md, "Run report at scale"), not asserted here.

The run is synthetic (tests/browser/synthetic.py): each case's values are functions of its
index, so the expected order after a sort is computed here from the same functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser import synthetic

N = 100_000
ROWS = "#cases-table tbody tr.case-row"
COUNT = '[data-filter-count-for="cases-table"]'


@pytest.fixture(scope="module")
def big_url(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> str:
    # `browser` first: without chromium the tests skip before writing 100,000 records.
    from evalkit.report.html.run import write_run_report

    results = synthetic.write_run(tmp_path_factory.mktemp("big") / "results", N)
    return write_run_report("big", results_dir=results).resolve().as_uri()


def _open(watched: Any, url: str) -> Any:
    page = watched.page
    page.goto(url, wait_until="load", timeout=120_000)
    page.wait_for_selector("#cases-table[data-ready]", timeout=120_000)
    return page


def _ids(page: Any) -> list[str]:
    return page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")


def _sort(page: Any, label: str) -> None:
    page.locator("#cases-table thead th").filter(has_text=label).locator("button").click()


def _to_bottom(page: Any) -> None:
    # the table draws on the frame after a scroll; three frames later it has settled
    page.evaluate("""async () => {
      document.getElementById('cases-scroll').scrollTop = 1e9;
      for (let i = 0; i < 3; i++) { await new Promise(r => requestAnimationFrame(r)); }
    }""")


def _clean(watched: Any) -> None:
    assert watched.problems() == {k: [] for k in watched.problems()}


def test_every_case_is_in_the_table_and_few_rows_are_in_the_page(report_page: Any, big_url: str) -> None:
    page = _open(report_page, big_url)
    assert page.inner_text(COUNT) == "100,000 of 100,000 rows"
    assert "Showing the first" not in page.inner_text("#cases")  # no cut
    drawn = page.locator(ROWS).count()
    assert 10 <= drawn <= 100  # a screenful and a margin, not 100,000 rows
    assert _ids(page)[:3] == ["q000000", "q000001", "q000002"]  # eval-set order, though the file is not
    _to_bottom(page)
    assert _ids(page)[-1] == "q099999"
    assert page.locator(ROWS).count() <= 100
    _clean(report_page)


def test_sorting_100000_rows_by_a_metric_then_reversing_it(report_page: Any, big_url: str) -> None:
    page = _open(report_page, big_url)
    # nDCG@5 sorts descending first; cases without a value (unanswerable, every 13th) last,
    # ties in the order they had (eval-set order)
    value = {i: synthetic.ndcg(i) if i % 10 != 9 else None for i in range(N)}
    present = [i for i in range(N) if value[i] is not None]
    blank = [i for i in range(N) if value[i] is None]
    descending = sorted(present, key=lambda i: -value[i]) + blank  # type: ignore[operator]
    _sort(page, "nDCG@5")
    shown = _ids(page)
    assert shown == [f"q{i:06d}" for i in descending[: len(shown)]]
    assert page.locator("#cases-table thead th").filter(has_text="nDCG@5").get_attribute("aria-sort") == "descending"

    # again: ascending, blanks still last, ties in the order the first sort left them
    _sort(page, "nDCG@5")
    ascending = sorted([i for i in descending if value[i] is not None], key=lambda i: value[i]) + blank  # type: ignore[arg-type, return-value]
    shown = _ids(page)
    assert shown == [f"q{i:06d}" for i in ascending[: len(shown)]]
    _to_bottom(page)
    tail = _ids(page)
    assert tail == [f"q{i:06d}" for i in ascending[N - len(tail):]]
    assert page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.cells[8].getAttribute('data-sort'))")[-1] == ""
    _clean(report_page)


def test_sorting_100000_rows_by_text(report_page: Any, big_url: str) -> None:
    page = _open(report_page, big_url)
    _sort(page, "id")  # ascending first
    assert _ids(page)[:2] == ["q000000", "q000001"]
    _sort(page, "id")
    assert _ids(page)[:3] == ["q099999", "q099998", "q099997"]
    _clean(report_page)


def test_filtering_100000_rows(report_page: Any, big_url: str) -> None:
    from evalkit.report.html.cases import case_row

    page = _open(report_page, big_url)
    page.select_option('select[data-filter-key="category"]', "reasoning")
    assert page.inner_text(COUNT) == f"{N // 5:,} of 100,000 rows"
    assert set(page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.category)")) == {"reasoning"}

    page.select_option('select[data-filter-key="outcome"]', "error")  # both apply
    errors = [i for i in range(N) if synthetic.category(i) == "reasoning" and case_row(synthetic.record(i)).outcome == "error"]
    assert page.inner_text(COUNT) == f"{len(errors):,} of 100,000 rows"
    assert _ids(page) == [f"q{i:06d}" for i in errors][: len(_ids(page))]

    page.select_option('select[data-filter-key="category"]', "")
    page.select_option('select[data-filter-key="outcome"]', "")
    page.fill('input[data-filter-for="cases-table"]', "Q054321")  # case-insensitive
    assert _ids(page) == ["q054321"]
    page.fill('input[data-filter-for="cases-table"]', "")
    assert page.inner_text(COUNT) == "100,000 of 100,000 rows"
    _clean(report_page)


def test_a_case_far_down_expands_to_its_own_details(report_page: Any, big_url: str) -> None:
    page = _open(report_page, big_url)
    _sort(page, "id")
    _sort(page, "id")  # descending: the last case of the last detail block comes first
    for i in (99_999, 99_990):
        row = page.locator(f'{ROWS}[data-id="q{i:06d}"]')
        row.locator("button.expand").click()
        detail = page.locator(f'{ROWS}[data-id="q{i:06d}"] + tr.case-detail-row')
        detail.locator("ol.chunks").wait_for()
        text = detail.inner_text()
        assert synthetic.chunk_text(i, 1) in text and synthetic.chunk_text(i, 3) in text
        assert f"Note {i % 997} [1]." in text  # the answer
    _clean(report_page)


def test_the_synthetic_run_is_out_of_order_on_disk(tmp_path: Path) -> None:
    # what the tests above rely on: the table's eval-set order is not the file's order
    import orjson

    synthetic.write_run(tmp_path, 20)
    indexes = [orjson.loads(line)["case_index"] for line in (tmp_path / "big" / "results.jsonl").read_bytes().splitlines()]
    assert sorted(indexes) == list(range(20)) and indexes[:8] == list(range(7, -1, -1))
