"""compare_runs end to end: two runs of the reference chatbot (over loopback HTTP) with different
`--param` settings, compared in all three formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.compare_runs import app as compare_app
from tests.support import run_eval_cli, write_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"
FALLBACK_SET = [
    {"id": "t1", "question": "How often should I water tomato plants?", "answerable": True, "tags": ["garden"], "category": "factual",
     "gold_supports": [{"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Watering"}]},
    {"id": "t2", "question": "At what temperature do I bake sourdough?", "answerable": True, "tags": ["kitchen"], "category": "factual",
     "gold_supports": [{"rel_path": "Kitchen/Bread.md", "heading_path": "# Sourdough bread"}]},
    {"id": "t3", "question": "What is the capital of Mars?", "answerable": False, "tags": ["general"], "category": "adversarial"},
]


@pytest.fixture(scope="module")
def two_runs(reference_server: str, reference_vault: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results/ with `a` (defaults, concurrency 4) and `b` (abstain_threshold 0.95, concurrency 2)."""
    results = tmp_path_factory.mktemp("results")
    if reference_vault == SAMPLE_VAULT and MAIN_SET.is_file():
        eval_set = MAIN_SET
    else:
        eval_set = write_eval_set(results.parent / "eval_set.jsonl", FALLBACK_SET)
    base = dict(eval_set=eval_set, api_url=reference_server, results_dir=results, quiet=True)
    for settings in (dict(run_id="a", concurrency=4),
                     dict(run_id="b", concurrency=2, params={"abstain_threshold": 0.95})):
        out = run_eval_cli(**base, **settings)
        assert out.exit_code == 0, out.output
    return results


def _compare(results: Path, *args: str):
    return CliRunner().invoke(compare_app, ["--run-id-1", "a", "--run-id-2", "b", "--results-dir", str(results), *args],
                              catch_exceptions=False, env={"COLUMNS": "160"})


def test_json(two_runs):
    out = _compare(two_runs, "--format", "json")
    assert out.exit_code in (0, 1), out.output
    body = json.loads(out.stdout)
    assert body["invariants"]["ok"] is True
    assert body["config_diff"]["settings.params.abstain_threshold"] == [None, 0.95]
    assert body["config_diff"]["settings.concurrency"] == [4, 2]
    # a stricter abstention threshold: more abstentions on answerable questions
    false_abst = next(r for r in body["deltas"] if r["metric"] == "false_abstention_rate" and r["scope"] == "overall")
    assert false_abst["delta"] > 0 and false_abst["n"] == false_abst["n_a"]
    # retrieval does not depend on the answerer's threshold: no retrieval row changed
    assert all(r["delta"] == 0 for r in body["deltas"] if r["k"] is not None and r["scope"] == "overall")
    assert body["flips"]["regressions"] and all(f["metric"] != "recall_any@5" for f in body["flips"]["regressions"])
    assert body["drift"]["n_changed"] > 0 and body["drift"]["cases"][0]["diff"]
    assert body["latency"]["comparable"] is False and "concurrency 4 vs 2" in body["latency"]["warnings"][0]
    assert out.exit_code == (0 if body["gate"]["passed"] else 1)
    assert (body["gate"]["passed"] is False) == bool(body["gate"]["failures"])


def test_markdown(two_runs, tmp_path):
    summary = tmp_path / "summary.md"
    out = CliRunner().invoke(
        compare_app, ["a", "b", "--results-dir", str(two_runs), "--format", "markdown", "--allow-regressions"],
        catch_exceptions=False, env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("### ❌ FAIL: worse — ") and "(allowed by --allow-regressions: exit 0)" in out.stdout.splitlines()[0]
    assert "#### Significant changes" in out.stdout and "<details><summary>Config diff" in out.stdout
    assert summary.read_text(encoding="utf-8") == out.stdout


def test_rich(two_runs):
    out = _compare(two_runs, "--allow-regressions", "--show-drift", "2")
    assert out.exit_code == 0, out.output
    assert "compare a (a, baseline) → b (b)" in out.stdout and "Answer drift:" in out.stdout
    assert "warning: latency is not comparable: the runs differ in concurrency 4 vs 2" in out.stdout


def test_a_run_against_itself_and_against_its_baseline_file(two_runs, tmp_path):
    same = CliRunner().invoke(compare_app, ["a", "a", "--results-dir", str(two_runs), "--format", "json"], catch_exceptions=False)
    assert same.exit_code == 0
    body = json.loads(same.stdout)
    assert body["stats"]["n_significant"] == 0 and body["flips"]["regressions"] == [] and body["gate"]["passed"]
    baseline = tmp_path / "baseline.json"
    saved = CliRunner().invoke(compare_app, ["a", "--results-dir", str(two_runs), "--save-baseline", str(baseline)])
    assert saved.exit_code == 0, saved.output
    assert baseline.stat().st_size < (two_runs / "a" / "results.jsonl").stat().st_size / 3
    vs_file = CliRunner().invoke(compare_app, ["--baseline", str(baseline), "b", "--results-dir", str(two_runs), "--format", "json"])
    vs_run = _compare(two_runs, "--format", "json")
    a, b = json.loads(vs_file.stdout), json.loads(vs_run.stdout)
    assert a["deltas"] == b["deltas"] and a["flips"] == b["flips"] and a["gate"] == b["gate"]
    # The bundled set's conversations are resampled whole against a baseline file too (it keeps
    # each turn's place and history).
    turns = '"conversation"' in (two_runs / "a" / "results.jsonl").read_text(encoding="utf-8")
    assert a["stats"]["unit"] == b["stats"]["unit"] == ("conversation" if turns else "case")
