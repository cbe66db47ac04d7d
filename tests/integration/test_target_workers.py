"""A python: target whose worker dies, raises what cannot travel back, or never returns (issue 38
items 1 and 2).

With `--target-processes`, concurrent.futures' process pool broke as a whole when one worker
died (os._exit, a segfault, an exception that pickles but does not unpickle): every later case
was recorded as BrokenProcessPool, and `--resume --retry-errors` failed the same way. A call
that never returned held a worker for the rest of the run (48 of 59 cases timed out instead of
6), and in threads or processes it kept run_eval from exiting once every file was written.

Each bot below fails on cases c3 and c7 only; every other case must be answered.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from evalkit.store.runlog import Rec
from evalkit.targets.workers import DaemonThreads, exit_reason
from tests.support import make_case, read_records, run_eval_api, run_eval_script, write_eval_set

BAD = ("c3", "c7")

BOT = '''
import os, signal, threading

BAD = {"question c3?", "question c7?"}


class TwoArgs(Exception):
    """Pickles, but unpickling calls TwoArgs("x/y") and fails: common in libraries."""

    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def _answer(request):
    return {"answer": "ok", "abstained": False,
            "debug": {"retrieved_chunks": [{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}


def exits(request):
    if request["question"] in BAD:
        os._exit(3)
    return _answer(request)


def segfaults(request):
    if request["question"] in BAD:
        os.kill(os.getpid(), signal.SIGSEGV)
    return _answer(request)


def unpicklable(request):
    if request["question"] in BAD:
        raise TwoArgs("x", "y")
    return _answer(request)


def unsendable(request):
    if request["question"] in BAD:
        return {"answer": lambda: "a function does not pickle"}
    return _answer(request)


def hangs(request):
    if request["question"] in BAD:
        threading.Event().wait()  # forever
    return _answer(request)
'''

# The same functions, fixed: what the user runs `--resume --retry-errors` with.
FIXED_BOT = '''
def _answer(request):
    return {"answer": "ok", "abstained": False,
            "debug": {"retrieved_chunks": [{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}

exits = segfaults = unpicklable = unsendable = hangs = _answer
'''


def _setup(tmp_path: Path, n: int = 10) -> tuple[Path, Path]:
    bot = tmp_path / "bot.py"
    bot.write_text(BOT)
    return bot, write_eval_set(tmp_path / "es.jsonl", [make_case(i) for i in range(n)])


def _errors(run_dir: Path) -> dict[str, dict]:
    return {r[Rec.CASE_ID]: r["error"] for r in read_records(run_dir) if r.get("error")}


@pytest.mark.parametrize(("function", "kind", "reason"), [
    pytest.param("exits", "exception", "the target's worker process died (exit code 3)", id="os._exit"),
    pytest.param("segfaults", "exception", "the target's worker process died (exit code -11 / SIGSEGV)", id="segfault"),
    pytest.param("unpicklable", "exception", "raised TwoArgs: x/y", id="unpicklable-exception"),
    pytest.param("unsendable", "invalid_response", "cannot be sent back from the worker process", id="unpicklable-answer"),
])
def test_a_dying_worker_fails_only_its_case_and_resume_finishes_the_run(tmp_path: Path, function: str, kind: str,
                                                                       reason: str) -> None:
    bot, es = _setup(tmp_path)
    results = tmp_path / "r"
    result = run_eval_api(eval_set=es, target=f"python:{bot}:{function}", target_processes=2, concurrency=3,
                          results_dir=results, retrieval_only=True, no_probe=True, quiet=True, max_error_rate=0.5)
    errors = _errors(result.run_dir)
    assert sorted(errors) == list(BAD)  # not every case after the first death (BrokenProcessPool)
    assert {e["kind"] for e in errors.values()} == {kind}
    assert all(reason in e["detail"] for e in errors.values()), errors
    assert len(read_records(result.run_dir)) == 10

    bot.write_text(FIXED_BOT)  # the user fixes the target, then finishes the run
    resumed = run_eval_api(resume=result.run_id, retry_errors=True, results_dir=results, quiet=True)
    records = read_records(resumed.run_dir)
    assert _errors(resumed.run_dir) == {}
    assert sorted(r[Rec.CASE_ID] for r in records) == sorted(f"c{i}" for i in range(10))


def test_a_hung_worker_process_times_out_alone_and_is_replaced(tmp_path: Path) -> None:
    # two workers, both hung once: with the old pool every case after them waited and timed out
    bot, es = _setup(tmp_path, n=12)
    result = run_eval_api(eval_set=es, target=f"python:{bot}:hangs", target_processes=2, concurrency=2, timeout=3,
                          results_dir=tmp_path / "r", retrieval_only=True, no_probe=True, quiet=True,
                          max_error_rate=0.5)
    errors = _errors(result.run_dir)
    assert sorted(errors) == list(BAD)
    assert {e["kind"] for e in errors.values()} == {"timeout"}
    assert all("worker process was stopped and replaced" in e["detail"] for e in errors.values())


@pytest.mark.parametrize("processes", [None, 2], ids=["threads", "processes"])
def test_run_eval_exits_once_its_files_are_written_whatever_the_target_hangs_on(tmp_path: Path,
                                                                                processes: int | None) -> None:
    # Before: every file was written, then the process waited (concurrent.futures joins its
    # threads at exit) until killed. The timeout below only bounds the wait for a stuck child.
    bot, es = _setup(tmp_path, n=8)
    results = tmp_path / "r"
    done = run_eval_script("--timeout", "3", eval_set=es, target=f"python:{bot}:hangs", target_processes=processes,
                           concurrency=4, results_dir=results, run_id="hung", retrieval_only=True, no_probe=True,
                           quiet=True, max_error_rate=0.5, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    run = results / "hung"
    assert {"config.json", "results.jsonl", "metrics.json"} <= {p.name for p in run.iterdir()}
    errors = _errors(run)
    assert sorted(errors) == list(BAD) and {e["kind"] for e in errors.values()} == {"timeout"}
    assert json.loads((run / "metrics.json").read_text())  # derived whole


def test_a_thread_given_up_on_no_longer_holds_a_place() -> None:
    # one thread at most: a call stuck in it is abandoned (at its timeout), and the next call
    # gets a new thread instead of waiting behind the stuck one
    threads = DaemonThreads(1, "test")
    release = threading.Event()
    stuck = threads.submit(release.wait)
    threads.abandon(stuck)
    assert threads.submit(lambda: "answered").result(timeout=60) == "answered"
    release.set()
    assert stuck.result(timeout=60) is True
    threads.shutdown()
    # a call abandoned before it started never runs
    queued = DaemonThreads(1, "test")
    gate = threading.Event()
    first = queued.submit(gate.wait)
    never = queued.submit(lambda: pytest.fail("an abandoned queued call ran"))
    queued.abandon(never)
    gate.set()
    assert first.result(timeout=60) is True and never.cancelled()
    queued.shutdown()


def test_exit_reason_names_the_signal() -> None:
    assert exit_reason(3) == "exit code 3"
    assert exit_reason(-11) == "exit code -11 / SIGSEGV"
    assert exit_reason(-9) == "exit code -9 / SIGKILL"
    assert exit_reason(None) == "exit code unknown"
