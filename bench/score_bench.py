"""How fast is `score_retrieval` on a large stored run, next to pytrec_eval on the same data?

For N in 1,000 / 10,000 / 100,000 cases it makes (once, cached under --workdir):

    eval_set.jsonl   N cases: 90% answerable with 1-3 anchor gold supports (rel_path +
                     heading_path, one in five as chunk_id), graded relevance 1 or 2,
                     support groups on 30%; 10% unanswerable; categories, tags, difficulty
    results/bench    a run written by `evalkit.run_eval()` with this file's `ask` as a
                     Python-callable target (K = 20, retrieval-only), so results.jsonl is
                     our own format: 20 chunks per case, text cut to 200 characters
    run.trec, qrels.trec
                     the same run and labels as TREC files. Every gold support names
                     exactly one section and every section is one chunk, so chunk-level
                     qrels and our support-level matching agree (as in
                     tests/unit/test_metrics_reference.py)

Then, each in a fresh process (wall time of the work itself, peak RSS of the process):

    evalkit     `evalkit.score_retrieval(run_id, ks=[10, 20])`: stream results.jsonl, hash
                the eval set, match, score, aggregate overall and by group, merge into
                metrics.json
    pytrec_eval parse run.trec and qrels.trec in Python, build a RelevanceEvaluator and
                evaluate recall_10, P_10, recip_rank, ndcg_cut_10 (trec_eval's recip_rank
                has no cut-off: it is MRR over the 20 chunks)

pytrec_eval is not a dependency of evalkit: give its interpreter with --trec-python
(a venv with `pip install pytrec_eval-terrier`). Without it the script says so and times
ranx (test extra) on the same TREC files instead.

Usage:
    python bench/score_bench.py                                  # N = 1000 10000 100000
    python bench/score_bench.py --n 1000 10000 --repeat 3
    python bench/score_bench.py --trec-python /tmp/benchenv/bin/python
    python bench/score_bench.py --check                          # also compare the values
    python bench/score_bench.py --phases                         # read / score / aggregate split

Target: evalkit within 1.5x of pytrec_eval at 100,000 cases, under 500 MB peak RSS.
Results: bench/README.md, section "Re-scoring a stored run".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

K = 20
N_NOTES = 5000
N_SECTIONS = 8
CATEGORIES = ("factual", "reasoning", "multi_hop", "general", "adversarial")
TAGS = ("work", "personal", "howto", "ops", "research")
DIFFICULTIES = ("easy", "medium", "hard")
_WORDS = "alpha beta gamma delta retrieval anchor index vault note chunk heading section answer model".split()
_CASE = re.compile(r"^case (\d+):")


# --------------------------------------------------------------------------- the data


def _rel_path(note: int) -> str:
    return f"area{note % 17}/note{note}.md"


def _heading(note: int, section: int) -> str:
    return f"# Note {note} > ## Section {section}"


def _chunk_id(note: int, section: int) -> str:
    return hashlib.sha256(f"bench|{note}|{section}".encode()).hexdigest()[:32]


def _gold(i: int) -> dict:
    """Case i's labels and retrieval plan, a pure function of i (the eval set and `ask` agree)."""
    rng = random.Random(i * 7919 + 17)
    answerable = rng.random() >= 0.1
    note = rng.randrange(N_NOTES)
    sections = rng.sample(range(N_SECTIONS), rng.randint(1, 3)) if answerable else []
    return {"rng": rng, "answerable": answerable, "note": note, "sections": sections}


