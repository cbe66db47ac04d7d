"""The compare page and the trend page in headless chromium: they render with charts and
without console errors or requests, their controls work, and hostile text from the runs
(questions, answers, chunk text, file names) shows as text and runs nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.browser import hostile
from tests.browser.hostile import HOSTILE, IMG, SCRIPT, make_hostile_run, write_eval_set


def ask_b(request: dict) -> dict:
    """The hostile target, changed: every fourth case loses its gold chunk, even cases get a
    new (still hostile) answer. A python target of run "hostile-b"."""
    reply = hostile.ask(request)
    i = int(request["question"].split(":")[0].split()[1])
    if i % 4 == 0:
        reply["debug"]["retrieved_chunks"] = [
            {**c, "rel_path": f"other/o{c['rank']}.md", "heading_path": f"# O{c['rank']}"} for c in reply["debug"]["retrieved_chunks"]
        ]
    if i % 2 == 0:
        reply["answer"] = f"A new answer {HOSTILE} for case {i} [1]."
    return reply


def _make_runs(folder: Path) -> Path:
    from tests.support import run_eval_api

    results, _ = make_hostile_run(folder)
    common = {"k": [5, 3], "results_dir": str(results), "concurrency": 2, "no_probe": True, "quiet": True}
    run_eval_api(eval_set=str(folder / "eval_set.jsonl"), target=f"python:{Path(__file__).resolve()}:ask_b", run_id="hostile-b", **common)
    # a smaller eval set (another version) whose file name is hostile: a second trend series
    other = write_eval_set(folder / f"{IMG}.jsonl", 8)
    run_eval_api(eval_set=str(other), target=f"python:{Path(hostile.__file__).resolve()}:ask", run_id="hostile-small", **common)
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Playwright's sync API keeps an event loop in this thread; run_eval starts its own.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_make_runs, tmp_path_factory.mktemp("cmp")).result()


@pytest.fixture(scope="module")
def compare_url(results: Path) -> str:
    from evalkit.report.html.compare import write_compare_report

    return write_compare_report("hostile", "hostile-b", results_dir=results).resolve().as_uri()


@pytest.fixture(scope="module")
def trend_url(results: Path) -> str:
    from evalkit.report.html.trend import write_trend_report

    return write_trend_report(results).resolve().as_uri()


def _clean(watched: Any) -> None:
    assert watched.problems() == {k: [] for k in watched.problems()}


def test_compare_page_renders_with_charts_and_no_errors(report_page: Any, compare_url: str) -> None:
    page = report_page.page
    page.goto(compare_url, wait_until="load")
    assert page.title() == "evalkit compare: hostile → hostile-b"
    assert page.locator("svg.chart").count() >= 1  # the overall intervals (and significant ones, if any)
    assert page.locator("#flips-regressions tbody tr").count() >= 1
    assert page.locator("#drift .diff del").count() >= 1 and page.locator("#drift .diff ins").count() >= 1
    # the scope filter starts on "overall"; "all" shows every slice
    shown = page.locator("#delta-table tbody tr:not([hidden])").count()
    page.select_option('select[data-filter-key="grouping"]', "")
    assert page.locator("#delta-table tbody tr:not([hidden])").count() > shown
    _clean(report_page)


def test_compare_page_shows_hostile_text_as_text(report_page: Any, compare_url: str) -> None:
    page = report_page.page
    page.goto(compare_url, wait_until="load")
    row = page.locator("#flips-regressions tbody tr").filter(has_text="h-000")
    row.locator("summary").click()
    assert SCRIPT in row.inner_text() and IMG in row.inner_text()  # the question and the gold file name
    drift = page.locator("#drift").inner_text()
    assert SCRIPT in drift and IMG in drift  # the answers
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("document.scripts.length") == 1  # the page's own
    _clean(report_page)


def test_trend_page_renders_series_markers_and_links(report_page: Any, trend_url: str) -> None:
    page = report_page.page
    page.goto(trend_url, wait_until="load")
    assert page.locator("svg.chart").count() >= 6
    assert page.locator("#run-table tbody tr").count() == 3
    assert page.locator("#series tbody tr").count() == 2
    text = page.locator("main").inner_text()
    assert f"{IMG}.jsonl" in text  # the hostile eval set file name, as text
    # the second run's target changed: a labelled marker on every chart
    assert page.locator("svg.chart g.marker").count() >= 6
    assert "evalkit report --run-id" in page.content()
    page.select_option('select[data-filter-key="series"]', "1")
    assert page.locator("#run-table tbody tr:not([hidden])").count() == 1
    assert page.locator("main img, main script").count() == 0
    _clean(report_page)
