"""How fast is a whole `scripts/run_eval.py` process against a chatbot that answers in L?

runner_overhead.py times `run_eval()` inside a warmed-up process. This times what a user
waits for: the real CLI as a subprocess (interpreter start, imports, argument parsing, the
probe, config.json, the first connections, the ask loop, metrics.json, the summary, exit),
against bench/stub_server.py (its own process) answering after a fixed L on loopback, with
the issue's command line: `--concurrency C --retrieval-only`, default retries and timeout.

Each repetition runs, for every row, a `--limit 1` run and then the full N-case run:

    wall        wall of the full run, spawn to exit, seen from this process
    startup     wall of the `--limit 1` run: what a run pays once (interpreter, imports, the
                probe, config.json, metrics.json, exit), plus one case
    efficiency  (N * L / C) / (wall - startup), per repetition; the median [min-max].
                1.0 = the N cases cost what the chatbot alone would take at concurrency C
    strict      the same with the one case of the `--limit 1` run not credited: ideal /
                (wall - startup + L)
    of meds     ideal / (median wall - median startup); of mins: ideal / (fastest wall -
                fastest startup). On a shared machine load only ever adds time, so these
                two are steadier than the per-repetition figure when others run tests
    loop        the ask loop of the full run (metrics.json run_timing.session_wall_s);
                loop1 the same for the `--limit 1` run
    cpu         user + system CPU of the CLI process (cpu1: of the `--limit 1` run);
                cpu/case = (cpu - cpu1) / (N - 1)

Output modes (rows):
    quiet       --quiet, stdout and stderr to pipes
    bar-pipe    progress bar and summary table, stdout and stderr to pipes (rich draws
                nothing live on a non-terminal)
    bar-pty     progress bar and summary table on a pseudo-terminal (rich redraws it live)

Retrieval-only is the headline (it measures the harness alone, as runner_overhead.py
does); `--judge heuristic` or `--judge both` adds rows with the offline heuristic judge,
whose per-case CPU is part of the harness but is not what an LLM judge costs.

Variants (rows too): `tree:DIR` runs the evalkit package found in DIR (a copy from before a
change) instead of this one; a patch name runs the CLI through a launcher that applies it
inside the process (PATCHES below: changes to files this benchmark cannot edit, measured
before anyone edits them). `--phases` runs every row through the launcher and adds time
stamps at the phase boundaries inside the process.

Usage:
    python bench/cli_runner.py                                # N=400, C=16, L=50 ms, 5 repeats (about 1.5 min)
    python bench/cli_runner.py --repeat 9 --modes quiet       # only --quiet
    python bench/cli_runner.py --judge both                   # also with the heuristic judge
    python bench/cli_runner.py --phases --modes quiet         # where the wall goes, per phase
    python bench/cli_runner.py --variants tree:/tmp/before none   # before / after a change
    python bench/cli_runner.py --variants none gc-freeze      # a patch to a file not ours
    python bench/cli_runner.py --profile /tmp/prof            # cProfile one full run per mode

Target: efficiency >= 0.85 at N=400, C=16, L=50 ms (median, retrieval-only). Results:
bench/README.md, section "CLI run".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = ROOT / "scripts" / "run_eval.py"
MODES = ("quiet", "bar-pipe", "bar-pty")
_PHASES_ENV = "EVALKIT_BENCH_PHASES"
_PATCHES_ENV = "EVALKIT_BENCH_PATCHES"


def _eval_set(path: Path, n: int) -> None:
    # The same cases as runner_overhead.py.
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


def _env(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    # Nothing may force rich one way or the other; the mode decides.
    for var in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES"):
        env.pop(var, None)
    if mode == "bar-pty" and env.get("TERM", "dumb") in ("", "dumb", "unknown"):
        env["TERM"] = "xterm-256color"
    # --api-url is given; a stray EVAL_API_URL must not be what a reader thinks was asked.
    env.pop("EVAL_API_URL", None)
    return env


def _run_pty(cmd: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """Run `cmd` with stdout and stderr on a pseudo-terminal (120 x 40); returns (rc, output)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    out = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO once the child closed its side
                return
            if not chunk:
                return
            out.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=ROOT)
        os.close(slave)
        rc = proc.wait()
        reader.join(timeout=5)
    finally:
        os.close(master)
    return rc, bytes(out)


