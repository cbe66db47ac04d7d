"""The work after the last answer: run_eval at 100,000 cases on real text, a fifth never retrieved.

Issue 39 item 1: a run is not over when its last answer is written; the derive step
(aggregates, run warnings, metrics.json, summary.md, results.json) follows. This bench makes
the run the issue describes and measures, from inside the run, when the last answer was
written and when run_eval returned, and from outside, the process's peak RSS.

The data (made once under --workdir, `<corpus>-n<N>/`):

    chunks.jsonl     the corpus cut into ~300-character chunks by the reference chatbot's own
                     chunker (`evalkit.reference.chunker`, max_tokens 60): obsidian-tasks (107
                     notes with headings) or SciFact (one note per abstract, title as heading).
                     One chunk in five is "not indexed": the target never returns it.
    eval_set.jsonl   N cases, one gold support each, on a chunk of the corpus, in one of four
                     forms (heading anchor, line span, anchor + span, chunk id). For four
                     cases in five the chunk is indexed and the target returns it; for one in
                     five it is a chunk no indexed chunk matches (checked with
                     `anchors.match_support` when the set is made), so the run's warnings
                     report them as `gold_never_retrieved`.

The target (`ask` below, a `python:` target that answers at once): K = 20 chunks of real text,
the gold chunk (when indexed) at a random rank, half the others from the same note, half from
anywhere in the index.

Each round runs `evalkit.run_eval()` in a fresh process (retrieval-only, K = 20, concurrency 16,
no probe) with a progress sink whose `close()` (called right after the last record is
written) marks the last answer. Reported per run:

    answers_s   run_eval called -> last answer written (loading the set, asking, writing)
    tail_s      last answer written -> run_eval returned (the derive: health, aggregates,
                metrics.json, summary.md, results.json, the `latest` pointer)
    exit_s      run_eval returned -> process gone (freeing what the run held)
    ratio       tail_s / answers_s (target ≤ 0.10)
    rss_mb      peak RSS of the process (os.wait4), target ≤ 250 MB
    load        os.getloadavg() before the round, and the 1-minute average after it

`--tree DIR` runs the same rounds with DIR first on PYTHONPATH (e.g. a worktree of the commit
before a change), alternating with the current tree, each in fresh processes. The ratio is
measured inside each run, so it holds under load better than a wall time; other sessions share
the machine's 2 cores, so read wall times against the same round's reference.

`--profile` adds one run under cProfile of the tail only (started in the sink's `close()`),
and prints the top functions by cumulative time.

Usage:
    python bench/run_tail_bench.py                                # N = 100000, obsidian-tasks
    python bench/run_tail_bench.py --n 10000 --corpus scifact --repeat 2
    python bench/run_tail_bench.py --tree /tmp/tail_base --repeat 2
    python bench/run_tail_bench.py --profile

Results: bench/README.md, "Work after the last answer".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from memory_bench import measure  # noqa: E402 - one way to run a job and read its peak RSS

ROOT = BENCH.parent
CORPORA = Path("/work/shared/corpora")
K = 20
MISS_SHARE = 0.2
FORMS = ("anchor", "span", "anchor_span", "chunk_id")
_CASE = re.compile(r"^case (\d+):")
POOL_ENV = "RUN_TAIL_POOL"


# --------------------------------------------------------------------------- the data


def _notes(corpus: str) -> list[tuple[str, bytes]]:
    """(rel_path, markdown bytes) of the corpus's notes."""
    if corpus == "obsidian-tasks":
        vault = CORPORA / "obsidian-tasks" / "vault"
        return [(p.relative_to(vault).as_posix(), p.read_bytes()) for p in sorted(vault.rglob("*.md"))]
    out = []
    with open(CORPORA / "scifact" / "corpus.jsonl", "rb") as f:
        for line in f:
            doc = json.loads(line)
            out.append((f"scifact/{doc['_id']}.md", f"# {doc['title']}\n\n{doc['text']}\n".encode()))
    return out


def make_chunks(corpus: str) -> list[dict]:
    """The corpus's ~300-character chunks, each marked indexed or not (one in five not)."""
    from evalkit.reference.chunker import ChunkerConfig, chunk_markdown

    cfg = ChunkerConfig(max_tokens=60)
    chunks = []
    for rel, data in _notes(corpus):
        for c in chunk_markdown(data, rel, vault_id="bench", config=cfg).chunks:
            h = int(hashlib.sha256(c.chunk_id.encode()).hexdigest()[:8], 16)
            chunks.append({"chunk_id": c.chunk_id, "rel_path": c.rel_path, "heading_path": c.heading_path,
                           "start_line": c.start_line, "end_line": c.end_line, "text": c.text,
                           "indexed": h % 5 != 0})
    return chunks


