"""A sync Python target runs --concurrency calls at once (issue 27 item 2).

asyncio.to_thread's default pool holds min(32, cores + 4) threads, so on this 2-core machine a
sync callable ran 6 calls at a time whatever --concurrency said. The callable below counts the
calls in flight; each waits until 32 are (or a second passes), so the peak is 32 only if the
target really runs 32 at once, and 6 under the old pool."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit import run_eval

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
    full.wait(1.0)
    with lock:
        state["now"] -= 1
    return {"answer": f"peak {state['peak']}", "abstained": False,
            "debug": {"retrieved_chunks": [{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}
'''


def test_a_sync_callable_at_concurrency_32_has_32_calls_in_flight(tmp_path: Path) -> None:
    bot = tmp_path / "counting_bot.py"
    bot.write_text(BOT)
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps({"id": f"c{i}", "question": f"q{i}", "answerable": True,
                                      "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]}) + "\n"
                          for i in range(64)))
    result = run_eval(str(es), target=f"python:{bot}:ask", concurrency=32, results_dir=str(tmp_path / "r"),
                      retrieval_only=True, no_probe=True, quiet=True)
    answers = [json.loads(line)["answer"] for line in (result.run_dir / "results.jsonl").read_text().splitlines()]
    assert max(int(a.split()[1]) for a in answers) == 32