def _cli(args: argparse.Namespace, url: str, es: Path, results: Path, run_id: str, mode: str,
         judge: str, limit: int | None, prefix: list[str], variant: str = "none") -> dict:
    """One CLI process; returns its wall time and what metrics.json says about the loop."""
    cmd = [
        *prefix, "--api-url", url, "--eval-set", str(es), "--concurrency", str(args.concurrency),
        "--results-dir", str(results), "--run-id", run_id,
    ]
    cmd += ["--retrieval-only"] if judge == "retrieval-only" else ["--judge-provider", "heuristic"]
    if mode == "quiet":
        cmd.append("--quiet")
    if limit is not None:
        cmd += ["--limit", str(limit)]
    env = _env(mode)
    phases_file = results / f"{run_id}.phases.json"
    phases = "--launch" in prefix
    if variant.startswith("tree:"):
        # Another copy of the package (say, before a change): imported ahead of this one.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [variant[5:], env.get("PYTHONPATH")]))
    if phases:
        env[_PHASES_ENV] = str(phases_file)
        env[_PATCHES_ENV] = "none" if variant.startswith("tree:") else variant
    t_spawn = time.time()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    if mode == "bar-pty":
        rc, output = _run_pty(cmd, env)
    else:
        proc = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, check=False)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    wall = time.perf_counter() - t0
    t_exit = time.time()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI process, reaped just now
    if rc != 0:
        raise RuntimeError(f"CLI exited {rc}: {' '.join(cmd)}\n{output.decode(errors='replace')[-2000:]}")
    metrics = json.loads((results / run_id / "metrics.json").read_bytes())
    row = {
        "wall_s": wall,
        "loop_s": metrics["run_timing"]["session_wall_s"],
        "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        "n": metrics["total_tests"],
        "errors": sum((metrics["aggregate_metrics"]["operational_metrics"].get("error_kinds") or {}).values()),
    }
    if phases:
        marks = json.loads(phases_file.read_text())
        row["phases"] = {k: v - t_spawn for k, v in marks.items()} | {"exit": t_exit - t_spawn}
    shutil.rmtree(results / run_id, ignore_errors=True)
    return row


# --------------------------------------------------------------------------- phases


def _launch(cli_args: list[str]) -> None:
    """Run the CLI in this process with timestamps at its phase boundaries (--phases).

    The marks are time.time() values written to $EVALKIT_BENCH_PHASES at exit; the parent
    subtracts its spawn time. Wrapping costs microseconds per call, only on calls that
    happen once per run (and once per case for `first_answer`).
    """
    import atexit

    marks: dict[str, float] = {"interpreter": time.time()}

    def mark(name: str) -> None:
        marks.setdefault(name, time.time())

    def dump() -> None:
        mark("atexit")  # registered first, so it runs after every other exit hook
        Path(os.environ[_PHASES_ENV]).write_text(json.dumps(marks))

    atexit.register(dump)

    import evalkit.cli.run_eval as cli_mod

    mark("cli_imported")
    import evalkit.run.api
    import evalkit.run.session as session_mod
    import evalkit.targets

    run_mod = sys.modules["evalkit.run.runner"]  # evalkit.run.runner is also a function's name
    from evalkit.targets.http import HttpTarget

    mark("runner_imported")

    def wrap_sync(obj: object, name: str, before: str, after: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*a, **kw):  # type: ignore[no-untyped-def]
            mark(before)
            try:
                return fn(*a, **kw)
            finally:
                mark(after)

        setattr(obj, name, wrapper)

    def wrap_async(obj: object, name: str, before: str, after: str, *, in_loop: bool = False) -> None:
        """in_loop: mark only calls made once the ask loop started (the probe asks, and the
        anchor check reads the index stats, before it)."""
        fn = getattr(obj, name)

        async def wrapper(*a, **kw):  # type: ignore[no-untyped-def]
            counts = not in_loop or "loop" in marks
            if counts:
                mark(before)
            try:
                return await fn(*a, **kw)
            finally:
                if counts:
                    mark(after)

        setattr(obj, name, wrapper)

    # Public functions only. The runner imported prepare_inputs, probe_target and derive_run
    # by name, so they are wrapped where it calls them (its module); build_target it imports
    # from evalkit.targets at call time. A name that is gone raises here, not a silent gap.
    wrap_sync(evalkit.run.api, "run_eval", "run_eval", "run_eval_done")
    wrap_sync(run_mod, "prepare_inputs", "prepare", "prepared")
    wrap_sync(evalkit.targets, "build_target", "build_target", "target_built")
    wrap_async(run_mod, "probe_target", "probe", "probe_done")  # the one question asked before the run
    wrap_sync(run_mod, "derive_run", "metrics", "metrics_done")
    wrap_async(session_mod.Session, "execute", "loop", "loop_done")
    wrap_async(HttpTarget, "index_stats", "index_stats", "index_stats_done", in_loop=True)
    wrap_async(HttpTarget, "ask", "first_case", "first_answer", in_loop=True)
    report = sys.modules.get("evalkit.report.run")
    if report is None:
        import evalkit.report.run as report
    wrap_sync(report.RunProgress, "start", "progress_start", "progress_started")
    wrap_sync(report.RunProgress, "close", "progress_close", "progress_closed")
    wrap_sync(report, "print_run_summary", "summary", "summary_done")
    for name in filter(None, os.environ.get(_PATCHES_ENV, "none").split("+")):
        if name != "none":
            PATCHES[name](run_mod, session_mod, report)
    sys.argv = [str(SCRIPT), *cli_args]
    try:
        cli_mod.app()
    finally:
        mark("cli_done")


