"""Killing the real script mid-run (SIGKILL or Ctrl-C) and resuming: every case exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evalkit.store.runs import RunDir
from tests.support import make_case, run_eval_api, start_run_eval_script, write_eval_set

pytestmark = pytest.mark.integration

N_CASES = 16
GOLD = [{"rel_path": "notes/alpha.md", "heading_path": "# Alpha"}]


# The last cases hang until the test lets them go (or the server stops): however late a loaded
# machine delivers the kill, the first run cannot have finished before it.
HELD = {f"slow question {i}": {"behaviour": "hang", "hang_s": 120} for i in range(10, N_CASES)}


def _release(srv) -> None:
    for question in HELD:
        del srv.behaviours[question]


def _eval_set(path: Path) -> Path:
    cases = [make_case(f"c{i:02d}", question=f"slow question {i}", gold_supports=GOLD) for i in range(N_CASES)]
    return write_eval_set(path, cases)


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {n} lines")


def _ids(run: RunDir) -> list[str]:
    return [r["test_case_id"] for r in run.iter_results()]


def _settings(es: Path, results: Path, url: str, run_id: str) -> dict:
    return dict(eval_set=es, api_url=url, retrieval_only=True, concurrency=2, results_dir=results, run_id=run_id,
                quiet=True, retries=0)


def test_sigkill_mid_run_then_resume_has_every_case_once(fault_server, tmp_path):  # noqa: F811
    srv = fault_server({"*": {"behaviour": "ok", "delay_ms": 120}, **HELD})
    es, results = _eval_set(tmp_path / "es.jsonl"), tmp_path / "results"
    proc = start_run_eval_script(**_settings(es, results, srv.base_url, "killed"))
    run_path = results / "killed" / "results.jsonl"
    try:
        _wait_for_lines(run_path, 5, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    run = RunDir.open(results, "killed")
    before = _ids(run)
    assert 5 <= len(before) < N_CASES
    assert run.metrics_path.exists() is False  # never reached the end

    _release(srv)
    # Resume from the stored config alone: the API URL, K and mode come from config.json.
    result = run_eval_api(resume="killed", results_dir=results)
    after = _ids(run)
    assert after == [f"c{i:02d}" for i in range(N_CASES)]  # once each, in eval-set order
    assert result.skipped == len(before)
    # Cases finished before the kill were not asked again (the first run's probe asked c00
    # once more before its first case; the resume probes with a pending case).
    for cid in before:
        assert srv.hits[f"slow question {int(cid[1:])}"] == (2 if cid == "c00" else 1), cid
    assert json.loads(run.config_path.read_text())["sessions"][-1]["resumed"] is True
    assert run.metrics_path.exists()


def test_ctrl_c_stops_cleanly_with_a_resume_hint(fault_server, tmp_path):  # noqa: F811
    srv = fault_server({"*": {"behaviour": "ok", "delay_ms": 120}, **HELD})
    es, results = _eval_set(tmp_path / "es.jsonl"), tmp_path / "results"
    proc = start_run_eval_script(**_settings(es, results, srv.base_url, "stopped"))
    try:
        _wait_for_lines(results / "stopped" / "results.jsonl", 3, proc)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert f"interrupted; resume with: python scripts/run_eval.py --resume stopped --results-dir {results}" in stderr
    assert "Traceback" not in stderr
    raw = (results / "stopped" / "results.jsonl").read_bytes()
    assert raw.endswith(b"\n")  # every line written is whole
    n_before = raw.count(b"\n")
    assert n_before < N_CASES

    _release(srv)
    proc = start_run_eval_script(resume="stopped", results_dir=results, quiet=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().endswith("stopped")
    assert _ids(RunDir.open(results, "stopped")) == [f"c{i:02d}" for i in range(N_CASES)]
