"""Issue 43: an expanded case of the run report shows the target's trace steps (name, input,
output as stored), as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROWS = "#cases-table tbody tr.case-row"


@pytest.fixture(scope="module")
def traced_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    from concurrent.futures import ThreadPoolExecutor

    from evalkit.report.html.run import write_run_report
    from tests.unit.test_trace_steps import _run

    tmp = tmp_path_factory.mktemp("traced")
    with ThreadPoolExecutor(1) as pool:  # run_eval's asyncio.run beside Playwright's loop
        pool.submit(_run, Path(tmp)).result()
    return write_run_report("traced", results_dir=tmp / "results").resolve().as_uri()


def test_an_expanded_case_shows_its_trace_steps(report_page: Any, traced_url: str) -> None:
    page = report_page.page
    page.goto(traced_url, wait_until="load")
    page.wait_for_selector("#cases-table[data-ready]")
    row = page.locator(f'{ROWS}[data-id="q1"]')
    row.locator("button.expand").click()
    detail = page.locator(f'{ROWS}[data-id="q1"] + tr.case-detail-row')
    detail.locator("ol.traces").wait_for()
    text = detail.inner_text()
    assert "trace steps (2)" in text
    assert "bm25" in text and 'in: {"query":"What is A?","limit":50}' in text
    assert "Bearer ***" in text and "sk-live" not in text
    assert report_page.problems() == {k: [] for k in report_page.problems()}
