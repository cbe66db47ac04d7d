"""run_eval end to end: the reference chatbot over a loopback socket, the in-process default,
the regression gate's exit codes, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evalkit.schema import Metrics, ResultRecord, RunConfig
from tests.support import bundled_cases, run_eval_cli

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"

# For the conftest's fallback vault (used when sample_vault/ has no notes yet).
FALLBACK_SET = [
    {"id": "t1", "question": "How often should I water tomato plants?", "answerable": True, "tags": ["garden"], "category": "factual",
     "gold_supports": [{"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Watering"}]},
    {"id": "t2", "question": "At what temperature do I bake sourdough?", "answerable": True, "tags": ["kitchen"], "category": "factual",
     "gold_supports": [{"rel_path": "Kitchen/Bread.md", "heading_path": "# Sourdough bread"}]},
    {"id": "t3", "question": "What is the capital of Mars?", "answerable": False, "tags": ["general"],
     "category": "adversarial"},
]


@pytest.fixture(scope="module")
def eval_set(reference_vault: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("es") / "eval_set.jsonl"
    if reference_vault == SAMPLE_VAULT and MAIN_SET.is_file():
        # A copy: a run gated against --baseline locks its eval set in the eval_sets.lock beside it.
        path.write_bytes(MAIN_SET.read_bytes())
        return path
    path.write_text("\n".join(json.dumps(c) for c in FALLBACK_SET) + "\n")
    return path


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


SEED_AGGREGATE_KEYS = {
    "recall_at_k_avg", "mrr_avg", "scope_miss_rate", "attribution_hit_rate", "groundedness_avg", "correctness_avg",
    "abstention_accuracy", "hallucination_rate_unanswerable", "latency", "cost", "indexing_coverage",
    "operational_metrics", "at_k", "k", "n",
}


def test_full_run_over_the_reference_server(reference_server, eval_set, tmp_path):
    out = run_eval_cli(eval_set=eval_set, api_url=reference_server, k=[5, 10], results_dir=tmp_path, json=True,
                  concurrency=8)
    assert out.exit_code == 0, out.output
    payload = _last_json(out.stdout)
    run_dir = Path(payload["run_dir"])
    # .writer.lock: the run's writer lock, empty once run_eval let go of it (EVAL.md "One writer per run")
    assert sorted(p.name for p in run_dir.iterdir()) == [
        ".writer.lock", "config.json", "metrics.json", "results.json", "results.jsonl", "summary.md"]

    n_cases = len(bundled_cases(eval_set))  # a conversation's turns are cases
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == n_cases
    assert [r["case_index"] for r in records] == list(range(n_cases))
    for r in records:
        ResultRecord.model_validate(r)
        assert r["error"] is None, r["error"]
        assert set(r["latency"]) >= {"total_ms", "folder_selection_ms", "retrieval_ms", "generation_ms", "judge_ms"}
        assert r["latency"]["total_ms"] > 0
        assert set(r["retrieval_metrics"]["at_k"]) == {"5", "10"}
        assert r["indexing_coverage"] is not None
        assert r["judge_input"] is not None  # judged by the offline heuristic
        for c in r["retrieved_chunks"]:
            assert len(c["text"]) <= 200 and {"rank", "score_vector", "score_final", "token_count"} <= set(c)

    config = json.loads((run_dir / "config.json").read_text())
    RunConfig.model_validate(config)
    assert config["target"]["kind"] == "http"
    assert config["judge"]["heuristic"] is True
    assert set(config["versions"]) >= {
        "dataset_version", "index_build_version", "retriever_version", "answerer_version", "judge_version"
    }
    assert config["versions"]["index_build_version"]  # from the server's debug.versions
    assert config["hardware"] and config["settings"]["k"] == [5, 10]

    metrics = json.loads((run_dir / "metrics.json").read_text())
    Metrics.model_validate(metrics)
    assert SEED_AGGREGATE_KEYS <= set(metrics["aggregate_metrics"])
    assert {"by_tag", "by_category", "by_difficulty", "by_domain", "by_answerable"} <= set(metrics)
    assert metrics["total_tests"] == n_cases
    assert metrics["aggregate_metrics"]["indexing_coverage"]["docs_processed"] > 0
    assert payload["aggregate_metrics"] == metrics["aggregate_metrics"]


def test_same_config_twice_gives_the_same_metrics(reference_server, eval_set, tmp_path):
    runs = []
    for conc in ("1", "8"):
        out = run_eval_cli(eval_set=eval_set, api_url=reference_server, results_dir=tmp_path, json=True, concurrency=conc)
        assert out.exit_code == 0, out.output
        runs.append(_last_json(out.stdout))
    # Latency differs run to run; the judge's own counters are session stats (their score
    # means are summed in completion order, so they may differ in the last bit).
    a, b = ({k: v for k, v in r["aggregate_metrics"].items() if k not in ("latency", "judge")} for r in runs)
    assert runs[0]["run_id"] != runs[1]["run_id"]
    assert a == b
    ja, jb = (r["aggregate_metrics"]["judge"]["scores"] for r in runs)
    assert ja.keys() == jb.keys()
    for kind in ja:
        assert ja[kind]["n"] == jb[kind]["n"] and ja[kind]["mean"] == pytest.approx(jb[kind]["mean"], abs=1e-12)


@pytest.mark.skipif(not (SAMPLE_VAULT.is_dir() and MAIN_SET.is_file()), reason="sample_vault/ not there yet")
def test_default_in_process_run_over_sample_vault(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the defaults are relative: eval_set.jsonl, sample_vault
    out = run_eval_cli(results_dir=tmp_path, json=True, limit=12)
    assert out.exit_code == 0, out.output
    payload = _last_json(out.stdout)
    config = json.loads((Path(payload["run_dir"]) / "config.json").read_text())
    assert config["target"]["kind"] == "reference" and config["settings"]["vault"] == "sample_vault"
    assert config["judge"]["heuristic"] is True
    assert payload["aggregate_metrics"]["n_cases"] == 12


def test_gate_exit_codes(reference_server, eval_set, tmp_path):
    base = dict(eval_set=eval_set, api_url=reference_server, results_dir=tmp_path, retrieval_only=True)
    assert run_eval_cli(**base, run_id="baseline", quiet=True).exit_code == 0
    same = run_eval_cli(**base, baseline="baseline", json=True)  # the verdict: identical
    same_gate = _last_json(same.stdout)["gate"]
    assert same_gate["outcome"] == "pass" and same_gate["headline"].startswith("PASS: identical")
    base = {**base, "gate": "threshold"}  # the baseline's aggregates are edited below: the threshold gate
    assert same.exit_code == 0 and same_gate["passed"] is True and same_gate["regressions"] == []

    # A baseline 0.2 better on both gated retrieval metrics: by hand, 0.2 > 0.05 (recall)
    # and 0.2 > 0.10 (MRR), so both regress whatever this system scores.
    path = tmp_path / "baseline" / "metrics.json"
    m = json.loads(path.read_text())
    agg = m["aggregate_metrics"]
    agg["recall_at_k_avg"] = agg["at_k"]["5"]["recall_any"] = agg["recall_at_k_avg"] + 0.2
    agg["mrr_avg"] = agg["at_k"]["5"]["mrr"] = agg["mrr_avg"] + 0.2
    path.write_text(json.dumps(m))
    expected = ["recall_at_k_avg", "mrr_avg"]

    failed = run_eval_cli(**base, baseline="baseline", json=True)
    assert failed.exit_code == 1
    payload = _last_json(failed.stdout)
    assert payload["gate"]["passed"] is False
    assert [r["metric"] for r in payload["gate"]["regressions"]] == expected
    assert "regression gate failed" in failed.stderr and f"{expected[0]} dropped by" in failed.stderr
    assert json.loads((Path(payload["run_dir"]) / "metrics.json").read_text())["gate"]["passed"] is False

    allowed = run_eval_cli(**base, baseline="baseline", allow_regressions=True)
    assert allowed.exit_code == 0
    assert "gate failed, allowed" in allowed.stdout


def test_a_gate_that_compared_nothing_is_not_passed(reference_server, eval_set, tmp_path):
    base = dict(eval_set=eval_set, api_url=reference_server, results_dir=tmp_path, retrieval_only=True)
    assert run_eval_cli(**base, run_id="k5", quiet=True).exit_code == 0
    # A baseline whose target reported no abstention and no references (an older API):
    path = tmp_path / "k5" / "metrics.json"
    m = json.loads(path.read_text())
    for key in ("attribution_hit_rate", "abstention_accuracy", "hallucination_rate_unanswerable", "false_abstention_rate"):
        m["aggregate_metrics"][key] = None
    path.write_text(json.dumps(m))
    # K=10 against that K=5 baseline, retrieval-only: recall/MRR were not measured at 10 by the
    # baseline, the judge metrics by neither run, the rest not by the baseline -> nothing is
    # compared, which is no pass.
    out = run_eval_cli(**base, k=10, baseline="k5")
    assert out.exit_code == 1, out.output
    text = " ".join(out.stdout.split())  # rich wraps at the test console's width
    assert "gate: nothing comparable" in text and "no K measured by both runs (baseline K=5, new run K=10)" in text
    assert "gate passed" not in text
    metrics = json.loads(next(p for p in tmp_path.glob("*/metrics.json") if p.parent.name != "k5").read_text())
    assert metrics["gate"]["passed"] is False and metrics["gate"]["nothing_compared"] is True
    allowed = run_eval_cli(**base, k=10, baseline="k5", allow_regressions=True)
    assert allowed.exit_code == 0 and "gate: nothing comparable" in allowed.stdout


def test_the_gate_watches_abstention_and_judge_scores(tmp_path, monkeypatch):
    # Raising the reference chatbot's abstention threshold to 0.95 makes it abstain on
    # almost every answerable question: false abstention rises far past 0.05.
    monkeypatch.chdir(ROOT)
    es = tmp_path / "eval_set.jsonl"  # a copy: gating against --baseline locks it in eval_sets.lock beside it
    es.write_bytes(MAIN_SET.read_bytes())
    base = dict(results_dir=tmp_path, eval_set=es, limit=20, quiet=True)
    assert run_eval_cli(**base, run_id="base").exit_code == 0
    out = run_eval_cli(**base, params={"abstain_threshold": 0.95}, baseline="base", json=True, ignore_invariants=True)
    assert out.exit_code == 1, out.output
    failed = {r["metric"] for r in _last_json(out.stdout)["gate"]["regressions"]}
    assert {"false_abstention_rate", "correctness_avg"} <= failed, failed


def test_scope_is_not_sent_by_default(tmp_path):
    # A case whose `folders` name exactly the gold note's folder: by default the target must
    # search everything (the folders are the gold labels' location, not the user's filter).
    log = tmp_path / "requests.jsonl"
    bot = tmp_path / "bot.py"
    bot.write_text(
        "import json\n"
        "def ask(request):\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(json.dumps([request['vaults'], request['folders']]) + '\\n')\n"
        "    return {'answer': 'x', 'references': [], 'abstained': False,\n"
        "            'debug': {'retrieved_chunks': [{'rel_path': 'work/a.md', 'heading_path': '# A', 'text': 't'}]}}\n"
    )
    es = tmp_path / "es.jsonl"
    es.write_text(json.dumps({"id": "c1", "question": "q", "answerable": True, "vaults": ["v"], "folders": ["work"],
                              "gold_supports": [{"rel_path": "work/a.md", "heading_path": "# A"}]}) + "\n")
    from evalkit import run_eval

    for scope, expected in (("none", [[], []]), ("folders", [[], ["work"]]), ("both", [["v"], ["work"]])):
        log.unlink(missing_ok=True)
        values = dict(eval_set=str(es), target=f"python:{bot}:ask", retrieval_only=True,
                      results_dir=str(tmp_path / scope))
        if scope != "none":
            values["send_scope"] = scope
        result = run_eval(**values)
        sent = [json.loads(line) for line in log.read_text().splitlines()]
        assert sent == [expected, expected], scope  # the probe, then the case
        config = json.loads((result.run_dir / "config.json").read_text())
        assert config["settings"]["send_scope"] == scope and config["hashed"]["send_scope"] == scope
