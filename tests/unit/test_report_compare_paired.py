"""Δ on screen is b − a of what is on screen (issue 36 item 6).

a and b were metrics.json's values (over every case a run scored) while Δ beside them was over
the cases both runs scored, so a row could read "Correctness 3.250 → 3.333, Δ −0.667". Now every
delta table shows the paired means Δ is the difference of, and a run's all-case value, where it
reads differently, beside them marked †: in the terminal (80 and 200 columns), the markdown and
the HTML page.
"""

from __future__ import annotations

import html as htmllib
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from evalkit.compare import compare_runs
from evalkit.compare.models import Comparison, DeltaRow
from evalkit.report.compare import print_comparison, render_markdown, row_label
from evalkit.report.html.compare import write_compare_report
from tests.unit.test_compare import make_run, rec

R = 500


def _unanswerable(cid: str, **kw) -> dict:
    return rec(cid, answerable=False, g=None, c=None, **kw)


def build(root: Path) -> None:
    """Two runs whose paired and all-case means differ: run b times out on c7 and u3 and its
    judge fails on c8's correctness; run a scores every case.

    By hand, correctness a = 4 (c1..c6), 1, 1 -> all cases 26/8 = 3.25; b = 2, 2, 4, 4, 4, 4 ->
    20/6 = 3.333 over the six it scored. The all-case values rise (+0.083) while the paired
    difference over c1..c6 is (−2 − 2) / 6 = −0.667: a 4.000 → b 3.333. Hallucination (1 −
    abstention accuracy) on u1..u3: a answers u3 only -> 1/3 over all; over the pair u1, u2 it
    is 0, and b answers u1 -> 1/2.
    """
    a = [*(rec(f"c{i}", c=4.0) for i in range(1, 7)), rec("c7", c=1.0), rec("c8", c=1.0),
         _unanswerable("u1", abstained=True), _unanswerable("u2", abstained=True), _unanswerable("u3", abstained=False)]
    b = [rec("c1", c=2.0), rec("c2", c=2.0), *(rec(f"c{i}", c=4.0) for i in range(3, 7)), rec("c7", error="timeout"),
         rec("c8", c=None, judge_error="correctness"),
         _unanswerable("u1", abstained=False), _unanswerable("u2", abstained=True), _unanswerable("u3", error="timeout")]
    make_run(root, "a", a)
    make_run(root, "b", b)


@pytest.fixture
def paired(tmp_path: Path) -> tuple[Comparison, Path]:
    build(tmp_path)
    return compare_runs("a", "b", results_dir=tmp_path, resamples=R, seed=0), tmp_path


def _overall(c: Comparison, metric: str) -> DeltaRow:
    return next(r for r in c.deltas if r.scope == "overall" and r.metric == metric)


def test_the_model_holds_the_paired_means_delta_is_the_difference_of(paired) -> None:
    c, _ = paired
    corr = _overall(c, "correctness_avg")
    assert (corr.a, corr.b, corr.n_a, corr.n_b) == (pytest.approx(26 / 8), pytest.approx(20 / 6), 8, 6)  # metrics.json's
    assert (corr.paired_a, corr.paired_b, corr.n) == (pytest.approx(4.0), pytest.approx(20 / 6), 6)  # by hand, c1..c6
    assert corr.paired_delta == pytest.approx(-4 / 6) and corr.change == "worse"
    hall, abst = _overall(c, "hallucination_rate_unanswerable"), _overall(c, "abstention_accuracy")
    assert (hall.paired_a, hall.paired_b) == (pytest.approx(0.0), pytest.approx(1 / 2))  # its own means, 1 − abstention's
    assert (abst.paired_a, abst.paired_b) == (pytest.approx(1.0), pytest.approx(1 / 2))
    assert hall.a == pytest.approx(1 / 3)  # all cases: a answered u3
    for r in c.deltas:
        if r.paired_delta is not None:
            assert r.paired_b - r.paired_a == pytest.approx(r.paired_delta, abs=1e-12), (r.metric, r.scope, r.k)
        else:
            assert r.paired_a is None and r.paired_b is None


def _num(text: str) -> float:
    return 0.0 if text.startswith("±0") else float(text.replace("−", "-"))  # "±0" (terminal, markdown), "±0.000" (HTML)


def _check_difference(a: str, b: str, delta: str, where: str) -> None:
    # Each shown number is rounded to 3 decimals, so b − a and Δ may differ by one unit in the last place.
    assert abs(_num(b) - _num(a) - _num(delta)) <= 0.001 + 1e-9, (where, a, b, delta)


