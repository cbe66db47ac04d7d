"""Seed 004's scorers and weighted global score, end to end, on a bot whose results are known.

The bot returns fixed chunks per question, so every per-case value below is computed by
hand from them, and the global score from seed 004's weights (follow_up_recall 30%,
temporal_narrative 20%, dedup_conflict 15%, code_location_recall 20%,
token_budget_packing 15%) and primary metrics.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.integration

# chunk 2 of b1: 40 characters, "fact omega" in its last 10 (see test_expectations_by_hand).
_OMEGA = "x" * 30 + "fact omega"
CHUNKS = {
    "f1": ["User prefers vim keybindings", "User likes dark mode", "unrelated"],
    "f2": ["nothing", "still nothing", "We chose Postgres for storage"],
    "t1": ["In March we shipped", "In January we planned", "In June we launched"],
    "d1": ["The server runs on port 8080", "It moved to port 9090 later"],
    "d2": ["The sky is blue"],
    "c1": ["see src/api/x.ts", "other", "auth lives in src/auth/login.ts"],
    "c2": ["lib/db.py holds the pool", "lib/cache.py holds the LRU"],
    "b1": ["fact alpha, first entry.", _OMEGA],
}
ANSWERS = {"f1": "You use vim.", "t1": "June, then January.", "d1": "Port 7070."}

BOT = textwrap.dedent(
    f'''
    CHUNKS = {CHUNKS!r}
    ANSWERS = {ANSWERS!r}

    def ask(request):
        q = request["question"]
        chunks = [{{"chunk_id": f"{{q}}-{{i}}", "rel_path": f"{{q}}/fact-{{i}}.md", "heading_path": "",
                    "text": t, "rank": i, "score_final": 1.0 / i}}
                  for i, t in enumerate(CHUNKS[q], start=1)]
        return {{"answer": ANSWERS.get(q, "I found it."), "abstained": False, "references": [],
                "debug": {{"retrieved_chunks": chunks}}}}
    '''
)

CASES = [
    {"id": "f1", "scenario": "follow_up_recall", "expected": {"mustInclude": ["dark mode", "vim"]}},
    {"id": "f2", "scenario": "follow_up_recall", "expected": {"mustInclude": ["postgres"]}},
    {"id": "t1", "scenario": "temporal_narrative", "expected": {"orderedHints": ["january", "march", "june"]}},
    {"id": "d1", "scenario": "dedup_conflict", "expected": {"mustInclude": ["port 8080", "port 9090"], "mustExclude": ["port 7070"]}},
    {"id": "d2", "scenario": "dedup_conflict", "expected": {"mustInclude": ["blue", "green"]}},
    {"id": "c1", "scenario": "code_location_recall", "expected": {"mustInclude": ["src/auth/login.ts"]}, "constraints": {"topK": 2}},
    {"id": "c2", "scenario": "code_location_recall", "expected": {"mustInclude": ["lib/db.py", "lib/cache.py"]}},
    {"id": "b1", "scenario": "token_budget_packing", "expected": {"mustInclude": ["fact alpha", "fact omega"]},
     "constraints": {"tokenBudget": 10}},
]

# Seed 004's scenario table: primary metric and weight, in evalkit's metric names.
SUITE = """\
name = "hindsight-baseline"

[scenarios.follow_up_recall]
metric = "must_include_mrr"
weight = 0.30

[scenarios.temporal_narrative]
metric = "ordering_accuracy"
weight = 0.20

[scenarios.dedup_conflict]
metric = "must_include_recall"
weight = 0.15

[scenarios.code_location_recall]
metric = "must_include_recall"
weight = 0.20

