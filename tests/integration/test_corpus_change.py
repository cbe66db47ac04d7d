"""Editing the notes between two runs shows in compare (issue 30 item 4): one note edited and
one added used to give "the configs do not differ" and no warning, though the index stats said
docs_processed 6 -> 7 and another index_version. Now the config diff names the index stats, a
warning says retrieval may have changed with the corpus, `--same-corpus` makes it a broken
invariant (exit 2), and the index's coverage is in the run summary, compare and the trend.
Also the scorer (issue 30 item 5): every run records evalkit's version and the metric
registry's hash, and a run made before that is re-scored into the current scorer.

The reference chatbot indexes a copy of sample_vault in a temp folder; the eval set is copied
too, so a `--baseline` run locks it there and not in the checkout."""

from __future__ import annotations

import json
import shutil
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from evalkit.cli.main import app
from evalkit.compare import compare_runs
from evalkit.gate.invariants import scorer_identity
from evalkit.report.compare import print_comparison, render_markdown
from tests.support import run_eval_api, run_eval_cli

ROOT = Path(__file__).resolve().parents[2]
EDITED = "docs/setup/Deploy process.md"


@pytest.fixture(scope="module")
def corpus_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run a over the sample vault; then one note edited and one added; run b over that."""
    tmp = tmp_path_factory.mktemp("corpus")
    vault, results, es = tmp / "vault", tmp / "r", tmp / "eval_set.jsonl"
    shutil.copytree(ROOT / "sample_vault", vault)
    shutil.copy(ROOT / "eval_set.jsonl", es)
    run_eval_api(eval_set=es, vault=vault, run_id="a", results_dir=results, retrieval_only=True, quiet=True)
    note = vault / EDITED
    note.write_text(note.read_text(encoding="utf-8") + "\nOne more line about the deploy.\n", encoding="utf-8")
    (vault / "docs" / "added.md").write_text("# Added\n\nA new note.\n", encoding="utf-8")
    run_eval_api(eval_set=es, vault=vault, run_id="b", results_dir=results, retrieval_only=True, quiet=True)
    return {"vault": vault, "results": results, "eval_set": es}


def _compare(results: Path, *args: str):
    return CliRunner().invoke(app, ["compare", "a", "b", "--results-dir", str(results), *args])


def test_a_changed_corpus_is_in_the_config_diff_and_a_warning(corpus_runs: dict[str, Path]) -> None:
    results = corpus_runs["results"]
    out = _compare(results, "--format", "json")
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    docs = body["config_diff"]["index.docs_processed"]
    assert docs[1] == docs[0] + 1  # by hand: one note added
    assert "index.index_version" in body["config_diff"]
    assert body["config_diff"]["index.chunks_attempted"][1] > body["config_diff"]["index.chunks_attempted"][0]
    # the coverage is in the diff too: the same notes without chunks over one more note
    rate = body["config_diff"]["index.no_chunks_generated_rate"]
    zero = body["corpus"]["a"]["docs_with_0_chunks"]
    assert rate == [zero / docs[0], zero / docs[1]]
    # a warning, not a violation: the pair is compared
    assert body["invariants"]["ok"] is True
    [warning] = body["invariants"]["warnings"]
    assert warning.startswith("the notes or the index changed between the runs (index_version ")
    assert f"docs_processed {docs[0]} -> {docs[1]}" in warning
    assert "a difference in retrieval may come from the corpus" in warning
    assert body["corpus"]["available"] and {"index_version", "docs_processed"} <= set(body["corpus"]["changed"])

    # the terminal and markdown reports say it, with the index table
    result = compare_runs("a", "b", results_dir=results, resamples=200)
    buf = StringIO()
    print_comparison(result, Console(file=buf, width=400, color_system=None))
    text = buf.getvalue()
    assert "warning: the notes or the index changed between the runs" in text
    assert "Index and coverage" in text and "notes indexed ✱" in text
    md = render_markdown(result)
    assert "**⚠️ Warnings**" in md and "Index and coverage (" in md and "| notes indexed ✱ |" in md

    same = CliRunner().invoke(app, ["compare", "a", "a", "--results-dir", str(results), "--format", "json"])
    same_body = json.loads(same.stdout)
    assert not any(k.startswith("index.") for k in same_body["config_diff"])
    assert same_body["invariants"]["warnings"] == [] and same_body["corpus"]["changed"] == []


def test_same_corpus_makes_it_a_broken_invariant(corpus_runs: dict[str, Path]) -> None:
    results = corpus_runs["results"]
    refused = _compare(results, "--same-corpus")
    assert refused.exit_code == 2
    assert "cannot compare a with b: the notes or the index differ (--same-corpus): index_version " in refused.stderr
    assert "pass --ignore-invariants" in refused.stderr and refused.stdout == ""

    ignored = _compare(results, "--same-corpus", "--ignore-invariants", "--format", "json")
    # every number is marked not comparable: the merge decision has nothing to decide on (exit 4)
    assert ignored.exit_code == 4, ignored.output
    body = json.loads(ignored.stdout)
    assert body["invariants"]["ignored"] is True
    assert [v.split(":")[0] for v in body["invariants"]["violations"]] == ["the notes or the index differ (--same-corpus)"]
    assert body["invariants"]["warnings"] == []  # said once, as the violation
    assert body["corpus"]["same_corpus"] is True

    same = CliRunner().invoke(app, ["compare", "a", "a", "--results-dir", str(results), "--same-corpus"])
    assert same.exit_code == 0, same.output


def test_run_eval_baseline_same_corpus_refuses_before_asking(corpus_runs: dict[str, Path]) -> None:
    results, es, vault = corpus_runs["results"], corpus_runs["eval_set"], corpus_runs["vault"]
    out = run_eval_cli("run", app=app, eval_set=es, vault=vault, run_id="c", results_dir=results, retrieval_only=True,
                       quiet=True, baseline="a", same_corpus=True)
    assert out.exit_code == 2, out.output
    assert "cannot gate against a: the notes or the index differ (--same-corpus)" in out.stderr
    assert not (results / "c").exists()  # refused before the first case: nothing written


def test_runs_record_their_scorer_and_coverage(corpus_runs: dict[str, Path]) -> None:
    results = corpus_runs["results"]
    config = json.loads((results / "b" / "config.json").read_text())
    metrics = json.loads((results / "b" / "metrics.json").read_text())
    assert config["scorer"] == metrics["invariants"]["scorer"] == scorer_identity()
    # summary.md: the index line and the coverage rows (seed 000's indexing coverage)
    summary = (results / "b" / "summary.md").read_text()
    cov = metrics["aggregate_metrics"]["indexing_coverage"]
    assert f"- **index**: {cov['index_version']} ({cov['docs_processed']} notes, {cov['chunks_attempted']} chunks)" in summary
    zero, docs = cov["docs_with_0_chunks"], cov["docs_processed"]
    assert f"| Notes with no chunks (index) | {zero / docs:.3f} ({zero} of {docs}) | {docs} |" in summary
    assert "| Chunks skipped (index) |" in summary


def test_the_trend_marks_the_corpus_change_and_charts_coverage(corpus_runs: dict[str, Path]) -> None:
    from evalkit.report.html.trend import trend_view

    runs = {r["run_id"]: r for r in trend_view(corpus_runs["results"])["runs"]}
    changed = {c["key"] for c in runs["b"]["changes"]}
    assert {"index.index_version", "index.docs_processed"} <= changed
    assert runs["b"]["marker"] is not None
    cov = json.loads((corpus_runs["results"] / "b" / "metrics.json").read_text())["aggregate_metrics"]["indexing_coverage"]
    assert runs["b"]["values"]["no_chunks"] == cov["docs_with_0_chunks"] / cov["docs_processed"]


def test_an_old_run_without_a_scorer_warns_and_is_rescored_into_the_current_one(corpus_runs: dict[str, Path], tmp_path: Path) -> None:
    from evalkit.rescore.scoring import score_retrieval

    results = tmp_path / "r"
    for run_id in ("a", "b"):
        shutil.copytree(corpus_runs["results"] / run_id, results / run_id)
    for name in ("config.json", "metrics.json"):  # run a as evalkit wrote it before it recorded the scorer
        path = results / "a" / name
        body = json.loads(path.read_text())
        body.pop("scorer", None)
        body.get("invariants", {}).pop("scorer", None)
        path.write_text(json.dumps(body))
    before = compare_runs("a", "b", results_dir=results, resamples=200)
    assert before.invariants.ok  # a missing scorer is not held against the pair
    [warning] = [w for w in before.invariants.warnings if "scorer" in w]
    assert warning.startswith("the baseline recorded no scorer (made before evalkit recorded one); the new run was scored by evalkit ")
    assert warning.endswith("score_retrieval.py --run-id a")

    scoring = score_retrieval("a", results_dir=results)
    assert scoring.results_rewritten  # its per-case values are this scorer's now
    assert scoring.metrics["invariants"]["scorer"] == scorer_identity()
    after = compare_runs("a", "b", results_dir=results, resamples=200)
    assert not any("scorer" in w for w in after.invariants.warnings)


def test_another_scorer_is_a_broken_invariant(corpus_runs: dict[str, Path], tmp_path: Path) -> None:
    results = tmp_path / "r"
    for run_id in ("a", "b"):
        shutil.copytree(corpus_runs["results"] / run_id, results / run_id)
    path = results / "a" / "metrics.json"
    body = json.loads(path.read_text())
    body["invariants"]["scorer"] = {"evalkit_version": "0.0.9", "registry_hash": "0" * 64}
    path.write_text(json.dumps(body))
    out = CliRunner().invoke(app, ["compare", "a", "b", "--results-dir", str(results)])
    assert out.exit_code == 2
    current = scorer_identity()
    assert (f"cannot compare a with b: scorers differ (evalkit 0.0.9, registry 000000000000 vs evalkit "
            f"{current['evalkit_version']}, registry {current['registry_hash'][:12]})") in out.stderr
    assert "score_retrieval.py --run-id a, then compare again" in out.stderr
    ignored = CliRunner().invoke(app, ["compare", "a", "b", "--results-dir", str(results), "--ignore-invariants",
                                       "--format", "json"])
    assert ignored.exit_code == 4, ignored.output  # nothing comparable: not enough evidence
    nc = json.loads(ignored.stdout)["invariants"]["not_comparable"]
    assert [(x["reason"].split(" (")[0], x["metrics"]) for x in nc] == [("scorers differ", ["*"])]