# ----------------------------------------------------------------- variants (--variants)
# Changes to files this benchmark does not own, applied by monkeypatching inside the CLI
# process, so that their gain can be measured before anyone edits the file. Each takes the
# run module, the session module and the report module.


def _patch_gc_freeze(run_mod, session_mod, report) -> None:  # type: ignore[no-untyped-def]
    """gc.freeze() once the CLI has imported everything, just before run_eval(): the
    collector stops re-scanning the ~200k objects of the imports (during the run and,
    above all, at interpreter exit)."""
    import gc

    import evalkit.run.api

    inner = evalkit.run.api.run_eval

    def run_eval(*a, **kw):  # type: ignore[no-untyped-def]
        gc.freeze()
        return inner(*a, **kw)

    evalkit.run.api.run_eval = run_eval


def _patch_warm_connections(run_mod, session_mod, report) -> None:  # type: ignore[no-untyped-def]
    """Measurement only: open C connections during start-up, by sending C index-stats
    GETs as soon as the target is built (at most what a connection warm-up could gain)."""
    import asyncio

    import evalkit.targets

    inner = evalkit.targets.build_target

    def build(*a, **kw):  # type: ignore[no-untyped-def]
        target = inner(*a, **kw)
        n = int(sys.argv[sys.argv.index("--concurrency") + 1])  # _cli always passes it
        target._bench_warm = asyncio.get_running_loop().create_task(
            asyncio.wait([asyncio.ensure_future(target.index_stats()) for _ in range(n)])
        )
        return target

    evalkit.targets.build_target = build


def _patch_preimport(run_mod, session_mod, report) -> None:  # type: ignore[no-untyped-def]
    """Import the judges (sqlite3, numpy) and the metrics kernels before the run, so that no
    import stalls the event loop while the first answers arrive. Measured when a
    retrieval-only record imported evalkit.judges.runner for `stored_answer`; that helper
    now lives in evalkit.config, so the row shows what is left."""
    import evalkit.judges.runner  # noqa: F401
    import evalkit.metrics.abstention  # noqa: F401
    import evalkit.metrics.retrieval  # noqa: F401


# (metrics-read-once is gone: derive_run makes one pass over the records, and none at all
# after a fresh run written in order, whose records it took as they were written.)
PATCHES = {
    "preimport": _patch_preimport,
    "gc-freeze": _patch_gc_freeze,
    "warm-connections": _patch_warm_connections,
}


_PHASE_ORDER = [
    ("start-up to CLI import", "interpreter", "cli_imported"),
    ("runner, rich imports (eager here)", "cli_imported", "runner_imported"),
    ("arguments to run_eval()", "runner_imported", "run_eval"),
    ("run_eval() to inputs checked", "run_eval", "prepared"),
    ("inputs checked to probe", "prepared", "probe"),
    ("probe (one ask)", "probe", "probe_done"),
    ("probe to loop start", "probe_done", "loop"),
    ("inputs checked to loop start", "prepared", "loop"),
    ("loop start to index stats", "loop", "index_stats_done"),
    ("index stats to first answer", "index_stats_done", "first_answer"),
    ("first answer to loop end", "first_answer", "loop_done"),
    ("loop end to metrics", "loop_done", "metrics"),
    ("derive_run: metrics.json etc.", "metrics", "metrics_done"),
    ("metrics to run_eval() return", "metrics_done", "run_eval_done"),
    ("run_eval() return to CLI return", "run_eval_done", "cli_done"),
    ("CLI return to last exit hook", "cli_done", "atexit"),
    ("last exit hook to process exit", "atexit", "exit"),
]


