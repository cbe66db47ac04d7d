"""compare_runs on hand-built run folders: invariants, exact deltas, paired exclusion, flips,
config diff, significance and its correction, the gate, baselines (EVAL.md "Comparing two runs")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from evalkit.compare import IncomparableRuns, compare_runs, config_diff, flatten_config, open_source, save_baseline
from evalkit.compare.cases import word_diff
from evalkit.errors import InputError
from evalkit.metrics.aggregate import aggregate_records
from evalkit.metrics.stats import adjust_pvalues, compare_paired

R = 2000  # resamples: enough for these tests, fast
JUDGE = {"provider": "heuristic", "model": "heuristic-v1", "prompt_version": {"correctness": "heuristic-v1"}, "temperature": None}


def rec(
    cid: str,
    *,
    rank: int | None = 1,
    attribution: bool | None = True,
    abstained: bool = False,
    answerable: bool = True,
    g: float | None = 4.0,
    c: float | None = 4.0,
    error: str | None = None,
    judge_error: str | None = None,
    category: str = "factual",
    tags: tuple[str, ...] = ("work",),
    answer: str | None = None,
    question: str | None = None,
    top: list[tuple[str, str]] | None = None,
    k: int = 5,
) -> dict[str, Any]:
    """One results.jsonl record. `rank`: position of the first gold hit in the top K (None: miss)."""
    hit = rank is not None and rank <= k
    block = None
    if answerable:
        block = {"recall_any": float(hit), "recall_all": None, "recall_frac": float(hit), "precision": (1 / k) if hit else 0.0,
                 "mrr": (1 / rank) if hit else 0.0, "ndcg": (1 / math.log2(rank + 1)) if hit else 0.0}
    if error is not None and answerable:
        block = {m: 0.0 for m in ("recall_any", "recall_frac", "precision", "mrr", "ndcg")} | {"recall_all": None}
    record: dict[str, Any] = {
        "test_case_id": cid,
        "case": {"id": cid, "question": question or f"question {cid}?", "answerable": answerable, "tags": list(tags),
                 "category": category, "difficulty": "easy", "domain": "work",
                 "gold_supports": [{"rel_path": f"notes/{cid}.md", "heading_path": "# Gold"}] if answerable else []},
        "question": question or f"question {cid}?",
        "answer": "" if error else (answer if answer is not None else f"answer of {cid} says something"),
        "references": [{"rel_path": f"notes/{cid}.md", "heading_path": "# Gold"}] if attribution else [],
        "retrieved_chunks": [{"rel_path": p, "heading_path": h, "rank": i + 1} for i, (p, h) in enumerate(top or [("notes/x.md", "# X")])],
        "retrieval_metrics": {
            "k": k, "at_k": {str(k): block} if block else {str(k): dict.fromkeys(("recall_any", "recall_all", "recall_frac", "precision", "mrr", "ndcg"))},
            "attribution_hit": (attribution if error is None else False) if answerable else None,
            "scope_miss": None, "recency": None, "first_match_rank": rank if hit and answerable else None,
        },
        "abstention": None if error else {"abstained": abstained},
        "latency": {"total_ms": 10.0},
        "cost": {"judge_cost_usd": 0.0, "judge_tokens": 0},
        "judge_errors": [{"judge": judge_error}] if judge_error else [],
    }
    if error:
        record["error"] = {"kind": error}
    for name, score in (("groundedness", g), ("correctness", c)):
        if score is not None and name != judge_error and error is None:
            record[name] = {"score": score}
    return record


def make_run(
    root: Path,
    run_id: str,
    records: list[dict[str, Any]],
    *,
    ks: tuple[int, ...] = (5,),
    dataset_version: str = "d" * 64,
    judge: dict | None = JUDGE,
    debug_missing: tuple[str, ...] = (),
    config: dict | None = None,
    total_tests: int | None = None,
) -> Path:
    """A run folder as run_eval leaves it: results.jsonl, metrics.json (aggregate_records), config.json."""
    folder = root / run_id
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    metrics = aggregate_records(records, ks=list(ks))
    metrics.update(run_id=run_id, dataset_version=dataset_version, ks=list(ks),
                   invariants={"judge": judge, "debug_fields_missing": list(debug_missing)})
    if total_tests is not None:
        metrics["total_tests"] = total_tests
    (folder / "metrics.json").write_bytes(orjson.dumps(metrics))
    cfg = {"run_id": run_id, "created_at": f"2026-01-01T00:00:0{len(run_id) % 10}Z", "config_hash": run_id * 8,
           "settings": {"concurrency": 4, "k": list(ks), "run_id": run_id, "params": {}},
           "target": {"kind": "reference", "params": {}}, "hardware": {"cpu_model": "cpu", "logical_cores": 2},
           "sessions": [{"started_at": "2026-01-01T00:00:00Z", "wall_s": 0.1 * len(run_id), "settings": {"concurrency": 4}}]}
    for key, value in (config or {}).items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and isinstance(cfg.get(key), dict) else value
    (folder / "config.json").write_bytes(orjson.dumps(cfg))
    return folder


def _ab(tmp_path: Path, recs_a, recs_b, **kw) -> Any:
    make_run(tmp_path, "a", recs_a, **kw.pop("a_kw", {}))
    make_run(tmp_path, "b", recs_b, **kw.pop("b_kw", {}))
    return compare_runs("a", "b", results_dir=tmp_path, resamples=R, **kw)


def _row(result, metric: str, scope: str = "overall", k: int | None = None):
    rows = [r for r in result.deltas if r.metric == metric and r.scope == scope and r.k == k]
    assert len(rows) == 1, (metric, scope, k, rows)
    return rows[0]


# The deltas fixture: six answerable cases (factual c1-c3, multi_hop c4-c6) and two unanswerable.
RUN_A = [
    rec("c1", rank=1), rec("c2", rank=2), rec("c3", rank=None), rec("c4", rank=1, category="multi_hop", tags=("work", "ops")),
    rec("c5", rank=3, category="multi_hop"), rec("c6", rank=None, category="multi_hop"),
    rec("u1", answerable=False, abstained=True, g=None, c=None, category="adversarial", tags=()),
    rec("u2", answerable=False, abstained=True, g=None, c=None, category="adversarial", tags=()),
]
RUN_B = [
    rec("c1", rank=1, attribution=False), rec("c2", rank=None, top=[("notes/wrong.md", "# Wrong > ## Place")]), rec("c3", rank=1),
    rec("c4", rank=2, c=2.0, category="multi_hop", tags=("work", "ops")), rec("c5", rank=3, g=3.0, category="multi_hop"),
    rec("c6", rank=None, category="multi_hop"),
    rec("u1", answerable=False, abstained=False, g=None, c=None, category="adversarial", tags=()),
    rec("u2", answerable=False, abstained=True, g=None, c=None, category="adversarial", tags=()),
]


def test_deltas_overall_and_by_slice_are_exact(tmp_path):
    result = _ab(tmp_path, RUN_A, RUN_B)
    mrr = _row(result, "mrr", k=5)
    # by hand: a = (1 + 1/2 + 0 + 1 + 1/3 + 0) / 6, b = (1 + 0 + 1 + 1/2 + 1/3 + 0) / 6
    assert mrr.a == pytest.approx((1 + 1 / 2 + 0 + 1 + 1 / 3 + 0) / 6)
    assert mrr.b == pytest.approx((1 + 0 + 1 + 1 / 2 + 1 / 3 + 0) / 6)
    assert mrr.delta == pytest.approx(mrr.b - mrr.a) and (mrr.n_a, mrr.n_b, mrr.n) == (6, 6, 6)
    recall = _row(result, "recall_any", k=5)
    # by hand: 4/6 in both runs, but two cases changed (c2 1 -> 0, c3 0 -> 1)
    assert (recall.a, recall.b, recall.delta, recall.n_changed) == (4 / 6, 4 / 6, 0.0, 2)
    attribution = _row(result, "attribution_hit_rate")
    assert (attribution.a, attribution.b) == pytest.approx((6 / 6, 5 / 6))
    correctness = _row(result, "correctness_avg")
    assert correctness.delta == pytest.approx((4 * 5 + 2) / 6 - 4.0)  # by hand: c4 4 -> 2
    abstention = _row(result, "abstention_accuracy")
    assert (abstention.a, abstention.b, abstention.n_a) == (1.0, 0.5, 2)  # u1 abstained, then answered
    halluc = _row(result, "hallucination_rate_unanswerable")
    assert (halluc.a, halluc.b) == (0.0, 0.5) and halluc.direction == "lower_is_better" and halluc.change == "worse"
    # slices: the same metric per category and tag, each with its own n
    factual = _row(result, "mrr", "category:factual", 5)
    assert (factual.a, factual.b, factual.n_a) == pytest.approx(((1 + 1 / 2 + 0) / 3, (1 + 0 + 1) / 3, 3))
    ops = _row(result, "mrr", "tag:ops", 5)
    assert (ops.a, ops.b, ops.n_a, ops.n) == (1.0, 0.5, 1, 1)
    assert {r.scope for r in result.deltas} >= {"overall", "category:factual", "category:multi_hop", "category:adversarial",
                                                 "tag:work", "tag:ops", "answerable:answerable", "answerable:unanswerable",
                                                 "difficulty:easy", "domain:work"}
    assert result.n == {"a": 8, "b": 8, "paired": 8, "only_a": 0, "only_b": 0}


def test_flips_are_exact_and_sorted_by_size(tmp_path):
    result = _ab(tmp_path, RUN_A, RUN_B)
    got = [(f.id, f.metric, f.a, f.b) for f in result.flips.regressions]
    # by hand: size 1 first, ties by the change in 1/rank (c2 lost 1/2), then metric order;
    # c4's correctness drop of 2 points is 2/5; c5's groundedness drop of exactly 1 is not a flip
    assert got == [
        ("c2", "recall_any@5", 1.0, 0.0),
        ("c1", "attribution_hit", 1.0, 0.0),
        ("u1", "abstention_correct", 1.0, 0.0),
        ("c4", "correctness", 4.0, 2.0),
    ]
    assert [f.size for f in result.flips.regressions] == [1.0, 1.0, 1.0, 2 / 5]
    c2 = result.flips.regressions[0]
    assert (c2.first_hit_rank_a, c2.first_hit_rank_b) == (2, None)
    assert c2.question == "question c2?"
    assert [(t.rel_path, t.heading_path) for t in c2.top_b] == [("notes/wrong.md", "# Wrong > ## Place")]
    assert [(g.rel_path, g.heading_path) for g in c2.gold] == [("notes/c2.md", "# Gold")]
    assert [(f.id, f.metric, f.first_hit_rank_a, f.first_hit_rank_b) for f in result.flips.improvements] == [("c3", "recall_any@5", None, 1)]
    assert result.flips.counts["recall_any@5"] == {"regressions": 1, "improvements": 1}


def test_comparing_a_run_with_itself_reports_no_change(tmp_path):
    make_run(tmp_path, "a", RUN_A)
    result = compare_runs("a", "a", results_dir=tmp_path, resamples=R)
    assert result.stats.n_significant == 0 and result.stats.family_size == 0
    assert all(r.delta in (0.0, None) and not r.significant for r in result.deltas)
    assert all(r.note.startswith("no paired case changed") for r in result.deltas if r.p_value is not None)
    assert result.flips.regressions == [] and result.flips.improvements == []
    assert result.drift.n_changed == 0 and result.config_diff == {}
    assert result.invariants.ok and result.gate.passed and result.gate.failures == []


def test_a_target_error_is_excluded_pairwise_and_counted(tmp_path):
    recs_b = [rec("c1"), rec("c2", error="timeout"), rec("c3"), rec("c4", judge_error="correctness")]
    result = _ab(tmp_path, [rec("c1"), rec("c2"), rec("c3"), rec("c4")], recs_b)
    recall = _row(result, "recall_any", k=5)
    # metrics.json scores the timeout as a miss (3/4); the paired test leaves it out
    assert (recall.a, recall.b) == (1.0, 3 / 4)
    assert (recall.n, recall.n_excluded_a, recall.n_excluded_b, recall.paired_delta) == (3, 0, 1, 0.0)
    correctness = _row(result, "correctness_avg")
    assert (correctness.n_a, correctness.n_b, correctness.n, correctness.n_excluded_b) == (4, 2, 2, 2)
    error_rate = _row(result, "error_rate")
    assert (error_rate.b, error_rate.n, error_rate.n_changed) == (1 / 4, 4, 1)  # the error itself is measured
    u = result.unscoreable["b"]
    assert (u.target_errors, u.target_error_kinds, u.judge_errors, u.ids_target_error, u.ids_judge_error) == (
        1, {"timeout": 1}, {"correctness": 1}, ["c2"], ["c4"])
    assert result.unscoreable["a"].target_errors == 0
    assert [f.id for f in result.flips.regressions] == []  # an unscoreable case is not a flip


@pytest.mark.parametrize(
    ("a_kw", "b_kw", "line", "affected"),
    [
        pytest.param({}, {"dataset_version": "e" * 64}, "eval sets differ", ["*"], id="eval-set"),
        pytest.param({}, {"total_tests": 9}, "case counts differ (8 vs 9)", ["*"], id="case-count"),
        pytest.param({}, {"judge": {**JUDGE, "model": "other-v2"}}, "judge model differs", ["groundedness_avg", "correctness_avg", "context_relevance_avg"], id="judge-model"),
        pytest.param({}, {"judge": {**JUDGE, "prompt_version": {"correctness": "v9"}}}, "judge prompt version differs",
                     ["groundedness_avg", "correctness_avg", "context_relevance_avg"], id="judge-prompt"),
        pytest.param({}, {"judge": {**JUDGE, "temperature": 0.7}}, "judge temperature differs", ["groundedness_avg", "correctness_avg", "context_relevance_avg"], id="judge-temperature"),
    ],
)
def test_each_broken_invariant_is_listed_and_refused(tmp_path, a_kw, b_kw, line, affected):
    recs_b = RUN_A if "ks" not in b_kw else [rec(r["test_case_id"]) | {} for r in RUN_A]
    make_run(tmp_path, "a", RUN_A, **a_kw)
    make_run(tmp_path, "b", recs_b, **b_kw)
    with pytest.raises(IncomparableRuns) as err:
        compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    assert len(err.value.violations) == 1 and err.value.violations[0].startswith(line), err.value.violations
    assert "pass --ignore-invariants" in str(err.value)
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R, ignore_invariants=True)
    assert result.invariants.ok is False and result.invariants.ignored is True
    assert [nc.reason for nc in result.invariants.not_comparable] == err.value.violations
    if affected is not None:
        assert result.invariants.not_comparable[0].metrics == affected
        for row in result.deltas:
            blocked = "*" in affected or row.metric in affected
            assert row.comparable is not blocked and (not blocked or row.note.startswith("not comparable: ")), row


def test_a_different_k_compares_retrieval_at_a_shared_k_and_marks_the_answer_metrics(tmp_path):
    # Issue 25 item 4 (one gate): K asked of the target differs (5 vs 10). Not a refusal, in
    # compare as in run_eval's gate: Recall@5 and MRR@5 are compared (both runs measured K=5);
    # what the answerer saw differs, so the answer metrics are marked not comparable.
    from evalkit.gate.invariants import ANSWER_METRICS
    from evalkit.gate.regressions import gate_result

    make_run(tmp_path, "a", RUN_A, ks=(5,))
    make_run(tmp_path, "b", [rec(r["test_case_id"]) for r in RUN_A], ks=(5, 10))
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="threshold")
    assert result.invariants.ok is True
    (nc,) = result.invariants.not_comparable
    assert nc.reason == "K differs: the target was asked for 5 vs 10 chunks" and nc.metrics == list(ANSWER_METRICS)
    assert result.gate.k == "5" and {"recall_at_k_avg", "mrr_avg"} <= set(result.gate.compared)
    assert {s["metric"] for s in result.gate.skipped} >= {"groundedness_avg", "correctness_avg"}
    for row in result.deltas:
        assert row.comparable is (row.metric not in ANSWER_METRICS), row
    # run_eval's gate on the same two metrics.json: the same verdict and the same failures
    ma = orjson.loads((tmp_path / "a" / "metrics.json").read_bytes())
    mb = orjson.loads((tmp_path / "b" / "metrics.json").read_bytes())
    g = gate_result(ma, mb)
    assert (g["passed"], g["failures"], g["compared"]) == (result.gate.passed, result.gate.failures,
                                                          [m for m in result.gate.compared if m != "mrr_relative_drop"])


def test_two_broken_invariants_are_both_listed(tmp_path):
    make_run(tmp_path, "a", RUN_A)
    make_run(tmp_path, "b", RUN_A, dataset_version="e" * 64, judge={**JUDGE, "temperature": 1.0})
    with pytest.raises(IncomparableRuns) as err:
        compare_runs("a", "b", results_dir=tmp_path)
    assert [v.split(" (")[0] for v in err.value.violations] == ["eval sets differ", "judge temperature differs"]


def test_config_diff_shows_what_differs_and_nothing_else():
    a = {"run_id": "a", "created_at": "t1", "config_hash": "x", "settings": {"k": [5], "concurrency": 4, "params": {}},
         "sessions": [{"wall_s": 1.0, "started_at": "t1", "settings": {"concurrency": 4}}], "target": {"kind": "reference"}}
    b = {"run_id": "b", "created_at": "t2", "config_hash": "y", "settings": {"k": [5, 10], "concurrency": 4, "params": {"abstain_threshold": 0.5}},
         "sessions": [{"wall_s": 2.0, "started_at": "t2", "settings": {"concurrency": 16}}], "target": {"kind": "reference"}}
    assert config_diff(a, b) == {
        "sessions.0.settings.concurrency": [4, 16],
        "settings.k": [[5], [5, 10]],
        "settings.params.abstain_threshold": [None, 0.5],
    }
    assert flatten_config({"x": {"y": [1, 2]}, "z": [{"w": 1}]}) == {"x.y": [1, 2], "z.0.w": 1}
    assert config_diff(a, a) == {}


def test_config_diff_and_latency_warning_from_run_folders(tmp_path):
    result = _ab(tmp_path, RUN_A, RUN_A, b_kw={"config": {"settings": {"concurrency": 16, "params": {"abstain_threshold": 0.5}},
                                                         "sessions": [{"settings": {"concurrency": 16}}]}})
    assert result.config_diff == {"sessions.0.settings.concurrency": [4, 16], "settings.concurrency": [4, 16],
                                  "settings.params.abstain_threshold": [None, 0.5]}
    assert result.latency.comparable is False and result.latency.differences == {"concurrency": ["4", "16"]}
    assert "differ in concurrency 4 vs 16" in result.latency.warnings[0] and "25 ms at 16" in result.latency.warnings[0]
    p50 = next(r for r in result.latency.rows if r.metric == "latency_p50_ms")
    assert (p50.a, p50.b, p50.delta) == (10.0, 10.0, 0.0)


def _clear_effect(n: int, *, hit_a: bool, hit_b: bool, unanswerable: int = 0, abst_a: bool = False, abst_b: bool = True):
    a = [rec(f"q{i:02d}", rank=1 if hit_a else None) for i in range(n)]
    b = [rec(f"q{i:02d}", rank=1 if hit_b else None) for i in range(n)]
    a += [rec(f"u{i:02d}", answerable=False, abstained=abst_a, g=None, c=None, tags=()) for i in range(unanswerable)]
    b += [rec(f"u{i:02d}", answerable=False, abstained=abst_b, g=None, c=None, tags=()) for i in range(unanswerable)]
    return a, b


@pytest.mark.parametrize("correction", ["holm", "bh"])
def test_a_clear_change_is_significant_after_correction(tmp_path, correction):
    recs_a, recs_b = _clear_effect(30, hit_a=False, hit_b=True, unanswerable=10)
    result = _ab(tmp_path, recs_a, recs_b, correction=correction)
    recall = _row(result, "recall_any", k=5)
    assert recall.significant and recall.change == "better" and recall.ci95 == [1.0, 1.0]
    # the family: one test per distinct paired data (rows sharing `test`), each counted once
    family: dict[str, tuple[float, float]] = {}
    for row in result.deltas:
        if row.in_family:
            assert family.setdefault(row.test, (row.p_value, row.p_adjusted)) == (row.p_value, row.p_adjusted)
    assert result.stats.family_size == len(family) > 1
    assert [adj for _, adj in family.values()] == adjust_pvalues([p for p, _ in family.values()], method=correction)
    # recall, recall_frac, MRR and nDCG all go 0 -> 1 on the same cases: one test
    assert len({_row(result, m, k=5).test for m in ("recall_any", "recall_frac", "mrr", "ndcg")}) == 1
    # hallucination = 1 - abstention accuracy case by case: one test shown on two rows
    acc, hal = _row(result, "abstention_accuracy"), _row(result, "hallucination_rate_unanswerable")
    assert (acc.p_value, acc.p_adjusted) == (hal.p_value, hal.p_adjusted)
    assert hal.ci95 == [-acc.ci95[1], -acc.ci95[0]] and hal.paired_delta == -acc.paired_delta == -1.0
    assert acc.significant and hal.significant and hal.change == "better"


def test_few_changed_cases_are_noise_and_left_out_of_the_family(tmp_path):
    # 3 of 30 cases changed: the sign-flip p-value is at least 2/2^3 = 0.25, it cannot reach 0.05
    recs_a, _ = _clear_effect(30, hit_a=True, hit_b=True)
    recs_b = [rec(r["test_case_id"], rank=None if i < 3 else 1) for i, r in enumerate(recs_a)]
    result = _ab(tmp_path, recs_a, recs_b)
    recall = _row(result, "recall_any", k=5)
    assert (recall.n_changed, recall.in_family, recall.p_adjusted, recall.significant) == (3, False, None, False)
    assert recall.p_value >= 0.25
    assert recall.note == "not distinguishable from noise at n=30; only 3 case(s) changed, too few to reach p ≤ 0.05"


def test_no_paired_case_changed_is_known_without_drawing():
    a = np.array([1.0, 0.0, np.nan, 0.5, 1.0])
    b = np.array([1.0, 0.0, 1.0, 0.5, np.nan])
    got = compare_paired(a, b, seed=3, key="k", resamples=500)
    # by hand: 3 paired cases, every d_i = 0: Δ 0, every resample mean 0, every sign pattern ties
    assert (got.n, got.delta, got.ci, got.p_value) == (3, 0.0, (0.0, 0.0), 1.0)
    assert (got.ci_method, got.p_method, got.p_exact, got.p_draws) == ("exact", "exact", True, 0)


def test_gate_threshold_mode_uses_run_evals_gate(tmp_path):
    # recall drops by 3/30 = 0.1 > 0.05: run_eval's gate fails; the drop is 3 changed cases (noise)
    recs_a, _ = _clear_effect(30, hit_a=True, hit_b=True)
    recs_b = [rec(r["test_case_id"], rank=None if i < 3 else 1) for i, r in enumerate(recs_a)]
    result = _ab(tmp_path, recs_a, recs_b, gate="threshold")
    assert result.gate.mode == "threshold" and result.gate.passed is False
    assert result.gate.regressions[0].startswith("recall_at_k_avg dropped by 0.1 ")
    assert {"metric": "scope_miss_rate", "reason": "not computed in the new run"} in result.gate.skipped
    significant_mode = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="significant")
    assert significant_mode.gate.passed is True and significant_mode.gate.regressions == []
    assert significant_mode.gate.not_significant[0].startswith("recall_at_k_avg dropped by 0.1 ")
    assert "not significant after holm" in significant_mode.gate.not_significant[0]


def test_gate_significant_mode_fails_on_a_significant_drop(tmp_path):
    recs_a, recs_b = _clear_effect(30, hit_a=True, hit_b=False)
    make_run(tmp_path, "a", recs_a)
    make_run(tmp_path, "b", recs_b)
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="significant")
    assert result.gate.passed is False
    assert any(r.startswith("recall_at_k_avg dropped by 1 ") for r in result.gate.regressions)


def test_gate_mrr_relative_drop(tmp_path):
    # by hand: a = 0.5; b = (8 * 0.5 + 2 * 0.2) / 10 = 0.44: 0.06 absolute (< 0.10), 12% relative (> 10%)
    recs_a = [rec(f"q{i}", rank=2) for i in range(10)]
    recs_b = [rec(f"q{i}", rank=2 if i < 8 else 5) for i in range(10)]
    result = _ab(tmp_path, recs_a, recs_b, gate="threshold")
    assert result.gate.passed is False and "mrr_relative_drop" in result.gate.compared
    assert result.gate.regressions == ["mrr@5 dropped by 12.0% of the baseline (0.5 -> 0.44; allowed 10%)"]
    relaxed = compare_runs("a", "b", results_dir=tmp_path, resamples=R, mrr_relative_threshold=0.15, gate="threshold")
    assert relaxed.gate.passed is True


def test_gate_fail_on_flip(tmp_path):
    # one case of 30 loses its hit: 1/30 < 0.05 passes the thresholds, --fail-on-flip does not
    recs_a, _ = _clear_effect(30, hit_a=True, hit_b=True)
    recs_b = [rec(r["test_case_id"], rank=None if i == 0 else 1) for i, r in enumerate(recs_a)]
    make_run(tmp_path, "a", recs_a)
    make_run(tmp_path, "b", recs_b)
    assert compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="threshold").gate.passed is True
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R, fail_on_flip=True, gate="threshold")
    assert result.gate.passed is False and result.gate.flip_regressions == ["q00 (recall_any@5)"]
    assert result.gate.failures == ["1 case flip(s) pass -> fail (--fail-on-flip): q00 (recall_any@5)"]


def test_drift_word_diff_and_references():
    diff, removed, added, similarity = word_diff("The plan starts on Monday at nine", "The plan starts on Tuesday at nine")
    assert (diff, removed, added) == ("The plan starts on [-Monday-] {+Tuesday+} at nine", 1, 1)
    assert similarity == pytest.approx(2 * 6 / 14)  # difflib: 2 * matches / total words
    long = " ".join(f"w{i}" for i in range(40))
    diff, *_ = word_diff(long + " end", long + " END")
    assert diff == "… w34 w35 w36 w37 w38 w39 [-end-] {+END+}"


def test_drift_lists_changed_answers_most_changed_first(tmp_path):
    recs_a = [rec("c1", answer="Ravi leads Harbor."), rec("c2", answer="same answer"), rec("c3", answer="one two three four")]
    recs_b = [rec("c1", answer="Ravi   leads Harbor."), rec("c2", answer="same answer"), rec("c3", answer="one two five four", attribution=False)]
    recs_b[1]["answer"] = "a completely different reply"
    result = _ab(tmp_path, recs_a, recs_b)
    d = result.drift
    assert (d.n_compared, d.n_changed, d.ids) == (3, 2, ["c2", "c3"])  # whitespace alone is not drift
    c3 = d.cases[1]
    assert (c3.diff, c3.words_removed, c3.words_added) == ("one two [-three-] {+five+} four", 1, 1)
    assert [(r.rel_path, r.heading_path) for r in c3.references_removed] == [("notes/c3.md", "# Gold")]
    assert _ab_show(tmp_path, 1).drift.cases[0].id == "c2"


def _ab_show(tmp_path: Path, n: int):
    return compare_runs("a", "b", results_dir=tmp_path, resamples=R, show_drift=n)


def test_baseline_file_compares_like_the_run_folder(tmp_path):
    make_run(tmp_path, "a", RUN_A)
    make_run(tmp_path, "b", RUN_B)
    path = save_baseline(open_source("a", tmp_path), tmp_path / "eval" / "baseline.json")
    body = orjson.loads(path.read_bytes())
    assert body["kind"] == "evalkit-baseline" and body["run_id"] == "a" and len(body["records"]) == 8
    assert "text" not in body["records"][0]["retrieved_chunks"][0]
    from_run = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    from_file = compare_runs(path, "b", results_dir=tmp_path, resamples=R)
    assert from_file.sources["a"].kind == "baseline" and from_file.run_id_1 == "a"
    assert from_file.deltas == from_run.deltas and from_file.flips == from_run.flips and from_file.drift == from_run.drift
    assert from_file.gate == from_run.gate and from_file.config_diff == from_run.config_diff


def test_a_bare_metrics_json_baseline_gives_deltas_and_the_gate_only(tmp_path):
    make_run(tmp_path, "b", RUN_B)
    bare = tmp_path / "committed" / "baseline.json"
    bare.parent.mkdir()
    folder = make_run(tmp_path / "old", "a", RUN_A)
    bare.write_bytes((folder / "metrics.json").read_bytes())
    result = compare_runs(bare, "b", results_dir=tmp_path, resamples=R)
    assert result.sources["a"].kind == "metrics" and result.flips.available is False and result.drift.available is False
    mrr = _row(result, "mrr", k=5)
    assert mrr.a == pytest.approx((1 + 1 / 2 + 0 + 1 + 1 / 3 + 0) / 6) and mrr.p_value is None and mrr.n is None
    assert _row(result, "mrr", "category:factual", 5).a == pytest.approx((1 + 1 / 2) / 3)  # compact slice, primary K
    assert any("bare metrics.json" in n for n in result.notes)
    # without per-case results the threshold gate decides (a note says so), as against the folder with --gate threshold
    assert result.gate.mode == "threshold" and any("the threshold gate decided" in n for n in result.notes)
    assert result.gate.regressions == compare_runs(folder, tmp_path / "b", resamples=R, gate="threshold").gate.regressions
    with pytest.raises(InputError, match="--gate significant needs per-case results"):
        compare_runs(bare, "b", results_dir=tmp_path, gate="significant")
    # a metrics.json inside a run folder is that run folder
    assert compare_runs(folder / "metrics.json", "b", results_dir=tmp_path, resamples=R).sources["a"].kind == "run"


def test_unknown_run_and_bad_files_are_input_errors(tmp_path):
    make_run(tmp_path, "a", RUN_A)
    with pytest.raises(InputError, match="no run 'nope'"):
        compare_runs("a", "nope", results_dir=tmp_path)
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="not a metrics.json"):
        compare_runs(junk, "a", results_dir=tmp_path)
    with pytest.raises(InputError, match="--alpha"):
        compare_runs("a", "a", results_dir=tmp_path, alpha=1.5)


def test_json_has_the_documented_top_level_shape(tmp_path):
    body = orjson.loads(_ab(tmp_path, RUN_A, RUN_B).model_dump_json())
    assert {"run_id_1", "run_id_2", "invariants", "deltas", "flips", "unscoreable", "config_diff", "drift", "gate"} <= set(body)
    assert set(body["invariants"]) >= {"ok", "violations"} and set(body["gate"]) >= {"passed", "regressions", "skipped"}
    assert set(body["flips"]) >= {"regressions", "improvements"} and set(body["unscoreable"]) == {"a", "b"}
    assert all(isinstance(r, str) for r in body["gate"]["regressions"])
    row = body["deltas"][0]
    assert {"metric", "scope", "k", "a", "b", "delta", "ci95", "p_value", "p_adjusted", "significant", "n", "n_a", "n_b"} <= set(row)
    assert row["scope"] == "overall" and all(r["scope"] == "overall" or ":" in r["scope"] for r in body["deltas"])
    assert {"id", "metric"} <= set(body["flips"]["regressions"][0])


def test_cases_in_one_run_only_are_unpaired_and_counted(tmp_path):
    make_run(tmp_path, "a", [rec("c1"), rec("c2")])
    make_run(tmp_path, "b", [rec("c1"), rec("c2"), rec("c3", rank=None)])
    with pytest.raises(IncomparableRuns, match="case counts differ"):
        compare_runs("a", "b", results_dir=tmp_path)
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R, ignore_invariants=True)
    assert result.n == {"a": 2, "b": 3, "paired": 2, "only_a": 0, "only_b": 1}
    assert result.unscoreable["b"].only_in_this_run == 1 and result.unscoreable["a"].only_in_this_run == 0
    recall = _row(result, "recall_any", k=5)
    assert (recall.a, recall.b, recall.n_b, recall.n, recall.paired_delta) == (1.0, 2 / 3, 3, 2, 0.0)
    assert recall.comparable is False and recall.note.startswith("not comparable: case counts differ (2 vs 3)")


def test_importing_the_comparison_loads_no_terminal_or_network_library():
    import subprocess
    import sys

    code = "import sys, evalkit.compare; print(' '.join(m for m in ('rich', 'httpx', 'openai', 'anthropic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


def test_a_rescored_run_is_still_compared_on_the_k_it_asked_for(tmp_path):
    # score_retrieval --k 1 --k 3 rewrites metrics.json's ks, not what the target returned:
    # config.json's settings.k says 5 chunks were asked for on both sides.
    make_run(tmp_path, "a", RUN_A, ks=(5,))
    make_run(tmp_path, "b", RUN_A, ks=(5,))
    m = orjson.loads((tmp_path / "a" / "metrics.json").read_bytes())
    m["ks"] = [1, 3]
    (tmp_path / "a" / "metrics.json").write_bytes(orjson.dumps(m))
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    assert result.invariants.ok is True


def test_metric_selector_shows_only_the_named_rows_in_either_vocabulary(tmp_path):
    # issue 15: --metric takes ours or ir_measures' names; the family stays every metric.
    from evalkit.compare import select_metrics

    recs_a, recs_b = _clear_effect(30, hit_a=False, hit_b=True, unanswerable=10)
    result = _ab(tmp_path, recs_a, recs_b)
    picked = select_metrics(result, ["nDCG@5", "Success@5", "abstention_accuracy"])
    assert {(r.metric, r.k, r.ir_measure) for r in picked.deltas if r.scope == "overall"} == {
        ("ndcg", 5, "nDCG@5"), ("recall_any", 5, "Success@5"), ("abstention_accuracy", None, None)}
    assert picked.stats.family_size == result.stats.family_size  # tests were corrected over every metric
    assert _row(picked, "ndcg", k=5).p_adjusted == _row(result, "ndcg", k=5).p_adjusted
    assert "rows limited to --metric" in picked.notes[-1]
    # A headline name means its metric at the primary K.
    assert {(r.metric, r.k) for r in select_metrics(result, ["mrr_avg"]).deltas} == {("mrr", 5)}
    with pytest.raises(InputError, match="no row for 'nDCG@7'"):
        select_metrics(result, ["nDCG@7"])


def test_a_baseline_record_that_is_not_an_object_is_an_input_error(tmp_path: Path) -> None:
    # Issue 38 item 7, for baseline.json's `records` as for a results.jsonl line.
    from evalkit.compare.sources import BASELINE_KIND, BASELINE_SCHEMA_VERSION

    path = tmp_path / "baseline.json"
    path.write_bytes(orjson.dumps({"kind": BASELINE_KIND, "schema_version": BASELINE_SCHEMA_VERSION,
                                "metrics": {}, "records": [{}, 42]}))
    with pytest.raises(InputError, match=r"`records` item 2 is not a JSON object"):
        open_source(path)
