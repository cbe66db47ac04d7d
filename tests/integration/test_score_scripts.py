"""score_retrieval / score_abstention on run folders written by run_eval (a Python-callable
target, in process): re-scoring reproduces run_eval's numbers, new K, fixed labels, the
eval-set hash check, the merge into metrics.json, and the abstention confusion matrix by
hand (issue: score scripts, items 1, 2 and 4)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit import score_abstention, score_retrieval
from evalkit.errors import BadConfig, InputError
from evalkit.rescore.scoring import eval_set_version

pytestmark = pytest.mark.integration

# Per question: (chunks as (chunk_id, rel_path, heading_path) in rank order, answer, abstained or "-" for none).
BOT = textwrap.dedent(
    '''
    PLAN = {
        "q1": ([("x", "n/x.md", "# X"), ("ab", "n/a.md", "# A > ## B"), ("y", "n/y.md", "# Y")], "A is B [2].", False),
        "q2": ([("cz", "n/z.md", "# Z"), ("q", "n/q.md", "# Q"), ("r", "n/r.md", "# R")], "Z [1].", False),
        "q3": ([("x", "n/x.md", "# X")], "I cannot answer that.", True),
        "q4": ([("x", "n/x.md", "# X")], "It is 42.", False),
        "q5": ([("q", "n/q.md", "# Q"), ("r", "n/r.md", "# R"), ("c", "n/c.md", "# C")], "No.", True),
        "q6": ([("q", "n/q.md", "# Q")], "I don't know.", "-"),
        "q7": ([("q", "n/q.md", "# Q")], "The notes do not mention it.", "-"),
        "q8": ([("e", "n/e.md", "# E"), ("q", "n/q.md", "# Q")], "Alpha is the first letter [1].", "-"),
    }

    def ask(request):
        chunks, answer, abstained = PLAN[request["question"]]
        out = {"answer": answer, "references": [{"chunk_id": c, "rel_path": p, "heading_path": h} for c, p, h in chunks[:1]],
               "debug": {"retrieved_chunks": [
                   {"chunk_id": c, "rel_path": p, "heading_path": h, "start_line": 1, "end_line": 2,
                    "text": ("long " * 60) if c == "ab" else "short text", "rank": i}
                   for i, (c, p, h) in enumerate(chunks, start=1)]}}
        if abstained != "-":
            out["abstained"] = abstained
        return out
    '''
)

CASES = [
    {"id": "q1", "question": "q1", "answerable": True, "category": "factual", "tags": ["t1"],
     "gold_supports": [{"rel_path": "n/a.md", "heading_path": "# A"}]},
    {"id": "q2", "question": "q2", "answerable": True, "category": "factual", "tags": ["t1", "t2"],
     "gold_supports": [{"rel_path": "n/b.md", "heading_path": "# B"}, {"chunk_id": "cz"}],
     "required_support_groups": [[0, 1]]},
    {"id": "q3", "question": "q3", "answerable": False, "category": "adversarial"},
    {"id": "q4", "question": "q4", "answerable": False, "category": "adversarial"},
    {"id": "q5", "question": "q5", "answerable": True, "category": "reasoning",
     "gold_supports": [{"rel_path": "n/c.md", "heading_path": "# C"}]},
    {"id": "q6", "question": "q6", "answerable": True, "category": "reasoning",
     "gold_supports": [{"rel_path": "n/d.md", "heading_path": "# D"}]},
    {"id": "q7", "question": "q7", "answerable": False, "category": "general"},
    {"id": "q8", "question": "q8", "answerable": True, "category": "general",
     "gold_supports": [{"rel_path": "n/e.md", "heading_path": "# E"}]},
]


def _write_set(path: Path, cases: list[dict]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


@pytest.fixture
def run(tmp_path: Path):
    """A retrieval-only run at K = 3 over the 8 cases; returns (results_dir, run_id, eval_set path)."""
    from evalkit import run_eval

    (tmp_path / "bot.py").write_text(BOT)
    es = _write_set(tmp_path / "es.jsonl", CASES)
    result = run_eval(eval_set=str(es), k=[3], target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True,
                      results_dir=str(tmp_path / "results"), run_id="r1", no_probe=True)
    assert result.n_cases == 8
    return tmp_path / "results", "r1", es


def _metrics(results_dir: Path, run_id: str) -> dict:
    return orjson.loads((results_dir / run_id / "metrics.json").read_bytes())


# --------------------------------------------------------------------------- retrieval


def test_same_settings_reproduce_run_eval_exactly(run) -> None:
    results_dir, run_id, _ = run
    before = _metrics(results_dir, run_id)
    res = score_retrieval(run_id, results_dir=results_dir)
    after = _metrics(results_dir, run_id)
    assert res.metrics == after
    assert set(after) - set(before) == {"retrieval_scoring"}
    assert {k: v for k, v in after.items() if k != "retrieval_scoring"} == before
    assert after["retrieval_scoring"]["eval_set"]["origin"] == "config.json"
    assert after["retrieval_scoring"]["n_records"] == 8 and res.warnings == []


def test_headline_values_by_hand(run) -> None:
    results_dir, run_id, _ = run
    agg = score_retrieval(run_id, results_dir=results_dir).metrics["aggregate_metrics"]
    # Labeled answerable cases q1 q2 q5 q6 q8; first match at 2, 1, 3, none, 1.
    assert agg["recall_at_k_avg"] == 4 / 5
    assert agg["mrr_avg"] == pytest.approx((1 / 2 + 1 + 1 / 3 + 0 + 1) / 5, abs=1e-15)
    assert agg["recall_frac_avg"] == pytest.approx((1 + 1 / 2 + 1 + 0 + 1) / 5, abs=1e-15)
    assert agg["recall_all_avg"] == 0.0 and agg["n"]["recall_all_avg"] == 1  # only q2 has groups: {0, 1} not both hit
    # q1: DCG = 1/log2(3), IDCG = 1; q2: 1 / (1 + 1/log2(3)); q5: 1/log2(4) = 1/2; q8: 1.
    assert agg["ndcg_at_k_avg"] == pytest.approx((1 / math.log2(3) + 1 / (1 + 1 / math.log2(3)) + 1 / 2 + 0 + 1) / 5)


def test_new_k_up_to_the_run_k(run) -> None:
    results_dir, run_id, _ = run
    res = score_retrieval(run_id, ks=[3], primary_k=1, results_dir=results_dir)
    m = res.metrics
    assert m["ks"] == [1, 3] and m["aggregate_metrics"]["k"] == 1
    at1 = m["aggregate_metrics"]["at_k"]["1"]
    # by hand: a match at position 1 for q2 (cz) and q8 (e) only, of 5 labeled cases.
    assert at1["recall_any"] == 2 / 5 and at1["mrr"] == 2 / 5 and at1["precision"] == 2 / 5
    assert m["aggregate_metrics"]["recall_at_k_avg"] == 2 / 5  # the headline follows the primary K
    assert m["aggregate_metrics"]["at_k"]["3"]["recall_any"] == 4 / 5
    assert m["by_category"]["factual"]["recall_at_k_avg"] == 1 / 2  # q1 misses at 1, q2 hits


def test_k_larger_than_the_run_is_refused(run) -> None:
    results_dir, run_id, _ = run
    with pytest.raises(BadConfig, match=r"K=5 is larger than the K=3 the run asked its target for"):
        score_retrieval(run_id, ks=[1, 5], results_dir=results_dir)
    with pytest.raises(InputError, match="K must be a positive integer"):
        score_retrieval(run_id, ks=[0], results_dir=results_dir)


def test_changed_eval_set_is_refused_with_both_hashes(run) -> None:
    results_dir, run_id, es = run
    old_version = eval_set_version([es])
    fixed = [dict(c) for c in CASES]
    fixed[0] = {**CASES[0], "gold_supports": [{"rel_path": "n/x.md", "heading_path": "# X"}]}
    _write_set(es, fixed)
    new_version = eval_set_version([es])
    before = (results_dir / run_id / "metrics.json").read_bytes()
    with pytest.raises(BadConfig) as e:
        score_retrieval(run_id, results_dir=results_dir)
    assert old_version in str(e.value) and new_version in str(e.value) and "--eval-set" in str(e.value)
    assert (results_dir / run_id / "metrics.json").read_bytes() == before  # nothing written

    # Named explicitly, the fixed labels are used: q1's gold is now at position 1.
    res = score_retrieval(run_id, results_dir=results_dir, eval_set=es)
    agg = res.metrics["aggregate_metrics"]
    assert agg["mrr_avg"] == pytest.approx((1 + 1 + 1 / 3 + 0 + 1) / 5, abs=1e-15)
    prov = res.metrics["retrieval_scoring"]["eval_set"]
    assert prov == {"paths": [str(es)], "version": new_version, "run_version": old_version, "origin": "--eval-set",
                    "changed": True}
    # issue 36 item 5: labels are part of the run's identity; config.json keeps what was run
    assert res.n_regrouped == 0 and res.metrics["dataset_version"] == new_version
    assert json.loads((results_dir / run_id / "config.json").read_text())["dataset_version"] == old_version


def test_eval_set_version_matches_the_loader(tmp_path: Path) -> None:
    from evalkit.evalset.load import load_eval_set

    one = _write_set(tmp_path / "one.jsonl", CASES[:2])
    folder = tmp_path / "sets"
    folder.mkdir()
    _write_set(folder / "a.jsonl", CASES[:3])
    _write_set(folder / "b.jsonl", CASES[3:])
    assert eval_set_version([one]) == load_eval_set([one]).version
    assert eval_set_version([folder]) == load_eval_set([folder]).version


def test_regrouped_cases_rewrite_every_aggregate(run) -> None:
    results_dir, run_id, es = run
    moved = [dict(c) for c in CASES]
    moved[6] = {**CASES[6], "category": "factual"}  # q7, q8: general -> factual; "general" is left empty
    moved[7] = {**CASES[7], "category": "factual"}
    _write_set(es, moved)
    res = score_retrieval(run_id, results_dir=results_dir, eval_set=es)
    assert res.n_regrouped == 2 and any("recomputed with the new labels" in w for w in res.warnings)
    cats = res.metrics["by_category"]
    assert "general" not in cats  # derived as a fresh run derives it: a group without a case has no cell
    assert cats["factual"]["n_cases"] == 4
    # factual = q1 q2 q7 q8: q7 (unanswerable) gave no `abstained`, so no abstention accuracy.
    assert "abstention_accuracy" not in cats["factual"] and cats["factual"]["false_abstention_rate"] == 0.0
    assert cats["factual"]["recall_at_k_avg"] == 1.0 and cats["factual"]["n"]["recall_at_k_avg"] == 3


def test_case_missing_from_the_eval_set_is_refused(run) -> None:
    results_dir, run_id, es = run
    _write_set(es, CASES[:-1])
    with pytest.raises(BadConfig, match=r"1 case of the run is not in the eval set \('q8'\)"):
        score_retrieval(run_id, results_dir=results_dir, eval_set=es)


def test_snippets_on_cut_text_need_consent(run) -> None:
    results_dir, run_id, _ = run
    with pytest.raises(BadConfig, match="--allow-truncated-text"):
        score_retrieval(run_id, results_dir=results_dir, require_snippets=True)
    res = score_retrieval(run_id, results_dir=results_dir, require_snippets=True, allow_truncated_text=True)
    assert res.snippets_on_cut_text and res.n_cut_chunks == 1  # q1's "ab" chunk was 300 characters
    assert any("upper bounds" in w for w in res.warnings)
    assert res.metrics["retrieval_scoring"]["snippets_on_cut_text"] is True


def test_full_text_run_with_snippets_reproduces(tmp_path: Path) -> None:
    from evalkit import run_eval

    (tmp_path / "bot.py").write_text(BOT)
    cases = [dict(c) for c in CASES]
    cases[0] = {**CASES[0], "gold_supports": [{"rel_path": "n/a.md", "heading_path": "# A", "snippets": ["long long"]}]}
    cases[4] = {**CASES[4], "gold_supports": [{"rel_path": "n/c.md", "heading_path": "# C", "snippets": ["absent"]}]}
    es = _write_set(tmp_path / "es.jsonl", cases)
    run_eval(eval_set=str(es), k=[3], target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True,
             results_dir=str(tmp_path / "results"), run_id="full", no_probe=True, require_snippets=True,
             store_full_text=True)
    before = _metrics(tmp_path / "results", "full")
    res = score_retrieval("full", results_dir=tmp_path / "results")
    assert res.require_snippets and not res.snippets_on_cut_text
    assert {k: v for k, v in res.metrics.items() if k != "retrieval_scoring"} == before
    assert before["aggregate_metrics"]["recall_at_k_avg"] == 3 / 5  # q5's snippet is absent: no longer a hit


def test_rescoring_derives_every_number_from_the_records(run) -> None:
    """Issue 37 (one derive): a re-scoring writes metrics.json whole from the records, so a
    number edited into metrics.json does not survive it; what a command owns that no record
    holds (judge_answers' spot check) does."""
    results_dir, run_id, _ = run
    path = results_dir / run_id / "metrics.json"
    m = orjson.loads(path.read_bytes())
    m["aggregate_metrics"]["judge_reliability"] = {"weighted_kappa": 0.5}
    m["aggregate_metrics"]["groundedness_avg"] = 4.25  # as if judged: no record says so
    m["aggregate_metrics"]["n"]["groundedness_avg"] = 7
    m["by_category"]["factual"]["groundedness_avg"] = 3.5
    m["compare_note"] = "not derived"
    path.write_bytes(orjson.dumps(m))
    res = score_retrieval(run_id, primary_k=1, ks=[1], results_dir=results_dir)
    agg = res.metrics["aggregate_metrics"]
    assert agg["judge_reliability"] == {"weighted_kappa": 0.5}
    # retrieval-only run: no record holds a verdict, so no mean and n = 0
    assert agg["groundedness_avg"] is None and agg["n"]["groundedness_avg"] == 0
    assert "compare_note" not in res.metrics
    fact = res.metrics["by_category"]["factual"]
    assert "groundedness_avg" not in fact
    assert fact["recall_at_k_avg"] == 1 / 2 and list(fact)[0] == "n_cases" and list(fact)[-1] == "n"


def test_unknown_run_and_missing_eval_set(run, tmp_path: Path) -> None:
    results_dir, run_id, es = run
    with pytest.raises(InputError, match="no run 'nope'"):
        score_retrieval("nope", results_dir=results_dir)
    es.unlink()
    with pytest.raises(BadConfig, match="pass --eval-set PATH"):
        score_retrieval(run_id, results_dir=results_dir)


# --------------------------------------------------------------------------- abstention


def test_abstention_confusion_by_hand(run) -> None:
    results_dir, run_id, _ = run
    before = _metrics(results_dir, run_id)
    res = score_abstention(run_id, results_dir=results_dir)
    agg = res.metrics["aggregate_metrics"]
    # Stored: q1 q2 answered (answerable), q5 abstained (answerable), q3 abstained and q4
    # answered (unanswerable); q6 q7 q8 gave no `abstained`: unknown.
    assert agg["abstention_confusion"] == {"answerable": {"answered": 2, "abstained": 1},
                                           "unanswerable": {"answered": 1, "abstained": 1}}
    assert agg["n_abstention_unknown"] == 3
    assert agg["abstention_accuracy"] == 1 / (1 + 1)
    assert agg["hallucination_rate_unanswerable"] == 1 / (1 + 1)
    assert agg["false_abstention_rate"] == 1 / (1 + 2)
    assert agg["abstention_precision"] == 1 / (1 + 1) and agg["abstention_recall"] == 1 / 2
    assert agg["abstention_f1"] == 2 * (1 / 2 * 1 / 2) / (1 / 2 + 1 / 2)
    assert agg["abstention_decision_accuracy"] == (1 + 2) / 5
    assert {k: v for k, v in res.metrics.items() if k != "abstention_scoring"} == before  # as run_eval had it


def test_abstention_heuristic_classifier_by_hand(run) -> None:
    results_dir, run_id, _ = run
    res = score_abstention(run_id, results_dir=results_dir, classifier="heuristic")
    agg = res.metrics["aggregate_metrics"]
    # q6 "I don't know." -> abstained (answerable); q7 "The notes do not mention it." ->
    # abstained (unanswerable); q8 -> answered. The target's own decisions stay.
    assert res.n_classified == 3 and res.n_changed == 3 and res.n_classifier_failures == 0
    assert agg["abstention_confusion"] == {"answerable": {"answered": 3, "abstained": 2},
                                           "unanswerable": {"answered": 1, "abstained": 2}}
    assert agg["n_abstention_unknown"] == 0
    p, r = 2 / (2 + 2), 2 / (2 + 1)
    assert agg["abstention_accuracy"] == r and agg["hallucination_rate_unanswerable"] == 1 / 3
    assert agg["false_abstention_rate"] == 2 / 5 and agg["abstention_precision"] == p
    assert agg["abstention_f1"] == 2 * p * r / (p + r) and agg["abstention_decision_accuracy"] == (2 + 3) / 8
    assert res.metrics["by_category"]["general"]["abstention_accuracy"] == 1.0  # q7
    assert res.metrics["abstention_scoring"]["classifier"] == "heuristic"
    # results.jsonl holds the same new decisions (issue 25: one truth per number), marked as the classifier's
    recs = [orjson.loads(x) for x in (results_dir / run_id / "results.jsonl").read_bytes().splitlines()]
    assert [r["abstention"]["abstained"] for r in recs][5:] == [True, True, False]
    assert {r["abstention"]["method"] for r in recs[5:]} == {"heuristic"}
    assert res.results_rewritten and res.metrics["abstention_scoring"]["results_rewritten"] is True
    # the target's own decisions stay as they were
    assert all(r["abstention"].get("method") != "heuristic" for r in recs[:5])


def test_abstention_relabelled_answerable(run) -> None:
    results_dir, run_id, es = run
    relabelled = [dict(c) for c in CASES]
    relabelled[4] = {**CASES[4], "answerable": False, "gold_supports": []}  # q5 abstained: now a correct abstention
    _write_set(es, relabelled)
    with pytest.raises(BadConfig, match="the eval set changed since run r1"):
        score_abstention(run_id, results_dir=results_dir)
    res = score_abstention(run_id, results_dir=results_dir, eval_set=es)
    agg = res.metrics["aggregate_metrics"]
    assert agg["abstention_confusion"] == {"answerable": {"answered": 2, "abstained": 0},
                                           "unanswerable": {"answered": 1, "abstained": 2}}
    assert res.n_regrouped == 1
    # The whole aggregate follows the new labels: q5 no longer counts in retrieval.
    assert agg["n"]["recall_at_k_avg"] == 4 and agg["recall_at_k_avg"] == 3 / 4


def test_a_damaged_dataset_version_in_config_json_is_named(run) -> None:
    # Issue 38: bytes damaged in config.json's dataset_version read as "the eval set changed
    # since run r1", sending the user to an eval set that had not changed.
    results_dir, run_id, es = run
    config = results_dir / run_id / "config.json"
    cfg = json.loads(config.read_text())
    version = cfg["dataset_version"]
    assert cfg["eval_set"]["version"] == version == eval_set_version([str(es)])
    config.write_text(config.read_text().replace(f'"dataset_version": "{version}"', f'"dataset_version": "{version[:-1]}Z"'))
    for score in (score_retrieval, score_abstention):
        with pytest.raises(BadConfig) as e:
            score(run_id, results_dir=results_dir)
        (problem,) = e.value.problems
        assert problem.path == str(config) and "config.json looks damaged" in problem.message
    # Given again, the eval set scores the run as it is.
    assert score_retrieval(run_id, results_dir=results_dir, eval_set=es).metrics["aggregate_metrics"]["n"]


def test_llm_classifier_needs_a_model(run) -> None:
    results_dir, run_id, _ = run
    with pytest.raises(InputError, match="--classifier llm needs an LLM judge"):
        score_abstention(run_id, results_dir=results_dir, classifier="llm")
    with pytest.raises(BadConfig, match="unknown classifier"):
        score_abstention(run_id, results_dir=results_dir, classifier="magic")


# --------------------------------------------------------------------------- CLI


def test_cli_score_retrieval(run) -> None:
    from evalkit.cli.score_retrieval import app

    results_dir, run_id, _ = run
    res = CliRunner().invoke(app, ["--run-id", run_id, "--results-dir", str(results_dir), "--k", "1", "--k", "3"])
    assert res.exit_code == 0, res.output
    # other K: the per-case values are rewritten with metrics.json, and the output says so
    assert "by category" in res.stdout and "factual" in res.stdout
    assert "metrics.json and the per-case values in results.jsonl updated together" in res.stdout
    res = CliRunner().invoke(app, ["--run-id", run_id, "--results-dir", str(results_dir), "--k", "1", "--k", "3"])
    assert "metrics.json updated" in res.stdout  # the same again: nothing per case to rewrite
    res = CliRunner().invoke(app, ["--run-id", run_id, "--results-dir", str(results_dir), "--k", "4"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "evalkit: --k: K=4 is larger than the K=3 the run asked its target for (config.json settings.k = [3]): "
        "positions past 3 were never retrieved; use --k 3 or less, or run again with --k 4"
    ]
    res = CliRunner().invoke(app, ["--run-id", run_id, "--results-dir", str(results_dir), "--json", "-q"])
    assert res.exit_code == 0
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["aggregate_metrics"]["recall_at_k_avg"] == 4 / 5 and out["retrieval_scoring"]["ks"] == [3]
    res = CliRunner().invoke(app, ["--run-id", "missing", "--results-dir", str(results_dir)])
    assert res.exit_code == 2 and "no run 'missing'" in res.stderr


def test_cli_score_abstention(run) -> None:
    from evalkit.cli.score_abstention import app

    results_dir, run_id, _ = run
    res = CliRunner().invoke(app, ["--run-id", run_id, "--results-dir", str(results_dir), "--classifier", "heuristic"])
    assert res.exit_code == 0, res.output
    assert "confusion" in res.stdout and "unanswerable" in res.stdout
    res = CliRunner().invoke(app, ["--run-id", run_id, "--results-dir", str(results_dir), "--classifier", "llm"])
    assert res.exit_code == 2 and "--classifier llm needs an LLM judge" in res.stderr


def test_console_command_mounts_both() -> None:
    from evalkit.cli.main import app

    for name in ("score-retrieval", "score-abstention"):
        res = CliRunner().invoke(app, [name, "--help"])
        assert res.exit_code == 0 and "--run-id" in res.stdout


def test_cli_modules_stay_light() -> None:
    code = ("import sys, evalkit.cli.score_retrieval, evalkit.cli.score_abstention\n"
            "print([m for m in ('openai', 'anthropic', 'rich', 'httpx') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- parallel re-scoring


def test_worker_processes_give_the_same_metrics(run, tmp_path: Path) -> None:
    """Forced to 2 and 3 worker processes (in a fresh interpreter: no test threads, so forking
    is allowed), score_retrieval writes the same metrics.json as one process does."""
    results_dir, run_id, es = run
    pristine = results_dir.parent / "pristine"
    shutil.copytree(results_dir, pristine)
    one = score_retrieval(run_id, results_dir=results_dir, ks=[3, 1], workers=1)
    assert one.processes == 1
    expected = {k: v for k, v in one.metrics.items() if k not in ("retrieval_scoring", "timestamp")}
    for workers, eval_set in ((2, None), (3, str(es))):
        # ks=[3, 1] changes what the per-case values hold: each copy is re-scored and rewritten.
        shutil.rmtree(results_dir)
        shutil.copytree(pristine, results_dir)
        code = textwrap.dedent(
            f"""
            import json, orjson
            from evalkit import score_retrieval
            r = score_retrieval({run_id!r}, results_dir={str(results_dir)!r}, ks=[3, 1], workers={workers},
                                eval_set={eval_set!r})
            m = {{k: v for k, v in r.metrics.items() if k not in ("retrieval_scoring", "timestamp")}}
            print(json.dumps({{"processes": r.processes, "metrics": orjson.loads(orjson.dumps(m))}}))
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["processes"] == workers
        assert got["metrics"] == json.loads(json.dumps(expected))


def test_a_bad_line_under_workers_is_reported_by_its_true_line_number(run) -> None:
    """A worker's failure is redone in one process, which names the file and the real line."""
    results_dir, run_id, _ = run
    path = results_dir / run_id / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[6] = b'{"broken": \n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputError, match=r"results\.jsonl:7: corrupt record"):
        score_retrieval(run_id, results_dir=results_dir, workers=2)
