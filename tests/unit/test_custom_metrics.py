"""A project's own metrics (issue 42 item 5): a rubric defined in a file and a Python scorer
gate a merge through the verdict as a built-in metric does, in compare's JSON and exit code."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli.compare_runs import app as compare_app
from evalkit.compare import compare_runs
from evalkit.errors import InputError
from evalkit.judges.rubric import load_rubric, load_scorer
from evalkit.rescore.custom import score_run_custom
from evalkit.metrics.custom import CUSTOM_METRICS, CUSTOM_SCORES
from evalkit.store.runs import RunDir
from tests.unit.test_compare import make_run, rec

RUBRIC = """\
name = "helpfulness"
description = "Does the answer tell the user what to do, and where it says so?"
scale = 5
margin = 0.5
criteria = [
  { text = "The answer gives a concrete step", pattern = "\\\\b(open|run|set)\\\\b" },
  { text = "The answer cites a note", pattern = "\\\\[\\\\d+\\\\]" },
]
[[examples]]
answer = "Open Settings and set the port to 8080 [1]."
score = 5
reasoning = "A concrete step, cited."
"""

GOOD = "Open the settings and set the port to 8080 [1]."
BAD = "The port is somewhere in the settings."


def _runs(tmp_path: Path, answers_a: list[str], answers_b: list[str]) -> None:
    # Retrieval and the built-in judge scores are the same in both runs: only the answers' text differs.
    make_run(tmp_path, "a", [rec(f"q{i:02d}", answer=t) for i, t in enumerate(answers_a)])
    make_run(tmp_path, "b", [rec(f"q{i:02d}", answer=t) for i, t in enumerate(answers_b)])


def _score(tmp_path: Path, rubric_file: Path, *run_ids: str) -> None:
    rubric = load_rubric(rubric_file)
    for run_id in run_ids:
        score_run_custom(RunDir.open(tmp_path, run_id), [rubric])


@pytest.fixture
def rubric_file(tmp_path: Path) -> Path:
    path = tmp_path / "helpfulness.toml"
    path.write_text(RUBRIC, encoding="utf-8")
    return path


def test_the_rubric_file_is_read_with_its_version(rubric_file: Path):
    r = load_rubric(rubric_file)
    assert r.metric.name == "rubric/helpfulness" and r.metric.scale == 5 and r.metric.margin == 0.5
    assert r.heuristic_score(GOOD)[0] == 5.0 and r.heuristic_score(BAD)[0] == 0.0
    assert r.heuristic_score("Open it.")[0] == 2.5
    before = r.metric.version
    rubric_file.write_text(RUBRIC.replace("margin = 0.5", "margin = 0.4"), encoding="utf-8")
    assert load_rubric(rubric_file).metric.version != before  # any edit is a new version


def test_a_rubric_metric_gates_the_merge_through_the_verdict(tmp_path: Path, rubric_file: Path):
    _runs(tmp_path, [GOOD] * 30, [GOOD] * 10 + [BAD] * 20)
    _score(tmp_path, rubric_file, "a", "b")
    stored = orjson.loads((tmp_path / "b" / "metrics.json").read_bytes())["aggregate_metrics"][CUSTOM_METRICS]
    assert stored["rubric/helpfulness"]["mean"] == pytest.approx(5 * 10 / 30) and stored["rubric/helpfulness"]["n"] == 30
    summary = (tmp_path / "b" / "summary.md").read_text(encoding="utf-8")
    assert "## Your own metrics" in summary and "| rubric/helpfulness | 1.667 | 30 | 0-5 | higher | 0.500 |" in summary
    first = orjson.loads((tmp_path / "b" / "results.jsonl").read_bytes().splitlines()[0])
    assert first[CUSTOM_SCORES] == {"rubric/helpfulness": 5.0}

    c = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    v = next(m for m in c.verdict.metrics if m.metric == "rubric/helpfulness")
    assert v.verdict == "worse" and v.gated and v.delta == pytest.approx(-5 * 20 / 30) and v.n == 30
    # every built-in metric is identical: the rubric alone fails the merge
    assert all(m.verdict == "identical" for m in c.verdict.metrics if m.metric != "rubric/helpfulness")
    assert c.verdict.verdict == "worse" and "rubric/helpfulness" in c.verdict.gated
    # compare's delta row: the runs' stored means and the paired means
    row = next(r for r in c.deltas if r.metric == "rubric/helpfulness")
    assert (row.a, row.b, row.n, row.n_changed, row.change) == (5.0, pytest.approx(5 / 3), 30, 20, "worse")
    from evalkit.compare import select_metrics
    from evalkit.report.compare import render_markdown

    assert [r.metric for r in select_metrics(c, ["rubric/helpfulness"]).deltas] == ["rubric/helpfulness"]
    assert "rubric/helpfulness" in render_markdown(c)

    # The CLI: JSON and exit code. b worse than a fails (1); a better than b passes (0).
    out = CliRunner().invoke(compare_app, ["a", "b", "--results-dir", str(tmp_path), "--format", "json",
                                           "--resamples", "200"], catch_exceptions=False)
    assert out.exit_code == 1, out.output
    doc = json.loads(out.stdout)
    row = next(m for m in doc["verdict"]["metrics"] if m["metric"] == "rubric/helpfulness")
    assert row["verdict"] == "worse" and doc["verdict"]["verdict"] == "worse"
    back = CliRunner().invoke(compare_app, ["b", "a", "--results-dir", str(tmp_path), "--format", "json",
                                            "--resamples", "200"], catch_exceptions=False)
    assert back.exit_code == 0, back.output
    assert next(m for m in json.loads(back.stdout)["verdict"]["metrics"]
                if m["metric"] == "rubric/helpfulness")["verdict"] == "better"
    # --margin off leaves it out: the merge is identical again
    off = compare_runs("a", "b", results_dir=tmp_path, resamples=200, margins={"rubric/helpfulness": None})
    assert off.verdict.verdict == "identical"
    assert {"metric": "rubric/helpfulness", "reason": "left out by --margin rubric/helpfulness=off"} in off.verdict.not_compared


def test_runs_scored_by_different_rubric_versions_are_not_paired(tmp_path: Path, rubric_file: Path):
    _runs(tmp_path, [GOOD] * 30, [GOOD] * 10 + [BAD] * 20)
    _score(tmp_path, rubric_file, "a")
    rubric_file.write_text(RUBRIC.replace("cites a note", "cites a note by number"), encoding="utf-8")
    _score(tmp_path, rubric_file, "b")
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    assert not any(m.metric == "rubric/helpfulness" for m in c.verdict.metrics)
    reason = next(x["reason"] for x in c.verdict.not_compared if x["metric"] == "rubric/helpfulness")
    assert "version" in reason


def test_a_python_scorer_is_a_metric_too(tmp_path: Path):
    (tmp_path / "my_scorers.py").write_text(
        "def cites(record):\n    return '[1]' in (record.get('answer') or '')\n"
        "def length(record):\n    return None if not record.get('answer') else min(len(record['answer']) / 100, 1.0)\n",
        encoding="utf-8",
    )
    spec = f"python:{tmp_path / 'my_scorers.py'}:cites"
    scorer = load_scorer(spec)
    assert scorer.metric.name == "scorer/cites" and scorer.metric.scale == 1.0 and len(scorer.metric.version) == 16
    _runs(tmp_path, [GOOD] * 30, [BAD] * 30)
    for run_id in ("a", "b"):
        score_run_custom(RunDir.open(tmp_path, run_id), scorers=[scorer])
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    v = next(m for m in c.verdict.metrics if m.metric == "scorer/cites")
    assert v.verdict == "worse" and v.delta == pytest.approx(-1.0) and c.verdict.verdict == "worse"
    with pytest.raises(InputError, match="off its scale"):
        load_scorer(f"python:{tmp_path / 'my_scorers.py'}:length", scale=0.1).score({"answer": "x" * 90})


def test_a_bad_rubric_says_what_is_wrong(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\ncriteria = []\n', encoding="utf-8")
    with pytest.raises(InputError, match="criteria"):
        load_rubric(bad)
    bad.write_text('name = "Bad Name"\ncriteria = ["a"]\n', encoding="utf-8")
    with pytest.raises(InputError, match="lower-case"):
        load_rubric(bad)


def test_threshold_names_a_rubric_metric_and_is_judged_when_the_run_is_scored(tmp_path: Path, rubric_file: Path):
    from evalkit.gate.floors import parse_thresholds, threshold_check

    assert parse_thresholds(["rubric/helpfulness=4", "scorer/cites=0.9"]) == {"rubric/helpfulness": 4.0,
                                                                             "scorer/cites": 0.9}
    with pytest.raises(ValueError, match="unknown metric"):
        parse_thresholds(["rubric/Bad=1"])
    th = {"settings": {"thresholds": {"rubric/helpfulness": 4.0}}}
    make_run(tmp_path, "a", [rec(f"q{i:02d}", answer=GOOD) for i in range(10)], config=th)
    make_run(tmp_path, "b", [rec(f"q{i:02d}", answer=GOOD if i < 5 else BAD) for i in range(10)], config=th)
    _score(tmp_path, rubric_file, "a", "b")
    got = {r: orjson.loads((tmp_path / r / "metrics.json").read_bytes())["thresholds"] for r in ("a", "b")}
    assert got["a"]["passed"] and got["a"]["checked"][0] == {
        "metric": "rubric/helpfulness", "value": 5.0, "n": 10, "threshold": 4.0, "direction": "min", "passed": True}
    assert not got["b"]["passed"] and got["b"]["failures"] == ["rubric/helpfulness 2.5 is below the threshold 4 (n = 10)"]
    # a lower-is-better rubric is a ceiling; a threshold beyond its scale fails saying so
    agg = {"aggregate_metrics": {"custom_metrics": {"rubric/harm": {"mean": 1.0, "n": 3, "direction": "lower",
                                                                     "scale": 5.0}}}}
    assert threshold_check(agg, {"rubric/harm": 2.0})["passed"]
    assert not threshold_check(agg, {"rubric/harm": 0.5})["passed"]
    assert "off the metric's scale" in threshold_check(agg, {"rubric/harm": 7})["failures"][0]
    assert "not measured" in threshold_check(agg, {"scorer/other": 0.5})["failures"][0]


def test_a_later_rescore_keeps_the_custom_metrics(tmp_path: Path, rubric_file: Path):
    from evalkit.derive import RunFacts, rederive

    make_run(tmp_path, "a", [rec(f"q{i:02d}", answer=GOOD) for i in range(4)])
    _score(tmp_path, rubric_file, "a")
    run = RunDir.open(tmp_path, "a")
    cfg = run.read_config()
    rederive(run, RunFacts.stored(run, cfg, run.read_metrics() or {}), run.read_results(), config=cfg)
    block = orjson.loads((tmp_path / "a" / "metrics.json").read_bytes())["aggregate_metrics"][CUSTOM_METRICS]
    assert block["rubric/helpfulness"]["mean"] == 5.0 and block["rubric/helpfulness"]["n"] == 4


def test_evalkit_score_rubric_and_scorer_from_the_command_line(tmp_path: Path, rubric_file: Path, monkeypatch):
    from evalkit.cli.main import app as main_app

    (tmp_path / "checks.py").write_text("def cites(record):\n    return '[1]' in record['answer']\n", encoding="utf-8")
    (tmp_path / "evalkit.toml").write_text(
        f'[[rubrics]]\nfile = "{rubric_file.name}"\n\n[[scorers]]\nspec = "python:checks.py:cites"\nmargin = 0.2\n',
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "results", "a", [rec(f"q{i:02d}", answer=GOOD if i % 2 else BAD) for i in range(6)])
    out = CliRunner().invoke(main_app, ["score", "--run-id", "a", "--results-dir", "results", "--custom", "--json"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    block = json.loads(out.stdout.strip().splitlines()[-1])["custom_metrics"]
    assert block["rubric/helpfulness"]["mean"] == 2.5 and block["scorer/cites"]["mean"] == 0.5
    assert block["scorer/cites"]["margin"] == 0.2  # evalkit.toml's definition
    cfg = orjson.loads((tmp_path / "results" / "a" / "config.json").read_bytes())
    assert set(cfg["custom_metrics"]) == {"rubric/helpfulness", "scorer/cites"}
    # --rubric alone runs only that, not the default retrieval and abstention parts
    again = CliRunner().invoke(main_app, ["score", "--run-id", "a", "--results-dir", "results", "--rubric",
                                          str(rubric_file)], catch_exceptions=False)
    assert again.exit_code == 0 and "rubric/helpfulness: 2.500 on [0, 5] over 6 case(s)" in again.output
    bad = CliRunner().invoke(main_app, ["score", "--results-dir", "results", "--rubric", str(rubric_file)])
    assert bad.exit_code == 2


def test_an_llm_rubric_judge_is_cached_under_the_rubric_version(tmp_path: Path, rubric_file: Path, monkeypatch):
    import httpx
    import respx
    import tenacity

    from evalkit.judges import JudgeSettings, build_judge
    from evalkit.judges.rubric import score_records
    from evalkit.net.retry import RetryPolicy
    from tests.unit.judges.judge_helpers import OPENAI_MODEL, OPENAI_URL, openai_reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-000000000000000000000000")
    seen: list[dict] = []

    def reply(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        prompt = body["messages"][-1]["content"]
        score = 4.5 if "[1]" in prompt.split("Answer to grade:")[1] else 1.0
        return httpx.Response(200, json=openai_reply(json.dumps({"reasoning": "graded", "score": score})))

    def judge():
        return build_judge(JudgeSettings(provider="openai", model=OPENAI_MODEL, cache_path=tmp_path / "c.sqlite",
                                         retry_policy=RetryPolicy(attempts=2, wait=tenacity.wait_none())))

    records = [rec("q1", answer=GOOD), rec("q2", answer=BAD)]
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=reply)
        score_records(records, [load_rubric(rubric_file)], llm=judge())
        assert [r[CUSTOM_SCORES]["rubric/helpfulness"] for r in records] == [4.5, 1.0] and len(seen) == 2
        assert "The answer cites a note" in seen[0]["messages"][-1]["content"]  # the criteria are sent
        assert "Open Settings and set the port to 8080 [1]." in seen[0]["messages"][-1]["content"]  # and the examples
        score_records(records, [load_rubric(rubric_file)], llm=judge())
        assert len(seen) == 2  # the same rubric: every judgment from the cache
        rubric_file.write_text(RUBRIC.replace("a concrete step", "one concrete step"), encoding="utf-8")
        score_records(records, [load_rubric(rubric_file)], llm=judge())
        assert len(seen) == 4  # an edited rubric is a new version: asked again
        # a score off the rubric's scale is not a score
        router.post(OPENAI_URL).mock(return_value=httpx.Response(200, json=openai_reply('{"reasoning": "x", "score": 9}')))
        fresh = [rec("q3", answer="something else entirely")]
        score_records(fresh, [load_rubric(rubric_file)], llm=judge())
        assert fresh[0][CUSTOM_SCORES]["rubric/helpfulness"] is None
        assert fresh[0]["custom_errors"]["rubric/helpfulness"]["reason"] == "parse_failure"
        assert "off its scale" in fresh[0]["custom_errors"]["rubric/helpfulness"]["detail"]


def test_a_run_without_custom_metrics_derives_byte_for_byte_as_before(tmp_path: Path):
    from evalkit.derive import RunFacts, rederive

    make_run(tmp_path, "a", [rec(f"q{i:02d}", answer=GOOD) for i in range(4)])
    run = RunDir.open(tmp_path, "a")

    def derive() -> bytes:
        cfg = run.read_config()
        facts = RunFacts.stored(run, cfg, run.read_metrics() or {})
        facts.timestamp = "2026-01-01T00:00:00Z"
        rederive(run, facts, run.read_results(), config=cfg)
        return (tmp_path / "a" / "metrics.json").read_bytes()

    first = derive()
    assert b"custom_metrics" not in first and derive() == first


def test_the_documented_examples_load_and_score():
    root = Path(__file__).resolve().parents[2] / "docs" / "examples"
    rubric = load_rubric(root / "rubric_helpfulness.toml")
    assert rubric.metric.name == "rubric/helpfulness" and len(rubric.criteria) == 3 and len(rubric.examples) == 2
    for example in rubric.examples:  # the offline heuristic agrees with the file's own graded examples
        assert rubric.heuristic_score(example["answer"])[0] == example["score"]
    scorer = load_scorer(f"python:{root / 'scorers.py'}:cites_a_note")
    assert scorer.score(rec("q1", answer="See [1].")) == 1.0 and scorer.score(rec("q1", answer="")) is None


def test_scoring_custom_metrics_changes_the_config_hash_like_a_rejudge(tmp_path: Path, rubric_file: Path):
    from evalkit.store.runs import config_hash

    make_run(tmp_path, "a", [rec("q1", answer=GOOD)], config={"hashed": {"target": "t"}})
    before = orjson.loads((tmp_path / "a" / "config.json").read_bytes())["config_hash"]
    _score(tmp_path, rubric_file, "a")
    cfg = orjson.loads((tmp_path / "a" / "config.json").read_bytes())
    assert cfg["hashed"]["custom_metrics"] == cfg["custom_metrics"] and cfg["config_hash"] != before
    assert cfg["config_hash"] == config_hash(cfg["hashed"])


def test_a_rubric_scored_by_another_judge_is_not_paired():
    from evalkit.compare.custom import custom_members

    base = {"kind": "rubric", "direction": "higher", "scale": 5.0, "margin": 0.5, "gated": True, "version": "v1",
            "mean": 4.0, "n": 2}

    def metrics(judge):
        return {"aggregate_metrics": {CUSTOM_METRICS: {"rubric/h": {**base, "judge": judge}}}}

    def records():
        return [{"test_case_id": c, CUSTOM_SCORES: {"rubric/h": 4.0}} for c in ("q1", "q2")]

    members, not_compared, rows = custom_members(metrics("heuristic"), metrics("openai:gpt-4o-2024-08-06"), records,
                                                 records, ["q1", "q2"], {})
    assert members == [] and rows == [] and "judge 'heuristic' vs 'openai:gpt-4o-2024-08-06'" in not_compared[0]["reason"]
    members, not_compared, rows = custom_members(metrics("heuristic"), metrics("heuristic"), records, records,
                                                 ["q1", "q2"], {})
    assert [m.metric for m in members] == ["rubric/h"] and not not_compared and rows[0].change == "unchanged"