def _support(chunk: dict, form: str) -> dict:
    if form == "chunk_id":
        return {"chunk_id": chunk["chunk_id"]}
    out: dict = {"rel_path": chunk["rel_path"]}
    if form in ("anchor", "anchor_span"):
        out["heading_path"] = chunk["heading_path"]
    if form in ("span", "anchor_span"):
        out["start_line"], out["end_line"] = chunk["start_line"], chunk["end_line"]
    return out


def _golds(chunks: list[dict]) -> tuple[list[tuple[int, dict]], list[tuple[int, dict]]]:
    """(supports the index can match, supports no indexed chunk matches), each with its chunk."""
    from evalkit.evalset.anchors import match_support

    by_file: dict[str, list[dict]] = {}
    for c in chunks:
        if c["indexed"]:
            by_file.setdefault(c["rel_path"], []).append(c)
    hit, miss = [], []
    for i, c in enumerate(chunks):
        for form in FORMS:
            s = _support(c, form)
            if c["indexed"]:
                hit.append((i, s))
            elif not any(match_support(s, o) for o in by_file.get(c["rel_path"], ())):
                miss.append((i, s))
    return hit, miss


def _plan(i: int, n_hit: int, n_miss: int) -> tuple[random.Random, bool, int]:
    """Case i's random source, whether its gold is retrievable, and which gold (pure in i)."""
    rng = random.Random(i * 7919 + 39)
    miss = rng.random() < MISS_SHARE
    return rng, miss, rng.randrange(n_miss if miss else n_hit)


def prepare(corpus: str, n: int, workdir: Path) -> Path:
    folder = workdir / f"{corpus}-n{n}"
    if (folder / "ready").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    chunks = make_chunks(corpus)
    hit, miss = _golds(chunks)
    with open(folder / "chunks.jsonl", "w") as f:
        for c in chunks:
            f.write(json.dumps(c) + "\n")
    (folder / "golds.json").write_text(json.dumps({"hit": hit, "miss": miss}))
    with open(folder / "eval_set.jsonl", "w") as f:
        for i in range(n):
            rng, missed, g = _plan(i, len(hit), len(miss))
            ci, support = (miss if missed else hit)[g]
            words = chunks[ci]["text"].split()
            f.write(json.dumps({
                "id": f"q{i:06d}", "question": f"case {i}: what does the guide say about {' '.join(words[2:9])}?",
                "answerable": True, "gold_supports": [support],
                "category": rng.choice(("factual", "general", "reasoning")), "difficulty": rng.choice(("easy", "hard")),
            }) + "\n")
    (folder / "ready").write_text(f"{len(chunks)} chunks, {len(hit)} retrievable supports, {len(miss)} never\n")
    return folder


# --------------------------------------------------------------------------- the target

_POOL: dict | None = None
_POOL_LOCK = threading.Lock()  # a sync target is called from several threads: load the pool once


def _pool() -> dict:
    """The index the target answers from, lean: it lives in the measured process."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            folder = Path(os.environ[POOL_ENV])
            keys = ("chunk_id", "rel_path", "heading_path", "start_line", "end_line", "text")
            chunks, indexed = [], []
            with open(folder / "chunks.jsonl") as f:
                for i, line in enumerate(f):
                    c = json.loads(line)
                    chunks.append(tuple(c[k] for k in keys))
                    if c["indexed"]:
                        indexed.append(i)
            golds = json.loads((folder / "golds.json").read_text())
            by_file: dict[str, list[int]] = {}
            for i in indexed:
                by_file.setdefault(chunks[i][1], []).append(i)
            _POOL = {"chunks": chunks, "hit": [i for i, _ in golds["hit"]], "miss": [i for i, _ in golds["miss"]],
                     "indexed": indexed, "by_file": by_file}
        return _POOL


def ask(request: dict) -> dict:
    """K chunks of real text: the gold chunk when it is indexed, the rest from its note and anywhere."""
    pool = _pool()
    chunks, indexed = pool["chunks"], pool["indexed"]
    i = int(_CASE.match(request["question"]).group(1))
    rng, missed, g = _plan(i, len(pool["hit"]), len(pool["miss"]))
    gold_chunk = (pool["miss"] if missed else pool["hit"])[g]
    same = pool["by_file"].get(chunks[gold_chunk][1]) or indexed
    picked = [] if missed else [gold_chunk]
    seen = set(picked)
    k = request["k"]
    for _ in range(4 * k):
        if len(picked) >= k:
            break
        j = rng.choice(same) if rng.random() < 0.5 else rng.choice(indexed)
        if j not in seen:
            seen.add(j)
            picked.append(j)
    rng.shuffle(picked)
    out = []
    for rank, j in enumerate(picked, start=1):
        chunk_id, rel_path, heading_path, start_line, end_line, text = chunks[j]
        out.append({"chunk_id": chunk_id, "rel_path": rel_path, "heading_path": heading_path, "start_line": start_line,
                    "end_line": end_line, "text": text, "score_final": 1.0 / rank, "rank": rank})
    return {"answer": "See the guide.", "abstained": False, "debug": {"retrieved_chunks": out}}


# --------------------------------------------------------------------------- one run

# The child: run_eval with a sink that marks the last answer (close() follows the last write).
_CHILD = """
import cProfile, json, sys, time
from evalkit import run_eval
es, results, target, profile = sys.argv[1:5]
marks = {}
prof = cProfile.Profile() if profile else None
class Sink:
    def start(self, **kw): pass
    def advance(self, record): pass
    def close(self):
        marks['last_answer'] = time.perf_counter()
        if prof is not None: prof.enable()
