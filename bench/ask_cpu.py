"""CPU per ask of the runner, beside bare references in the same rounds (issue 39 item 4).

Four jobs, each in a fresh process, after a 20-ask warm-up in that process, against answers of
real text (real_answers.py: SciFact abstracts or obsidian-tasks sections, K = 5 chunks of
300-600 characters; one gold support per case, a fifth never retrieved):

    http          evalkit.run_eval, HTTP target, against bench/stub_server.py --corpus (its own
                  process), retrieval-only, no probe: the whole run_eval() call
    aiohttp       a bare aiohttp client: the same N POSTs of the same bodies, C at once, each
                  answer read and parsed with orjson (nothing else)
    python        evalkit.run_eval, a python: target: `async def ask(request)` that sleeps L
                  and returns the answer its question names
    loop          a bare asyncio loop: C tasks calling the same function N times
    target        (only when asked for with --jobs) evalkit's HTTP target alone, no runner: C tasks
                  calling HttpTarget.ask N times, what the HTTP stack costs by itself

Per job: wall, efficiency = (N · L / C) / wall, and CPU per ask = (user + system CPU of the
process during the timed part) / N. Rounds alternate the four jobs, so a slow spell of the
shared machine falls on all; the table shows medians over rounds, the runner's figures as
ratios to its reference in the same rounds, the load average during the rounds.

    python bench/ask_cpu.py                          # N = 2560, C = 64, L = 50 ms, 3 rounds
    python bench/ask_cpu.py --repeat 5 --corpus obsidian
    python bench/ask_cpu.py --jobs http aiohttp      # some of the jobs only
    python bench/ask_cpu.py --jobs target aiohttp --before /tmp/old-tree   # also a checkout of
                                  # evalkit from before a change, its jobs in the same rounds

Needs aiohttp for its reference (a bench dependency only: `pip install aiohttp`).
Results: bench/README.md, "Runner CPU per ask".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBS = ("http", "aiohttp", "python", "loop", "target")
WARMUP = 20
BOT = """import asyncio
import sys
sys.path.insert(0, {here!r})
from real_answers import answer_index, answers

POOL = answers({corpus!r})


