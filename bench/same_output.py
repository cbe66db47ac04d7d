"""Does a change to the runner leave every written value as it was? Runs the same runs on two
checkouts of evalkit and compares what they wrote, byte for byte once timings are masked.

    python bench/same_output.py --before /tmp/old-tree            # this tree against an old one
    python bench/same_output.py --before /tmp/old --after /tmp/new

Each run is a fresh `run_eval` process with PYTHONPATH at the tree, a fixed run id, into its own
folder; then results.jsonl, metrics.json, summary.md, results.json and config.json of the two
trees are compared. Masked: wall times, latencies (`*_ms` measured by the runner, and what is
computed from them: latency budgets' scores), timestamps, the tree's git revision and paths.
Everything else must be the same bytes.

The runs (real text: bench/real_answers.py):

    scifact-python    a python: target answering SciFact chunks (K = 5), retrieval-only, 600 cases
    obsidian-python   the same with obsidian-tasks sections, --k 3 5, --store-full-text
    scifact-http      the HTTP target against bench/stub_server.py --corpus scifact, 400 cases
    scifact-judged    a python: target, judged by the offline heuristic judge (answers kept whole)
    odd-answers       a python: target answering every kind of broken or unusual answer: fields
                      missing, extra, of the wrong type, null, non-finite, tuples, huge, raising,
                      not a dict, pydantic objects, ... (each must be recorded as before)
    conversations     eval_set.jsonl (its three conversations among single questions) over
                      sample_vault (the in-process reference chatbot), --history live, then
                      reference, 2 trials
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FILES = ("results.jsonl", "metrics.json", "summary.md", "results.json", "config.json")
# Keys whose values are clocks or measured time, wherever they sit; and blocks that are all that.
VOLATILE = {"total_ms", "session_wall_s", "wall_s", "timestamp", "created_at", "started_at", "finished_at",
            "scored_at", "elapsed_ms", "generated_at", "latency_ms"}
TIMED = {"latency", "run_timing", "latency_budget", "phase_budgets", "git", "environment", "hardware"}

GOOD_BOT = """import asyncio, sys
sys.path.insert(0, {here!r})
from real_answers import answer_index, answers
POOL = answers({corpus!r})

async def ask(request):
    await asyncio.sleep(0.001)
    return POOL[answer_index(request["question"], len(POOL))]
