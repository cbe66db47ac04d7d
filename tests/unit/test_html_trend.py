"""The trend page (issue 12): every run of a results folder in time order, one series per
eval set version, config-change markers, links to run reports, escaped text, no network."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalkit.errors import InputError
from evalkit.report.html.trend import condense_keys, marker_label, trend_markers, trend_view, write_trend_report

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
NETWORK = re.compile(r"""(?:\b(?:src|href|action|poster)\s*=\s*["']?\s*|url\(\s*["']?)(?:https?:)?//""", re.IGNORECASE)
V1, V2 = "1" * 64, "2" * 64


def make_run(
    root: Path,
    run_id: str,
    *,
    at: str,
    version: str = V1,
    params: dict[str, Any] | None = None,
    k: int = 5,
    recall: float = 0.8,
    metrics: bool = True,
    eval_file: str = "eval_set.jsonl",
    commit: str = "abc",
) -> Path:
    """A run folder as run_eval leaves it (config.json + metrics.json; no results.jsonl: the
    trend never reads it). The option `params` appears in hashed, settings and target, as
    run_eval writes it; run id, time, git and session timing differ on every run."""
    folder = root / run_id
    folder.mkdir(parents=True)
    params = params or {}
    config = {
        "run_id": run_id, "created_at": at, "config_hash": run_id * 4, "dataset_version": version,
        "eval_set": {"version": version, "n_cases": 10, "paths": [f"/data/{eval_file}"], "files": [{"path": f"/data/{eval_file}"}]},
        "git": {"commit": commit * 10, "dirty": False},
        "hashed": {"k": [k], "params": params, "dataset_version": version},
        "settings": {"k": [k], "params": params, "run_id": run_id, "results_dir": str(root), "eval_set": [f"/data/{eval_file}"]},
        "target": {"kind": "reference", "params": params},
        "sessions": [{"started_at": at, "wall_s": len(run_id) / 10, "settings": {"concurrency": 4}}],
    }
    (folder / "config.json").write_bytes(orjson.dumps(config))
    if metrics:
        agg = {
            "k": k, "recall_at_k_avg": recall, "mrr_avg": recall / 2, "ndcg_at_k_avg": None, "groundedness_avg": 4.0,
            "correctness_avg": 3.5, "abstention_accuracy": 1.0, "latency": {"p95_ms": 12.5}, "cost": {"judge_total_usd": 0.01},
        }
        (folder / "metrics.json").write_bytes(orjson.dumps({"aggregate_metrics": agg, "total_tests": 10, "dataset_version": version}))
    return folder


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Names that do not sort by time; a config change, a rerun, an eval set change and back."""
    make_run(tmp_path, "zeta", at="2026-01-01T00:00:00Z", recall=0.5)
    make_run(tmp_path, "alpha", at="2026-01-02T00:00:00Z", recall=0.5, commit="def")          # same config, new commit
    make_run(tmp_path, "mid", at="2026-01-03T00:00:00Z", params={"abstain_threshold": 0.5}, recall=0.6)
    make_run(tmp_path, "new-set", at="2026-01-04T00:00:00Z", version=V2, eval_file="eval_v2.jsonl", recall=0.9)
    make_run(tmp_path, "back", at="2026-01-05T00:00:00Z", params={"abstain_threshold": 0.5}, k=10, recall=0.7)
    make_run(tmp_path, "unfinished", at="2026-01-06T00:00:00Z", metrics=False)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "zeta" / "report.html").write_text("<p>zeta</p>", encoding="utf-8")
    return tmp_path


def test_runs_in_time_order_on_one_series_per_eval_set_version(results):
    view = trend_view(results)
    runs = view["runs"]
    assert [r["run_id"] for r in runs] == ["zeta", "alpha", "mid", "new-set", "back"]
    assert [r["x"] for r in runs] == [0, 1, 2, 3, 4]
    assert [r["series"] for r in runs] == [0, 0, 0, 1, 0]
    assert [(s["version"], s["run_ids"]) for s in view["series"]] == [(V1, ["zeta", "alpha", "mid", "back"]), (V2, ["new-set"])]
    assert view["series"][1]["label"] == "eval set 222222222222 (10 cases, eval_v2.jsonl)"
    assert [r["previous"] for r in runs] == [None, "zeta", "alpha", None, "mid"]
    assert [r["new_eval_set"] for r in runs] == [False, False, False, True, False]
    assert runs[0]["values"] == {
        "recall_any": 0.5, "mrr": 0.25, "ndcg": None, "groundedness_avg": 4.0, "correctness_avg": 3.5, "abstention_accuracy": 1.0,
        "latency_p95": 12.5, "cost": 0.01, "no_chunks": None,  # no index stats in this run
    }
    assert [r["k"] for r in runs] == [5, 5, 5, 5, 10]
    # skipped folders, noted in time order ("scratch" has no created_at: its mtime, now)
    assert [(s["run_id"], s["reason"].split(" ")[1]) for s in view["skipped"]] == [("unfinished", "metrics.json"), ("scratch", "config.json")]


def test_config_changes_are_diffed_against_the_previous_run_of_the_same_series(results):
    runs = {r["run_id"]: r for r in trend_view(results)["runs"]}
    # a new commit, run id, time and session timing are not a config change
    assert runs["alpha"]["changes"] == [] and runs["alpha"]["marker"] is None
    assert runs["mid"]["changes"] == [
        {"key": "hashed.params.abstain_threshold", "a": None, "b": 0.5},
        {"key": "settings.params.abstain_threshold", "a": None, "b": 0.5},
        {"key": "target.params.abstain_threshold", "a": None, "b": 0.5},
    ]
    assert runs["mid"]["marker"] == "params.abstain_threshold"
    # the first run on another eval set starts a series: no diff, an eval set marker instead
    assert runs["new-set"]["changes"] == [] and runs["new-set"]["marker"] is None
    # back on V1: compared with "mid" (not with "new-set"), so only K changed
    assert [c["key"] for c in runs["back"]["changes"]] == ["hashed.k", "settings.k"]
    assert runs["back"]["marker"] == "k"


def test_markers_mark_config_changes_and_eval_set_changes(results):
    assert trend_markers(trend_view(results)) == [(2, "Δ params.abstain_threshold"), (3, "eval set 22222222"), (4, "Δ k")]


def test_marker_labels_are_condensed_and_truncated():
    keys = ["hashed.params.a", "settings.params.a", "target.params.a", "hashed.k", "settings.k", "versions.retriever_version",
            "judge.model"]
    assert condense_keys(keys) == ["params.a", "k", "versions.retriever_version", "judge.model"]
    assert marker_label(keys) == "params.a, k +2"
    assert marker_label(["settings." + "x" * 40]) == "x" * 31 + "…"


def test_links_only_to_reports_that_exist(results):
    runs = trend_view(results)["runs"]
    assert [r["href"] for r in runs] == ["zeta/report.html", None, None, None, None]
    html = write_trend_report(results).read_text(encoding="utf-8")
    assert 'href="zeta/report.html"' in html and "alpha/report.html" not in html
    assert "evalkit report --run-id alpha" in html


def test_the_page_is_written_to_index_html_with_a_chart_per_metric(results):
    path = write_trend_report(results)
    assert path == results / "index.html"
    html = path.read_text(encoding="utf-8")
    assert html.count("<svg") == 8 - 1 + html.count('class="cell-bar"')  # nDCG is null in every run: no chart
    assert "No run has nDCG@K." in html
    assert not NETWORK.search(html)
    # the page itself is not a run on the next rebuild
    assert [r["run_id"] for r in trend_view(results)["runs"]][-1] == "back"


def test_output_elsewhere_keeps_relative_links(results):
    out = results / "site" / "trend.html"
    write_trend_report(results, out)
    assert 'href="../zeta/report.html"' in out.read_text(encoding="utf-8")


def test_hostile_text_in_run_ids_file_names_and_config_is_escaped(tmp_path):
    make_run(tmp_path, "one", at="2026-01-01T00:00:00Z", eval_file=f"{SCRIPT}.jsonl")
    make_run(tmp_path, "two", at="2026-01-02T00:00:00Z", params={SCRIPT: IMG}, eval_file=f"{IMG}.jsonl")
    # a folder whose name breaks the run-id rule is not a run (store.list_runs): never shown
    make_run(tmp_path, IMG, at="2026-01-03T00:00:00Z")
    (tmp_path / IMG / "report.html").write_text("x", encoding="utf-8")
    html = write_trend_report(tmp_path).read_text(encoding="utf-8")
    # shown, and inert: escaped by the template (or JSON-escaped inside a shown value)
    assert "onerror=alert(2)" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert SCRIPT not in html and "<img" not in html
    assert len(re.findall(r"<script\b", html)) == 1
    assert "%3Cimg" not in html and "2026-01-03" not in html


def test_empty_and_missing_results_folders(tmp_path):
    html = write_trend_report(tmp_path).read_text(encoding="utf-8")
    assert "No run with a metrics.json" in html
    with pytest.raises(InputError, match="results folder not found"):
        write_trend_report(tmp_path / "nope")
