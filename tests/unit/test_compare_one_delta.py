"""compare_runs says one thing in every format (issue 25 item 5).

The Δ beside the CI and p was the difference of the two runs' means in the terminal and the
markdown, but the paired difference in the HTML; and a run compared with an identical copy was
"not distinguishable from noise". Now every format shows DeltaRow.reported_delta (the paired
mean difference where there is a paired test), and identical runs are said to be identical.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from evalkit.compare import compare_runs
from evalkit.report.compare import DELTA_LEGEND, print_comparison, render_markdown
from evalkit.report.html.compare import write_compare_report
from tests.unit.test_compare import make_run, rec


def _runs(tmp_path: Path):
    # By hand: groundedness a = 4, 4, 4, 1 (mean 13/4 = 3.25); b = 2, 2, 4 and a judge error on c4
    # (mean over the 3 it scored 8/3 = 2.667). The means differ by 2.667 − 3.25 = −0.583; the paired
    # mean over c1..c3, the cases both runs scored, is ((2 − 4) + (2 − 4) + (4 − 4)) / 3 = −1.333.
    a = [rec("c1", g=4.0), rec("c2", g=4.0), rec("c3", g=4.0), rec("c4", g=1.0)]
    b = [rec("c1", g=2.0), rec("c2", g=2.0), rec("c3", g=4.0), rec("c4", g=None, judge_error="groundedness")]
    make_run(tmp_path, "a", a)
    make_run(tmp_path, "b", b)
    return compare_runs("a", "b", results_dir=tmp_path, resamples=500, seed=0)


def test_every_format_shows_the_paired_delta(tmp_path: Path) -> None:
    c = _runs(tmp_path)
    row = next(r for r in c.deltas if r.metric == "groundedness_avg" and r.scope == "overall")
    assert row.a == pytest.approx(13 / 4) and row.b == pytest.approx(8 / 3)
    assert row.delta == pytest.approx(8 / 3 - 13 / 4)  # metrics.json's b − a, kept in the JSON
    assert row.paired_delta == pytest.approx(-4 / 3)  # by hand, over c1..c3
    assert row.reported_delta == row.paired_delta
    assert row.change == "worse"

    md = render_markdown(c)
    assert DELTA_LEGEND in md
    md_row = next(line for line in md.splitlines() if line.startswith("| Groundedness (0-5) |"))
    assert "−1.33" in md_row or "-1.33" in md_row, md_row
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=200, color_system=None, force_terminal=False))
    term_row = next(line for line in out.getvalue().splitlines() if line.lstrip().startswith("Groundedness (0-5)"))
    assert "-1.33" in term_row or "−1.33" in term_row, term_row
    assert "-0.58" not in term_row and "−0.58" not in term_row
    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=500, seed=0).read_text()
    assert "the mean paired difference b − a over the cases both runs scored" in html
    assert "-0.58" not in html and "−0.58" not in html


def test_a_run_and_its_identical_copy_are_said_to_be_identical(tmp_path: Path) -> None:
    make_run(tmp_path, "a", [rec("c1"), rec("c2", rank=None), rec("c3", g=2.0), rec("c4", answerable=False, abstained=True)])
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    c = compare_runs("a", "copy", results_dir=tmp_path, resamples=500, seed=0)
    assert c.identical
    said = "Nothing changed: every metric has the same value in both runs on each of the 4 paired cases."
    assert said in render_markdown(c)
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=300, color_system=None, force_terminal=False))
    assert said in out.getvalue()
    assert said in write_compare_report("a", "copy", results_dir=tmp_path, resamples=500, seed=0).read_text()
    assert "noise" not in render_markdown(c).split("**Gate")[0]
    # one case changed: no longer identical
    make_run(tmp_path, "b", [rec("c1"), rec("c2", rank=1), rec("c3", g=2.0), rec("c4", answerable=False, abstained=True)])
    assert not compare_runs("a", "b", results_dir=tmp_path, resamples=500, seed=0).identical