def make_case(i: int) -> dict:
    g = _gold(i)
    rng = g["rng"]
    supports = []
    for s in g["sections"]:
        rel = 1 if rng.random() < 0.7 else 2
        if rng.random() < 0.2:
            supports.append({"chunk_id": _chunk_id(g["note"], s), "relevance": rel})
        else:
            supports.append({"rel_path": _rel_path(g["note"]), "heading_path": _heading(g["note"], s), "relevance": rel})
    case = {
        "id": f"q{i:06d}",
        "question": f"case {i}: what does note {g['note']} say about {rng.choice(_WORDS)}?",
        "answerable": g["answerable"],
        "gold_supports": supports,
        "category": rng.choice(CATEGORIES),
        "tags": rng.sample(TAGS, rng.randint(1, 2)),
        "difficulty": rng.choice(DIFFICULTIES),
    }
    if supports and rng.random() < 0.3:
        case["required_support_groups"] = [list(range(len(supports)))]
    return case


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(50))  # about 300 characters: cut to 200


def ask(request: dict) -> dict:
    """The Python-callable target: 20 chunks, some of them the gold sections, at random ranks."""
    i = int(_CASE.match(request["question"]).group(1))
    g = _gold(i)
    rng = random.Random(i * 104729 + 3)
    picked: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for s in g["sections"]:
        if rng.random() < 0.75:
            picked.append((g["note"], s))
            seen.add((g["note"], s))
    while len(picked) < request["k"]:
        loc = (g["note"], rng.randrange(N_SECTIONS)) if rng.random() < 0.3 else (rng.randrange(N_NOTES), rng.randrange(N_SECTIONS))
        if loc not in seen:
            seen.add(loc)
            picked.append(loc)
    rng.shuffle(picked)
    chunks = []
    for rank, (note, s) in enumerate(picked[: request["k"]], start=1):
        chunks.append({
            "chunk_id": _chunk_id(note, s), "rel_path": _rel_path(note), "heading_path": _heading(note, s),
            "start_line": 10 * s + 1, "end_line": 10 * s + 9, "score_vector": 1.0 / rank, "score_lexical": 0.5,
            "score_final": 1.0 / rank, "text": _text(rng), "rank": rank,
        })
    top = chunks[0]
    return {
        "answer": f"Note {g['note']} says so [1].",
        "references": [{k: top[k] for k in ("chunk_id", "rel_path", "heading_path")}],
        "abstained": not g["answerable"] and rng.random() < 0.8,
        "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1.0}},
    }


