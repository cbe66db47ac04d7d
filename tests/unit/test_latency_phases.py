"""A target's other `debug.timings_ms` phases (e.g. rerank) are kept and aggregated, and any
phase can carry a budget (issue 30 item 5; seed 002's custom traces: BM25 search,
reranking).

regression: issue 30 item 5 — `timings_ms.rerank` was dropped from the record and a
budget applied to the whole request only.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalkit.config import build_settings
from evalkit.errors import BadConfig
from evalkit.metrics.aggregate import RecordTable, aggregate_records
from evalkit.metrics.latency import case_phase_budgets, extra_phases_ms


def test_extra_phases_by_hand() -> None:
    timings = {
        "retrieval": 5.0,  # a known phase: the record's retrieval_ms already
        "rerank": 12.5,
        "BM25_Search": 3,  # lower-cased
        "total": 40.0,  # the harness measures its own total: kept as the server's
        "judge": 1.0,
        "bad name!": 3.0,  # not a phase name: dropped
        "negative": -1.0,  # not a time: dropped
        "flag": True,
        "nan": float("nan"),
    }
    assert extra_phases_ms(timings) == {
        "rerank_ms": 12.5, "bm25_search_ms": 3.0, "server_total_ms": 40.0, "server_judge_ms": 1.0,
    }


def test_budget_flag_parses_and_refuses_with_the_reason() -> None:
    s = build_settings({"phase_budgets_ms": ["rerank=200", "Retrieval=50ms"]})
    assert s.phase_budgets_ms == {"rerank": 200.0, "retrieval": 50.0}
    assert s.hashed()["phase_budgets_ms"] == {"rerank": 200.0, "retrieval": 50.0}
    assert "phase_budgets_ms" not in build_settings({}).hashed()  # runs without one keep their config_hash
    for value, message in [
        ("total=2000", "--latency-budget: total: the whole request's budget is --latency-budget-ms MS"),
        ("judge=10", "--latency-budget: judge: the judge's time is the harness's"),
        ("rerank", "--latency-budget: expected PHASE=MS, e.g. rerank=200, got 'rerank'"),
        ("rerank=-5", "--latency-budget: rerank: a budget must be a positive number of ms"),
        ("rerank=fast", "--latency-budget: rerank: expected a number of ms, got 'fast'"),
    ]:
        with pytest.raises(BadConfig) as e:
            build_settings({"phase_budgets_ms": [value]})
        assert str(e.value.problems[0]).startswith(message), str(e.value.problems[0])


def test_case_phase_budgets_by_hand() -> None:
    got = case_phase_budgets({"total_ms": 900.0, "rerank_ms": 300.0, "retrieval_ms": 40.0},
                             {"rerank": 200.0, "retrieval": 50.0, "expand": 10.0})
    # by hand: rerank 300 > 200 -> 1 - (300 - 200) / 200 = 0.5; retrieval 40 <= 50 -> 1
    assert got == {
        "rerank": {"budget_ms": 200.0, "latency_ms": 300.0, "score": 0.5, "within": False},
        "retrieval": {"budget_ms": 50.0, "latency_ms": 40.0, "score": 1.0, "within": True},
        "expand": {"budget_ms": 10.0, "latency_ms": None, "score": None, "within": None},  # not reported: excluded
    }
    assert case_phase_budgets({"total_ms": 1.0}, {}) is None
    assert case_phase_budgets({"rerank_ms": 1.0}, {"rerank": 5.0}, failed=True) is None


def _rec(i: int, rerank: float | None, budget: dict | None = None) -> dict:
    latency = {"total_ms": 100.0 + i, "folder_selection_ms": None, "retrieval_ms": 5.0, "generation_ms": None, "judge_ms": None}
    if rerank is not None:
        latency["rerank_ms"] = rerank
    rec = {"case": {"id": f"c{i}", "answerable": True, "category": "factual"}, "latency": latency}
    if budget is not None:
        rec["phase_budgets"] = budget
    return rec


def test_aggregate_per_phase_percentiles_and_budget_by_hand() -> None:
    rerank = [100.0, 200.0, 300.0, 400.0]
    records = [
        _rec(i, r, case_phase_budgets({"rerank_ms": r}, {"rerank": 250.0})) for i, r in enumerate(rerank)
    ] + [_rec(9, None, case_phase_budgets({}, {"rerank": 250.0}))]  # a case without the phase
    phases = aggregate_records(records, ks=[5])["aggregate_metrics"]["latency"]["phases"]
    assert list(phases) == ["folder_selection", "retrieval", "generation", "judge", "rerank"]
    block = phases["rerank"]
    # by hand (linear, type 7): p50 = h 1.5 -> 200 + 0.5 * 100 = 250; p95 = h 2.85 -> 300 + 0.85 * 100 = 385
    assert block["n"] == 4 and block["p50_ms"] == 250.0 and block["p95_ms"] == pytest.approx(385.0)
    assert block["mean_ms"] == 250.0
    # by hand: scores 1, 1, 1 - 50/250 = 0.8, 1 - 150/250 = 0.4 -> mean 0.8; within 2 of 4
    assert block["budget"] == {"budget_ms": 250.0, "score_avg": pytest.approx(0.8), "within_rate": 0.5, "n": 4}


def test_a_table_merged_from_parts_equals_one_table() -> None:
    records = [_rec(i, 10.0 * (i + 1), case_phase_budgets({"rerank_ms": 10.0 * (i + 1)}, {"rerank": 25.0}))
               for i in range(5)]
    whole = RecordTable([5])
    for r in records:
        whole.add_record(r)
    a, b = RecordTable([5]), RecordTable([5])
    for r in records[:2]:
        a.add_record(r)
    for r in records[2:]:
        b.add_record(r)
    a.merge(b)
    assert a.result()["aggregate_metrics"]["latency"] == whole.result()["aggregate_metrics"]["latency"]


BOT = textwrap.dedent(
    """
    RERANK = {"q1": 120.0, "q2": 180.0, "q3": 400.0}

    def ask(request):
        cid = request["question"].split()[0]
        chunk = {"chunk_id": cid, "rel_path": "a.md", "heading_path": "# A", "text": "text", "rank": 1}
        return {"answer": "an answer [1]", "references": [], "abstained": False,
                "debug": {"retrieved_chunks": [chunk],
                          "timings_ms": {"retrieval": 4.0, "rerank": RERANK[cid], "generation": 9.0}}}
    """
)


def test_run_keeps_aggregates_and_budgets_a_targets_rerank_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    cases = [{"id": f"q{i}", "question": f"q{i} what?", "answerable": True,
              "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]} for i in (1, 2, 3)]
    (tmp_path / "es.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    result = run_eval(eval_set=str(tmp_path / "es.jsonl"), target=f"python:{tmp_path / 'bot.py'}:ask",
                      retrieval_only=True, results_dir=str(tmp_path / "results"), no_probe=True,
                      phase_budgets_ms=["rerank=200"])
    recs = [json.loads(x) for x in (result.run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["latency"]["rerank_ms"] for r in recs] == [120.0, 180.0, 400.0]
    assert recs[2]["phase_budgets"] == {"rerank": {"budget_ms": 200.0, "latency_ms": 400.0, "score": 0.0, "within": False}}
    block = result.metrics["aggregate_metrics"]["latency"]["phases"]["rerank"]
    # by hand: p50 of 120, 180, 400 = 180; p95: h = 1.9 -> 180 + 0.9 * 220 = 378
    assert block["p50_ms"] == 180.0 and block["p95_ms"] == pytest.approx(378.0) and block["n"] == 3
    # by hand: scores 1, 1, max(0, 1 - 200/200) = 0 -> 2/3; within 2 of 3
    assert block["budget"] == {"budget_ms": 200.0, "score_avg": pytest.approx(2 / 3), "within_rate": pytest.approx(2 / 3),
                               "n": 3}
    summary = (result.run_dir / "summary.md").read_text()
    assert "| rerank p50 / p95 | 180 ms / 378 ms | 3 |" in summary
    assert "| rerank within 200 ms / budget score | 0.667 / 0.667 | 3 |" in summary
    cfg = json.loads((result.run_dir / "config.json").read_text())
    assert cfg["hashed"]["phase_budgets_ms"] == {"rerank": 200.0}
