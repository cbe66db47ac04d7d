"""Ctrl-C while the writer's queue is full (issue 40's clean-up fix, reproduced).

The workers hand finished cases to the writer through a bounded queue (max(64, 4·C)): a
target faster than the writer waits there instead of piling answers up. When Ctrl-C arrives
while that queue is full, the session's clean-up must still queue its stop mark behind the
workers' items; with put_nowait it raised QueueFull, which hid the interrupt (no
RunInterrupted, no resume command) and left the records waiting in the queue unwritten.
"""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import threading
from pathlib import Path

import orjson
import pytest

from evalkit.store.runs import ResultsWriter

BOT = textwrap.dedent(
    '''
    async def ask(request):
        return {"answer": "ok [1]", "retrieved_chunks": [{"rel_path": "n/a.md", "heading_path": "# A", "text": "a"}]}
    '''
)
N = 400


def test_ctrl_c_with_the_queue_full_is_an_interrupt_and_loses_no_record(tmp_path: Path, monkeypatch) -> None:
    from evalkit import run_eval
    from evalkit.run.result import RunInterrupted

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches asyncio's handler in the main thread only")
    (tmp_path / "bot.py").write_text(BOT)
    es = tmp_path / "es.jsonl"
    es.write_bytes(b"".join(orjson.dumps({"id": f"q{i}", "question": f"question {i}?", "answerable": True,
                                          "gold_supports": [{"rel_path": "n/a.md"}]}) + b"\n" for i in range(N)))

    queues: list[asyncio.Queue] = []
    real_queue, real_sync = asyncio.Queue, ResultsWriter.sync

    class Seen(real_queue):  # the session's queue, to see when it is full
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            queues.append(self)

    syncs: list[bool] = []

    def sync(self: ResultsWriter) -> None:
        # The writer's first fsync (in a thread): while it waits, the workers fill the queue and
        # wait to put more; then Ctrl-C. Waits for a state, bounded; never a time compared.
        if not syncs:
            for _ in range(3000):
                if queues and queues[-1].full():
                    break
                threading.Event().wait(0.01)
            syncs.append(bool(queues) and queues[-1].full())
            os.kill(os.getpid(), signal.SIGINT)
        real_sync(self)

    monkeypatch.setattr(asyncio, "Queue", Seen)
    monkeypatch.setattr(ResultsWriter, "sync_due", lambda self: True)
    monkeypatch.setattr(ResultsWriter, "sync", sync)
    kw = dict(eval_set=str(es), target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True, no_probe=True,
              results_dir=str(tmp_path / "results"), concurrency=4, allow_format_mismatch=True)
    with pytest.raises(RunInterrupted):
        run_eval(run_id="r", **kw)
    assert syncs == [True]  # the interrupt came with the queue full: the case under test
    lines = (tmp_path / "results" / "r" / "results.jsonl").read_bytes().splitlines()
    ids = [orjson.loads(x)["test_case_id"] for x in lines]
    # every record the workers finished was written (the queue's 64 and the first batch), once each
    assert len(ids) == len(set(ids)) and len(ids) >= 64
    monkeypatch.setattr(ResultsWriter, "sync", real_sync)
    result = run_eval(resume="r", **kw)
    ids = [orjson.loads(x)["test_case_id"] for x in (tmp_path / "results" / "r" / "results.jsonl").read_bytes().splitlines()]
    assert sorted(ids) == sorted(f"q{i}" for i in range(N)) and result.n_cases == N
