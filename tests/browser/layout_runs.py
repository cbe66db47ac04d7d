"""Runs whose HTML reports once had rough spots (issue 28 item 8), for the layout tests and
the docs screenshots.

    make_runs(folder)          six real runs (run_eval) into folder/results, with reports:
        t1-base             the bundled eval set, reference chatbot over sample_vault/
        t2-abstain-05       abstain_threshold 0.5 (a config-change marker)
        t3-limit-4          --limit 4: a partial run (4 of 59 cases)
        t4-all-failed       a target that raises on every case: a failed run
        t5-k-10             K 10 and abstain_threshold 0.3
        t6-slow-long-ids    another eval set (a second series) of 8 cases with 40-character
                            ids, against `slow`: latency p50 ~4,29x ms, p95 ~4,60x ms
    make_dense_trend(folder)   36 synthetic run folders (config.json + metrics.json only, what
                               the trend page reads) with timestamp run ids, a config change on
                               each of 14 runs in a row, a partial and a failed run, and an eval
                               set change: markers a few px apart

`slow` and `fail` are Python-callable targets (`--target python:<this file>:slow`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
LONG_IDS = 8
SLOW_S = (4.29, 4.6)  # most cases, every fourth case


def long_id(i: int) -> str:
    return f"harbor-team-directory-multi-hop-{i:04d}q"  # 40 characters


def write_long_id_eval_set(path: Path, n: int = LONG_IDS) -> Path:
    """`n` answerable cases with 40-character ids, each with one gold note."""
    cases = [
        {"id": long_id(i), "question": f"Question {i}: who leads team {i} in the directory?", "answerable": True,
         "expected_key_facts": [f"team {i}"], "gold_supports": [{"rel_path": f"notes/team{i}.md", "heading_path": f"# Team {i}"}],
         "category": ("factual", "multi_hop")[i % 2], "tags": ["layout"]}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


def slow(request: dict) -> dict:
    """A slow chatbot: 4.29 s a case (4.6 s every fourth), the gold note at rank 1 on even cases."""
    i = int(request["question"].split(":")[0].split()[1])
    time.sleep(SLOW_S[1] if i % 4 == 3 else SLOW_S[0])
    rel = f"notes/team{i}.md" if i % 2 == 0 else "notes/other.md"
    chunk = {"chunk_id": f"c{i}", "rel_path": rel, "heading_path": f"# Team {i}", "text": f"Team {i} is led by Ravi.", "rank": 1,
             "score_final": 1.0}
    return {"answer": f"Ravi leads team {i} [1].", "references": [{"rel_path": rel, "heading_path": f"# Team {i}"}],
            "abstained": False, "debug": {"retrieved_chunks": [chunk]}}


def fail(request: dict) -> dict:
    """A chatbot whose backend is down: every case is a target error."""
    raise RuntimeError("the backend is down")


RUNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("t1-base", {}),
    ("t2-abstain-05", {"params": {"abstain_threshold": 0.5}}),
    ("t3-limit-4", {"params": {"abstain_threshold": 0.5}, "limit": 4}),
    ("t4-all-failed", {"target": f"python:{Path(__file__).resolve()}:fail", "no_probe": True}),
    ("t5-k-10", {"params": {"abstain_threshold": 0.3}, "k": [10, 5]}),
)


def make_runs(folder: Path) -> Path:
    """The six runs of the module docstring, and the report.html of t1, t4 and t6. Returns
    the results folder. Runs made in the same second keep their order by name (t1 < t2 ...)."""
    from evalkit.report.html.run import write_run_report
    from tests.support import run_eval_api

    results = folder / "results"
    common = {"vault": str(ROOT / "sample_vault"), "results_dir": str(results), "quiet": True}
    for run_id, kwargs in RUNS:
        run_eval_api(eval_set=str(ROOT / "eval_set.jsonl"), run_id=run_id, **common, **kwargs)
    eval_set = write_long_id_eval_set(folder / "long_ids.jsonl")
    run_eval_api(eval_set=str(eval_set), run_id="t6-slow-long-ids", target=f"python:{Path(__file__).resolve()}:slow", no_probe=True,
                 concurrency=LONG_IDS, **common)
    for run_id in ("t1-base", "t4-all-failed", "t6-slow-long-ids"):
        write_run_report(run_id, results_dir=results)
    return results


def _synthetic_run(root: Path, i: int, *, threshold: float, version: str, total: int = 10, errors: int = 0,
                   limit: int | None = None) -> None:
    run_id = f"20260102T03{i:02d}05Z-{i * 7919 % 16**6:06x}"
    params = {"abstain_threshold": threshold}
    config = {
        "run_id": run_id, "created_at": f"2026-01-02T03:{i:02d}:05Z", "dataset_version": version,
        "eval_set": {"version": version, "n_cases": 10, "n_selected": total, "paths": ["/data/eval_set.jsonl"]},
        "hashed": {"k": [5], "params": params}, "settings": {"k": [5], "params": params, "limit": limit},
        "target": {"kind": "reference", "params": params},
    }
    recall = 0.0 if errors else 0.6 + (i % 5) / 20
    agg = {
        "k": 5, "n_cases": total, "recall_at_k_avg": recall, "mrr_avg": recall / 2, "ndcg_at_k_avg": recall * 0.8,
        "latency": {"p95_ms": 4_600.0 + 37 * i}, "cost": {"judge_total_usd": 0.0},
        "operational_metrics": {"n_errors": errors, "n": total},
    }
    folder = root / run_id
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(orjson.dumps(config))
    (folder / "metrics.json").write_bytes(orjson.dumps({"aggregate_metrics": agg, "total_tests": total}))


def make_dense_trend(folder: Path, n: int = 36, name: str = "dense") -> Path:
    """`n` synthetic runs (module docstring) into folder/name: config changes on runs 2, 5
    and 12-25, run 8 partial (--limit 4), run 16 failed (every case an error), runs 30 on
    another eval set. With n = 5: a few runs, their x labels the longest they get."""
    root = folder / name
    for i in range(n):
        threshold = 0.3 + 0.01 * (i - 11) if 12 <= i <= 24 else (0.4 if i >= 25 else 0.35 if i >= 5 else 0.3 if i >= 2 else 0.2)
        _synthetic_run(root, i, threshold=round(threshold, 2), version="2" * 64 if i >= 30 else "1" * 64,
                       total=4 if i == 8 else 10, limit=4 if i == 8 else None, errors=10 if i == 16 else 0)
    return root
