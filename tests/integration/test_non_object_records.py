"""A run-folder file that is valid JSON but not an object (issue 38 item 7).

A results.jsonl line `42`, `[]`, `"x"` or `null`, or a config.json / metrics.json whose top
level is one, made compare_runs, report, judge_answers, export and redact exit 70 with an
AttributeError. The one reader (RunDir) now says it: exit 2, one line naming the file, the
line and "not a JSON object".
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli.compare_runs import app as compare_app
from evalkit.cli.export import app as export_app
from evalkit.cli.judge_answers import app as judge_app
from evalkit.cli.redact import app as redact_app
from evalkit.cli.report import app as report_app
from evalkit.cli.score_retrieval import app as score_app
from tests.support import make_case, run_eval_cli, write_eval_set

pytestmark = pytest.mark.integration

BOT = textwrap.dedent(
    '''
    def ask(request):
        chunk = {"chunk_id": "c1", "rel_path": "a.md", "heading_path": "# A", "text": "alpha", "rank": 1}
        return {"answer": "alpha", "references": [], "abstained": False, "debug": {"retrieved_chunks": [chunk]}}
    '''
)

# Each command that reads a run's records, and its words for runs `a` (the damaged one) and `b`.
COMMANDS = {
    "compare_runs": (compare_app, ["--run-id-1", "a", "--run-id-2", "b"]),
    "report": (report_app, ["--run-id", "a"]),
    "judge_answers": (judge_app, ["--run-id", "a"]),
    "export": (export_app, ["--run-id", "a"]),
    "redact": (redact_app, ["--run-id", "a"]),
    "score_retrieval": (score_app, ["--run-id", "a"]),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two finished three-case runs, `a` and `b`, from an in-process Python target."""
    root = tmp_path_factory.mktemp("runs")
    (root / "bot.py").write_text(BOT)
    cases = [make_case(f"q{i}", gold_supports=[{"rel_path": "a.md", "heading_path": "# A"}]) for i in range(3)]
    es = write_eval_set(root / "es.jsonl", cases)
    for run_id in ("a", "b"):
        res = run_eval_cli(eval_set=es, target=f"python:{root / 'bot.py'}:ask", retrieval_only=True,
                           results_dir=root / "results", run_id=run_id)
        assert res.exit_code == 0, res.output
    return root / "results"


def _one_line_exit_2(app: Any, args: list[str], results: Path) -> str:
    res = CliRunner().invoke(app, [*args, "--results-dir", str(results)])
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: "), res.stderr
    return lines[0]


def _copy(pristine: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(pristine, tmp_path / "results", symlinks=True)
    return tmp_path / "results"


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("line", ["42", "[]", '"x"', "null"])
def test_a_results_line_that_is_not_an_object(pristine: Path, tmp_path: Path, command: str, line: str) -> None:
    results = _copy(pristine, tmp_path)
    path = results / "a" / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    lines[1] = line.encode() + b"\n"
    path.write_bytes(b"".join(lines))
    app, args = COMMANDS[command]
    said = _one_line_exit_2(app, args, results)
    assert said.startswith(f"evalkit: {path}:2: corrupt record: not a JSON object ("), said


@pytest.mark.parametrize("name", ["config.json", "metrics.json"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_run_file_whose_top_level_is_not_an_object(pristine: Path, tmp_path: Path, command: str, name: str) -> None:
    if (command, name) == ("export", "metrics.json"):
        pytest.skip("export reads no metrics.json: it writes TREC files from the records")
    results = _copy(pristine, tmp_path)
    path = results / "a" / name
    path.write_text(json.dumps([1, 2]) + "\n")
    app, args = COMMANDS[command]
    said = _one_line_exit_2(app, args, results)
    assert said == f"evalkit: {path}: not a JSON object (an array): evalkit writes an object here", said
