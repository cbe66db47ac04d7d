"""Runs with different trial counts compare on per-case trial means (issue 30 item 6): a
`--trials 3` run against a single-trial one was refused as "case counts differ (59 vs 177): a
filtered or partial run" -- the wrong reason: it counted records, not cases."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evalkit import run_eval
from evalkit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_a_three_trial_run_compares_with_a_single_trial_run(tmp_path: Path) -> None:
    # a copy: gating against a baseline locks the eval set file (eval_sets.lock beside it)
    (tmp_path / "eval_set.jsonl").write_bytes((ROOT / "eval_set.jsonl").read_bytes())
    es, vault, results = str(tmp_path / "eval_set.jsonl"), str(ROOT / "sample_vault"), str(tmp_path / "r")
    run_eval(es, vault=vault, run_id="one", results_dir=results, retrieval_only=True, quiet=True)
    run_eval(es, vault=vault, run_id="three", results_dir=results, retrieval_only=True, quiet=True, trials=3)
    out = CliRunner().invoke(app, ["compare", "one", "three", "--results-dir", results, "--format", "json"])
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["invariants"]["violations"] == []
    assert body["n"]["paired"] == body["n"]["a"] == body["n"]["b"] == 66  # cases (59 questions, 7 turns), not records
    assert any("asked each case 1 time(s), run b 3" in n for n in body["notes"])
    # the reference chatbot is deterministic: every trial mean equals the single answer's value
    (row,) = [r for r in body["deltas"] if r["metric"] == "recall_any" and r["scope"] == "overall" and r["k"] == 5]
    assert row["change"] == "unchanged"
    # a baseline gate at run time reads the same rule
    gated = run_eval(es, vault=vault, run_id="gated", results_dir=results, retrieval_only=True, quiet=True,
                     trials=2, baseline="one")
    assert gated.gate["passed"] is True, gated.gate