def case_folder(workdir: Path, n: int, case: Callable[[int], dict]) -> tuple[Path, bool]:
    """(workdir/n<N>, whether it is ready): a folder whose `ready` mark is missing is made
    anew with an eval set of `case(0) ... case(N - 1)` (compare_bench's folders too)."""
    folder = workdir / f"n{n}"
    if (folder / "ready").exists():
        return folder, True
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with open(folder / "eval_set.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps(case(i)) + "\n")
    return folder, False


def prepare(n: int, workdir: Path) -> Path:
    """The N-case folder: eval set, a run_eval run, TREC files. Reused when already made."""
    folder, ready = case_folder(workdir, n, make_case)
    if ready:
        return folder
    done = folder / "ready"
    from evalkit import run_eval

    t0 = time.perf_counter()
    result = run_eval(
        eval_set=str(folder / "eval_set.jsonl"), k=[K], target=f"python:{Path(__file__).resolve()}:ask",
        retrieval_only=True, results_dir=str(folder / "results"), run_id="bench", concurrency=16, no_probe=True,
        quiet=True,
    )
    print(f"  n={n}: run_eval wrote {result.n_cases} cases in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    write_trec(folder)
    done.write_text("ok\n")
    return folder


def write_trec(folder: Path) -> None:
    """qrels.trec (qid 0 docid rel) from the eval set; run.trec (qid Q0 docid rank score tag) from results.jsonl."""
    import orjson

    with open(folder / "eval_set.jsonl", "rb") as src, open(folder / "qrels.trec", "w") as out:
        for line in src:
            case = orjson.loads(line)
            for s in case["gold_supports"]:
                doc = s.get("chunk_id") or _locate(s)
                out.write(f"{case['id']} 0 {doc} {int(s['relevance'])}\n")
    with open(folder / "results" / "bench" / "results.jsonl", "rb") as src, open(folder / "run.trec", "w") as out:
        for line in src:
            rec = orjson.loads(line)
            for c in rec["retrieved_chunks"]:
                out.write(f"{rec['test_case_id']} Q0 {c['chunk_id']} {c['rank']} {K + 1 - c['rank']} bench\n")


def _locate(support: dict) -> str:
    m = re.match(r"area\d+/note(\d+)\.md$", support["rel_path"])
    s = int(support["heading_path"].rsplit(" ", 1)[1])
    return _chunk_id(int(m.group(1)), s)


# --------------------------------------------------------------------------- the timed jobs

# Each job runs in a fresh interpreter and prints one JSON line: {"wall_s", "rss_mb", ...}.
_EVALKIT_JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    import evalkit
    from evalkit.rescore.scoring import score_retrieval
    folder, workers = sys.argv[1], (int(sys.argv[2]) if len(sys.argv) > 2 else None)
    cpu = lambda: sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                      for f in ("ru_utime", "ru_stime"))
    c0, t0 = cpu(), time.perf_counter()
    res = score_retrieval("bench", ks=[10, 20], results_dir=folder + "/results", workers=workers)
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    at = res.metrics["aggregate_metrics"]["at_k"]["10"]
    rss = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024
    print(json.dumps({"wall_s": wall, "cpu_s": cpu_s, "rss_mb": rss, "processes": res.processes,
                      "values": {m: at[m] for m in ("recall_frac", "precision", "ndcg", "mrr")}, "n": at["n"]}))
    """
)

# Where the time goes, in one process (workers=1): CPU time (other processes weigh less) of three fresh processes, each
# starting cold (path and heading tables empty), as a user's run does: reading records
# (RunDir.iter_results: file + orjson); reading + scoring each one (`score_case_retrieval`, what
# a re-scoring that changes the per-case values does per record); score_retrieval whole (+ the
# derive: every cell, metrics.json, summary.md and results.json; on the bench's folder, after
# its first call, nothing changed per case, so this is the derive alone).
_PHASE_JOB = textwrap.dedent(
    """
    import json, sys, time
    from evalkit.metrics.retrieval import score_case_retrieval
    from evalkit.rescore.scoring import score_retrieval
    from evalkit.store.runs import RunDir
    folder, phase = sys.argv[1], sys.argv[2]
    run = RunDir(folder + "/results/bench")
    t0 = time.process_time()
    if phase == "read":
        for r in run.iter_results():
            pass
    elif phase == "read+score":
        for r in run.iter_results():
            score_case_retrieval(r["case"], r["retrieved_chunks"], r.get("references") or [], None, "off", [10, 20])
    else:
        score_retrieval("bench", ks=[10, 20], results_dir=folder + "/results", workers=1)
    print(json.dumps({"cpu_s": time.process_time() - t0}))
    """
)

_PYTREC_JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    import pytrec_eval  # imports are not timed, for any tool (once per process)
    folder = sys.argv[1]
    c0, t0 = time.process_time(), time.perf_counter()
    qrels, run = {}, {}
    with open(folder + "/qrels.trec") as f:
        for line in f:
            q, _, d, r = line.split()
            qrels.setdefault(q, {})[d] = int(r)
    with open(folder + "/run.trec") as f:
        for line in f:
            q, _, d, _, s, _ = line.split()
            run.setdefault(q, {})[d] = float(s)
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recall_10", "P_10", "recip_rank", "ndcg_cut_10"})
    per_q = ev.evaluate(run)
    means = {m: sum(v[m] for v in per_q.values()) / len(per_q) for m in ("recall_10", "P_10", "ndcg_cut_10", "recip_rank")}
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "cpu_s": time.process_time() - c0,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "values": means, "n": len(per_q)}))
    """
)

