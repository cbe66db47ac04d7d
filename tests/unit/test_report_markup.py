"""User-supplied text that rich prints is text, never markup (hardening issue, item 7)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from evalkit.report.judges import print_judge_summary
from evalkit.report.run import print_run_summary
from evalkit.rescore.answers import JudgeRunResult


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=300, color_system=None, force_terminal=False), out


def test_run_summary_prints_run_ids_and_paths_literally() -> None:
    # regression: issue item 7, `--run-id '[bold red]RUN'` was printed as red markup, and a
    # path holding "[/x]" made rich raise MarkupError after the run had finished
    console, out = _console()
    metrics = {"run_id": "[bold red]RUN", "total_tests": 1, "aggregate_metrics": {}}
    gate = {"baseline_run_id": "[red]base", "passed": True, "compared": ["recall_any@5"]}
    print_run_summary(metrics, Path("/tmp/[dim]results[/x]/RUN"), judge={"provider": None}, gate=gate, console=console)
    text = out.getvalue()
    assert "run [bold red]RUN — 1 cases" in text
    assert "run folder: /tmp/[dim]results[/x]/RUN" in text
    assert "gate passed against [red]base" in text


def test_judge_summary_prints_models_and_paths_literally() -> None:
    console, out = _console()
    result = JudgeRunResult(
        run_id="r1", run_dir=Path("/tmp/[bold]res[/]/r1"), stats={}, reliability=None,
        judge={"provider": "openai-compatible", "model": "qwen[bold]@abc", "pinned": True, "prompt_set": "[v1]",
               "temperature": 0.0},
        metrics={"aggregate_metrics": {}}, n_judged=1, n_records=1,
    )
    print_judge_summary(result, console=console)
    text = out.getvalue()
    assert "judge: openai-compatible qwen[bold]@abc · prompts [v1] · temperature 0.0" in text
    assert "/tmp/[bold]res[/]/r1" in text
