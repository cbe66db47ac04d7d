"""A deliberately flaky chatbot for `run_eval --trials` (docs/running.md, "Trials"; tests/integration/test_trials.py).

The n-th ask of a question (n = 1, 2, 3) follows PLAN; with --concurrency 1 the n-th ask is
trial n (every case once, then again).
"""

import threading

ASKS = {}
LOCK = threading.Lock()
PLAN = {  # question: what each ask does: "hit" (gold at rank 1), "miss", "abstain", "error"
    "qa": ["hit", "hit", "hit"],
    "qb": ["hit", "miss", "hit"],
    "qc": ["miss", "miss", "miss"],
    "qd": ["abstain", "abstain", "miss"],
    "qe": ["hit", "error", "hit"],
}

def ask(request):
    q = request["question"]
    with LOCK:
        ASKS[q] = ASKS.get(q, 0) + 1
        n = ASKS[q]
    what = PLAN[q][(n - 1) % 3]
    if what == "error":
        raise RuntimeError("flaky backend")
    path = f"notes/{q}.md" if what == "hit" else "notes/other.md"
    chunk = {"chunk_id": f"{q}-{n}", "rel_path": path, "heading_path": "# H", "text": "t", "rank": 1}
    return {"answer": "I don't know." if what == "abstain" else "It is in [1].",
            "abstained": what == "abstain",
            "references": [{"rel_path": path, "heading_path": "# H"}],
            "debug": {"retrieved_chunks": [chunk]}}
