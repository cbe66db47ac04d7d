"""Peak RSS and wall time of `evalkit embed` (offline lexical vectors) on real SciFact runs
of N cases at K = 20 (bench/real_runs.py), this tree beside another copy of evalkit (`--base`,
e.g. `git archive` of the commit before a change), in fresh processes, alternating which goes
first, the same rounds. Each job embeds a private copy of the run folder (the shared one under
--workdir is left as it is) and the two embeddings.json are compared byte for byte but for
`computed_at`.

    python bench/embed_memory_bench.py --base /tmp/embed_base [--n 1000 2000 10000] [--rounds 1]

Peak RSS is the kernel's (`os.wait4`'s ru_maxrss). Other jobs share the machine's cores: the
wall times are noisy, read the same-round ratio; the RSS hardly depends on the load.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
CLI = "import sys; from evalkit.cli.main import app; sys.argv[0] = 'evalkit'; sys.exit(app())"


def measure(tree: Path, results: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CLI, "embed", "--run-id", "bench", "--results-dir", str(results)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=results.parent)  # not this tree: `python -c` puts the cwd first on sys.path
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: evalkit embed failed:\n{err[-2000:]}")
    body = re.sub(rb'"computed_at": "[^"]*"', b"", (results / "bench" / "embeddings.json").read_bytes())
    return {"wall_s": time.perf_counter() - t0, "rss_mb": usage.ru_maxrss / 1024, "body": body}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the other copy of evalkit (its root)")
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000, 10000])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_real_runs"))
    args = ap.parse_args()
    from real_runs import prepare

    trees = {"before": args.base.resolve(), "after": ROOT}
    rows = []
    for n in args.n:
        shared = prepare("scifact", n, args.workdir) / "results"
        got: dict[str, list[dict]] = {"before": [], "after": []}
        loads = []
        for i in range(args.rounds):
            for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
                private = args.workdir / f"embed-mem-{name}-n{n}"
                shutil.rmtree(private, ignore_errors=True)
                shutil.copytree(shared, private)
                (private / "bench" / "embeddings.json").unlink(missing_ok=True)
                loads.append(os.getloadavg()[0])
                got[name].append(measure(trees[name], private))
                shutil.rmtree(private, ignore_errors=True)
        same = all(a["body"] == b["body"] for a, b in zip(got["before"], got["after"]))
        rows.append((n, got, same, loads))
        print(f"n={n} done", file=sys.stderr)
    print(f"evalkit embed, SciFact, K = 20; {args.rounds} round(s) per N, alternating, fresh processes; "
          f"{os.cpu_count()} cores shared with other sessions")
    print("| cases | peak RSS before (MB) | peak RSS after (MB) | RSS after/before | wall before (s) | wall after (s) | "
          "wall after/before | embeddings.json identical | load (1 min) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, got, same, loads in rows:
        rb = max(r["rss_mb"] for r in got["before"])
        ra = max(r["rss_mb"] for r in got["after"])
        wb = min(r["wall_s"] for r in got["before"])
        wa = min(r["wall_s"] for r in got["after"])
        print(f"| {n:,} | {rb:.0f} | {ra:.0f} | {ra / rb:.2f} | {wb:.1f} | {wa:.1f} | {wa / wb:.2f} | "
              f"{'yes' if same else 'NO'} | {min(loads):.1f}-{max(loads):.1f} |")


if __name__ == "__main__":
    main()
