"""Does a Python-callable target run --concurrency calls at once? (issue 27 item 2)

A callable that sleeps L (50 ms) before answering, sync (time.sleep, in the target's thread
pool) or async (asyncio.sleep), run by `evalkit.run_eval` over N cases at each C, each run in
a fresh process. efficiency = (N * L / C) / wall of the whole run_eval call, after a 20-case
warm-up run in the same process: 1.0 = the harness adds nothing to the target's own time.

Usage:
    python bench/callable_target.py                      # N = 640, C in 16 64, sync and async
    python bench/callable_target.py --n 1280 --concurrency 4 16 64

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
BODY = ('{"answer": "ok", "abstained": False, "debug": {"retrieved_chunks": '
        '[{"rel_path": "a.md", "heading_path": "# A", "rank": 1}]}}')


def child(bot: str, es: str, c: int, out: str) -> None:
    from evalkit import run_eval

    # As runner_overhead.py: a 20-case run first pays the once-per-process costs (lazy imports,
    # the target module, first-call caches), which are not the target's concurrency.
    run_eval(es, target=f"python:{bot}:ask", concurrency=c, results_dir=out + "-warm", retrieval_only=True,
             no_probe=True, quiet=True, limit=20)
    t0 = time.perf_counter()
    run_eval(es, target=f"python:{bot}:ask", concurrency=c, results_dir=out, retrieval_only=True, no_probe=True,
             quiet=True)
    print(json.dumps({"wall": time.perf_counter() - t0}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=640)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--json", type=Path, help="Also append each row to this JSON-lines file (bench/table.py reads it).")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        bot, es, c, out = a.child
        child(bot, es, int(c), out)
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
        for kind, src in BOTS.items():
            bot = Path(tmp) / f"bot_{kind}.py"
            bot.write_text(src.format(delay=delay, body=BODY))
            for c in a.concurrency:
                out = subprocess.run([sys.executable, __file__, "--child", str(bot), str(es), str(c),
                                      str(Path(tmp) / f"r_{kind}_{c}")], capture_output=True, text=True, check=True)
                wall = json.loads(out.stdout.strip().splitlines()[-1])["wall"]
                ideal = a.n * delay / c
                print(f"| {kind} | {c} | {ideal:.2f} | {wall:.2f} | {ideal / wall:.2f} |")
                if a.json is not None:
                    with open(a.json, "a") as f:
                        f.write(json.dumps({"kind": kind, "c": c, "n": a.n, "wall_s": wall, "efficiency": ideal / wall}) + "\n")


if __name__ == "__main__":
    main()
