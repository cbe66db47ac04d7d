"""bench/verdict_gate.py judges a pair of runs as compare_runs' default gate does, and counts
every trial once (issue 36). The figures themselves are the bench's (bench/README.md, "The
merge decision (issue 36)"), not asserted here."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from evalkit.compare.cases import CaseTable
from evalkit.compare.compute import compare_runs
from evalkit.gate.verdict import build_verdict
from evalkit.metrics.keys import metric_key
from tests.support import run_eval_api

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("verdict_gate", ROOT / "bench" / "verdict_gate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdict_gate"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


vg = _bench()


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled eval set's run (offline reference chatbot, heuristic judge)."""
    results = tmp_path_factory.mktemp("results")
    return Path(run_eval_api(eval_set=ROOT / "eval_set.jsonl", run_id="a", results_dir=results, quiet=True).run_dir)


def _columns(run_dir: Path) -> dict[str, np.ndarray]:
    table = CaseTable([vg.K], [vg.K])
    for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines():
        table.add(json.loads(line))
    return {c: table.column(c) for c in vg.COLUMNS}


def _lose_attribution(records: list[dict], count: int) -> None:
    hits = [r for r in records if r["retrieval_metrics"].get("attribution_hit") is True]
    for r in hits[:count]:
        r["retrieval_metrics"]["attribution_hit"] = False


def _grounded_down(records: list[dict], count: int) -> None:
    graded = [r for r in records if (r.get("groundedness") or {}).get("score") is not None]
    for r in graded[:count]:
        r["groundedness"]["score"] = max(0.0, r["groundedness"]["score"] - 1.0)


def _time_out(records: list[dict], count: int) -> None:
    for r in records[-count:]:
        r["error"] = {"kind": "timeout", "status": None, "detail": "timed out"}


@pytest.mark.parametrize(
    ("change", "outcome"),
    [
        pytest.param(lambda rs: _grounded_down(rs, 3), "pass", id="three-grades-down"),
        pytest.param(lambda rs: (_lose_attribution(rs, 2), _time_out(rs, 1)), "inconclusive", id="two-citations-one-timeout"),
        pytest.param(lambda rs: _lose_attribution(rs, 12), "fail", id="twelve-citations-lost"),
    ],
)
def test_the_bench_decides_as_compare_runs(bundled: Path, tmp_path: Path, change, outcome: str) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(bundled, a)
    shutil.copytree(bundled, b)
    records = [json.loads(line) for line in (b / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    change(records)
    (b / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    ours = build_verdict(vg.members_of(vg.verdict_specs(), _columns(a), _columns(b)), [], alpha=vg.ALPHA)
    theirs = compare_runs(a, b, results_dir=tmp_path)

    assert {metric_key(v.metric, v.k): (v.verdict, v.gated, v.margin) for v in ours.metrics} == {
        metric_key(v.metric, v.k): (v.verdict, v.gated, v.margin) for v in theirs.verdict.metrics
    }
    assert (ours.verdict, ours.family_size) == (theirs.verdict.verdict, theirs.verdict.family_size)
    assert vg.outcome_of(ours.verdict) == outcome
    assert theirs.decision.exit_code == vg.EXIT_CODE[outcome]


def test_every_trial_is_counted_once(bundled: Path) -> None:
    pop, info = vg.load_population(bundled)
    assert info["kernel_mismatches"] == 0  # the kernels give every record's own retrieval values
    cells = vg.simulate(pop, trials=50, power_trials=50, seed=0, flaky_levels=(0.0, 0.35), power_flaky=(0.35,),
                        calibration_draws=20_000)
    assert [c.kind for c in cells] == ["A/A"] * 4 + ["drop"] * len(vg.BREAKS) + ["halved"] * 2
    for c in cells:
        assert sum(c.counts.values()) == c.trials == len(c.family) == 50
        assert sum(c.unsettled.values()) >= c.counts["inconclusive"]  # each exit 4 has a gated metric not settled
        assert sum(c.worse.values()) >= c.counts["fail"]
    # Nothing flaky, nothing changed: every metric is identical, both gates pass every trial.
    for c in cells[:2]:
        assert (c.counts["pass"], c.threshold_fail, max(c.family)) == (50, 0, 0)
    # Half of every case's gold supports lost: recall_frac@5 is 1 -> 0.5, shown worse every time.
    for c in cells[-2:]:
        assert c.counts["fail"] == 50
        assert c.worse[metric_key("recall_frac", vg.K)] == 50


def test_the_halved_recall_case_is_the_issues(bundled: Path) -> None:
    pop, _ = vg.load_population(bundled)
    halved = vg.halved_population(pop, np.random.default_rng(0))
    a, b = halved.ret[0, 0, 0], halved.ret[0, vg.VERSIONS.index("lose_last"), 0]
    row = dict(zip(vg.AT_K_METRICS, zip(a.tolist(), b.tolist(), strict=True), strict=True))
    # by hand: nDCG of gold at rank 1 only, two gold supports: 1 / (1 + 1/log2(3)) = 0.6131
    assert row["recall_frac"] == (1.0, 0.5) and row["precision"] == (0.4, 0.2)
    assert row["recall_any"] == (1.0, 1.0) and row["mrr"] == (1.0, 1.0)
    assert row["ndcg"] == pytest.approx((1.0, 1 / (1 + 1 / np.log2(3))))
