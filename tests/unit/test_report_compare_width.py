"""The terminal report at 80 columns (issue 36 item 8).

CI logs and pipes are 80 columns wide (rich assumes 80 when stdout is not a terminal). There
the verdict table's metric column collapsed to "met…" and blank rows appeared. Every table
print_comparison draws now keeps each metric's name whole on one line, at 80, 100 and 160
columns: a table that does not fit stacks each row (its name on a line, its numbers under it),
the failure-stage matrix numbers its columns, and a flip too long for a line breaks between
changes, never inside a name.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from evalkit.compare import compare_runs
from evalkit.compare.models import Comparison
from evalkit.report.compare import (
    by_case,
    distinct_rows,
    flip_change,
    print_comparison,
    row_label,
    stage_grid,
    stage_label,
    verdict_cells,
)
from tests.unit.test_compare import make_run, rec

WIDTHS = [80, 100, 160]


def _expect(record: dict[str, Any], include: float, violated: bool) -> dict[str, Any]:
    """The record with must-include / must-exclude results over its retrieved chunks."""
    record["expectations"] = {"retrieved": {"include_recall": include, "exclude_violated": violated}}
    return record


@pytest.fixture(scope="module")
def realistic(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """28 cases: 14 multi_hop ones run b now finds (a significant gain in `category:multi_hop`),
    10 factual ones of which run b loses one, times out on one and fails to judge one, and 4
    unanswerable ones of which run b answers one; must-include and must-exclude expectations
    on the answerable ones. The labels are the registry's longest: "Must-exclude violation
    rate (retrieved)", "Hallucination rate (unanswerable)"."""
    root = tmp_path_factory.mktemp("width")
    a, b = [], []
    for i in range(14):
        a.append(_expect(rec(f"m{i:02d}", rank=None, category="multi_hop", c=2.0), 0.0, True))
        b.append(_expect(rec(f"m{i:02d}", rank=1, category="multi_hop", c=4.0), 1.0, False))
    for i in range(10):
        a.append(_expect(rec(f"f{i:02d}", rank=1, category="factual"), 1.0, False))
        b.append(_expect(rec(f"f{i:02d}", rank=1, category="factual"), 1.0, False))
    b[14] = _expect(rec("f00", rank=None, attribution=False, c=1.0, g=1.0, category="factual",
                        top=[("notes/a long folder name/and a long note name.md", "# Heading > ## Sub-heading")]), 0.5, True)
    b[15] = rec("f01", error="timeout", category="factual")
    b[16] = _expect(rec("f02", rank=1, judge_error="correctness", c=None, category="factual"), 1.0, False)
    for i in range(4):
        a.append(rec(f"u{i}", answerable=False, abstained=True, g=None, c=None, category="adversarial", tags=()))
        b.append(rec(f"u{i}", answerable=False, abstained=i != 0, g=None, c=None, category="adversarial", tags=()))
    make_run(root, "base", a)
    make_run(root, "new", b)
    return compare_runs("base", "new", results_dir=root, resamples=2000, seed=0)


def _lines(c: Comparison, width: int) -> list[str]:
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=width, color_system=None, force_terminal=False))
    return out.getvalue().splitlines()


def test_the_fixture_has_what_the_report_must_fit(realistic: Comparison) -> None:
    labels = {row_label(r) for r in realistic.deltas}
    assert {"Must-exclude violation rate (retrieved)", "Must-include recall (retrieved)",
            "Hallucination rate (unanswerable)", "False abstention rate (answerable)"} <= labels
    assert any(r.significant and r.scope == "category:multi_hop" for r in realistic.deltas)
    assert realistic.verdict.metrics and realistic.flips.regressions and realistic.stages.cells


@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_is_wider_than_the_console_and_no_row_is_blank(realistic: Comparison, width: int) -> None:
    lines = _lines(realistic, width)
    assert max(cell_len(line) for line in lines) <= width
    # A blank row: a line of nothing but spaces and column rules (an empty line between sections is fine).
    blank = [i for i, line in enumerate(lines) if line and not line.strip(" │┃")]
    assert not blank, [lines[i - 1: i + 2] for i in blank]


@pytest.mark.parametrize("width", WIDTHS)
def test_every_table_keeps_its_metric_names_whole(realistic: Comparison, width: int) -> None:
    c = realistic
    lines = _lines(c, width)
    starts = [line.lstrip() for line in lines]

    def at_line_start(text: str) -> bool:
        return any(s == text or s.startswith(text + " ") for s in starts)

    # the verdict table: each metric's name (with its gated mark), at the start of a line
    missing = [verdict_cells(m)[0] for m in c.verdict.metrics if not at_line_start(verdict_cells(m)[0])]
    # the delta tables: overall, significant changes and tested slices, named with their scope
    missing += [row_label(r) for r in c.deltas if r.scope == "overall" and not at_line_start(row_label(r))]
    shown, _ = distinct_rows(c.significant_deltas())
    missing += [f"{row_label(r)} · {r.scope}" for r in shown if not at_line_start(f"{row_label(r)} · {r.scope}")]
    # the tested slices, less those repeating an overall row's test on the same cases (a note says so)
    overall_tests = {(r.metric, r.k, r.test) for r in c.deltas if r.scope == "overall" and r.test is not None}
    tested, _ = distinct_rows([r for r in c.deltas if r.scope != "overall" and r.in_family], overall_tests)
    assert any(r.scope == "category:multi_hop" for r in tested)
    missing += [f"{row_label(r)} · {r.scope}" for r in tested if not at_line_start(f"{row_label(r)} · {r.scope}")]
    assert not missing, (width, missing)
    # flips: every change whole on a line
    for flip in [*c.flips.regressions, *c.flips.improvements]:
        assert any(flip_change(flip) in line for line in lines), (width, flip_change(flip))
    assert len(by_case(c.flips.regressions)) == 2
    # the failure-stage matrix: every row's stage named whole
    present, _ = stage_grid(c.stages)
    start = next(i for i, line in enumerate(lines) if line.startswith("Failure stages"))
    for stage in present:
        assert any(stage_label(stage) in line for line in lines[start:start + len(present) + 4]), (width, stage)


def test_at_80_columns_wide_tables_stack_and_the_matrix_numbers_its_columns(realistic: Comparison) -> None:
    lines = _lines(realistic, 80)
    verdict = next(i for i, line in enumerate(lines) if line.startswith("Verdict per metric"))
    assert lines[verdict + 1] == "metric  verdict"
    row = lines.index("Must-exclude violation rate (retrieved)  better")
    assert lines[row + 1].split()[:2] == ["23", "-0.565"]  # n and Δ under the name
    matrix = next(i for i, line in enumerate(lines) if line.startswith("a ↓ · b →"))
    assert [x.strip() for x in lines[matrix].split("┃")][1:3] == ["1", "2"]
    assert lines[matrix + 2].startswith("1 pass ")
    # at 160 the same tables are one line per row
    wide = _lines(realistic, 160)
    assert any(line.startswith("Must-exclude violation rate (retrieved)") and "│ better" in line for line in wide)
