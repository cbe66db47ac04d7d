"""A `cite_newer` case without dates is a validation warning naming the case and what to
add (issue 30 item 5, "Rules that are never checked").

regression: issue 30 item 5 — seed 000's own test_005 (cite_newer, no `date` on either
support) ran with `recency.pass: null` and no word said.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.validate import app as validate_app
from evalkit.evalset.anchorcheck import validate_eval_set
from evalkit.evalset.load import load_eval_set

# Seed 000's example line test_005, verbatim ("Test Case JSONL Format").
SEED_TEST_005 = (
    '{"id": "test_005", "question": "Which note is more recent about the deployment process?", "answerable": true, '
    '"expected_key_facts": [], "gold_supports": [{"rel_path": "docs/deployment-v2.md", "heading_path": "# Overview", '
    '"snippets": []}, {"rel_path": "docs/deployment-v1.md", "heading_path": "# Overview", "snippets": []}], '
    '"recency_conflict_rule": "cite_newer", "tags": ["work"], "vaults": ["personal"], "folders": ["docs"], '
    '"category": "recency/conflict", "difficulty": "medium"}'
)
FACTUAL = {"id": "f1", "question": "What port?", "answerable": True,
           "gold_supports": [{"rel_path": "docs/config.md", "heading_path": "# Setup"}]}


def _set(tmp_path: Path, *lines: str | dict) -> Path:
    path = tmp_path / "eval_set.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _with_dates(*dates: str | None) -> str:
    case = json.loads(SEED_TEST_005)
    for support, d in zip(case["gold_supports"], dates, strict=True):
        if d is not None:
            support["date"] = d
    return json.dumps(case)


def test_seed_test_005_without_dates_is_a_warning_naming_the_case_and_the_fix(tmp_path: Path) -> None:
    path = _set(tmp_path, FACTUAL, SEED_TEST_005)
    result = validate_eval_set([path], None, extra_categories=())
    assert result.problems == []  # a warning: the set still runs
    assert [str(w) for w in result.warnings] == [
        f"{path}:2: gold_supports: warning: case 'test_005': recency_conflict_rule cite_newer needs a date on each "
        "gold support and none has one, so recency.pass stays null (the rule is never checked); "
        'add "date": "YYYY-MM-DD" (ISO 8601, the date the note was written or last updated) to '
        "gold_supports[0] and gold_supports[1]"
    ]
    # the loaded set carries it, by case index, for run_eval's pre-run warning
    assert [(i, w.line) for i, w in load_eval_set([path], extra_categories=()).warnings] == [(1, 2)]


@pytest.mark.parametrize(
    ("dates", "expected"),
    [
        pytest.param(("2024-03-01", "2023-01-10"), None, id="both-dated"),
        pytest.param(
            ("2024-03-01", None),
            "gold_supports[1] has no date, so cite_newer counts it as neither newer nor older; "
            'add "date": "YYYY-MM-DD" (ISO 8601, the date the note was written or last updated) to it',
            id="one-undated",
        ),
        pytest.param(
            # the same instant written two ways: the rule compares them as equal
            ("2024-03-01", "2024-03-01T00:00:00"),
            "every gold support has the date 2024-03-01, so none is older and citing any of them passes; "
            "give each note its own date",
            id="same-date",
        ),
    ],
)
def test_partly_dated_and_same_dated_cite_newer(tmp_path: Path, dates: tuple, expected: str | None) -> None:
    path = _set(tmp_path, _with_dates(*dates))
    warnings = [str(w) for w in validate_eval_set([path], None, extra_categories=()).warnings]
    prefix = f"{path}:1: gold_supports: warning: case 'test_005': recency_conflict_rule cite_newer: "
    assert warnings == ([] if expected is None else [prefix + expected])


def test_other_rules_need_no_dates(tmp_path: Path) -> None:
    cases = [json.loads(SEED_TEST_005) for _ in range(2)]
    for i, (case, rule) in enumerate(zip(cases, ("cite_both", "acknowledge_both"), strict=True)):
        case.update(id=f"c{i}", recency_conflict_rule=rule)
    path = _set(tmp_path, *cases)
    assert validate_eval_set([path], None, extra_categories=()).warnings == []


def test_validate_cli_prints_the_warning_and_exits_0(tmp_path: Path) -> None:
    path = _set(tmp_path, SEED_TEST_005)
    out = CliRunner().invoke(validate_app, ["--eval-set", str(path)])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{path}:1: gold_supports: warning: case 'test_005': recency_conflict_rule cite_newer")
    assert "evalkit: 1 warning: rules that scoring cannot check as written" in lines
    assert lines[-1] == "evalkit: 1 case OK"


BOT = textwrap.dedent(
    """
    def ask(request):
        chunks = [{"chunk_id": "c1", "rel_path": "docs/deployment-v2.md", "heading_path": "# Overview",
                   "text": "Deploy with v2.", "rank": 1}]
        return {"answer": "v2 [1]", "references": [{"rel_path": "docs/deployment-v2.md", "heading_path": "# Overview"}],
                "debug": {"retrieved_chunks": chunks}}
    """
)


def test_run_eval_warns_before_the_run_and_in_metrics_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    path = _set(tmp_path, FACTUAL, SEED_TEST_005)
    notes: list[tuple[str, list[str]]] = []

    class Progress:
        def note(self, message: str, details: list[str]) -> None:
            notes.append((message, details))

        def start(self, **kw: object) -> None: ...
        def advance(self, *a: object, **kw: object) -> None: ...
        def close(self) -> None: ...

    result = run_eval(
        eval_set=str(path), target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True,
        results_dir=str(tmp_path / "results"), progress=Progress(), no_probe=True,
    )
    said = [n for n in notes if "cannot check" in n[0]]
    assert len(said) == 1 and "test_005" in said[0][0]
    assert "add \"date\"" in said[0][1][0]
    warning = next(w for w in result.metrics["warnings"] if w["kind"] == "unchecked_rules")
    assert (warning["n"], warning["of"], warning["ids"]) == (1, 2, ["test_005"])
    record = [json.loads(x) for x in (result.run_dir / "results.jsonl").read_text().splitlines()][1]
    assert record["retrieval_metrics"]["recency"]["pass"] is None  # what the warning is about


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        pytest.param({"retrieval_only": True}, "--retrieval-only", id="retrieval-only"),
        pytest.param({"evaluators": ["retrieval,correctness"]}, "--evaluators without conflict", id="no-conflict-evaluator"),
    ],
)
def test_acknowledge_both_without_the_conflict_judge_is_warned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              kw: dict, why: str) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    case = json.loads(_with_dates("2024-03-01", "2022-05-10"))
    case.update(id="ack", recency_conflict_rule="acknowledge_both")
    path = _set(tmp_path, FACTUAL, case)
    result = run_eval(eval_set=str(path), target=f"python:{tmp_path / 'bot.py'}:ask",
                      results_dir=str(tmp_path / "results"), no_probe=True, **kw)
    warning = next(w for w in result.metrics["warnings"] if w["kind"] == "unchecked_rules")
    assert warning["ids"] == ["ack"]
    assert warning["problems"] == [
        f"{path}:2: recency_conflict_rule: warning: case 'ack': recency_conflict_rule acknowledge_both needs the conflict "
        f"judge, which this run does not run ({why}), so recency.pass stays null; judge the run with judge_answers.py "
        "to check it"
    ]
    # with the judge (the default), nothing to warn about
    judged = run_eval(eval_set=str(path), target=f"python:{tmp_path / 'bot.py'}:ask",
                      results_dir=str(tmp_path / "results"), no_probe=True)
    assert not [w for w in judged.metrics["warnings"] if w["kind"] == "unchecked_rules"]
    recency = json.loads((judged.run_dir / "results.jsonl").read_text().splitlines()[1])["retrieval_metrics"]["recency"]
    assert recency["acknowledged"] is False and recency["pass"] is False  # one side retrieved and told
