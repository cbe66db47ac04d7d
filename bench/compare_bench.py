"""How long does `compare_runs` take on two large runs with realistic slices (issue 36 item 11)?

For N cases it makes, once, under --workdir (`n<N>/`):

    eval_set.jsonl   score_bench's synthetic set (`make_case`: 1-3 anchor supports, graded, groups
                     on 30 %, 10 % unanswerable, 5 categories, 5 tags, 3 difficulties) plus a domain
                     (4) and, on a third of the answerable cases, an expected answer
    results/a, b     two runs written by `evalkit.run_eval()` with this file's `ask_a` / `ask_b` as
                     Python-callable targets, K = 5, 1, 3, 10, the default evaluators (the offline
                     heuristic judge scores groundedness and correctness of every answered case).
                     Run b answers a share of the cases differently (`CHANGED`): other chunks,
                     a little more often the gold ones, another answer, another abstention
                     decision now and then; on every other case it answers exactly as run a

Then each job runs in a fresh process, alternating, `--repeat` rounds:

    compare     `evalkit.compare.compare_runs("a", "b")` as compare_runs.py calls it (the
                default --seed 0 and --resamples 10,000): wall, and CPU time of the process and
                its forked worker, and peak RSS
    reference   the resampling compare_runs did before issue 36, in plain numpy, over the same
                distinct paired tests (`reference_tests`): per test, a 10,000 × n bootstrap of the
                case indices and 10,000 random sign patterns over the n paired cases
                (`reference_resampling`). With --reference-rows R only R tests, spread over the
                sizes, are timed, and the time is scaled by their share of Σ n (said in the output)

The table shows medians over the rounds and the load average at the start of every job.

Usage:
    python bench/compare_bench.py                          # N = 10000 100000, 3 rounds
    python bench/compare_bench.py --n 10000 --repeat 5
    python bench/compare_bench.py --n 100000 --reference-rows 24
    python bench/compare_bench.py --n 10000 --no-reference --tree DIR   # another copy of evalkit
    python bench/compare_bench.py --profile 10000          # cProfile of one compare, top functions

Target (issue 36 item 11): compare_runs ≤ 3 s wall at 10,000 vs 10,000 cases and ≤ 30 s at
100,000 on the 2-core bench machine. Results: bench/README.md, "Comparing two large runs".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from score_bench import _CASE, _WORDS, N_NOTES, N_SECTIONS, _chunk_id, _gold, _heading, _rel_path  # noqa: E402
from score_bench import case_folder  # noqa: E402
from score_bench import make_case as _score_case  # noqa: E402

KS = [5, 1, 3, 10]
DOMAINS = ("install", "config", "usage", "api")
# Share of cases run b answers differently.
CHANGED = 0.25


# --------------------------------------------------------------------------- the data


def make_case(i: int) -> dict:
    case = _score_case(i)
    rng = random.Random(i * 6151 + 29)
    case["domain"] = rng.choice(DOMAINS)
    if case["answerable"] and rng.random() < 0.33:
        case["expected_answer"] = f"Note {_gold(i)['note']} explains the {rng.choice(_WORDS)} of the {rng.choice(_WORDS)}."
    return case


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(40))


def _answer(i: int, variant: str, changed: bool) -> dict:
    """Case i's response from run `variant`; run b differs from run a only where `changed`."""
    g = _gold(i)
    rng = random.Random(i * 104729 + (7 if variant == "b" and changed else 3))
    gold_p = 0.8 if variant == "b" and changed else 0.72
    picked: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for s in g["sections"]:
        if rng.random() < gold_p:
            picked.append((g["note"], s))
            seen.add((g["note"], s))
    while len(picked) < max(KS):
        loc = (g["note"], rng.randrange(N_SECTIONS)) if rng.random() < 0.3 else (rng.randrange(N_NOTES), rng.randrange(N_SECTIONS))
        if loc not in seen:
            seen.add(loc)
            picked.append(loc)
    rng.shuffle(picked)
    chunks = []
    for rank, (note, s) in enumerate(picked[: max(KS)], start=1):
        chunks.append({
            "chunk_id": _chunk_id(note, s), "rel_path": _rel_path(note), "heading_path": _heading(note, s),
            "start_line": 10 * s + 1, "end_line": 10 * s + 9, "score_vector": 1.0 / rank, "score_lexical": 0.5,
            "score_final": 1.0 / rank, "text": _text(rng), "rank": rank,
        })
    abstain = rng.random() < (0.8 if not g["answerable"] else 0.04)
    top = chunks[0]
    if abstain:
        answer = "I don't know: the notes do not mention it."
    else:
        words = top["text"].split()
        start = rng.randrange(len(words) - 8)
        cite = " [1]" if rng.random() < 0.7 else ""
        answer = f"Note {g['note']} says {' '.join(words[start:start + 6])}{cite}. It also covers {rng.choice(_WORDS)}."
    return {
        "answer": answer,
        "references": [{k: top[k] for k in ("chunk_id", "rel_path", "heading_path")}],
        "abstained": abstain,
        "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1.0 + rng.random(), "generation": 5.0}},
    }


