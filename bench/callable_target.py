"""Does a Python-callable target run --concurrency calls at once? (issue 27 item 2)

A callable that sleeps L (50 ms) before answering, sync (time.sleep, in the target's thread
pool) or async (asyncio.sleep), run by `evalkit.run_eval` over N cases at each C, each run in
a fresh process. efficiency = (N * L / C) / wall of the whole run_eval call, after a 20-case
warm-up run in the same process: 1.0 = the harness adds nothing to the target's own time.

Usage:
    python bench/callable_target.py                      # N = 640, C in 16 64, sync and async
    python bench/callable_target.py --n 1280 --concurrency 4 16 64
    python bench/callable_target.py --cpu --n 200 --concurrency 2   # a function that computes

With --cpu the function spends L of its own CPU time (a busy loop) instead of sleeping, once in
the target's threads and once in `--target-processes C` worker processes: threads share one
core (the GIL), processes one core each, so on a 2-core machine at C = 2 threads reach at
most 0.5 and processes near 1.0.

Results: bench/README.md, "Python-callable targets".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BOTS = {
    "sync": "import time\n\ndef ask(request):\n    time.sleep({delay})\n    return {body}\n",
    "async": "import asyncio\n\nasync def ask(request):\n    await asyncio.sleep({delay})\n    return {body}\n",
}
# L of the calling thread's own CPU time: under the GIL a thread's clock runs only while it holds it.
CPU_BOT = ("import time\n\ndef ask(request):\n    end = time.thread_time() + {delay}\n"
           "    while time.thread_time() < end:\n        pass\n    return {body}\n")
BODY = ('{"answer": "ok", "abstained": False, "debug": {"retrieved_chunks": '
        '[{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}')


def child(bot: str, es: str, c: int, out: str, processes: int) -> None:
    from evalkit import run_eval

    more = {"target_processes": processes} if processes else {}
    # As runner_overhead.py: a 20-case run first pays the once-per-process costs (lazy imports,
    # the target module, first-call caches), which are not the target's concurrency. Worker
    # processes are started per run, so the measured run pays for starting its own.
    run_eval(es, target=f"python:{bot}:ask", concurrency=c, results_dir=out + "-warm", retrieval_only=True,
             no_probe=True, quiet=True, limit=20, **more)
    t0 = time.perf_counter()
    run_eval(es, target=f"python:{bot}:ask", concurrency=c, results_dir=out, retrieval_only=True, no_probe=True,
             quiet=True, **more)
    print(json.dumps({"wall": time.perf_counter() - t0}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=640)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--cpu", action="store_true", help="a function that computes for L (threads, then processes)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row (fresh process each), alternating between rows")
    ap.add_argument("--json", type=Path, help="Also append each row to this JSON-lines file (bench/table.py reads it).")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        bot, es, c, out, processes = a.child
        child(bot, es, int(c), out, int(processes))
        return
    delay = a.delay_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        es = Path(tmp) / "es.jsonl"
        es.write_text("".join(json.dumps({"id": f"c{i}", "question": f"q{i}", "answerable": True,
                                          "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]}) + "\n"
                              for i in range(a.n)))
        print(f"N = {a.n}, L = {a.delay_ms:g} ms")
        print("| kind | C | ideal s | wall s | efficiency |")
        print("| --- | ---: | ---: | ---: | ---: |")
        kinds = {"cpu-threads": CPU_BOT, "cpu-processes": CPU_BOT} if a.cpu else BOTS
        for kind, src in kinds.items():
            (Path(tmp) / f"bot_{kind}.py").write_text(src.format(delay=delay, body=BODY))
        # Repeats alternate between the rows, so slow spells of a shared machine spread over all.
        for kind, c in [(kind, c) for _ in range(max(1, a.repeat)) for kind in kinds for c in a.concurrency]:
            bot = Path(tmp) / f"bot_{kind}.py"
            processes = c if kind == "cpu-processes" else 0
            out = subprocess.run([sys.executable, __file__, "--child", str(bot), str(es), str(c),
                                  str(Path(tmp) / f"r_{kind}_{c}"), str(processes)],
                                 capture_output=True, text=True, check=True)
            wall = json.loads(out.stdout.strip().splitlines()[-1])["wall"]
            ideal = a.n * delay / c
            print(f"| {kind} | {c} | {ideal:.2f} | {wall:.2f} | {ideal / wall:.2f} |")
            if a.json is not None:
                with open(a.json, "a") as f:
                    f.write(json.dumps({"kind": kind, "c": c, "n": a.n, "wall_s": wall, "efficiency": ideal / wall}) + "\n")


if __name__ == "__main__":
    main()