t0 = time.perf_counter()
r = run_eval(eval_set=es, k=[%d], target=target, retrieval_only=True, results_dir=results, run_id='bench',
             concurrency=16, no_probe=True, quiet=True, progress=Sink())
t1 = time.perf_counter()
if prof is not None:
    prof.disable(); prof.dump_stats(profile)
w = {x['kind']: x['n'] for x in r.metrics.get('warnings') or []}
print(json.dumps({'answers_s': marks['last_answer'] - t0, 'tail_s': t1 - marks['last_answer'], 'n': r.n_cases,
                  'warnings': w, 'recall': r.data.get('recall_at_k'), 'done_at': time.time()}))
""" % K


def run_once(folder: Path, tree: Path | None, python: str, profile: Path | None = None) -> dict:
    results = folder / "results"
    shutil.rmtree(results / "bench", ignore_errors=True)
    env = {**os.environ, POOL_ENV: str(folder)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree or ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [python, "-c", _CHILD, str(folder / "eval_set.jsonl"), str(results), f"python:{BENCH / 'run_tail_bench.py'}:ask",
           str(profile or "")]
    load_before = os.getloadavg()[0]
    got = measure(cmd, folder, env, folder / "log_run")  # wall, peak RSS of the process tree, CPU
    ended = time.time()
    if got["exit"] != 0:
        raise SystemExit(f"run failed ({got['exit']}):\n{got['stderr'][-3000:]}")
    row = json.loads(got["stdout"].strip().splitlines()[-1])
    row.update(wall_s=got["wall_s"], cpu_s=got["cpu_s"], rss_mb=got["rss_mb"],
               exit_s=max(0.0, ended - row.pop("done_at")), load_before=load_before,
               load_after=os.getloadavg()[0])
    row["ratio"] = row["tail_s"] / row["answers_s"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000])
    ap.add_argument("--corpus", choices=("obsidian-tasks", "scifact"), default="obsidian-tasks")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/run_tail_bench"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tree", type=Path, help="another evalkit tree, run in alternating rounds (e.g. the code before)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--profile", action="store_true", help="also one run with the tail under cProfile")
    ap.add_argument("--json", type=Path, help="append one JSON row per run")
    args = ap.parse_args()
    rows = []
    for n in args.n:
        folder = prepare(args.corpus, n, args.workdir)
        print(f"n={n} {args.corpus}: {(folder / 'ready').read_text().strip()}", file=sys.stderr)
        trees = [("current", None)] + ([("tree", args.tree)] if args.tree else [])
        for rnd in range(args.repeat):
            for name, tree in trees if rnd % 2 == 0 else trees[::-1]:
                got = run_once(folder, tree, args.python)
                row = {"n": n, "corpus": args.corpus, "tree": name, "round": rnd, **got}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")
        if args.profile:
            prof = folder / "tail.prof"
            run_once(folder, None, args.python, profile=prof)
            import pstats

            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(25)
    print(f"\nload average now {os.getloadavg()}; K = {K}, one gold support per case, {MISS_SHARE:.0%} never retrieved")
    print("| N | corpus | tree | round | answers | after last answer | ratio | exit | peak RSS | load before/after |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['n']:,} | {r['corpus']} | {r['tree']} | {r['round']} | {r['answers_s']:.1f} s | {r['tail_s']:.2f} s | "
              f"{r['ratio']:.3f} | {r['exit_s']:.2f} s | {r['rss_mb']:.0f} MB | {r['load_before']:.1f} / {r['load_after']:.1f} |")


if __name__ == "__main__":
    main()