def _changed(i: int) -> bool:
    return random.Random(i * 15485863 + 11).random() < CHANGED


def ask_a(request: dict) -> dict:
    """Run a's target (the baseline)."""
    i = int(_CASE.match(request["question"]).group(1))
    return _answer(i, "a", _changed(i))


def ask_b(request: dict) -> dict:
    """Run b's target: as run a's, except on the CHANGED share of cases."""
    i = int(_CASE.match(request["question"]).group(1))
    return _answer(i, "b", _changed(i))


def prepare(n: int, workdir: Path) -> Path:
    """The N-case folder: eval set and the two runs. Reused when already made."""
    folder, ready = case_folder(workdir, n, make_case)
    if ready:
        return folder
    done = folder / "ready"
    from evalkit import run_eval

    for run_id in ("a", "b"):
        t0 = time.perf_counter()
        result = run_eval(
            eval_set=str(folder / "eval_set.jsonl"), k=KS, target=f"python:{Path(__file__).resolve()}:ask_{run_id}",
            results_dir=str(folder / "results"), run_id=run_id, concurrency=16, no_probe=True, quiet=True,
            allow_regressions=True,
        )
        print(f"  n={n}: run {run_id}: {result.n_cases} cases in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    done.write_text("ok\n")
    return folder


# --------------------------------------------------------------------------- the reference


def reference_resampling(a: np.ndarray, b: np.ndarray, key: str, seed: int = 0, resamples: int = 10_000) -> None:
    """One paired test as compare_runs drew it before issue 36, in plain numpy (its
    `evalkit.metrics.stats` of 2026-11-28): the cases both scored; none changed -> nothing
    drawn; else a percentile bootstrap of R resamples of n case indices each, and a sign-flip
    test over all n cases, every sign pattern when 2^n <= R, else R random ones (64 per word),
    in blocks of 2^21 elements."""
    keep = ~(np.isnan(a) | np.isnan(b))
    d = b[keep] - a[keep]
    n = d.shape[0]
    if n == 0 or not d.any():
        return
    boot, test = np.random.SeedSequence(seed, spawn_key=_key_words(key)).spawn(2)
    rng = np.random.default_rng(boot)
    means = np.empty(resamples)
    rows = max(1, (1 << 21) // n)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        means[start:stop] = np.take(d, rng.integers(0, n, size=(stop - start, n))).sum(axis=1) / n
    np.quantile(means, [0.025, 0.975])
    total, threshold = float(d.sum()), abs(float(d.sum())) - 1e-9 * float(np.abs(d).sum())
    if n < 63 and (1 << n) <= resamples:
        bits = (np.arange(1 << n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)) & 1
        np.count_nonzero(np.abs(total - 2.0 * (bits @ d)) >= threshold)
        return
    rng, words = np.random.default_rng(test), -(-n // 64)
    for start in range(0, resamples, rows):
        packed = rng.integers(0, 2**64, size=(min(resamples, start + rows) - start, words), dtype=np.uint64)
        bits = np.unpackbits(packed.astype("<u8", copy=False).view(np.uint8), axis=1, count=n, bitorder="little")
        np.count_nonzero(np.abs(total - 2.0 * (bits.astype(np.float64) @ d)) >= threshold)


def _key_words(key: str) -> tuple[int, ...]:
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 32, 4))


def reference_tests(results: str) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The distinct paired tests of compare_runs("a", "b"): each one's per-case values in both
    runs and its key, caught as compare_runs hands them to `compare_paired` (rows with the same
    paired data share one test, as they did before)."""
    import evalkit.compare.compute as compute
    from evalkit.compare import compare_runs

    caught: list[tuple[np.ndarray, np.ndarray, str]] = []
    real = compute.compare_paired

    def catch(a, b, *, key, **kwargs):
        caught.append((np.array(a), np.array(b), key))
        return real(a, b, key=key, **kwargs)

    compute.compare_paired = catch
    try:
        compare_runs("a", "b", results_dir=results)
    finally:
        compute.compare_paired = real
    return caught


# --------------------------------------------------------------------------- the timed jobs

# Each job runs in a fresh interpreter (imports not timed) and prints one JSON line.
_COMPARE_JOB = textwrap.dedent(
    """
    import json, os, resource, sys, time
    from evalkit.compare import compare_runs
    cpu = lambda: sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                      for f in ("ru_utime", "ru_stime"))
    load = os.getloadavg()[0]
    c0, t0 = cpu(), time.perf_counter()
    result = compare_runs("a", "b", results_dir=sys.argv[1])
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    rss = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024
    stats = result.stats
    methods = getattr(stats, "methods", None)  # None: a copy of evalkit from before issue 36 (--tree)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu_s, "rss_mb": rss, "load": load, "rows": len(result.deltas),
                      "tested_rows": stats.n_tested, "tests": sum(methods["p"].values()) if methods else None,
                      "family": stats.family_size, "significant": stats.n_significant, "methods": methods}))
    """
)

_REFERENCE_JOB = textwrap.dedent(
    """
    import json, os, resource, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    from compare_bench import reference_resampling, reference_tests
    tests = reference_tests(sys.argv[1])
    every = len(tests)
    size = lambda t: int((~(np.isnan(t[0]) | np.isnan(t[1]))).sum())
    limit = int(sys.argv[2])
    # An even spread of the tests by size when only some are timed; the time is scaled by their share of Σ n.
    timed = sorted(tests, key=size)[:: max(1, len(tests) // limit)][:limit] if limit else tests
    share = sum(map(size, timed)) / max(1, sum(map(size, tests)))
    cpu = lambda: sum(getattr(resource.getrusage(resource.RUSAGE_SELF), f) for f in ("ru_utime", "ru_stime"))
    load = os.getloadavg()[0]
    c0, t0 = cpu(), time.perf_counter()
    for a, b, key in timed:
        reference_resampling(a, b, key)
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    print(json.dumps({"wall_s": wall / share, "cpu_s": cpu_s / share, "load": load, "tests": every, "timed": len(timed),
                      "share": share, "measured_wall_s": wall}))
    """
)


def _job(code: str, cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    # Not from the checkout: `python -c` puts the working directory first on sys.path, before --tree's copy.
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False, cwd=cwd, env=env)
    if out.returncode != 0:
        raise SystemExit(f"job failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def profile(n: int, workdir: Path, top: int) -> None:
    """cProfile of one compare_runs in this process (the forked pass of run b is not in it)."""
    import cProfile
    import pstats

    from evalkit.compare import compare_runs

    folder = prepare(n, workdir)
    prof = cProfile.Profile()
    prof.enable()
    compare_runs("a", "b", results_dir=str(folder / "results"))
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--repeat", type=int, default=3, help="Alternating rounds of both jobs; the table shows medians.")
    ap.add_argument("--reference-rows", type=int, default=0,
                    help="Time only this many of the reference's tests (spread by size) and scale to all (0: all).")
    ap.add_argument("--no-reference", action="store_true", help="Time compare_runs only.")
    ap.add_argument("--tree", type=Path, help="Put this copy of evalkit first on PYTHONPATH for the compare job.")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_compare_bench"))
    ap.add_argument("--profile", type=int, metavar="N", help="Print a cProfile of one compare at N cases and stop.")
    ap.add_argument("--json", type=Path, help="Also append every measurement to this JSON-lines file.")
    args = ap.parse_args()
    if args.profile:
        profile(args.profile, args.workdir, 40)
        return

    env = dict(os.environ)
    if args.tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(args.tree.resolve()), *filter(None, [env.get("PYTHONPATH")])])
    print(f"machine: {os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.2f}")
    print("| N | rows | tests | compare wall s | CPU s | peak RSS MB | reference wall s | CPU s | wall ratio | CPU ratio "
          "| load |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |", flush=True)
    for n in args.n:
        results = str(prepare(n, args.workdir) / "results")
        ours, refs = [], []
        for _ in range(args.repeat):  # alternating, so that both see the same machine
            ours.append({"job": "compare", "n": n, "tree": str(args.tree or ""),
                         **_job(_COMPARE_JOB, args.workdir, results, env=env)})
            if not args.no_reference:
                refs.append({"job": "reference", "n": n,
                             **_job(_REFERENCE_JOB, args.workdir, results, str(args.reference_rows), str(BENCH))})
        if args.json is not None:
            with open(args.json, "a") as f:
                for row in ours + refs:
                    f.write(json.dumps({**row, "date": time.strftime("%Y-%m-%d")}) + "\n")
        med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
        loads = ", ".join(f"{r['load']:.1f}" for r in ours + refs)
        ref = (f"{med(refs, 'wall_s'):.1f} | {med(refs, 'cpu_s'):.1f} | {med(ours, 'wall_s') / med(refs, 'wall_s'):.3f} | "
               f"{med(ours, 'cpu_s') / med(refs, 'cpu_s'):.3f}") if refs else "— | — | — | —"
        scaled = f" (scaled from {refs[0]['timed']} of {refs[0]['tests']} tests)" if refs and refs[0]["timed"] < refs[0]["tests"] else ""
        tests = refs[0]["tests"] if refs else ours[0]["tests"]
        print(f"| {n:,} | {ours[0]['rows']} | {tests} | {med(ours, 'wall_s'):.2f} | {med(ours, 'cpu_s'):.2f} | "
              f"{max(r['rss_mb'] for r in ours):.0f} | {ref} | {loads}{scaled} |", flush=True)


if __name__ == "__main__":
    main()
