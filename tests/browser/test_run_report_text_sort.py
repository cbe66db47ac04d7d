"""Issue 39 item 2: the run report ships the order of its id column
(`cases.text_ranks`), so a text sort of 100,000 rows is a sort of numbers. The order must be
the one the page makes itself (cases.js `textRanks`: lower case, digit runs as numbers,
UTF-16 comparison, ties in the order they had): the same run's page is written with the
ranks and without them (the page then ranks in the browser), and every sort of both is
read in full, row by row, and compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.browser import synthetic

# Values whose order is easy to get wrong: case, digit runs (and zeros in front of them:
# "q010" and "Q10" tie), a digit run past 20 digits, accents, final sigma, a dotted capital
# I (two characters in lower case), code points past U+FFFF beside ones just below it (code
# points and UTF-16 code units order them differently), empty values (last both ways).
TRICKY = ["q10", "Q9", "q010", "Q10", "a", "A", "", "b" + "9" * 25, "b" + "1" * 21, "Äpfel", "äpfel", "apfel", "ΑΣ",
          "ας", "İx", "ix", "x\U0001f600", "x\uff01", "x", "10", "9", "z 2 a", "z 02 b", "Zeta", "ZETA", "ζ"]
N = 3 * len(TRICKY)
ROWS = "#cases-table tbody tr.case-row"


def _write(results: Path) -> None:
    synthetic.write_run(results, N, run_id="tricky")
    path = results / "tricky" / "results.jsonl"
    lines = []
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        i = rec["case_index"]
        rec["test_case_id"] = rec["case"]["id"] = TRICKY[i % len(TRICKY)] + (" " if i // len(TRICKY) == 1 else "")
        rec["question"] = rec["case"]["question"] = TRICKY[(7 * i) % len(TRICKY)]
        if i % 5 == 0:  # the error column sorts as text too
            rec["error"] = {"kind": TRICKY[(3 * i) % len(TRICKY)] or "x", "detail": TRICKY[i % len(TRICKY)]}
        lines.append(orjson.dumps(rec))
    path.write_bytes(b"\n".join(lines) + b"\n")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> dict[str, str]:
    from evalkit.report.html import cases
    from evalkit.report.html.run import write_run_report

    results = tmp_path_factory.mktemp("tricky") / "results"
    _write(results)
    shipped = write_run_report("tricky", results_dir=results, output=results.parent / "shipped.html")
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(cases, "RANKED", ())
        own = write_run_report("tricky", results_dir=results, output=results.parent / "own.html")
    finally:
        mp.undo()
    return {"shipped": shipped.resolve().as_uri(), "own": own.resolve().as_uri()}


def _order(page: Any) -> list[str]:
    """Every row's data-row, in table order: the table draws a screenful, so scroll through it."""
    return page.evaluate("""async (n) => {
      const box = document.getElementById('cases-scroll'), seen = new Map();
      const frames = async () => { for (let i = 0; i < 2; i++) { await new Promise(r => requestAnimationFrame(r)); } };
      box.scrollTop = 0; await frames();
      for (let guard = 0; seen.size < n && guard < 1000; guard++) {
        document.querySelectorAll('#cases-table tbody tr.case-row').forEach(tr => {
          seen.set(Number(tr.getAttribute('aria-rowindex')), tr.getAttribute('data-row'));
        });
        box.scrollTop += 200; await frames();
      }
      return [...seen.keys()].sort((a, b) => a - b).map(k => seen.get(k));
    }""", N)


def _sorts(watched: Any, url: str) -> dict[str, list[str]]:
    page = watched.page
    page.goto(url, wait_until="load")
    page.wait_for_selector("#cases-table[data-ready]")
    out = {"start": _order(page)}
    for col in ("id", "category", "outcome", "error"):
        for way in ("first", "again"):
            page.locator(f'#cases-table thead th[data-col="{col}"] button').click()
            out[f"{col} {way}"] = _order(page)
    assert watched.problems() == {k: [] for k in watched.problems()}
    return out


def test_shipped_ranks_sort_as_the_page_sorts_itself(report_page: Any, pages: dict[str, str]) -> None:
    shipped = _sorts(report_page, pages["shipped"])
    report_page.page.goto("about:blank")
    own = _sorts(report_page, pages["own"])
    assert all(len(order) == N for order in shipped.values())
    assert shipped["id first"] != shipped["start"]  # it sorted
    assert shipped == own


def test_the_page_holds_the_ranks_it_sorts_by(pages: dict[str, str]) -> None:
    from evalkit.report.html.cases import unpack

    def columns(url: str) -> dict[str, Any]:
        html = Path(url.removeprefix("file://")).read_text()
        start = html.index('id="case-rows">') + len('id="case-rows">')
        return unpack(html[start:html.index("<", start)])

    assert set(columns(pages["shipped"])["ranks"]) == {"id"}
    assert columns(pages["own"])["ranks"] == {}
