"""`evalkit embed` (offline lexical vectors) on a real run, beside the same work written with
scikit-learn, in fresh processes, alternating, the same rounds:

- evalkit:   `evalkit embed --run-id bench` over a SciFact run of N cases at K = 20
             (bench/real_runs.py): every distinct question and top-K chunk text embedded,
             question-gold / question-retrieved cosines, far gold, k-means for k = 2..8 with
             the silhouette of each, embeddings.json written;
- sklearn:   the same distinct texts through TfidfVectorizer(analyzer="char_wb",
             ngram_range=(3, 5), sublinear_tf=True) (an exact vocabulary, no hashing), the
             same per-case cosines, and KMeans(k, n_init=4) + silhouette_score for k = 2..8 on
             the questions (scikit-learn is a dev dependency: the reference, never evalkit's).

    python bench/embed_bench.py [--cases 1000] [--rounds 3]

Prints a table of wall times (median over the rounds) and their ratio, with the load.
Other jobs share the machine's 2 cores: read the same-round ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

SKLEARN = r"""
import sys, orjson, numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
recs = {}
for line in open(sys.argv[1], "rb"):
    r = orjson.loads(line); recs.setdefault(r["test_case_id"], r)
texts, pairs = {}, []
for r in recs.values():
    q = r["question"]; texts.setdefault(q, len(texts))
    for c in sorted(r["retrieved_chunks"], key=lambda c: c.get("rank", 0))[:20]:
        t = c.get("text") or ""; texts.setdefault(t, len(texts)); pairs.append((texts[q], texts[t]))
x = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True).fit_transform(list(texts))
a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
sims = np.asarray(x[a].multiply(x[b]).sum(1)).ravel()
qx = x[[texts[r["question"]] for r in recs.values()]]
best = max((silhouette_score(qx, KMeans(k, n_init=4, random_state=0).fit_predict(qx)), k) for k in range(2, 9))
print(len(texts), float(np.median(sims)), best)
"""


def _timed(argv: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_real_runs"))
    args = ap.parse_args()
    from real_runs import prepare

    folder = prepare("scifact", args.cases, args.workdir)
    results = folder / "results"
    ours = [str(Path(sys.executable).parent / "evalkit"), "embed", "--run-id", "bench", "--results-dir", str(results)]
    ref = [sys.executable, "-c", SKLEARN, str(results / "bench" / "results.jsonl")]
    times: dict[str, list[float]] = {"evalkit embed": [], "scikit-learn": []}
    loads = []
    for i in range(args.rounds):
        order = [("evalkit embed", ours), ("scikit-learn", ref)]
        for name, argv in order if i % 2 == 0 else order[::-1]:
            loads.append(os.getloadavg()[0])
            times[name].append(_timed(argv, folder))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"SciFact, {args.cases} cases, K = 20; {args.rounds} rounds, alternating, fresh processes; "
          f"load (1 min) {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    print("| | median s | rounds (s) | ratio to scikit-learn |")
    print("| --- | --- | --- | --- |")
    for name, v in times.items():
        print(f"| {name} | {med[name]:.1f} | {', '.join(f'{t:.1f}' for t in v)} | {med[name] / med['scikit-learn']:.2f} |")


if __name__ == "__main__":
    main()
