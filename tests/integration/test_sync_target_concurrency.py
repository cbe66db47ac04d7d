"""A sync Python target runs --concurrency calls at once (issue 27 item 2).

asyncio.to_thread's default pool holds min(32, cores + 4) threads, so on this 2-core machine a
sync callable ran 6 calls at a time whatever --concurrency said. The callable below counts the
calls in flight; each waits until 32 are (or 15 s pass, a bound for a loaded machine that a
working pool never reaches), so the peak is 32 only if the target really runs 32 at once, and 6
under the old pool."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import make_case, read_records, run_eval_api, write_eval_set

BOT = '''
import threading, time

lock = threading.Lock()
state = {"now": 0, "peak": 0}
full = threading.Event()

def ask(request):
    with lock:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        if state["now"] >= 32:
            full.set()
    full.wait(15.0)
    with lock:
        state["now"] -= 1
    return {"answer": f"peak {state['peak']}", "abstained": False,
            "debug": {"retrieved_chunks": [{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}
'''


def _eval_set(tmp_path: Path, n: int) -> Path:
    gold = [{"rel_path": "a.md", "heading_path": "# A"}]
    return write_eval_set(tmp_path / "es.jsonl", [make_case(i, question=f"q{i}", gold_supports=gold) for i in range(n)])


def test_a_sync_callable_at_concurrency_32_has_32_calls_in_flight(tmp_path: Path) -> None:
    bot = tmp_path / "counting_bot.py"
    bot.write_text(BOT)
    es = _eval_set(tmp_path, 64)
    result = run_eval_api(eval_set=es, target=f"python:{bot}:ask", concurrency=32, results_dir=tmp_path / "r",
                          retrieval_only=True, no_probe=True, quiet=True)
    answers = [r["answer"] for r in read_records(result.run_dir)]
    assert max(int(a.split()[1]) for a in answers) == 32


# --target-processes: a function that computes (holds the GIL) gains nothing from threads; in
# worker processes it runs side by side. The bot answers with its process id, so the records
# show which process ran each call. Each call waits until the other worker is busy too (or
# 10 s pass: starting a worker process on a loaded machine can take seconds), so both of the
# 2 workers take calls whatever the scheduler does.
PROCESS_BOT = '''
import os, time
from pathlib import Path

def ask(request):
    here = Path(__file__).with_name("busy")
    here.mkdir(exist_ok=True)
    (here / str(os.getpid())).touch()
    deadline = time.monotonic() + 10.0
    while len(list(here.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    if request["question"] == "q5":
        raise ValueError("this one fails")
    return {"answer": f"pid {os.getpid()}", "abstained": False,
            "debug": {"retrieved_chunks": [{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}

async def ask_async(request):
    return ask(request)
'''


def _process_run(tmp_path: Path, **kw: object) -> object:
    bot = tmp_path / "pid_bot.py"
    bot.write_text(PROCESS_BOT)
    es = _eval_set(tmp_path, 8)
    return run_eval_api(eval_set=es, concurrency=2, results_dir=tmp_path / "r", retrieval_only=True, no_probe=True,
                        quiet=True, max_error_rate=0.5, **kw)


def test_target_processes_runs_the_calls_in_worker_processes(tmp_path: Path) -> None:
    import os

    result = _process_run(tmp_path, target=f"python:{tmp_path / 'pid_bot.py'}:ask", target_processes=2)
    records = read_records(result.run_dir)
    pids = {int(r["answer"].split()[1]) for r in records if not r.get("error")}
    assert len(pids) == 2 and os.getpid() not in pids  # two workers, neither of them this process
    failed = [r for r in records if r.get("error")]
    # A function that raises in a worker is that case's error; the run goes on.
    assert [r["test_case_id"] for r in failed] == ["c5"]
    assert failed[0]["error"]["kind"] == "exception" and "this one fails" in failed[0]["error"]["detail"]
    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["target"]["processes"] == 2 and config["settings"]["target_processes"] == 2


def test_target_processes_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    import pytest

    from evalkit.errors import InputError

    with pytest.raises(InputError, match="is async"):
        _process_run(tmp_path, target=f"python:{tmp_path / 'pid_bot.py'}:ask_async", target_processes=2)
    with pytest.raises(InputError, match="python: target"):
        _process_run(tmp_path, api_url="http://127.0.0.1:9", target_processes=2)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # nothing written
