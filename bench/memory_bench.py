"""Peak memory and wall time of the commands that read a whole eval set or run, at 1k / 10k / 100k cases.

For N cases it makes, once, under --workdir (`n<N>/`): `eval_set.jsonl`, the synthetic set of
bench/score_bench.py (`make_case`: 1-3 anchor supports, a fifth of them chunk ids, groups on
30 %, 10 % unanswerable, categories, tags, difficulty). Then each job runs in a fresh process
and is measured from outside: wall time of the process, and peak RSS as the kernel reports it
for the job's whole process tree (`os.wait4`'s ru_maxrss, which includes the forked workers
score_retrieval waits for):

    run_eval       `evalkit.run_eval()` with score_bench's `ask` as a Python-callable target
                   (K = 20, retrieval-only, concurrency 16): load and validate the set, ask,
                   write results.jsonl, metrics.json, summary.md, results.json. It writes
                   `results/bench`, which the jobs below read (made first when missing)
    validate       `validate.py --eval-set eval_set.jsonl`
    score          `score_retrieval.py --run-id bench` (the labels of config.json's eval set)
    score_es       `score_retrieval.py --run-id bench --eval-set eval_set.jsonl`
    compare        `compare_runs.py bench bench --format json` (the run against itself)
    report         `report.py --run-id bench` (report.html)

Every command is the CLI's own app (`evalkit.cli.<name>.app`), run with the working
directory at --workdir, so `--tree DIR` (DIR first on PYTHONPATH) measures another copy of
evalkit, e.g. a worktree of the commit before a change.

Usage:
    python bench/memory_bench.py                                  # N = 1000 10000, every job
    python bench/memory_bench.py --n 100000 --jobs run_eval validate score score_es
    python bench/memory_bench.py --n 10000 --tree /tmp/mem_base   # the code before a change

Targets (issue 27 item 3): peak RSS <= 250 MB at 100,000 cases (K = 20) for run_eval,
validate and score_retrieval with and without --eval-set, and at 10,000 cases within
1.5x of the 1,000-case figure. Results: bench/README.md, "Memory at 100,000 cases".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from score_bench import K, make_case  # noqa: E402 - the same data as score_bench

JOBS = ("run_eval", "validate", "score", "score_es", "compare", "report")

# A fresh interpreter running one CLI app with the given arguments, as its script would.
_CLI = "import sys; from evalkit.cli.{0} import app; sys.argv[0] = '{0}'; app()"
_RUN_EVAL = (
    "import json, sys, time\n"
    "from evalkit import run_eval\n"
    "es, results, target = sys.argv[1:4]\n"
    "t0 = time.perf_counter()\n"
    "r = run_eval(eval_set=es, k=[{k}], target=target, retrieval_only=True, results_dir=results, run_id='bench',\n"
    "             concurrency=16, no_probe=True, quiet=True)\n"
    "print(json.dumps({{'call_s': time.perf_counter() - t0, 'n': r.n_cases}}))\n"
).format(k=K)


def eval_set(n: int, workdir: Path) -> Path:
    """n<N>/eval_set.jsonl, written once."""
    folder = workdir / f"n{n}"
    path = folder / "eval_set.jsonl"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for i in range(n):
                f.write(json.dumps(make_case(i)) + "\n")
        tmp.replace(path)
    return path


def measure(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict:
    """Run `cmd` to the end; its wall time, exit code and the peak RSS of its process tree."""
    t0 = time.perf_counter()
    with open(log.with_suffix(".out"), "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        # wait4's rusage is the child's with its waited-for children: their largest RSS.
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": time.perf_counter() - t0,
        "rss_mb": usage.ru_maxrss / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "exit": proc.returncode,
        "stdout": log.with_suffix(".out").read_text(errors="replace"),
        "stderr": log.with_suffix(".err").read_text(errors="replace"),
    }


def command(job: str, folder: Path, python: str) -> list[str]:
    es, results = str(folder / "eval_set.jsonl"), str(folder / "results")
    if job == "run_eval":
        return [python, "-c", _RUN_EVAL, es, results, f"python:{BENCH / 'score_bench.py'}:ask"]
    if job == "validate":
        return [python, "-c", _CLI.format("validate"), "--eval-set", es]
    if job in ("score", "score_es"):
        extra = ["--eval-set", es] if job == "score_es" else []
        return [python, "-c", _CLI.format("score_retrieval"), "--run-id", "bench", "--results-dir", results, "-q", *extra]
    if job == "compare":
        return [python, "-c", _CLI.format("compare_runs"), "bench", "bench", "--results-dir", results, "--format", "json"]
    if job == "report":
        return [python, "-c", _CLI.format("report"), "--run-id", "bench", "--results-dir", results,
                "-o", str(folder / "report.html")]
    raise ValueError(job)


def run_job(job: str, n: int, folder: Path, args: argparse.Namespace, env: dict[str, str]) -> dict:
    if job == "run_eval":
        shutil.rmtree(folder / "results" / "bench", ignore_errors=True)
        (folder / "ready").unlink(missing_ok=True)
    got = measure(command(job, folder, args.python), folder, env, folder / f"log_{job}")
    if job == "run_eval" and got["exit"] == 0:
        (folder / "ready").write_text("ok\n")
    if got["exit"] not in (0, 1) or (job != "compare" and got["exit"] != 0):
        print(f"  {job} at n={n} exited {got['exit']}:\n{got['stderr'][-3000:]}", file=sys.stderr)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    ap.add_argument("--repeat", type=int, default=1, help="Run each job this many times; the table shows the lowest wall.")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_memory_bench"))
    ap.add_argument("--tree", type=Path, help="Put this copy of evalkit first on PYTHONPATH (a worktree of another commit).")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", type=Path, help="Also append every measurement to this JSON-lines file.")
    args = ap.parse_args()

    env = dict(os.environ)
    if args.tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(args.tree.resolve()), *filter(None, [env.get("PYTHONPATH")])])
    probe = subprocess.run([args.python, "-c", "import evalkit; print(evalkit.__file__)"], cwd=args.workdir.parent,
                           env=env, capture_output=True, text=True, check=True)
    print(f"evalkit from {probe.stdout.strip()}; K = {K}", flush=True)
    print("| N | command | wall s | CPU s | peak RSS MB | exit |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |", flush=True)
    for n in args.n:
        folder = eval_set(n, args.workdir).parent
        jobs = list(args.jobs)
        if "run_eval" not in jobs and not (folder / "ready").exists() and set(jobs) - {"validate"}:
            jobs.insert(0, "run_eval")  # the run the other jobs read
        for job in jobs:
            runs = [run_job(job, n, folder, args, env) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["wall_s"])
            rss = max(r["rss_mb"] for r in runs)
            print(f"| {n:,} | {job} | {best['wall_s']:.2f} | {best['cpu_s']:.2f} | {rss:.0f} | {best['exit']} |", flush=True)
            if args.json is not None:
                with open(args.json, "a") as f:
                    for r in runs:
                        f.write(json.dumps({"n": n, "job": job, "tree": str(args.tree or ""),
                                            **{k: r[k] for k in ("wall_s", "cpu_s", "rss_mb", "exit")}}) + "\n")


if __name__ == "__main__":
    main()
