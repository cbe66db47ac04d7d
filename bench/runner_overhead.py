"""How much does the runner itself cost? run_eval against a stub that answers after a fixed L.

For each concurrency C, a fresh child process runs `evalkit.run_eval` over N cases against
bench/stub_server.py (its own process, so its CPU is not ours) and reports:

    wall        seconds for the whole run_eval() call (load, config, N cases, metrics);
                imports (evalkit, httpx: a once-per-process cost) are timed apart
    import      seconds to import evalkit's runner and httpx in the fresh process
    warm-up     seconds of a first run of 20 cases in the same process, done before the
                measured run (it pays the once-per-process costs: lazy imports, first-call
                caches, thread pool); its ideal is 20 * L / C
    loop        seconds of the ask loop alone (metrics.json run_timing.session_wall_s)
    efficiency  (N * L / C) / wall: 1.0 = the harness adds nothing to the chatbot's time
    cpu/case    harness process CPU (user + sys) per case, ms
    peak RSS    of the harness process, MB

Usage:
    python bench/runner_overhead.py                      # N=1000, L=50 ms, C in 1 4 16 64
    python bench/runner_overhead.py --n 200 --concurrency 16 64
    python bench/runner_overhead.py --judge              # with the offline heuristic judge
    python bench/runner_overhead.py --floor              # also the HTTP target alone, for scale
    python bench/runner_overhead.py --concurrency 16 --repeat 8   # spread over repeated runs

Target: efficiency >= 0.85 at L=50 ms, C=16 (retrieval-only). Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP_CASES = 20


def _eval_set(path: Path, n: int) -> None:
    with path.open("w") as f:
        for i in range(n):
            case = {
                "id": f"b{i:05d}",
                "question": f"benchmark question {i}",
                "answerable": True,
                "gold_supports": [{"rel_path": f"notes/note-{i % 5}.md", "heading_path": f"# Note {i % 5}"}],
                "tags": ["bench"],
            }
            f.write(json.dumps(case) + "\n")


def floor(args: argparse.Namespace) -> None:
    """The same N asks through the HTTP target alone (no runner): the floor the runner sits on."""
    import asyncio

    import httpx  # noqa: F401

    from evalkit.schema import AskRequest
    from evalkit.targets import build_target

    async def go() -> float:
        target = build_target(target=None, api_url=args.url, vault=Path("."), timeout=30, retries=0, rps=None, params={})

        async def batch(n: int) -> float:
            todo = iter(range(n))

            async def worker() -> None:
                for i in todo:
                    await target.ask(AskRequest(question=f"benchmark question {i}", k=5))

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.c)))
            return time.perf_counter() - t0

        await batch(WARMUP_CASES)  # same warm-up as the runner's
        wall = await batch(args.n)
        await target.aclose()
        return wall

    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = asyncio.run(go())
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"c": args.c, "n": args.n, "wall_s": wall, "cpu_s": cpu}))


def child(args: argparse.Namespace) -> None:
    """One measured run in this (fresh) process; prints one JSON line."""
    # Imports are a once-per-process cost, reported apart from the run itself.
    t_import = time.perf_counter()
    import httpx  # noqa: F401  (the HTTP target's import, ~0.25 s)

    from evalkit import run_eval
    from evalkit.run.runner import arun  # noqa: F401

    import_s = time.perf_counter() - t_import

    with tempfile.TemporaryDirectory(dir=args.results_dir) as tmp:
        es = Path(tmp) / "bench.jsonl"
        _eval_set(es, args.n)
        # A short warm-up run pays the once-per-process costs (lazy imports, first-call
        # caches, thread pool) so that the measured run shows the per-run and per-case cost.
        t_warm = time.perf_counter()
        run_eval(
            eval_set=str(es), api_url=args.url, concurrency=args.c, retrieval_only=not args.judge,
            results_dir=str(Path(tmp) / "warmup"), retries=0, timeout=30, limit=WARMUP_CASES, no_probe=args.no_probe,
        )
        warmup_s = time.perf_counter() - t_warm
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        result = run_eval(
            eval_set=str(es),
            api_url=args.url,
            concurrency=args.c,
            retrieval_only=not args.judge,
            no_probe=args.no_probe,
            results_dir=str(Path(tmp) / "results"),
            retries=0,
            timeout=30,
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        json.dumps(
            {
                "c": args.c,
                "n": result.n_cases,
                "errors": result.n_errors,
                "wall_s": wall,
                "loop_s": result.metrics["run_timing"]["session_wall_s"],
                "cpu_s": cpu,
                "peak_rss_mb": after.ru_maxrss / 1024,  # Linux reports KiB
                "import_s": import_s,
                "warmup_s": warmup_s,
            }
        )
    )


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.1f} GiB RAM"
    except (ValueError, OSError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}){mem}, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="cases per run (default 1000)")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="stub answer delay L (default 50)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64], help="values of C")
    parser.add_argument("--judge", action="store_true", help="judge with the offline heuristic (default: retrieval-only)")
    parser.add_argument("--no-probe", action="store_true",
                        help="skip the run's one probe ask before the loop (one L per run, whatever N and C)")
    parser.add_argument("--results-dir", default=None, help="where run folders go (default: a temp dir)")
    parser.add_argument("--floor", action="store_true", help="also time the HTTP target alone (no runner)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per C (fresh process each); summary of the spread")
    parser.add_argument("--json", type=Path, help="also append each row to this JSON-lines file (bench/table.py reads it)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--c", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.floor_child:
        floor(args)
        return

    sys.path.insert(0, str(HERE))
    from stub_server import start_stub_process

    url, stop = start_stub_process(args.delay_ms)
    rows = []
    floors: dict[int, list[dict]] = {}
    try:
        # Repeats alternate between the C values (and the floor), so slow spells of a shared
        # machine spread over all of them.
        for _ in range(max(1, args.repeat)):
            for c in args.concurrency:
                if args.floor:
                    cmd = [sys.executable, __file__, "--floor-child", "--url", url, "--c", str(c), "--n", str(args.n)]
                    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                    floors.setdefault(c, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
                cmd = [sys.executable, __file__, "--child", "--url", url, "--c", str(c), "--n", str(args.n)]
                if args.judge:
                    cmd.append("--judge")
                if args.no_probe:
                    cmd.append("--no-probe")
                if args.results_dir:
                    cmd += ["--results-dir", args.results_dir]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"C={c} done", file=sys.stderr)
    finally:
        stop()

    L = args.delay_ms / 1000
    if args.json is not None:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps({**r, "efficiency": r["n"] * L / r["c"] / r["wall_s"], "probe": not args.no_probe}) + "\n")
    print(f"machine: {_machine()}")
    print(f"N={args.n}, L={args.delay_ms:g} ms, {'heuristic judge' if args.judge else 'retrieval-only'}"
          f"{', no probe' if args.no_probe else ''}")
    print(
        f"{'C':>4} {'ideal s':>8} {'wall s':>8} {'loop s':>8} {'efficiency':>10} {'cpu/case ms':>11} "
        f"{'peak RSS MB':>11} {'import s':>8} {'warm-up s':>9} {'errors':>6}"
    )
    for r in rows:
        ideal = r["n"] * L / r["c"]
        print(
            f"{r['c']:>4} {ideal:>8.2f} {r['wall_s']:>8.2f} {r['loop_s']:>8.2f} {ideal / r['wall_s']:>10.3f} "
            f"{1000 * r['cpu_s'] / r['n']:>11.2f} {r['peak_rss_mb']:>11.1f} {r['import_s']:>8.2f} {r['warmup_s']:>9.2f} {r['errors']:>6}"
        )
    if floors:
        print("HTTP target alone (no runner), same N, L and C:")
        print(f"{'C':>4} {'ideal s':>8} {'wall s':>8} {'efficiency':>10} {'cpu/case ms':>11}")
        for c, runs in floors.items():
            for f in runs:
                ideal = f["n"] * L / c
                print(f"{c:>4} {ideal:>8.2f} {f['wall_s']:>8.2f} {ideal / f['wall_s']:>10.3f} {1000 * f['cpu_s'] / f['n']:>11.2f}")
    if args.repeat > 1:
        print(f"spread over {args.repeat} runs per C (efficiency mean / min / max):")
        for c in args.concurrency:
            effs = [r["n"] * L / r["c"] / r["wall_s"] for r in rows if r["c"] == c]
            line = f"{c:>4} runner {statistics.mean(effs):.3f} / {min(effs):.3f} / {max(effs):.3f}"
            if c in floors:
                fe = [f["n"] * L / c / f["wall_s"] for f in floors[c]]
                line += f"   HTTP target alone {statistics.mean(fe):.3f} / {min(fe):.3f} / {max(fe):.3f}"
            print(line)


if __name__ == "__main__":
    main()
