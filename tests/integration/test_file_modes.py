"""Issue 29 item 8: every file evalkit makes gets the user's umask (0644 under umask 022), never
mkstemp's 0600 nor the installation's modes; and a configured key, echoed by a target in base64,
percent-encoded or spaced out, is in no file evalkit writes and on no line it prints.

The main writers run in one folder under a umask (the CLI in-process, and the library for
writers without a one-shot command); then every file and folder in it is checked. A second
umask (027) shows the mode is the umask's, not a constant 0644.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from tests.support import loopback_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HINDSIGHT = ROOT / "tests" / "data" / "hindsight" / "assistant-baseline.v1.jsonl"

# One file of each writer (more are checked: every file under the folder).
EXPECTED = [
    "proj/evalkit.toml", "proj/eval_set.jsonl", "proj/.gitignore", "proj/sample_vault",  # evalkit init
    "proj/eval_sets.lock",  # evalkit lock
    "results/a/config.json", "results/a/results.jsonl", "results/a/metrics.json", "results/a/summary.md",
    "results/a/results.json", "results/a/report.html",  # evalkit run, evalkit report --run-id
    "compare.html", "trend.html", "baseline.json", "step_summary.md",  # report --compare/--trend, compare
    "trec/run.trec",  # evalkit export
    "results/a-redacted/results.jsonl",  # evalkit redact
    "imported.jsonl", "imported_vault/.evalkit-import.json",  # evalkit import
    "cand.jsonl",  # evalkit generate
    "cand.review.jsonl", "proj/eval_set.v2.jsonl",  # review of candidates: its log, the new version
    "relabeled.jsonl",  # a labeling session's write to another file
    "results/a/human_grades.jsonl", "results/a/judge_batch.lock",  # human grades, judge --batch's lock
    "cache/judge_cache.sqlite",  # the judge cache (SQLite applies the umask itself)
]


def _ok(*args: str) -> None:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, (args, res.output, res.exception)


def _library_writers(work: Path) -> None:
    """Writers that have no one-shot command (the labeler and the reviewer are interactive)."""
    from evalkit.authoring import labeling, review
    from evalkit.judges import grades
    from evalkit.judges.batch import _locked
    from evalkit.judges.cache import JudgeCache
    from evalkit.store.runs import RunDir

    session = review.ReviewSession(work / "cand.jsonl", work / "proj" / "eval_set.jsonl", results_dir=work / "results")
    first, second = session.pending()[:2]
    session.reject(first)
    session.accept(second)
    session.write()
    labeling.EvalSetFile(work / "proj" / "eval_set.jsonl").write(work / "relabeled.jsonl")
    run = RunDir.open(work / "results", "a")
    grades.append_grade(run, {"test_case_id": "sv-002", "groundedness": 4, "correctness": 5})
    with _locked(run.path):
        pass
    cache = JudgeCache(work / "cache" / "judge_cache.sqlite")
    cache.put("k", {"score": 1}, kind="groundedness", model="m", prompt_version="v1")
    cache.close()


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)],
                         ids=["022", "027"])
def test_every_file_evalkit_writes_gets_the_umask_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       umask: int, file_mode: int, dir_mode: int) -> None:
    # regression: copytree gave `evalkit init`'s sample notes the installation's modes (0644
    # under any umask; read-only from a read-only install). Earlier, metrics.json and TREC files
    # were 0600 (mkstemp's mode): tests/unit/test_store.py, test_atomic.py.
    work = tmp_path / "w"
    old = os.umask(umask)
    try:
        work.mkdir()
        monkeypatch.chdir(work)
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(work / "step_summary.md"))
        _ok("init", "proj")
        es, vault = "proj/eval_set.jsonl", "proj/sample_vault"
        for run_id in ("a", "b"):
            _ok("run", "--eval-set", es, "--vault", vault, "--retrieval-only", "--run-id", run_id, "--results-dir", "results")
        _ok("report", "--run-id", "a", "--results-dir", "results")
        _ok("report", "--compare", "a", "b", "--results-dir", "results", "-o", "compare.html")
        _ok("report", "--trend", "--results-dir", "results", "-o", "trend.html")
        _ok("compare", "a", "b", "--results-dir", "results", "--format", "markdown", "--save-baseline", "baseline.json")
        _ok("export", "--run-id", "a", "--results-dir", "results", "-o", "trec")
        _ok("redact", "--run-id", "a", "--results-dir", "results")
        _ok("lock", es)
        _ok("import", "--format", "hindsight", str(HINDSIGHT), "-o", "imported.jsonl", "--vault-out", "imported_vault")
        _ok("generate", "--vault", vault, "-o", "cand.jsonl", "--no-retrieval")
        _library_writers(work)
    finally:
        os.umask(old)
    missing = [name for name in EXPECTED if not os.path.lexists(work / name)]
    assert missing == []
    wrong = {}
    for p in [work, *work.rglob("*")]:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue  # results/latest: a link's own mode means nothing
        want = dir_mode if stat.S_ISDIR(st.st_mode) else file_mode
        if stat.S_IMODE(st.st_mode) != want:
            wrong[p.relative_to(work).as_posix()] = oct(stat.S_IMODE(st.st_mode))
    assert wrong == {}


# ---------------------------------------------------------------- a key echoed by the target

KEY = "p4ss/w0rd+with=odd:chars-Zq8vN3kP"  # no character HTML escapes: report.html shows it as is


def _forms() -> dict[str, str]:
    """The key in the form the target echoes it for each question (see
    tests/unit/test_file_safety.py for every form the scrubber knows)."""
    raw = KEY.encode()
    return {
        "base64": base64.b64encode(raw).decode(),
        "basic": base64.b64encode(b"evalkit:" + raw).decode(),  # a Basic header's credentials
        "url": urllib.parse.quote(KEY, safe=""),
        "spaced": " ".join(KEY),
        "grouped": "-".join(KEY[i : i + 4] for i in range(0, len(KEY), 4)),
    }


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        question = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["question"]
        body = f"refused, your credentials were: {_forms().get(question, '?')}".encode()
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_server() -> Iterator[str]:
    with loopback_server(_Echo) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def test_a_key_echoed_encoded_by_the_target_is_in_no_file_and_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       echo_server: str) -> None:
    # issue 29 item 8: the scrubber missed a key inside a longer base64 blob (a Basic header)
    # and one written in dash-separated groups. Each case's error detail (results.jsonl) quotes
    # the target's reply; summary.md, results.json and the run's report show it again.
    from evalkit.cli.report import app as report_app
    from evalkit.cli.run_eval import app as run_app

    monkeypatch.setenv("EVAL_API_KEY", KEY)
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps({"id": f"q-{name}", "question": name, "answerable": False}) + "\n" for name in _forms()))
    results = tmp_path / "results"
    res = CliRunner().invoke(run_app, ["--eval-set", str(es), "--api-url", echo_server, "--retrieval-only", "--retries", "0",
                                       "--no-probe", "--run-id", "r", "--results-dir", str(results)])
    records = [json.loads(line) for line in (results / "r" / "results.jsonl").read_text().splitlines()]
    assert [(r["error"] or {}).get("kind") for r in records] == ["http_error"] * len(_forms()), res.output
    assert all("refused, your credentials were: " in r["error"]["detail"] for r in records)
    report = CliRunner().invoke(report_app, ["--run-id", "r", "--results-dir", str(results)])
    assert report.exit_code == 0, report.output
    written = {p.relative_to(tmp_path).as_posix(): p.read_text(encoding="utf-8", errors="replace")
               for p in tmp_path.rglob("*") if p.is_file() and p != es}
    assert {"results/r/report.html", "results/r/summary.md", "results/r/results.json"} <= set(written)
    for where, text in [("run_eval's output", res.output), ("report's output", report.output), *written.items()]:
        for name, form in _forms().items():
            assert form[8:-8] not in text, (where, name)
        assert KEY[4:-4] not in text, where