[scenarios.token_budget_packing]
metric = "fact_retention"
weight = 0.15
"""


def _setup(tmp_path: Path, cases: list[dict] = CASES) -> dict:
    (tmp_path / "bot.py").write_text(BOT)
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps({"question": c["id"], "answerable": True, **c}) + "\n" for c in cases))
    (tmp_path / "suite.toml").write_text(SUITE)
    return dict(eval_set=str(es), target=f"python:{tmp_path / 'bot.py'}:ask", k=[5], retrieval_only=True,
                results_dir=str(tmp_path / "results"), no_probe=True, quiet=True, suite=str(tmp_path / "suite.toml"))


def _records(run_dir: Path) -> dict[str, dict]:
    return {r["test_case_id"]: r for r in map(orjson.loads, (run_dir / "results.jsonl").read_bytes().splitlines())}


def test_expectations_by_hand(tmp_path: Path) -> None:
    from evalkit import run_eval

    assert len(_OMEGA) == 40 and len(CHUNKS["b1"][0]) == 24
    result = run_eval(**_setup(tmp_path), run_id="r1")
    recs = _records(result.run_dir)
    ret = {cid: r["expectations"]["retrieved"] for cid, r in recs.items()}
    # f1: vim at rank 1, dark mode at rank 2: MRR (1/2 + 1/1) / 2 = 0.75; recall 2/2;
    # precision: chunks 1 and 2 of 3 hold an item = 2/3.
    assert (ret["f1"]["include_mrr"], ret["f1"]["include_recall"]) == (0.75, 1.0)
    assert ret["f1"]["include_precision"] == pytest.approx(2 / 3)
    # f2: postgres at rank 3 (case-insensitive): 1/3.
    assert ret["f2"]["include_mrr"] == pytest.approx(1 / 3)
    # t1: january at 2, march at 1, june at 3: (jan, mar) reversed, (jan, jun) and (mar, jun) correct: 2/3.
    assert ret["t1"]["ordering_accuracy"] == pytest.approx(2 / 3)
    assert ret["t1"]["ordering_pairs"] == {"total": 3, "correct": 2, "reversed": 1, "tied": 0, "missing": 0}
    # d1: both ports retrieved, 7070 not; the answer says "Port 7070": an answer violation.
    assert (ret["d1"]["include_recall"], ret["d1"]["exclude_violated"]) == (1.0, False)
    assert recs["d1"]["expectations"]["answer"]["exclude_violated"] is True
    # d2: blue found, green not: 1/2.
    assert ret["d2"]["include_recall"] == 0.5
    # c1: topK 2 drops chunk 3, the only one with the path: 0.
    assert (ret["c1"]["include_recall"], ret["c1"]["n_chunks"]) == (0.0, 2)
    assert ret["c2"]["include_recall"] == 1.0
    # b1: chunk 1 = ceil(24 / 4) = 6 tokens, whole; 4 of the budget's 10 left for chunk 2
    # (ceil(40 / 4) = 10 tokens): its first floor(40 * 4 / 10) = 16 characters, all "x":
    # "fact omega" is cut off. Retention 1/2.
    assert ret["b1"]["fact_retention"] == 0.5
    assert ret["b1"]["fact_lost"] == ["fact omega"]
    assert ret["b1"]["budget"] == {"token_budget": 10, "tokens_used": 10, "chunks_whole": 1, "chunk_cut": True,
                                   "token_source": "chars/4"}

    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    agg = metrics["aggregate_metrics"]
    # must_include_recall over the 7 cases with must_include: f1 1, f2 1, d1 1, d2 .5, c1 0, c2 1, b1 1 = 5.5 / 7.
    assert agg["must_include_recall"] == pytest.approx(5.5 / 7) and agg["n"]["must_include_recall"] == 7
    assert agg["answer_must_exclude_violation_rate"] == 1.0 and agg["n"]["answer_must_exclude_violation_rate"] == 1
    assert metrics["by_scenario"]["dedup_conflict"]["must_include_recall"] == 0.75

    suite = metrics["suite"]
    scores = {name: row["score"] for name, row in suite["scenarios"].items()}
    # follow_up: mean(0.75, 1/3) = 13/24; temporal 2/3; dedup mean(1, .5) = .75; code mean(0, 1) = .5; packing .5.
    assert scores == pytest.approx({"follow_up_recall": 13 / 24, "temporal_narrative": 2 / 3, "dedup_conflict": 0.75,
                                    "code_location_recall": 0.5, "token_budget_packing": 0.5})
    # By hand: .30 * 13/24 + .20 * 2/3 + .15 * .75 + .20 * .5 + .15 * .5
    #        = .1625 + .13333 + .1125 + .1 + .075 = 7/12.
    assert suite["global_score"] == pytest.approx(7 / 12)
    assert suite["problems"] == [] and suite["weight_total"] == pytest.approx(1.0)
    assert result.metrics["suite"]["global_score"] == pytest.approx(7 / 12)

    summary = (result.run_dir / "summary.md").read_text()
    assert "Global score (hindsight-baseline): **0.583**" in summary
    assert "| token_budget_packing | fact_retention | 0.15 | 1 | 0.500 | 1 |" in summary

    # results.json: the whole report, one row per case, ids and scores but no text.
    report = json.loads((result.run_dir / "results.json").read_text())
    assert report["kind"] == "evalkit-results" and report["n_records"] == 8 and not report["cases_omitted"]
    assert report["metrics"]["suite"]["global_score"] == pytest.approx(7 / 12)
    assert report["config"]["suite"]["scenarios"]["follow_up_recall"] == {"metric": "must_include_mrr", "weight": 0.3}
    row = next(r for r in report["cases"] if r["test_case_id"] == "f1")
    assert row["scenario"] == "follow_up_recall" and row["retrieved"][0] == {"id": "f1-1", "rank": 1, "score": 1.0}
    assert row["expectations"]["retrieved"]["include_mrr"] == 0.75
    rows = json.dumps(report["cases"])
    assert "keybindings" not in rows and "Postgres for storage" not in rows  # chunk text never copied
    # `latest` points at the run: results/latest/results.json and summary.md (seed 004's layout).
    latest = Path(tmp_path / "results" / "latest")
    assert (latest / "results.json").exists() and (latest / "summary.md").exists()


def test_a_missing_scenario_leaves_the_global_score_null(tmp_path: Path) -> None:
    from evalkit import run_eval

    cases = [c for c in CASES if c["scenario"] != "token_budget_packing"]
    cases.append({"id": "x1", "scenario": "other_family", "expected": {"mustInclude": ["a"]}})
    bot_cases = dict(CHUNKS, x1=["a"])
    args = _setup(tmp_path, cases)
    (tmp_path / "bot.py").write_text(BOT.replace(repr(CHUNKS), repr(bot_cases)))
    result = run_eval(**args, run_id="r2")
    suite = result.metrics["suite"]
    # Renormalising over the four scenarios present would report a number for another suite.
    assert suite["global_score"] is None
    assert suite["problems"] == ["no case of scenario 'token_budget_packing' in this run"]
    assert suite["unweighted_scenarios"] == {"other_family": 1}
    assert suite["scenarios"]["token_budget_packing"] == {"metric": "fact_retention", "weight": 0.15, "n_cases": 0,
                                                          "n": 0, "score": None}


def test_rescoring_keeps_expectations_and_the_suite(tmp_path: Path) -> None:
    from evalkit import run_eval
    from evalkit.rescore.scoring import score_retrieval

    args = _setup(tmp_path)
    result = run_eval(**args, run_id="r3")
    before = json.loads((result.run_dir / "metrics.json").read_text())
    # The lean path (metrics.json present, labels unchanged) and the whole one (labels given).
    for eval_set in (None, args["eval_set"]):
        scored = score_retrieval("r3", results_dir=args["results_dir"], eval_set=eval_set)
        after = scored.metrics
        assert after["suite"]["global_score"] == pytest.approx(7 / 12)
        assert after["aggregate_metrics"]["must_include_recall"] == before["aggregate_metrics"]["must_include_recall"]
        assert after["by_scenario"]["dedup_conflict"]["must_include_recall"] == 0.75


def test_a_failing_suite_block_still_leaves_summary_and_results_json(tmp_path: Path, monkeypatch, caplog) -> None:
    # Derived output never fails the command, and one derived file failing spares the others.
    import evalkit.metrics.suite
    from evalkit import run_eval

    def boom(metrics, suite):
        raise RuntimeError("boom")

    monkeypatch.setattr(evalkit.metrics.suite, "suite_block", boom)
    result = run_eval(**_setup(tmp_path), run_id="r4")
    assert result.success and "suite" not in result.metrics
    assert (result.run_dir / "summary.md").exists() and (result.run_dir / "results.json").exists()
    assert "the suite score of" in caplog.text and "boom" in caplog.text