async def ask(request):
    await asyncio.sleep({delay})
    return POOL[answer_index(request["question"], len(POOL))]
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _sys() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def child(job: str, a: argparse.Namespace) -> dict:
    sys.path.insert(0, str(HERE))
    import asyncio

    from real_answers import answers, eval_set, question_for

    tmp = Path(a.tmp)
    pool = answers(a.corpus)
    es = tmp / "es.jsonl"
    if not es.exists():
        eval_set(es, a.n, pool)
    out: dict = {"job": job, "n": a.n, "c": a.c, "delay_ms": a.delay_ms, "corpus": a.corpus}
    if job in ("http", "python"):
        from evalkit import run_eval

        where = {"api_url": a.url} if job == "http" else {"target": f"python:{tmp / 'bot.py'}:ask"}
        common = dict(concurrency=a.c, retrieval_only=True, no_probe=True, quiet=True, retries=0, timeout=30, **where)
        run_eval(str(es), results_dir=str(tmp / f"warm-{job}-{os.getpid()}"), limit=WARMUP, **common)
        c0, s0, t0 = _cpu(), _sys(), time.perf_counter()
        result = run_eval(str(es), results_dir=str(tmp / f"run-{job}-{os.getpid()}"), **common)
        out |= {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - c0, "sys_s": _sys() - s0, "errors": result.n_errors,
                "loop_s": result.metrics["run_timing"]["session_wall_s"]}
        return out
    if job == "aiohttp":
        import aiohttp
        import orjson

        url = a.url + "/api/v1/ask?debug=true"

        async def go(n: int) -> None:
            todo = iter(range(n))
            connector = aiohttp.TCPConnector(limit=a.c)
            async with aiohttp.ClientSession(connector=connector) as session:
                async def worker() -> None:
                    for i in todo:
                        body = orjson.dumps({"question": question_for(i), "k": 5})
                        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                            orjson.loads(await r.read())

                await asyncio.gather(*(worker() for _ in range(a.c)))
    elif job == "target":
        from evalkit.schema import AskRequest
        from evalkit.targets import build_target

        async def go(n: int) -> None:
            target = build_target(target=None, api_url=a.url, vault=Path("."), timeout=30, retries=0, rps=None, params={})
            todo = iter(range(n))

            async def worker() -> None:
                for i in todo:
                    await target.ask(AskRequest(question=question_for(i), k=5))

            try:
                await asyncio.gather(*(worker() for _ in range(a.c)))
            finally:
                await target.aclose()
    else:  # loop
        sys.path.insert(0, str(tmp))
        from bot import ask

        async def go(n: int) -> None:
            todo = iter(range(n))

            async def worker() -> None:
                for i in todo:
                    await ask({"question": question_for(i), "k": 5})

            await asyncio.gather(*(worker() for _ in range(a.c)))

    asyncio.run(go(WARMUP))
    c0, s0, t0 = _cpu(), _sys(), time.perf_counter()
    asyncio.run(go(a.n))
    out |= {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - c0, "sys_s": _sys() - s0, "errors": 0}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2560)
    ap.add_argument("--c", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--corpus", choices=["scifact", "obsidian"], default="scifact")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (each job once per round, a fresh process each)")
    ap.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    ap.add_argument("--before", type=Path,
                    help="a checkout of the code before a change: its evalkit jobs run too, in the same rounds")
    ap.add_argument("--json", type=Path, help="also append each row to this JSON-lines file (bench/table.py reads it)")
    ap.add_argument("--child", choices=JOBS, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a)))
        return
    sys.path.insert(0, str(HERE))
    from stub_server import start_stub_process

    url, stop = start_stub_process(a.delay_ms, corpus=a.corpus)
    rows: list[dict] = []
    load = [os.getloadavg()[0]]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "bot.py").write_text(BOT.format(here=str(HERE), corpus=a.corpus, delay=a.delay_ms / 1000))
            # (label, job, PYTHONPATH): with --before, each evalkit job also runs on the old tree.
            runs = [(job, job, None) for job in a.jobs]
            if a.before:
                runs += [(f"{job} before", job, str(a.before.resolve())) for job in a.jobs if job in ("http", "python", "target")]
            for _ in range(max(1, a.repeat)):
                for label, job, tree in runs:
                    cmd = [sys.executable, __file__, "--child", job, "--url", url, "--tmp", tmp, "--n", str(a.n),
                           "--c", str(a.c), "--delay-ms", str(a.delay_ms), "--corpus", a.corpus]
                    env = dict(os.environ, PYTHONPATH=tree) if tree else None
                    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if done.returncode != 0:
                        raise SystemExit(f"{label} failed:\n{done.stderr}")
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    row["job"] = label
                    row["efficiency"] = a.n * a.delay_ms / 1000 / a.c / row["wall_s"]
                    rows.append(row)
                    print(f"{label}: {1000 * row['cpu_s'] / a.n:.3f} ms/ask ({1000 * row['sys_s'] / a.n:.3f} system), "
                          f"efficiency {row['efficiency']:.3f}",
                          file=sys.stderr)
                load.append(os.getloadavg()[0])
    finally:
        stop()
    labels = list(dict.fromkeys(r["job"] for r in rows))
    med = {job: {k: statistics.median(r[k] for r in rows if r["job"] == job) for k in ("cpu_s", "wall_s", "efficiency")}
           for job in labels}
    print(f"N = {a.n}, C = {a.c}, L = {a.delay_ms:g} ms, {a.corpus} answers (K = 5), {a.repeat} alternating rounds, "
          f"load average {min(load):.1f}-{max(load):.1f}; {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print("| job | CPU per ask ms | wall s | efficiency |")
    print("| --- | ---: | ---: | ---: |")
    for job in labels:
        m = med[job]
        print(f"| {job} | {1000 * m['cpu_s'] / a.n:.3f} | {m['wall_s']:.2f} | {m['efficiency']:.3f} |")
    pairs = [("http", "aiohttp"), ("target", "aiohttp"), ("python", "loop")]
    pairs += [(f"{job} before", ref) for job, ref in pairs] + [(job, f"{job} before") for job in ("http", "python", "target")]
    for runner, ref in pairs:
        if runner in med and ref in med:
            r, f = med[runner], med[ref]
            extra = 1000 * (r["cpu_s"] - f["cpu_s"]) / a.n
            print(f"{runner} / {ref}: CPU {r['cpu_s'] / f['cpu_s']:.2f}×, CPU on top {extra:.3f} ms per ask, "
                  f"efficiency {r['efficiency'] / f['efficiency']:.2f} of the reference's")
    if a.json is not None:
        with open(a.json, "a") as f:
            for r in rows:
                f.write(json.dumps({**r, "load": [min(load), max(load)]}) + "\n")


if __name__ == "__main__":
    main()
