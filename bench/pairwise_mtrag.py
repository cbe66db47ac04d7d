"""The pairwise judge against MTRAG's annotators (issue 42 item 4; docs/judges.md).

MTRAG's human_evaluations.json rates three models' answers to the same 119 tasks; it holds no
pairwise choice, so the annotators' preference between two models' answers to a task is taken
from their ratings: the mean over annotators of groundedness + correctness (the mapping `evalkit
import --format mtrag-ratings` documents) of each answer, the higher preferred, equal means
equal. The pairwise judge (`evalkit compare --pairwise-judge`, here `heuristic`, or an LLM
spec as argv[1]) is asked about the same pairs, both ways round, and its choices are set against
that preference. Not a speed benchmark: agreement counts, from a fresh temporary folder.

    python bench/pairwise_mtrag.py [JUDGE] [MODEL_A] [MODEL_B]
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RATINGS = ROOT.parent / "shared" / "corpora" / "mtrag" / "human_evaluations.json"


def human_preference(results: Path, a: str, b: str) -> dict[str, str]:
    def means(run: str) -> dict[str, float]:
        by: dict[str, list[float]] = collections.defaultdict(list)
        for line in (results / run / "human_grades.jsonl").read_text(encoding="utf-8").splitlines():
            x = json.loads(line)
            if x.get("groundedness") is not None and x.get("correctness") is not None:
                by[x["test_case_id"]].append(x["groundedness"] + x["correctness"])
        return {k: sum(v) / len(v) for k, v in by.items()}

    ha, hb = means(a), means(b)
    return {cid: "equal" if abs(ha[cid] - hb[cid]) < 1e-9 else ("a" if ha[cid] > hb[cid] else "b")
            for cid in ha if cid in hb}


def main() -> None:
    from evalkit.cli.main import app
    from evalkit.compare import compare_runs, open_source
    from evalkit.rescore.pairwise import judge_runs

    judge = sys.argv[1] if len(sys.argv) > 1 else "heuristic"
    models = sys.argv[2:4] if len(sys.argv) > 3 else ["gpt-4o", "llama-3.1-405b-instruct"]
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for m in models:
            for args in (["import", "--format", "mtrag-ratings", str(RATINGS), "--model", m],
                         ["judge", "--run-id", f"mtrag-{m}", "--results-dir", "results", "--quiet"]):
                try:
                    app(args, standalone_mode=False)
                except SystemExit:
                    pass
        a, b = (f"mtrag-{m}" for m in models)
        print(judge_runs(open_source(a, "results"), open_source(b, "results"), judge))
        human = human_preference(Path("results"), a, b)
        lines = [json.loads(x) for x in (Path("results") / b / "pairwise_judge.jsonl").read_text().splitlines()]
        pairs = [(human[x["test_case_id"]], x["choice"]) for x in lines if x["test_case_id"] in human]
        strict = [(h, j) for h, j in pairs if h != "equal"]
        both = [(h, j) for h, j in strict if j != "equal"]
        tally = compare_runs(a, b, results_dir="results", resamples=200, ignore_invariants=True,
                             allow_label_change=True).pairwise_judge
        print(f"judge {judge}: {a} (a) vs {b} (b), {len(pairs)} pairs")
        print(f"  annotators: a {sum(h == 'a' for h, _ in pairs)}, b {sum(h == 'b' for h, _ in pairs)}, "
              f"equal {sum(h == 'equal' for h, _ in pairs)}")
        print(f"  judge: {tally}")
        print(f"  same choice: {sum(h == j for h, j in pairs)} of {len(pairs)}; where the annotators prefer one: "
              f"{sum(h == j for h, j in strict)} of {len(strict)}; where both prefer one: "
              f"{sum(h == j for h, j in both)} of {len(both)}")
        print("  (annotators, judge):", sorted(collections.Counter(pairs).items()))


if __name__ == "__main__":
    main()
