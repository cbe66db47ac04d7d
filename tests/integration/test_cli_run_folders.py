"""run_eval and judge_answers on run folders the OS refuses, and on unsafe run ids: exit 2
with one line, never a traceback with exit 1 (the code CI reads as "regression")
(hardening issue, items 3 and 7)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app as judge_app
from tests.support import run_eval_cli, write_run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

BOT = textwrap.dedent(
    '''
    async def ask(request):
        chunk = {"chunk_id": "c1", "rel_path": "notes/a.md", "heading_path": "# A", "start_line": 1, "end_line": 2,
                 "score_vector": 0.9, "score_lexical": 0.5, "score_final": 0.8, "text": "alpha", "rank": 1}
        return {"answer": "alpha [1]", "references": [{k: chunk[k] for k in ("chunk_id", "rel_path", "heading_path")}],
                "abstained": False, "debug": {"retrieved_chunks": [chunk]}}
    '''
)


@pytest.fixture
def run_args(tmp_path: Path) -> list[str]:
    """run_eval flags for a one-case run over an in-process Python target (no sockets)."""
    (tmp_path / "bot.py").write_text(BOT)
    es = tmp_path / "es.jsonl"
    case = {"id": "q1", "question": "alpha?", "answerable": True,
            "gold_supports": [{"rel_path": "notes/a.md", "heading_path": "# A"}]}
    es.write_text(json.dumps(case) + "\n")
    return ["--eval-set", str(es), "--target", f"python:{tmp_path / 'bot.py'}:ask", "--retrieval-only"]


def _exit_2_in_one_line(res: Any) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: "), res.stderr
    assert "Traceback" not in res.output
    return lines[0]


# --------------------------------------------------------------------------- item 3


def test_results_dir_is_a_file(run_args: list[str], tmp_path: Path) -> None:
    # regression: issue item 3, NotADirectoryError traceback, exit 1
    (tmp_path / "results").write_text("x")
    line = _exit_2_in_one_line(run_eval_cli(*run_args, "--results-dir", str(tmp_path / "results"), "--run-id", "r"))
    assert line == (f"evalkit: {tmp_path}/results/r: cannot create the run folder: Not a directory "
                    f"({tmp_path}/results is a file, not a folder)")


def test_results_dir_under_a_file(run_args: list[str], tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    line = _exit_2_in_one_line(run_eval_cli(*run_args, "--results-dir", str(tmp_path / "f" / "results")))
    assert "cannot create the run folder: Not a directory" in line and f"{tmp_path}/f is a file" in line


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs")
def test_results_dir_the_os_refuses(run_args: list[str]) -> None:
    # A folder even root cannot write to: sysfs refuses mkdir (EPERM, or EROFS when read-only).
    line = _exit_2_in_one_line(run_eval_cli(*run_args, "--results-dir", "/sys/evalkit-test"))
    assert line.startswith("evalkit: /sys/evalkit-test") and ": cannot create the run folder: " in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_results_dir_unwritable(run_args: list[str], tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir(mode=0o555)
    try:
        line = _exit_2_in_one_line(run_eval_cli(*run_args, "--results-dir", str(results)))
    finally:
        results.chmod(0o755)
    assert "cannot create the run folder: Permission denied" in line


def test_run_id_of_300_characters(run_args: list[str], tmp_path: Path) -> None:
    # regression: issue item 3, OSError errno 36 (File name too long) traceback, exit 1
    line = _exit_2_in_one_line(run_eval_cli(*run_args, "--results-dir", str(tmp_path / "res"), "--run-id", "a" * 300))
    assert line.startswith("evalkit: --run-id: not a valid run id: 'aaaa")
    assert "(300 characters)" in line
    assert not (tmp_path / "res").exists()  # refused before anything was written


def test_name_too_long_from_the_os(run_args: list[str], tmp_path: Path) -> None:
    line = _exit_2_in_one_line(run_eval_cli(*run_args, "--results-dir", str(tmp_path / ("d" * 300))))
    assert line.endswith("cannot create the run folder: File name too long")


@pytest.mark.parametrize("where", ["file", "under-file"])
def test_judge_answers_results_dir_is_or_is_under_a_file(tmp_path: Path, where: str) -> None:
    (tmp_path / "f").write_text("x")
    results = tmp_path / "f" if where == "file" else tmp_path / "f" / "results"
    res = CliRunner().invoke(judge_app, ["--run-id", "r1", "--results-dir", str(results), "--quiet"])
    assert _exit_2_in_one_line(res) == f"evalkit: --run-id: no run 'r1' under {results}"


def _limit_file_size(max_bytes: int):
    def preexec() -> None:
        # Writes past max_bytes fail with EFBIG instead of killing the process (SIGXFSZ).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return preexec


def test_judge_answers_that_cannot_write_the_run(tmp_path: Path) -> None:
    # An OS failure while judge_answers rewrites the run (here EFBIG, which root gets too):
    # one line, exit 2, and the run as it was, without temp files.
    results = tmp_path / "results"
    run = results / "big"
    text = "The server listens on port 8080 by default. " * 40
    records = []
    for i in range(20):
        chunks = [{"chunk_id": f"c{i}-{r}", "rel_path": "n.md", "heading_path": "# H", "rank": r + 1, "text": text,
                   "text_truncated": False} for r in range(5)]
        records.append({
            "test_case_id": f"q{i}", "case_index": i, "question": "Which port?", "answer": "Port 8080 [1].",
            "case": {"id": f"q{i}", "question": "Which port?", "answerable": True, "expected_key_facts": ["port 8080"],
                     "gold_supports": [{"rel_path": "n.md", "heading_path": "# H"}]},
            "references": [{"chunk_id": f"c{i}-0", "rel_path": "n.md", "heading_path": "# H"}],
            "retrieved_chunks": chunks, "groundedness": None, "correctness": None,
            "abstention": {"abstained": False, "hallucinated": None, "method": "target"},
            "error": None, "judge_errors": [], "missing_fields": [],
        })
    write_run(results, "big", records, config={"run_id": "big", "settings": {"k": [5]}, "judge": {"provider": None}})
    (run / "metrics.json").write_text(json.dumps({"run_id": "big", "aggregate_metrics": {"k": 5}}))
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert len(before["results.jsonl"]) > 100_000

    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "judge_answers.py"), "--run-id", "big", "--results-dir", str(results),
         "--judge-provider", "heuristic", "--no-cache", "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=_limit_file_size(64_000),
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"evalkit: {run}: cannot update the run folder: File too large"]
    after = {p.name: p.read_bytes() for p in run.iterdir()}
    assert after.pop(".writer.lock") == b"" and after == before  # the writer lock is made, and let go


# --------------------------------------------------------------------------- item 7


@pytest.mark.parametrize(
    "flag, run_id",
    [
        pytest.param("--run-id", "[bold red]RUN", id="markup"),
        pytest.param("--run-id", "run\x1b[2J\x1b[31m", id="escape"),
        pytest.param("--run-id", "two\nlines", id="newline"),
        pytest.param("--run-id", "has space; rm -rf x", id="shell"),
        pytest.param("--resume", "[x]", id="resume"),
        pytest.param("--baseline", "base line", id="baseline"),
    ],
)
def test_unsafe_run_ids_are_refused(run_args: list[str], tmp_path: Path, flag: str, run_id: str) -> None:
    # regression: issue item 7, '[bold red]RUN' was printed as red markup while the folder
    # was named literally; an ESC byte went raw to the terminal, even with --quiet
    res = run_eval_cli(*run_args, "--results-dir", str(tmp_path / "res"), flag, run_id, "--quiet")
    line = _exit_2_in_one_line(res)
    assert line.startswith(f"evalkit: {flag}: not a valid run id: {run_id!r}")
    assert "\x1b" not in res.output
    assert not (tmp_path / "res").exists()


def test_judge_answers_refuses_an_unsafe_run_id(tmp_path: Path) -> None:
    res = CliRunner().invoke(judge_app, ["--run-id", "x\x1b]0;owned\x07", "--results-dir", str(tmp_path), "--quiet"])
    line = _exit_2_in_one_line(res)
    assert line.startswith("evalkit: --run-id: not a valid run id: ")
    assert "\x1b" not in res.output and "\x07" not in res.output


def test_resume_hint_is_shell_quoted() -> None:
    # regression: issue item 7, the hint pasted back ran `rm`
    import shlex

    from evalkit.run.result import RunInterrupted

    hint = RunInterrupted("my-run", Path("x"), "out dir; rm -rf x").resume_command
    assert shlex.split(hint) == ["python", "scripts/run_eval.py", "--resume", "my-run", "--results-dir", "out dir; rm -rf x"]
    assert RunInterrupted("r1", Path("x"), "results").resume_command == "python scripts/run_eval.py --resume r1"