_RANX_JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    folder = sys.argv[1]
    import ranx  # import and numba's first compile are not timed (they are once per process)
    ranx.evaluate(ranx.Qrels({"q": {"d": 1}}), ranx.Run({"q": {"d": 1.0}}), ["recall@10", "precision@10", "mrr@10", "ndcg_burges@10"])
    c0, t0 = time.process_time(), time.perf_counter()
    qrels = ranx.Qrels.from_file(folder + "/qrels.trec", kind="trec")
    run = ranx.Run.from_file(folder + "/run.trec", kind="trec")
    means = ranx.evaluate(qrels, run, ["recall@10", "precision@10", "mrr@10", "ndcg_burges@10"], make_comparable=True)
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "cpu_s": time.process_time() - c0,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "values": {k: float(v) for k, v in means.items()}}))
    """
)


def _job(python: str, code: str, folder: Path, *args: str) -> dict:
    out = subprocess.run([python, "-c", code, str(folder), *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"job failed ({python}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_pytrec(python: str) -> bool:
    return subprocess.run([python, "-c", "import pytrec_eval"], capture_output=True, check=False).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeat", type=int, default=1, help="Time each job this many times (fresh processes).")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_score_bench"))
    ap.add_argument("--trec-python", default=sys.executable, help="Interpreter that has pytrec_eval.")
    ap.add_argument("--workers", nargs="+", default=["auto", "1"],
                    help="score_retrieval's workers per timed job: 'auto' (its default) and/or numbers.")
    ap.add_argument("--check", action="store_true", help="Print both tools' @10 means side by side.")
    ap.add_argument("--phases", action="store_true", help="Also split evalkit's CPU time: read / score / aggregate.")
    args = ap.parse_args()

    trec = "pytrec_eval" if _has_pytrec(args.trec_python) else "ranx"
    if trec == "ranx":
        print(f"pytrec_eval cannot be imported by {args.trec_python}: timing ranx instead", file=sys.stderr)
    print(f"| N | evalkit procs | evalkit wall s | µs/case | CPU s | peak RSS MB | {trec} wall s | CPU s | RSS MB "
          "| wall ratio | CPU ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in args.n:
        folder = prepare(n, args.workdir)
        ours: dict[str, list[dict]] = {w: [] for w in args.workers}
        theirs = []
        for _ in range(args.repeat):
            # Alternating, so both see the same machine load.
            for w in args.workers:
                ours[w].append(_job(sys.executable, _EVALKIT_JOB, folder, *([] if w == "auto" else [w])))
            theirs.append(_job(args.trec_python, _PYTREC_JOB if trec == "pytrec_eval" else _RANX_JOB, folder))
        ref = min(theirs, key=lambda r: r["wall_s"])
        for w in args.workers:
            best = min(ours[w], key=lambda r: r["wall_s"])
            row = (f"| {n:,} | {best['processes']} | {best['wall_s']:.2f} | {best['wall_s'] / n * 1e6:.1f} | "
                   f"{best['cpu_s']:.2f} | {max(r['rss_mb'] for r in ours[w]):.0f} | {ref['wall_s']:.2f} | "
                   f"{ref['cpu_s']:.2f} | {max(r['rss_mb'] for r in theirs):.0f} | {best['wall_s'] / ref['wall_s']:.2f} | "
                   f"{best['cpu_s'] / ref['cpu_s']:.2f} |")
            print(row, flush=True)
        if args.phases:
            ph = {p: min(_job(sys.executable, _PHASE_JOB, folder, p)["cpu_s"] for _ in range(args.repeat))
                  for p in ("read", "read+score", "all")}
            read, score = ph["read"], ph["read+score"] - ph["read"]
            print(f"    CPU µs/case: read {read / n * 1e6:.0f}, score {score / n * 1e6:.0f}; "
                  f"score_retrieval of an unchanged run (the derive) {ph['all'] / n * 1e6:.0f}", flush=True)
        if args.check:
            print(f"    evalkit @10 (n={best['n']}): {best['values']}\n    {trec}: {ref['values']}", flush=True)


if __name__ == "__main__":
    main()
