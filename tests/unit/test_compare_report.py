"""The comparison's renderers: a markdown snapshot, escaping of user text, one model four ways."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from evalkit.compare import compare_runs
from evalkit.metrics.registry import label_of
from evalkit.report.compare import append_step_summary, print_comparison, render_markdown
from tests.unit.test_compare import RUN_A, RUN_B, make_run, rec

# RUN_A/RUN_B plus twelve cases run b finds and run a missed: a significant recall gain.
EXTRA_A = [rec(f"e{i:02d}", rank=None, category="reasoning", tags=()) for i in range(12)]
EXTRA_B = [rec(f"e{i:02d}", rank=1, category="reasoning", tags=()) for i in range(12)]
TRICKY = "Which `config` | flag <b>breaks</b> [bold]it[/bold]?"


@pytest.fixture
def comparison(tmp_path: Path):
    recs_a = [dict(r) for r in RUN_A] + EXTRA_A
    recs_b = [dict(r) for r in RUN_B] + EXTRA_B
    for r in (recs_a[1], recs_b[1]):  # c2: the recall regression
        r["question"] = TRICKY
    make_run(tmp_path, "base", recs_a)
    make_run(tmp_path, "new", recs_b, config={"settings": {"params": {"abstain_threshold": 0.5}}})
    return compare_runs("base", "new", results_dir=tmp_path, resamples=2000, seed=0)


SNAPSHOT = Path(__file__).parent / "snapshots" / "compare_report.md"


def test_markdown_snapshot(comparison):
    # To accept an intended change: write render_markdown(comparison) to SNAPSHOT and review the diff.
    text = render_markdown(comparison)
    assert text == SNAPSHOT.read_text(encoding="utf-8")
    assert render_markdown(comparison) == text  # deterministic
    # verdict first, then significant changes, then flips, then collapsible details
    order = [text.index(s) for s in ("### ⚠️ NOT ENOUGH EVIDENCE: ", "#### Significant changes", "#### Flips", "<details>")]
    assert order == sorted(order)


def test_markdown_escapes_questions_in_tables(comparison):
    text = render_markdown(comparison)
    row = next(line for line in text.splitlines() if line.startswith("| c2 |"))
    assert "Which \\`config\\` \\| flag &lt;b>breaks&lt;/b> [bold]it[/bold]?" in row
    assert row.count(" | ") == 4  # five cells: the question's pipe did not make a sixth


def test_rich_report_prints_user_text_literally(comparison):
    out = io.StringIO()
    print_comparison(comparison, Console(file=out, width=200, color_system=None, force_terminal=False))
    text = out.getvalue()
    assert TRICKY in text  # no markup applied, no MarkupError
    assert text.startswith("NOT ENOUGH EVIDENCE: ") and "compare base (a, baseline) → new (b)" in text
    assert "not distinguishable from noise" in text or "no change" in text


def test_one_model_three_renderings_agree(comparison):
    body = orjson.loads(comparison.model_dump_json())
    md = render_markdown(comparison)
    out = io.StringIO()
    print_comparison(comparison, Console(file=out, width=250, color_system=None, force_terminal=False))
    shown_tests = set()
    for row in (r for r in body["deltas"] if r["significant"]):
        label = label_of(row["metric"], row["k"])  # the registry's label; the JSON keeps metric and k
        if (label, row["test"]) in shown_tests:
            assert row["scope"] in md  # a repeat of a test above: named in the note under the table
            continue
        shown_tests.add((label, row["test"]))
        line = next(x for x in md.splitlines() if x.startswith(f"| {label} | {row['scope']} |"))
        assert f"{row['p_adjusted']:.3f}" in line or "<0.001" in line
        assert f"{label} · {row['scope']}" in out.getvalue()
    for flip in body["flips"]["regressions"]:
        assert f"| {flip['id']} |" in md and f"  {flip['id']}  " in out.getvalue()
    for key in body["config_diff"]:
        assert key in md and key in out.getvalue()


def test_step_summary_is_appended(tmp_path):
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert append_step_summary("## report", {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert target.read_text() == "earlier step\n## report\n"
    assert append_step_summary("## report", {}) is None