def _print_phases(rows: list[dict], label: str) -> None:
    print(f"phases, {label} (median s over {len(rows)} runs; times from the parent's spawn):")
    for title, a, b in _PHASE_ORDER:
        vals = [r["phases"][b] - r["phases"][a] for r in rows if a in r["phases"] and b in r["phases"]]
        if vals:
            print(f"  {title:<34} {statistics.median(vals):7.3f}")
    print(f"  {'spawn to interpreter ready':<34} {statistics.median(r['phases']['interpreter'] for r in rows):7.3f}")


# --------------------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--launch":
        _launch(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="cases in the full run (default 400)")
    parser.add_argument("--concurrency", type=int, default=16, help="C (default 16)")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="stub answer delay L (default 50)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row, alternating rows (default 5)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="output modes (default all)")
    parser.add_argument("--judge", choices=("retrieval-only", "heuristic", "both"), default="retrieval-only")
    parser.add_argument("--phases", action="store_true", help="time the phases inside the CLI process")
    parser.add_argument("--profile", metavar="DIR", help="cProfile one full run per row into DIR, print the top")
    parser.add_argument("--url", help="use this running stub instead of starting one (its L must be --delay-ms)")
    parser.add_argument("--save", metavar="FILE", help="also write every run's figures to FILE (JSON)")
    parser.add_argument("--variants", nargs="+", default=["none"],
                        help=f"rows: none, patches joined by + ({', '.join(PATCHES)}), or tree:DIR (the "
                             "evalkit package in DIR, e.g. a copy from before a change)")
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    from stub_server import start_stub_process

    for v in args.variants:
        if v.startswith("tree:"):
            if not (Path(v[5:]) / "evalkit" / "__init__.py").is_file():
                parser.error(f"{v}: no evalkit package in {v[5:]}")
            continue
        unknown = [p for p in v.split("+") if p != "none" and p not in PATCHES]
        if unknown:
            parser.error(f"unknown variant {'+'.join(unknown)} (known: none, {', '.join(PATCHES)})")
    judges = ["retrieval-only", "heuristic"] if args.judge == "both" else [args.judge]
    rows_keys = [(j, m, v) for j in judges for m in args.modes for v in args.variants]
    prefix = [sys.executable, str(SCRIPT)]
    if args.phases or any(v != "none" and not v.startswith("tree:") for v in args.variants):
        # Every row through the same launcher, so that rows differ only by their patches.
        prefix = [sys.executable, str(Path(__file__).resolve()), "--launch"]
    if args.url:  # a stub started by hand (python bench/stub_server.py --delay-ms ...)
        url, stop = args.url, lambda: None
    else:
        url, stop = start_stub_process(args.delay_ms)
    data: dict[tuple[str, str, str], list[tuple[dict, dict]]] = {key: [] for key in rows_keys}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            es = Path(tmp) / "bench.jsonl"
            _eval_set(es, args.n)
            results = Path(tmp) / "results"
            results.mkdir()
            if args.profile:
                _profile(args, url, es, results, rows_keys)
                return
            # One unmeasured run fills the OS file caches.
            _cli(args, url, es, results, "warm", "quiet", judges[0], 1, [sys.executable, str(SCRIPT)])
            for rep in range(args.repeat):
                for row, (judge, mode, variant) in enumerate(rows_keys):
                    tag = f"{rep}-{row}"
                    first = _cli(args, url, es, results, f"s{tag}", mode, judge, 1, prefix, variant)
                    full = _cli(args, url, es, results, f"f{tag}", mode, judge, None, prefix, variant)
                    data[(judge, mode, variant)].append((first, full))
                print(f"repetition {rep + 1}/{args.repeat} done", file=sys.stderr)
    finally:
        stop()
    if args.save:
        Path(args.save).write_text(json.dumps(
            {"args": vars(args), "runs": [{"judge": j, "mode": m, "variant": v, "startup": s, "full": f}
                                          for (j, m, v), runs in data.items() for s, f in runs]}, indent=1))
    _report(args, data)