def _terminal(c: Comparison, width: int) -> list[str]:
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=width, color_system=None, force_terminal=False))
    return out.getvalue().splitlines()


def _overall_rows(c: Comparison) -> list[DeltaRow]:
    return [r for r in c.deltas if r.scope == "overall"]


@pytest.mark.parametrize("width", [80, 200])
def test_terminal_delta_is_b_minus_a_of_the_shown_numbers(paired, width: int) -> None:
    c, _ = paired
    lines = _terminal(c, width)
    start = next(i for i, line in enumerate(lines) if line.startswith("Overall"))
    table = lines[start:]
    marked = []
    for r in _overall_rows(c):
        at = next(i for i, line in enumerate(table) if line.startswith(row_label(r) + " ") or line == row_label(r))
        if "│" in table[at]:  # the wide layout: one line per row
            cells = [x.strip() for x in table[at].split("│")]
            a, b, delta = cells[1:4]
            below = [x.strip() for x in table[at + 1].split("│")]
            all_case = (below[1], below[2]) if below[0] == "† all cases" else None
        else:  # the narrow one: the label line, then the numbers, then a † line with the all-case values
            a, b, delta = table[at + 1].split()[:3]
            below = table[at + 2].split()
            all_case = (below[1], below[2]) if below[0] == "†" else None
        _check_difference(a, b, delta, f"terminal {width}: {row_label(r)}")
        if all_case is not None:
            marked.append(row_label(r))
            assert all_case == (f"{r.a:.3f}", f"{r.b:.3f}")
    # the rows whose all-case values read differently, and only those, carry them
    assert marked == ["Recall@5 (any)", "Recall_frac@5", "Precision@5", "MRR@5", "nDCG@5", "Attribution hit rate",
                      "Correctness (0-5)", "Abstention accuracy", "Hallucination rate (unanswerable)",
                      "Abstention decision accuracy"]
    corr = next(i for i, line in enumerate(table) if line.startswith("Correctness (0-5)"))
    shown = " ".join(table[corr:corr + 3])
    assert "4.000" in shown and "3.333" in shown and "-0.667" in shown and "3.250" in shown


def test_markdown_delta_is_b_minus_a_and_the_all_case_values_are_marked(paired) -> None:
    c, _ = paired
    md = render_markdown(c).splitlines()
    start = next(i for i, line in enumerate(md) if line.startswith("<details><summary>All overall deltas"))
    header = next(line for line in md[start:] if line.startswith("| metric |"))
    names = [x.strip() for x in header.strip("|").split(" | ")]
    assert names[:5] == ["metric", "a", "b", "Δ", "n"] and names[-1] == "† all cases: a (n) · b (n)"
    for r in _overall_rows(c):
        line = next(x for x in md[start:] if x.startswith(f"| {row_label(r)} |"))
        cells = [x.strip() for x in line.strip("|").split(" | ")]
        _check_difference(cells[1], cells[2], cells[3], f"markdown: {row_label(r)}")
    corr = next(x for x in md[start:] if x.startswith("| Correctness (0-5) |"))
    assert corr.startswith("| Correctness (0-5) | 4.000 | 3.333 | -0.667 | 6 |")
    assert corr.endswith("| † 3.250 (8) · 3.333 (6) |")
    grounded = next(x for x in md[start:] if x.startswith("| Groundedness (0-5) |"))
    assert grounded.endswith("|  |")  # same value over all cases: nothing to mark


def test_html_delta_is_b_minus_a_and_the_all_case_values_are_marked(paired) -> None:
    c, root = paired
    page = write_compare_report("a", "b", results_dir=root, resamples=R, seed=0).read_text(encoding="utf-8")
    table = page[page.index('<table class="sortable" id="delta-table">'):]
    table = table[: table.index("</table>")]
    head = [htmllib.unescape(x) for x in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    assert head[2:5] == ["a", "b", "Δ"] and head[-1] == "† all cases: a (n) · b (n)"
    rows = {}
    for tr in re.findall(r'<tr data-grouping="overall"[^>]*>(.*?)</tr>', table, re.S):
        cells = [htmllib.unescape(re.sub(r"<[^>]+>", "", x)).strip() for x in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        rows[cells[0]] = cells
    assert set(rows) == {row_label(r) for r in _overall_rows(c)}
    for label, cells in rows.items():
        _check_difference(cells[2], cells[3], cells[4], f"html: {label}")
    assert rows["Correctness (0-5)"][2:5] == ["4.000", "3.333", "−0.667"]  # the page's minus sign
    assert rows["Correctness (0-5)"][-1] == "† 3.250 (8) · 3.333 (6)"
    assert rows["Groundedness (0-5)"][-1] == ""
