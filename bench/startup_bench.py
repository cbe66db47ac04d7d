"""How much CPU does `--help` cost? Every script in scripts/ and `evalkit --help`, beside a bare
interpreter (issue 39 item 5: target ≤ 0.12 s CPU each).

Each measurement is a fresh process: user + system CPU of the child (os.wait4), and its wall
time. A round runs `python -c pass` and then every command once; rounds repeat, so a slow spell
of the shared machine falls on all of them; the table shows medians over the rounds, and each
command's CPU as a ratio to the bare interpreter's in the same rounds. Every command runs once
before the rounds, so its bytecode is cached (a user's state after the first run);
PYTHONDONTWRITEBYTECODE is cleared for the children.

    python bench/startup_bench.py                         # 7 rounds
    python bench/startup_bench.py --repeat 15
    python bench/startup_bench.py --before /tmp/old-tree  # also a copy of the code from before a
                                                          # change (PYTHONPATH), alternating with this one

The children run with this checkout first on PYTHONPATH (or --before's tree), so a worktree
measures its own code. Results: bench/README.md, "Start-up".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BARE = "python -c pass"
EVALKIT = "evalkit"
# The console command as its entry point runs it (pyproject.toml [project.scripts]).
EVALKIT_CODE = "import sys; sys.argv[0] = 'evalkit'; from evalkit.cli.main import app; sys.exit(app())"


def commands(root: Path) -> dict[str, list[str]]:
    """{label: argv}: the bare interpreter, every scripts/*.py --help, evalkit --help."""
    out = {BARE: [sys.executable, "-c", "pass"]}
    for script in sorted((root / "scripts").glob("*.py")):
        out[f"{script.name} --help"] = [sys.executable, str(script), "--help"]
    out[f"{EVALKIT} --help"] = [sys.executable, "-c", EVALKIT_CODE, "--help"]
    return out


def measure(argv: list[str], tree: Path) -> tuple[float, float]:
    """(CPU s, wall s) of one fresh process running argv with `tree` first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(tree), COLUMNS="100", TERM="dumb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--before", type=Path, help="a checkout of the code before a change, measured in the same rounds")
    ap.add_argument("--json", type=Path, help="also append each row to this JSON-lines file (bench/table.py reads it)")
    a = ap.parse_args()
    trees = {"now": ROOT} | ({"before": a.before.resolve()} if a.before else {})
    cmds = {tree: commands(path) for tree, path in trees.items()}
    load = [os.getloadavg()[0]]
    for tree, path in trees.items():  # bytecode cached, as after a user's first run
        for argv in cmds[tree].values():
            measure(argv, path)
    cpu: dict[tuple[str, str], list[float]] = {}
    wall: dict[tuple[str, str], list[float]] = {}
    for _ in range(max(1, a.repeat)):
        for tree, path in trees.items():
            for label, argv in cmds[tree].items():
                c, w = measure(argv, path)
                cpu.setdefault((tree, label), []).append(c)
                wall.setdefault((tree, label), []).append(w)
        load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; load average {min(load):.1f}-{max(load):.1f} "
          f"during the {a.repeat} rounds; medians over rounds, each a fresh process")
    head = "| command | CPU s | wall s | × bare |" + (" CPU s before | × bare before | now / before |" if a.before else "")
    print(head)
    print("| --- | ---: | ---: | ---: |" + (" ---: | ---: | ---: |" if a.before else ""))
    rows = []
    for label in cmds["now"]:
        c = med[("now", label)]
        bare = med[("now", BARE)]
        line = f"| {label} | {c:.3f} | {statistics.median(wall[('now', label)]):.3f} | {c / bare:.1f} |"
        row = {"command": label, "cpu_s": c, "wall_s": statistics.median(wall[("now", label)]), "bare_cpu_s": bare,
               "rounds": a.repeat, "cpu_all": cpu[("now", label)], "load": [min(load), max(load)]}
        if a.before and ("before", label) in med:
            b, bare_b = med[("before", label)], med[("before", BARE)]
            line += f" {b:.3f} | {b / bare_b:.1f} | {c / b:.2f} |"
            row |= {"before_cpu_s": b, "before_bare_cpu_s": bare_b}
        print(line)
        rows.append(row)
    if a.json is not None:
        with open(a.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
