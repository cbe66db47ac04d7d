"""A damaged judge cache through the real scripts (issue 29 item 2): judge_answers.py and
run_eval.py with an LLM judge on a loopback socket exit 0, print the one warning line on
stderr and make the judgments again; a folder at the cache path exits 2 with one line."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.judges.cache import JudgeCache
# The hand-built run folder and the OpenAI-compatible judge server of the judge_answers tests.
from tests.integration.test_judge_answers_cli import RUN_ID, _FakeJudgeServer, judge_server, run_dir  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"
JUDGE = ("--judge-model", "local@build-test")


def _script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _random_cache(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(random.Random(29).randbytes(64 * 1024))
    return path


def _assert_one_warning(stderr: str, cache: Path, shown: Path) -> None:
    """stderr says, in one line, that `cache` (written as `shown`) was damaged and where it went."""
    (line,) = [ln for ln in stderr.splitlines() if "judge cache" in ln]
    (aside,) = cache.parent.glob(f"{cache.name}.corrupt-*")
    assert line == (
        f"evalkit: warning: the judge cache {shown} was damaged (file is not a database); it was moved to "
        f"{shown.parent / aside.name} and a new cache started: its judgments will be made again (and paid for) "
        "as they are needed"
    )


def test_judge_answers_on_a_random_bytes_cache(run_dir: Path, judge_server: str, tmp_path: Path) -> None:  # noqa: F811
    cache = _random_cache(tmp_path / "cache" / "judge_cache.sqlite")
    args = ("--run-id", RUN_ID, "--results-dir", str(run_dir), *JUDGE, "--judge-base-url", judge_server,
            "--cache-path", str(cache), "--allow-truncated-context", "--quiet", "--json")
    res = _script("judge_answers.py", *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    _assert_one_warning(res.stderr, cache, cache)
    stats = json.loads(res.stdout.strip().splitlines()[-1])["judge_stats"]
    # by hand, as in test_judge_answers_cli: q1 two judgments, q2 abstention + two, q3 abstention
    assert len(_FakeJudgeServer.calls) == 6 and stats["cache_misses"] == 6

    _FakeJudgeServer.calls = []
    again = _script("judge_answers.py", *args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "judge cache" not in again.stderr and _FakeJudgeServer.calls == []  # the new cache kept them


def test_judge_answers_with_a_folder_at_the_cache_path_exits_2(run_dir: Path, judge_server: str, tmp_path: Path) -> None:  # noqa: F811
    cache = tmp_path / "judge_cache.sqlite"
    cache.mkdir()
    res = _script("judge_answers.py", "--run-id", RUN_ID, "--results-dir", str(run_dir), *JUDGE, "--judge-base-url",
                  judge_server, "--cache-path", str(cache), "--allow-truncated-context", "--quiet", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == f"evalkit: {cache}: the judge cache is a folder, not a file; move it away, or use --no-cache\n"
    assert _FakeJudgeServer.calls == []


@pytest.mark.skipif(not (SAMPLE_VAULT.is_dir() and MAIN_SET.is_file()), reason="sample_vault/ not there yet")
def test_run_eval_with_a_judge_on_a_random_bytes_cache(judge_server: str, tmp_path: Path) -> None:  # noqa: F811
    # run_eval has no --cache-path: the cache is cache/judge_cache.sqlite under the working folder.
    shown = Path("cache") / "judge_cache.sqlite"
    cache = _random_cache(tmp_path / shown)
    eval_set = tmp_path / "eval_set.jsonl"
    eval_set.write_bytes(MAIN_SET.read_bytes())
    res = _script("run_eval.py", "--vault", str(SAMPLE_VAULT), "--eval-set", str(eval_set), "--limit", "4",
                  "--results-dir", str(tmp_path / "results"), *JUDGE, "--judge-base-url", judge_server, "--json",
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    _assert_one_warning(res.stderr, cache, shown)
    judge = json.loads(res.stdout.strip().splitlines()[-1])["aggregate_metrics"]["judge"]
    assert judge["n_judge_errors"] == 0
    # every judgment was asked for again, and the new cache holds each one
    new = JudgeCache(cache)
    try:
        assert new.count() == len(_FakeJudgeServer.calls) > 0
    finally:
        new.close()
