"""A synthetic run folder of any size, written directly (no target, no scoring): the HTML
report's scale tests use it for 100,000 cases in a few seconds.

Case i's values are functions of i (`ndcg(i)`, `latency(i)`, ...), so a test can say what
the table must show after a sort or a filter. Records are written out of order, in
reversed runs of 8, as a concurrent run writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

CATEGORIES = ("factual", "reasoning", "multi_hop", "general", "adversarial")


def category(i: int) -> str:
    return CATEGORIES[i % len(CATEGORIES)]


def ndcg(i: int) -> float | None:
    """Case i's nDCG: none for every 13th case, else a value in [0, 1) that many cases share."""
    return None if i % 13 == 0 else (i * 7919 % 1000) / 1000


def latency(i: int) -> float:
    return (i * 37 % 50_000) / 10


def error(i: int) -> dict[str, str] | None:
    return {"kind": "timeout", "detail": f"read timed out (case {i})"} if i % 101 == 100 else None


def chunk_text(i: int, rank: int) -> str:
    return f"chunk {rank} of case {i}: the text of note {(i + rank) % 997}"


def record(i: int, chunks: int = 3) -> dict[str, Any]:
    """The results.jsonl record of case i."""
    answerable = i % 10 != 9
    value = ndcg(i)
    first = 1 + i % chunks if answerable and value else None
    return {
        "schema_version": 1,
        "test_case_id": f"q{i:06d}",
        "case_index": i,
        "case": {
            "id": f"q{i:06d}", "question": f"question {i}: where is note {i % 997}?", "answerable": answerable,
            "category": category(i), "gold_supports": [{"rel_path": f"notes/n{i % 997}.md", "heading_path": "# Top"}],
            "tags": ["synthetic"],
        },
        "question": f"question {i}: where is note {i % 997}?",
        "answer": f"Note {i % 997} [1].",
        "answer_truncated": False,
        "references": [{"rel_path": f"notes/n{i % 997}.md", "heading_path": "# Top"}],
        "retrieved_chunks": [
            {"chunk_id": f"c{i}-{r}", "rel_path": f"notes/n{(i + r) % 997}.md", "heading_path": f"# Top > ## S{r}",
             "text": chunk_text(i, r), "text_truncated": False, "rank": r, "score_final": 1 / r}
            for r in range(1, chunks + 1)
        ],
        "retrieval_metrics": {
            "status": "scored" if answerable else "unanswerable", "recall_at_k": (1.0 if first else 0.0) if answerable else None,
            "mrr": (1 / first if first else 0.0) if answerable else None, "ndcg_at_k": value if answerable else None,
            "first_match_rank": first,
        },
        "abstention": {"abstained": not answerable},
        "latency": {"total_ms": latency(i)},
        "error": error(i),
        "judge_errors": [],
    }


def write_run(results_dir: Path, n: int, run_id: str = "big", chunks: int = 3) -> Path:
    """results_dir/run_id with config.json, metrics.json (headline numbers only) and n
    records. Returns results_dir."""
    folder = results_dir / run_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(orjson.dumps({"run_id": run_id, "settings": {"k": [5]}, "judge": {"provider": None}}))
    order = sorted(range(n), key=lambda i: (i // 8, -i))
    with open(folder / "results.jsonl", "wb") as f:
        for i in order:
            f.write(orjson.dumps(record(i, chunks)) + b"\n")
    answerable = [i for i in range(n) if i % 10 != 9]
    agg = {
        "k": 5, "n_cases": n, "n_errors": sum(1 for i in range(n) if error(i)),
        "recall_at_k_avg": sum(1 for i in answerable if ndcg(i)) / max(1, len(answerable)),
        "n": {"recall_at_k_avg": len(answerable)},
        "latency": {"p50_ms": 2500.0, "p95_ms": 4750.0, "mean_ms": 2500.0, "n": n},
    }
    (folder / "metrics.json").write_bytes(orjson.dumps({"schema_version": 1, "aggregate_metrics": agg}))
    return results_dir
