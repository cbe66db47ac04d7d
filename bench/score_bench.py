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

Real text (the default since issue 39, `--data scifact`): the same, but the notes are SciFact's
abstracts cut into ~300-character sections (/work/shared/corpora/scifact), each case has one
gold support (a section) and asks with a SciFact claim, and a fifth of the cases never retrieve
their gold (the others at a rank that favours the top). Each round runs, alternating, each in a
fresh process: score_retrieval at a new K (results.jsonl rewritten), the same again (nothing
changed per case: the derive alone, which is one process), pytrec_eval, the parse floor
(orjson over results.jsonl's lines), the floor plus the depth guard as it was before issue 39
(two bytes.count per line), and RunDir.iter_results (the bounded reader, guard included). It
prints every job with its CPU over the floor's and its wall over pytrec_eval's of the same
round, and the load average when it started; --json writes the rows for bench/table.py.

Usage:
    python bench/score_bench.py --trec-python /tmp/benchenv/bin/python --n 100000 --repeat 3
    python bench/score_bench.py --data synthetic                 # N = 1000 10000 100000
    python bench/score_bench.py --n 1000 10000 --repeat 3
    python bench/score_bench.py --trec-python /tmp/benchenv/bin/python
    python bench/score_bench.py --check                          # also compare the values
    python bench/score_bench.py --phases                         # read / score / aggregate split

Targets: evalkit within 1.5x of pytrec_eval at 100,000 cases, under 500 MB peak RSS (issue 10);
scoring within 2x of the parse floor, the depth guard within 10 % of it (issue 39).
Results: bench/README.md, section "Re-scoring a stored run".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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


def write_trec(folder: Path, locate: Callable[[dict], str] | None = None) -> None:
    """qrels.trec (qid 0 docid rel) from the eval set; run.trec (qid Q0 docid rank score tag) from results.jsonl."""
    import orjson

    with open(folder / "eval_set.jsonl", "rb") as src, open(folder / "qrels.trec", "w") as out:
        for line in src:
            case = orjson.loads(line)
            for s in case["gold_supports"]:
                doc = s.get("chunk_id") or (locate or _locate)(s)
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


# --------------------------------------------------------------------------- real text (issue 39)

# The setting: chunks of real text (SciFact abstracts, cut at word boundaries to about
# 300 characters, each its own section), one gold support per case, and a fifth of the cases
# never retrieving it; the gold chunk of the others at a rank that favours the top.
SCIFACT = Path("/work/shared/corpora/scifact")
CHUNK_CHARS = 300
MISS_RATE = 0.2
_REAL_CASE = re.compile(r"^case (\d+):")


class _Corpus:
    """SciFact's abstracts as notes of ~300-character sections, and its queries (read once)."""

    def __init__(self, root: Path = SCIFACT) -> None:
        import orjson

        self.notes: list[tuple[str, str, list[str]]] = []  # (doc id, title, section texts)
        with open(root / "corpus.jsonl", "rb") as f:
            for line in f:
                doc = orjson.loads(line)
                parts = _cut(doc["text"]) or [doc["title"]]
                self.notes.append((doc["_id"], " ".join(doc["title"].split()), parts))
        with open(root / "queries.jsonl", "rb") as f:
            self.queries = [orjson.loads(line)["text"] for line in f]

    def rel_path(self, d: int) -> str:
        return f"scifact/{self.notes[d][0]}.md"

    def heading(self, d: int, s: int) -> str:
        title = self.notes[d][1].replace(">", "-")  # a title's ">" would split the heading path
        return f"# {title} > ## Part {s + 1}"

    def chunk_id(self, d: int, s: int) -> str:
        return hashlib.sha256(f"scifact|{self.notes[d][0]}|{s}".encode()).hexdigest()[:32]


def _cut(text: str) -> list[str]:
    words, parts, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > CHUNK_CHARS:
            parts.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return [*parts, cur] if cur else parts


_CORPUS: _Corpus | None = None


def corpus() -> _Corpus:
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = _Corpus()
    return _CORPUS


def _real_gold(i: int) -> tuple[random.Random, int, int]:
    """(rng, note, section) of case i's one gold support: a pure function of i."""
    c = corpus()
    rng = random.Random(i * 7919 + 23)
    d = rng.randrange(len(c.notes))
    return rng, d, rng.randrange(len(c.notes[d][2]))


def make_real_case(i: int) -> dict:
    c = corpus()
    rng, d, s = _real_gold(i)
    return {
        "id": f"q{i:06d}",
        "question": f"case {i}: {c.queries[i % len(c.queries)]}",
        "answerable": True,
        "gold_supports": [{"rel_path": c.rel_path(d), "heading_path": c.heading(d, s), "relevance": 1}],
        "category": rng.choice(CATEGORIES),
        "tags": rng.sample(TAGS, rng.randint(1, 2)),
        "difficulty": rng.choice(DIFFICULTIES),
    }


def ask_real(request: dict) -> dict:
    """The Python-callable target on real text: K chunks; the gold one, unless the case is one
    of the fifth that never retrieve it, at a rank drawn to favour the top; the others from
    the same abstract (a third) or any other."""
    c = corpus()
    i = int(_REAL_CASE.match(request["question"]).group(1))
    _, d, s = _real_gold(i)
    rng = random.Random(i * 104729 + 5)
    k = request["k"]
    seen = {(d, s)}
    picked: list[tuple[int, int]] = []
    while len(picked) < k:
        other = d if rng.random() < 0.33 else rng.randrange(len(c.notes))
        loc = (other, rng.randrange(len(c.notes[other][2])))
        if loc not in seen:
            seen.add(loc)
            picked.append(loc)
    if rng.random() >= MISS_RATE:
        rank = min(int(rng.expovariate(0.35)), k - 1)  # 0-based; about a third at rank 1
        picked[rank] = (d, s)
    chunks = []
    for rank, (note, part) in enumerate(picked, start=1):
        chunks.append({
            "chunk_id": c.chunk_id(note, part), "rel_path": c.rel_path(note), "heading_path": c.heading(note, part),
            "start_line": 2 * part + 3, "end_line": 2 * part + 3, "score_vector": round(1.0 / rank, 6),
            "score_lexical": round(rng.random(), 6), "score_final": round(1.0 / rank, 6),
            "text": c.notes[note][2][part], "rank": rank,
        })
    top = chunks[0]
    return {
        "answer": f"{c.notes[picked[0][0]][1]} [1].",
        "references": [{key: top[key] for key in ("chunk_id", "rel_path", "heading_path")}],
        "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1.0}},
    }


def prepare_real(n: int, workdir: Path) -> Path:
    """The N-case folder on real text (eval set, a run_eval run, TREC files); reused when made."""
    folder, ready = case_folder(workdir / "scifact", n, make_real_case)
    if ready:
        return folder
    from evalkit import run_eval

    t0 = time.perf_counter()
    result = run_eval(
        eval_set=str(folder / "eval_set.jsonl"), k=[K], target=f"python:{Path(__file__).resolve()}:ask_real",
        retrieval_only=True, results_dir=str(folder / "results"), run_id="bench", concurrency=16, no_probe=True,
        quiet=True,
    )
    print(f"  n={n} (scifact): run_eval wrote {result.n_cases} cases in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    c = corpus()
    locate = {(c.rel_path(d), c.heading(d, s)): c.chunk_id(d, s) for d in range(len(c.notes)) for s in range(len(c.notes[d][2]))}
    write_trec(folder, lambda support: locate[(support["rel_path"], support["heading_path"])])
    (folder / "ready").write_text("ok\n")
    return folder


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


# The parse floor and the reader (issue 39): CPU and wall of reading results.jsonl and nothing
# else. "floor": each line parsed by orjson (`for line in f`, a 1 MB buffer); "floor+count": the
# same plus the depth guard as it was before issue 39 (two `bytes.count` per line); "reader":
# `RunDir.iter_results`, the bounded reader every command reads records with (guard included).
_READ_JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy, orjson  # imports are not timed (numpy: the reader's, imported on first use)
    from evalkit.store.runs import RunDir
    folder, how = sys.argv[1], sys.argv[2]
    path = folder + "/results/bench/results.jsonl"
    c0, t0, n = time.process_time(), time.perf_counter(), 0
    if how == "reader":
        for rec in RunDir(folder + "/results/bench").iter_results():
            n += 1
    else:
        count = how == "floor+count"
        with open(path, "rb", buffering=1 << 20) as f:
            for line in f:
                orjson.loads(line)
                if count:
                    line.count(b"[") + line.count(b"{") > 254
                n += 1
    print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "n": n,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    """
)


# Where an unchanged re-score's CPU goes (issue 39): each part of the derive's pass over the
# records (derive.RecordPass.add) as it runs in a derive, on each record just read (warm in the
# CPU's caches, as the derive finds it), after the first 20,000 records went through the same
# part (its memos hold what a long run repeats: the run's chunks), over the next 5,000: CPU µs
# per record, as (reading + the part) - reading, each the best of 3 passes; beside the parse
# floor and the reader over the same lines.
_DERIVE_PARTS_JOB = textwrap.dedent(
    """
    import gc, itertools, json, sys, time
    import numpy, orjson
    from evalkit.derive import RecordPass, RunFacts
    from evalkit.report.results_json import encode_row
    from evalkit.store.runs import RunDir
    from evalkit.targets.contract import ContractCheck
    folder, warm, n = sys.argv[1], 20000, 5000
    run = RunDir(folder + "/results/bench")
    cfg = run.read_config()
    facts = RunFacts.stored(run, cfg, run.read_metrics() or {})
    with open(run.results_path, "rb") as f:
        for _ in range(warm):
            f.readline()
        start = f.tell()
    def stream(obj=None, feed=None):
        gc.collect()
        t0 = time.process_time()
        for r in itertools.islice(run.iter_results(start), n):
            if feed is not None:
                feed(obj, r)
        return time.process_time() - t0
    def floor():
        t0 = time.process_time()
        with open(run.results_path, "rb", buffering=1 << 20) as f:
            f.seek(start)
            for line in itertools.islice(f, n):
                orjson.loads(line)
        return time.process_time() - t0
    out = {"parse floor": min(floor() for _ in range(3)) / n * 1e6}
    reading = min(stream() for _ in range(3))
    out["reader"] = reading / n * 1e6
    def part(name, make, feed):
        obj = make()
        for r in itertools.islice(run.iter_results(), warm):
            feed(obj, r)
        out[name] = max(0.0, min(stream(obj, feed) for _ in range(3)) - reading) / n * 1e6
    passed = lambda: RecordPass(facts.settings, ks=facts.cutoffs)
    part("aggregate row (RecordTable.add_record)", passed, lambda p, r: p.table.add_record(r))
    part("run warnings (RunHealth.add)", passed, lambda p, r: p.health.add(r))
    part("  of which the contract check", ContractCheck, lambda c, r: c.add(r.get("retrieved_chunks")))
    part("summary.md worst cases (WorstCases.add)", passed, lambda p, r: p.worst.add(r))
    part("results.json row (encode_row, first 20,000 only)", lambda: None, lambda p, r: encode_row(r))
    part("the whole pass (RecordPass.add, rows aside)", passed, lambda p, r: p.add(r))
    print(json.dumps(out))
    """
)


def _load() -> float:
    return os.getloadavg()[0]


def real_rounds(args: argparse.Namespace, trec_python: str) -> None:
    """Issue 39's comparison on real text, alternating in each round (each job a fresh process):
    score_retrieval at a new K (results.jsonl rewritten), the same again (nothing changed per
    case: the derive alone), pytrec_eval on the same run and labels, the parse floor, the
    floor with the old depth guard, and the reader. Ratios are taken within a round."""
    rows: list[dict] = []
    print("| N | job | procs | wall s | CPU s | peak RSS MB | CPU / parse floor | wall / pytrec_eval | load |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in args.n:
        folder = prepare_real(n, args.workdir)
        for r in range(args.repeat):
            # A new K each round (alternating sets), so every round's first job rewrites: the set
            # the run's records do not hold now (a folder left by an earlier bench may hold either).
            stored = (json.loads((folder / "results" / "bench" / "metrics.json").read_text()).get("ks")
                      if (folder / "results" / "bench" / "metrics.json").exists() else None)
            ks = ["10", "5"] if stored and 5 not in stored else ["10"]
            jobs = [
                ("new K", sys.executable, _EVALKIT_REAL_JOB, ["auto", *ks]),
                ("unchanged", sys.executable, _EVALKIT_REAL_JOB, ["1", *ks]),
                ("pytrec_eval", trec_python, _PYTREC_JOB, []),
                ("floor", sys.executable, _READ_JOB, ["floor"]),
                ("floor+count", sys.executable, _READ_JOB, ["floor+count"]),
                ("reader", sys.executable, _READ_JOB, ["reader"]),
            ]
            got = {}
            for name, python, code, extra in jobs:
                load = _load()
                got[name] = {**_job(python, code, folder, *extra), "load": load}
            for name, res in got.items():
                row = {"n": n, "data": "scifact", "round": r, "job": name, **{k: v for k, v in res.items() if k != "values"},
                       "cpu_vs_floor": res["cpu_s"] / got["floor"]["cpu_s"],
                       "wall_vs_pytrec": res["wall_s"] / got["pytrec_eval"]["wall_s"]}
                rows.append(row)
                print(f"| {n:,} | {name} | {res.get('processes', 1)} | {res['wall_s']:.2f} | {res['cpu_s']:.2f} | "
                      f"{res['rss_mb']:.0f} | {row['cpu_vs_floor']:.2f} | {row['wall_vs_pytrec']:.2f} | {res['load']:.1f} |",
                      flush=True)
            if args.check:
                print(f"    evalkit @10: {got['unchanged']['values']}\n    pytrec_eval: {got['pytrec_eval']['values']}",
                      flush=True)
        if args.phases:
            parts = _job(sys.executable, _DERIVE_PARTS_JOB, folder)
            rows.append({"n": n, "data": "scifact", "job": "derive parts", "us_per_record": parts})
            print("    CPU µs per record (records 20,001-25,000, streamed, warm): " + "; ".join(f"{k} {v:.1f}" for k, v in parts.items()),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


_EVALKIT_REAL_JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    import evalkit
    from evalkit.rescore.scoring import score_retrieval
    folder, workers, ks = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]]
    cpu = lambda: sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                      for f in ("ru_utime", "ru_stime"))
    c0, t0 = cpu(), time.perf_counter()
    res = score_retrieval("bench", ks=ks, results_dir=folder + "/results", workers=None if workers == "auto" else int(workers))
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    at = res.metrics["aggregate_metrics"]["at_k"]["10"]
    rss = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024
    print(json.dumps({"wall_s": wall, "cpu_s": cpu_s, "rss_mb": rss, "processes": res.processes,
                      "rewritten": res.results_rewritten,
                      "values": {m: at[m] for m in ("recall_frac", "precision", "ndcg", "mrr")}, "n": at["n"]}))
    """
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--data", choices=("scifact", "synthetic"), default="scifact",
                    help="scifact: real text, one gold support per case, a fifth never retrieved (issue 39's rounds); "
                    "synthetic: the 14-word vocabulary of the earlier sessions")
    ap.add_argument("--repeat", type=int, default=1, help="Rounds (each job once per round, fresh processes).")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_score_bench"))
    ap.add_argument("--trec-python", default=sys.executable, help="Interpreter that has pytrec_eval.")
    ap.add_argument("--workers", nargs="+", default=["auto", "1"],
                    help="synthetic: score_retrieval's workers per timed job: 'auto' (its default) and/or numbers.")
    ap.add_argument("--check", action="store_true", help="Print both tools' @10 means side by side.")
    ap.add_argument("--phases", action="store_true", help="Also split evalkit's CPU time (scifact: per part of the derive; "
                    "synthetic: read / score / aggregate).")
    ap.add_argument("--json", type=Path, help="scifact: also write every job's row here, one JSON object a line.")
    args = ap.parse_args()

    trec = "pytrec_eval" if _has_pytrec(args.trec_python) else "ranx"
    if args.data == "scifact":
        if trec != "pytrec_eval":
            raise SystemExit(f"pytrec_eval cannot be imported by {args.trec_python}: pass --trec-python")
        print(f"load average at the start: {_load():.1f} (2 CPUs shared with other sessions: read the ratios, "
              "taken within one round)", file=sys.stderr)
        real_rounds(args, args.trec_python)
        return
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
