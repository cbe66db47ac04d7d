"""Issue 42: `evalkit run --rubric FILE --scorer python:... --judge-samples N`: a run judged by
the project's own metrics in one command, recorded in config.json, kept on --resume."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app as main_app
from evalkit.metrics.custom import CUSTOM_METRICS, CUSTOM_SCORES
from tests.unit.test_custom_metrics import RUBRIC

BOT = textwrap.dedent(
    """
    def ask(request):
        cid = request["question"].split()[0]
        chunk = {"chunk_id": cid, "rel_path": "a.md", "heading_path": "# A", "text": "Set the port to 8080.", "rank": 1}
        answer = "Open the settings and set the port to 8080 [1]." if cid in ("q1", "q2") else "It is somewhere."
        return {"answer": answer, "references": [], "abstained": False, "debug": {"retrieved_chunks": [chunk]}}
    """
)
SCORERS = textwrap.dedent(
    """
    def cites(record):
        return "[1]" in (record.get("answer") or "")
    """
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("EVALKIT_JUDGE_PROVIDER", "EVALKIT_JUDGE_MODEL", "EVALKIT_JUDGE_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    (tmp_path / "checks.py").write_text(SCORERS, encoding="utf-8")
    (tmp_path / "helpfulness.toml").write_text(RUBRIC, encoding="utf-8")
    cases = [{"id": f"q{i}", "question": f"q{i} which port?", "answerable": True, "expected_answer": "8080",
              "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]} for i in (1, 2, 3, 4)]
    (tmp_path / "es.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return tmp_path


def _run(*args: str) -> object:
    return CliRunner().invoke(main_app, [
        "run", "--eval-set", "es.jsonl", "--target", "python:bot.py:ask", "--no-probe", "--quiet", *args])


def _files(path: Path, run_id: str) -> tuple[dict, dict, list[dict]]:
    run = path / "results" / run_id
    return (json.loads((run / "config.json").read_text()), json.loads((run / "metrics.json").read_text()),
            [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()])


def test_a_run_is_scored_by_a_rubric_and_a_scorer_in_one_command(project: Path) -> None:
    out = _run("--run-id", "r", "--rubric", "helpfulness.toml", "--scorer", "python:checks.py:cites")
    assert out.exit_code == 0, out.output
    cfg, metrics, records = _files(project, "r")
    # by hand: the heuristic rubric gives 5 (a step and a citation) to q1, q2 and 0 to q3, q4; the scorer 1, 1, 0, 0
    assert [r[CUSTOM_SCORES] for r in records] == [
        {"rubric/helpfulness": 5.0, "scorer/cites": 1.0}, {"rubric/helpfulness": 5.0, "scorer/cites": 1.0},
        {"rubric/helpfulness": 0.0, "scorer/cites": 0.0}, {"rubric/helpfulness": 0.0, "scorer/cites": 0.0}]
    block = metrics["aggregate_metrics"][CUSTOM_METRICS]
    assert block["rubric/helpfulness"]["mean"] == 2.5 and block["scorer/cites"]["mean"] == 0.5
    assert block["rubric/helpfulness"]["judge"] == "heuristic" and block["rubric/helpfulness"]["n"] == 4
    # recorded like the built-in judge settings: the flags in settings, the definitions in the hash
    assert cfg["settings"]["rubric"] == ["helpfulness.toml"] and cfg["settings"]["scorer"] == ["python:checks.py:cites"]
    assert sorted(cfg[CUSTOM_METRICS]) == ["rubric/helpfulness", "scorer/cites"]
    assert cfg["hashed"][CUSTOM_METRICS] == cfg[CUSTOM_METRICS]
    plain = _run("--run-id", "p")
    assert plain.exit_code == 0, plain.output
    assert _files(project, "p")[0]["config_hash"] != cfg["config_hash"]
    # --threshold names the rubric as a built-in metric, judged in the same command
    low = _run("--run-id", "t", "--rubric", "helpfulness.toml", "--threshold", "rubric/helpfulness=3")
    assert low.exit_code == 1 and "rubric/helpfulness" in low.output


def test_the_terminal_summary_shows_the_custom_metrics(project: Path) -> None:
    out = CliRunner().invoke(main_app, ["run", "--eval-set", "es.jsonl", "--target", "python:bot.py:ask", "--no-probe",
                                        "--run-id", "r", "--rubric", "helpfulness.toml", "--scorer", "python:checks.py:cites"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "rubric/helpfulness (heuristic) │ 2.500 of 5 │ 4" in text and "scorer/cites │ 0.500 of 1 │ 4" in text


def test_a_resumed_run_keeps_its_rubric_and_refuses_a_changed_one(project: Path) -> None:
    out = _run("--run-id", "r", "--rubric", "helpfulness.toml", "--ids", "q1,q2")
    assert out.exit_code == 0, out.output
    # drop the last record, as a killed run leaves it, then resume without naming the rubric again
    results = project / "results" / "r" / "results.jsonl"
    results.write_text(results.read_text().splitlines(keepends=True)[0], encoding="utf-8")
    again = CliRunner().invoke(main_app, ["run", "--resume", "r", "--quiet"])
    assert again.exit_code == 0, again.output
    cfg, metrics, records = _files(project, "r")
    assert [r[CUSTOM_SCORES]["rubric/helpfulness"] for r in records] == [5.0, 5.0]
    assert metrics["aggregate_metrics"][CUSTOM_METRICS]["rubric/helpfulness"]["n"] == 2
    (project / "helpfulness.toml").write_text(RUBRIC.replace("a concrete step", "one concrete step"), encoding="utf-8")
    results.write_text(results.read_text().splitlines(keepends=True)[0], encoding="utf-8")
    changed = CliRunner().invoke(main_app, ["run", "--resume", "r", "--quiet"])
    assert changed.exit_code == 2 and "its own metrics differ" in changed.output


def test_a_scorer_that_raises_keeps_the_run_and_says_so(project: Path) -> None:
    (project / "checks.py").write_text(SCORERS + "\n\ndef broken(record):\n    return 1 / 0\n", encoding="utf-8")
    out = _run("--run-id", "r", "--scorer", "python:checks.py:broken")
    assert out.exit_code == 0 and "error: the run's own metrics were not scored" in out.output
    cfg, metrics, records = _files(project, "r")
    assert len(records) == 4 and all("custom_scores" not in r for r in records)  # answers kept, unscored
    assert [w["kind"] for w in metrics["warnings"]].count("custom_metrics_failed") == 1
    assert metrics["aggregate_metrics"][CUSTOM_METRICS]["scorer/broken"]["n"] == 0
    # scored later (the fixed scorer, another version), the warning goes
    fixed = CliRunner().invoke(main_app, ["score", "--run-id", "r", "--scorer", "python:checks.py:cites", "--quiet"])
    assert fixed.exit_code == 0, fixed.output
    assert "custom_metrics_failed" not in [w["kind"] for w in _files(project, "r")[1]["warnings"]]


def test_a_bad_rubric_stops_the_run_before_any_case(project: Path) -> None:
    (project / "bad.toml").write_text('name = "x"\n', encoding="utf-8")
    out = _run("--run-id", "r", "--rubric", "bad.toml")
    assert out.exit_code == 2 and "criteria" in out.output
    assert not (project / "results" / "r").exists()


def test_judge_samples_and_an_llm_rubric_on_run(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import respx

    from tests.unit.judges.judge_helpers import (
        CORRECT,
        GROUNDED,
        OPENAI_MODEL,
        OPENAI_URL,
        openai_reply,
    )

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-000000000000000000000000")
    kinds: list[str] = []
    seen: dict[str, int] = {}

    def reply(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        name = body["response_format"]["json_schema"]["name"]
        kinds.append(name)
        # the rubric judge is noisy: the first time it sees a prompt it says 3, the second time 5
        prompt = body["messages"][-1]["content"]
        seen[prompt] = seen.get(prompt, 0) + (name == "rubric_score")
        rubric = {"reasoning": "fine", "score": 3 if seen[prompt] % 2 else 5}
        data = {"groundedness_verdict": GROUNDED, "correctness_verdict": CORRECT, "rubric_score": rubric}[name]
        return httpx.Response(200, json=openai_reply(json.dumps(data)))

    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=reply)
        out = _run("--run-id", "r", "--judge-provider", "openai", "--judge-model", OPENAI_MODEL, "--judge-samples", "2",
                   "--rubric", "helpfulness.toml")
    assert out.exit_code == 0, out.output
    # 4 cases x (groundedness, correctness, the rubric) x 2 samples, each sample its own call
    assert kinds.count("groundedness_verdict") == 8 and kinds.count("correctness_verdict") == 8
    assert kinds.count("rubric_score") == 8
    cfg, metrics, records = _files(project, "r")
    assert cfg["judge"]["trials"] == 2 and cfg["settings"]["judge_trials"] == 2
    assert records[0]["groundedness"]["trials"]["scores"] == [5, 5]
    # each case's rubric score is the mean of its two samples, 3 and 5 in some order: 4
    assert all(sorted(r["custom_samples"]["rubric/helpfulness"]) == [3.0, 5.0] for r in records)
    assert [r[CUSTOM_SCORES]["rubric/helpfulness"] for r in records] == [4.0] * 4
    block = metrics["aggregate_metrics"][CUSTOM_METRICS]["rubric/helpfulness"]
    assert block["mean"] == 4.0 and block["judge"] == f"openai:{OPENAI_MODEL}"
    # every sample cached apart: evalkit score with the same samples asks nothing
    kinds.clear()
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        router.post(OPENAI_URL).mock(side_effect=reply)
        again = CliRunner().invoke(main_app, ["score", "--run-id", "r", "--rubric", "helpfulness.toml", "--judge-provider",
                                              "openai", "--judge-model", OPENAI_MODEL, "--judge-samples", "2", "--quiet"])
    assert again.exit_code == 0, again.output
    assert kinds == [] and [r[CUSTOM_SCORES]["rubric/helpfulness"] for r in _files(project, "r")[2]] == [4.0] * 4


def test_a_custom_metric_of_a_conversation_run_is_resampled_by_conversation(tmp_path: Path) -> None:
    # issue 42: a project's metric goes through compare's one pairing (compare.cases.paired_values)
    # with the conversation as the unit. A scorer that returns the case's recall_any@5 must get
    # the built-in recall_any@5's interval exactly: same differences, same clusters, same scale.
    from evalkit.compare import compare_runs
    from evalkit.judges.rubric import load_scorer
    from evalkit.rescore.custom import score_run_custom
    from evalkit.store.runs import RunDir
    from tests.unit.test_compare import make_run, rec

    (tmp_path / "hit.py").write_text(
        "def hit(record):\n    return record['retrieval_metrics']['at_k']['5']['recall_any']\n", encoding="utf-8")
    # six conversations of 1-4 turns; run b loses or gains hits on whole conversations mostly
    turns = {"c1": 4, "c2": 3, "c3": 2, "c4": 1, "c5": 3, "c6": 2, "c7": 4, "c8": 2}
    hits_a = {"c1": [1, 1, 1, 0], "c2": [1, 0, 1], "c3": [1, 1], "c4": [0], "c5": [1, 1, 1], "c6": [0, 1],
              "c7": [1, 1, 0, 1], "c8": [1, 1]}
    hits_b = {"c1": [1, 1, 1, 1], "c2": [0, 0, 0], "c3": [1, 1], "c4": [1], "c5": [1, 1, 1], "c6": [1, 1],
              "c7": [1, 1, 1, 1], "c8": [0, 1]}

    def records(hits: dict[str, list[int]]) -> list[dict]:
        out = []
        for conv, n in turns.items():
            for t in range(1, n + 1):
                r = rec(f"{conv}#{t}", rank=1 if hits[conv][t - 1] else None)
                r["case"]["conversation"] = {"id": conv, "turn": t, "turns": n}
                out.append(r)
        return out

    make_run(tmp_path, "a", records(hits_a))
    make_run(tmp_path, "b", records(hits_b))
    scorer = load_scorer(f"python:{tmp_path / 'hit.py'}:hit")
    for run_id in ("a", "b"):
        score_run_custom(RunDir.open(tmp_path, run_id), scorers=[scorer])
    comparison = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    assert comparison.stats.unit == "conversation"
    by_name = {(m.metric if m.k is None else f"{m.metric}@{m.k}"): m for m in comparison.verdict.metrics}
    built_in, custom = by_name["recall_any@5"], by_name["scorer/hit"]
    assert custom.delta == pytest.approx(built_in.delta)
    assert custom.ci == pytest.approx(built_in.ci) and custom.sd == pytest.approx(built_in.sd)
    assert custom.cases_per_conversation == pytest.approx(built_in.cases_per_conversation) == 21 / 8


def test_custom_metrics_are_in_the_html_run_report_and_compare_page(tmp_path: Path) -> None:
    import re

    from evalkit.judges.rubric import load_rubric
    from evalkit.report.html.compare import write_compare_report
    from evalkit.report.html.run import render_run_report
    from evalkit.rescore.custom import score_run_custom
    from evalkit.store.runs import RunDir
    from tests.unit.test_compare import make_run, rec

    (tmp_path / "helpfulness.toml").write_text(RUBRIC, encoding="utf-8")
    good, bad = "Open the settings and set the port to 8080 [1].", "It is somewhere."
    make_run(tmp_path, "a", [rec(f"q{i}", answer=bad if i % 2 else good) for i in range(6)])
    make_run(tmp_path, "b", [rec(f"q{i}", answer=good) for i in range(6)])
    for run_id in ("a", "b"):
        score_run_custom(RunDir.open(tmp_path, run_id), [load_rubric(tmp_path / "helpfulness.toml")])
    page = render_run_report(RunDir.open(tmp_path, "a"))
    headline = page[page.index('id="headline-table"'):]
    headline = headline[:headline.index("</table>")]
    # its row beside the built-in ones, its mean on its own scale: by hand 3 of 6 answers at 5 -> 2.5
    assert "rubric/helpfulness (heuristic)" in headline and re.search(r"2\.50?\b", headline)
    out = write_compare_report("a", "b", results_dir=tmp_path, output=tmp_path / "c.html", resamples=200)
    html = out.read_text(encoding="utf-8")
    assert html.count("rubric/helpfulness") >= 2  # in the merge verdict's table and the deltas


def test_score_takes_judge_samples_beside_a_rubric_with_another_part(project: Path) -> None:
    out = _run("--run-id", "r")
    assert out.exit_code == 0, out.output
    # the rubric judge reads --judge-samples: not refused as a flag of --answers only
    ok = CliRunner().invoke(main_app, ["score", "--run-id", "r", "--retrieval", "--rubric", "helpfulness.toml",
                                       "--judge-samples", "2", "--quiet"])
    assert ok.exit_code == 0, ok.output
    refused = CliRunner().invoke(main_app, ["score", "--run-id", "r", "--retrieval", "--judge-samples", "2"])
    assert refused.exit_code == 2 and "--judge-trials" in refused.output