def _profile(args: argparse.Namespace, url: str, es: Path, results: Path, rows_keys: list) -> None:
    import pstats

    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    for judge, mode in dict.fromkeys((j, m) for j, m, _ in rows_keys):  # this tree only
        path = out / f"cli-{judge}-{mode}.prof"
        prefix = [sys.executable, "-m", "cProfile", "-o", str(path), str(SCRIPT)]
        row = _cli(args, url, es, results, f"p-{judge}-{mode}", mode, judge, None, prefix)
        print(f"== {judge}, {mode}: wall {row['wall_s']:.2f} s, loop {row['loop_s']:.2f} s (under cProfile) -> {path}")
        pstats.Stats(str(path)).sort_stats("cumulative").print_stats(30)


def _machine() -> str:
    sys.path.insert(0, str(HERE))
    from runner_overhead import _machine as machine

    return machine()


def _report(args: argparse.Namespace, data: dict) -> None:
    L = args.delay_ms / 1000
    ideal = args.n * L / args.concurrency
    med = statistics.median
    print(f"machine: {_machine()}")
    print(f"N={args.n}, C={args.concurrency}, L={args.delay_ms:g} ms, ideal N*L/C = {ideal:.3f} s, "
          f"median of {args.repeat} runs per row (min-max of efficiency in brackets)")
    vw = max(7, *(len(k[2]) for k in data))
    head = (f"{'judge':<15} {'mode':<9} {'variant':<{vw}} {'wall s':>7} {'startup s':>9} {'efficiency':>19} {'strict':>7} "
            f"{'of meds':>7} {'of mins':>7} "
            f"{'loop s':>7} {'loop1 s':>7} {'cpu s':>6} {'cpu1 s':>6} {'cpu/case ms':>11} {'errors':>6}")
    print(head)
    for (judge, mode, variant), runs in data.items():
        walls = [full["wall_s"] for _, full in runs]
        starts = [first["wall_s"] for first, _ in runs]
        # Efficiency per repetition (its own start-up run), then the median.
        effs = [ideal / (full["wall_s"] - first["wall_s"]) for first, full in runs]
        strict = [ideal / (full["wall_s"] - first["wall_s"] + L) for first, full in runs]
        errors = sum(full["errors"] for _, full in runs)
        eff = f"{med(effs):.3f} [{min(effs):.2f}-{max(effs):.2f}]"
        # Two steadier readings of the same ratio: from the median walls, and from the
        # fastest walls (load on a shared machine only ever adds time).
        of_meds = ideal / (med(walls) - med(starts))
        of_mins = ideal / (min(walls) - min(starts))
        print(
            f"{judge:<15} {mode:<9} {variant:<{vw}} {med(walls):>7.3f} {med(starts):>9.3f} {eff:>19} {med(strict):>7.3f} "
            f"{of_meds:>7.3f} {of_mins:>7.3f} "
            f"{med(f['loop_s'] for _, f in runs):>7.3f} {med(s['loop_s'] for s, _ in runs):>7.3f} "
            f"{med(f['cpu_s'] for _, f in runs):>6.2f} {med(s['cpu_s'] for s, _ in runs):>6.2f} "
            f"{med(1000 * (f['cpu_s'] - s['cpu_s']) / (args.n - 1) for s, f in runs):>11.2f} {errors:>6}"
        )
    variants = list(dict.fromkeys(k[2] for k in data))
    if len(variants) > 1:
        # Rows of one repetition ran back to back: their ratio is steadier than either figure.
        print(f"efficiency relative to {variants[0]} (median over repetitions of the ratio within one):")
        for (judge, mode, variant), runs in data.items():
            if variant == variants[0]:
                continue
            base = data[(judge, mode, variants[0])]
            ratios = [(f0["wall_s"] - s0["wall_s"]) / (f["wall_s"] - s["wall_s"]) for (s, f), (s0, f0) in zip(runs, base)]
            print(f"  {judge:<15} {mode:<9} {variant:<{vw}} x{med(ratios):.3f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    if args.phases:
        for (judge, mode, variant), runs in data.items():
            label = f"{judge}, {mode}, {variant}"
            _print_phases([full for _, full in runs], f"{label}, full run (N={args.n})")
            _print_phases([first for first, _ in runs], f"{label}, --limit 1")


if __name__ == "__main__":
    main()