"""

ODD_BOT = '''import copy, math, sys, time
sys.path.insert(0, {here!r})
from real_answers import answer_index, answers
from pydantic import BaseModel
POOL = answers("scifact")


class Model(BaseModel):
    answer: str
    references: list = []
    abstained: bool | None = None


def _odd(n, base):
    r = copy.deepcopy(base)
    d = r["debug"]
    c = d["retrieved_chunks"]
    kind = n % 46
    if kind == 0: return r
    if kind == 1: del r["answer"]
    if kind == 2: r["answer"] = None
    if kind == 3: r["answer"] = 42
    if kind == 4: r["answer"] = ""
    if kind == 5: r["answer"] = "x" * 300000
    if kind == 6: del r["debug"]
    if kind == 7: r["debug"] = None
    if kind == 8: del d["retrieved_chunks"]
    if kind == 9: c[0]["score_vector"] = 1
    if kind == 10: c[0]["score_vector"] = float("inf")
    if kind == 11: c[0]["score_final"] = float("nan")
    if kind == 12: c[1]["rank"] = 2.0
    if kind == 13: c[1]["rank"] = "3"
    if kind == 14: c[1]["rank"] = True
    if kind == 15: c[2]["start_line"] = "12"
    if kind == 16: del c[0]["rel_path"]
    if kind == 17: c[0]["rel_path"] = None
    if kind == 18: c[0]["extra_meta"] = {{"body": "y" * 500, "tags": ("a", "b"), "n": float("inf")}}
    if kind == 19: c[0]["tuple_field"] = (1, 2)
    if kind == 20: r["extra_top"] = {{"nested": [1, 2.5, None, {{"k": "v" * 300}}]}}
    if kind == 21: r["abstained"] = "true"
    if kind == 22: r["abstained"] = 1
    if kind == 23: r["abstained"] = True; r["abstain_reason"] = "not in the notes"; r["answer"] = ""
    if kind == 24: r["abstained"] = None
    if kind == 25: del r["abstained"]
    if kind == 26: r["references"] = None
    if kind == 27: r["references"] = [{{"rel_path": "a.md", "text": "z" * 400, "score": 0.5}}]
    if kind == 28: r["references"] = ["not an object"]
    if kind == 29: d["versions"] = {{"llm_model": "m2", "retriever_version": "r9", "extra": 1}}
    if kind == 30: d["timings_ms"] = {{"retrieval": 5, "generation": "7", "rerank": 3.5}}
    if kind == 31: d["folder_selection"] = {{"mode": "on", "selected_folders": ("x", "y"), "why": None}}
    if kind == 32: return ["not", "a", "dict"]
    if kind == 33: raise ValueError("the bot broke")
    if kind == 34: return Model(answer="from a model", references=[{{"rel_path": "m.md"}}], abstained=False)
    if kind == 35: c.reverse(); [x.pop("rank") for x in c]
    if kind == 36: c[0]["heading_path"] = None
    if kind == 37: c[0]["text"] = None
    if kind == 38: c[0]["text"] = "w" * 5000
    if kind == 39: d["retrieved_chunks"] = c * 5
    if kind == 40: c[0]["chunk_id"] = 12345
    if kind == 41: c[0][7] = "int key"
    if kind == 42: r["answer"] = "surrogate-free \\u00e9\\u4e2d\\U0001f600 " + r["answer"]
    if kind == 43: c[0]["score_lexical"] = -0.0; c[1]["score_lexical"] = 1e-320
    if kind == 44: c[0]["token_count"] = 10.0
    if kind == 45: c[0]["metadata"] = {{"nested": {{"deep": [{{"deeper": "q" * 250}}]}}}}
    return r


def ask(request):
    time.sleep({delay})
    i = answer_index(request["question"], 10 ** 9)
    return _odd(i, POOL[i % len(POOL)])
'''


def _runs(tmp: Path, url: str) -> dict[str, dict]:
    from real_answers import answers, eval_set

    sets = {}
    for corpus, n in (("scifact", 600), ("obsidian", 600)):
        sets[corpus] = tmp / f"es-{corpus}.jsonl"
        eval_set(sets[corpus], n, answers(corpus))
        (tmp / f"bot_{corpus}.py").write_text(GOOD_BOT.format(here=str(HERE), corpus=corpus))
    (tmp / "bot_odd.py").write_text(ODD_BOT.format(here=str(HERE), delay=0))
    (tmp / "bot_odd_slow.py").write_text(ODD_BOT.format(here=str(HERE), delay=0.02))
    base = dict(concurrency=16, retries=0, timeout=30, quiet=True, no_probe=True)
    return {
        "scifact-python": dict(base, eval_set=str(sets["scifact"]), target=f"python:{tmp / 'bot_scifact.py'}:ask",
                               retrieval_only=True),
        "obsidian-python": dict(base, eval_set=str(sets["obsidian"]), target=f"python:{tmp / 'bot_obsidian.py'}:ask",
                                retrieval_only=True, k=[3, 5], store_full_text=True),
        "scifact-http": dict(base, eval_set=str(sets["scifact"]), api_url=url, retrieval_only=True, limit=400),
        "scifact-judged": dict(base, eval_set=str(sets["scifact"]), target=f"python:{tmp / 'bot_scifact.py'}:ask",
                               limit=200),
        "odd-answers": dict(base, eval_set=str(sets["scifact"]), target=f"python:{tmp / 'bot_odd.py'}:ask",
                            retrieval_only=True, limit=230),
        # One at a time, 20 ms each: a judged run's error record takes the run's versions as they
        # stand when it is built, which, before the first answer's are recorded (in a thread),
        # depends on timing (in any tree).
        "odd-answers-judged": dict(base, concurrency=1, eval_set=str(sets["scifact"]), target=f"python:{tmp / 'bot_odd_slow.py'}:ask",
                                   limit=92),
        "conversations-live": dict(base, eval_set=str(ROOT / "eval_set.jsonl"),
                                   vault=str(ROOT / "sample_vault"), retrieval_only=True, history="live", trials=2),
        "conversations-reference": dict(base, eval_set=str(ROOT / "eval_set.jsonl"),
                                        vault=str(ROOT / "sample_vault"), history="reference"),
        "sample-vault": dict(base, eval_set=str(ROOT / "eval_set.jsonl"), vault=str(ROOT / "sample_vault"),
                             retrieval_only=True),
    }


def child(args: dict) -> None:
    from evalkit import run_eval

    run_eval(**args)


def _mask(value, timed: bool = False):
    """`value` with clocks and measured times replaced by "<t>"."""
    if isinstance(value, dict):
        return {k: "<t>" if (timed or k in VOLATILE) and not isinstance(v, dict | list) else _mask(v, timed or k in TIMED or "latency" in k or k.endswith("_ms"))
                for k, v in value.items()}
    if isinstance(value, list):
        return ["<t>" if timed and not isinstance(v, dict | list) else _mask(v, timed) for v in value]
    return value


def _paths(old, new, at: str = "") -> list[str]:
    """Where two JSON values differ: "path: old -> new" (or "key order" when only that)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [p for k in dict.fromkeys([*old, *new]) for p in _paths(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{at}.{k}")]
        return out or ([f"{at}: key order {list(old)} -> {list(new)}"] if list(old) != list(new) else [])
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [p for i, (o, n) in enumerate(zip(old, new)) for p in _paths(o, n, f"{at}[{i}]")]
    return [] if json.dumps(old) == json.dumps(new) else [f"{at}: {json.dumps(old)[:200]} -> {json.dumps(new)[:200]}"]


_NUMBER = re.compile(r"\d[\d,]*(\.\d+)?")


def _text(path: Path, name: str) -> list[str]:
    if not path.exists():
        return ["<missing>"]
    raw = path.read_text(encoding="utf-8")
    if name.endswith(".jsonl"):
        return [json.dumps(_mask(json.loads(line)), sort_keys=False) for line in raw.splitlines()]
    if name.endswith(".json"):
        return json.dumps(_mask(json.loads(raw)), indent=1).splitlines()
    # summary.md: numbers on lines about time are clocks
    return [_NUMBER.sub("#", line) if re.search(r"latenc|wall|\bms\b|\bs\b|time|UTC|run_id|budget|created|written", line, re.I) else line
            for line in raw.splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="a checkout of evalkit before the change")
    ap.add_argument("--after", type=Path, default=ROOT, help="the checkout after it (default: this one)")
    ap.add_argument("--only", nargs="+", help="these runs only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(json.loads(a.child))
        return
    if a.before is None:
        ap.error("--before is required")
    sys.path.insert(0, str(HERE))
    from stub_server import start_stub_process

    url, stop = start_stub_process(1.0, corpus="scifact")
    failed: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp_s:
            tmp = Path(tmp_s)
            runs = _runs(tmp, url)
            for name, args in runs.items():
                if a.only and name not in a.only:
                    continue
                dirs = {}
                for side, tree in (("before", a.before), ("after", a.after)):
                    out = tmp / "results"  # one path for both: config.json records it
                    cmd = [sys.executable, __file__, "--child", json.dumps({**args, "results_dir": str(out), "run_id": name})]
                    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
                    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT))
                    dirs[side] = out.rename(tmp / f"{side}-{name}") / name
                    if not (dirs[side] / "results.jsonl").exists():
                        raise SystemExit(f"{name} ({side}) wrote no results.jsonl:\n{done.stderr[-3000:]}")
                same = True
                for f in FILES:
                    old, new = _text(dirs["before"] / f, f), _text(dirs["after"] / f, f)
                    if old != new:
                        same = False
                        if f == "results.jsonl" and len(old) == len(new):
                            for o, n in zip(old, new):
                                if o != n:
                                    print(f"{name}: record {json.loads(o).get('test_case_id')}: "
                                          + "; ".join(_paths(json.loads(o), json.loads(n)))[:1500])
                            continue
                        diff = list(difflib.unified_diff(old, new, f"before/{f}", f"after/{f}", n=0, lineterm=""))
                        print(f"{name}: {f} differs ({len(diff)} diff lines):\n" + "\n".join(d[:400] for d in diff[:12]))
                n = sum(1 for _ in open(dirs["after"] / "results.jsonl")) if (dirs["after"] / "results.jsonl").exists() else 0
                print(f"{name}: {'same' if same else 'DIFFERENT'} ({n} records)")
                if not same:
                    failed.append(name)
    finally:
        stop()
    if failed:
        raise SystemExit(f"different: {', '.join(failed)}")
    print("every run wrote the same values")


if __name__ == "__main__":
    main()
