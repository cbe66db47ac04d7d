"""A small run whose text is hostile: the question, the answer, a chunk's text, a file name,
a tag and a domain carry `<script>` and `<img onerror>` payloads. Used by the
HTML report tests (unit and browser) to check that everything from a run is shown as text.

`ask` is the run's Python-callable target (`--target python:<this file>:ask`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
HOSTILE = f"{SCRIPT} {IMG}"
HOSTILE_PATH = 'notes/"><img src=x onerror=alert(3)>.md'
HOSTILE_TAG = '"><svg onload=alert(4)>'
HOSTILE_DOMAIN = "<b>bold</b>"
CATEGORIES = ("factual", "reasoning", "adversarial")


def _case(i: int) -> dict[str, Any]:
    answerable = i % 5 != 4
    question = f"Question {i}: what does {HOSTILE} do?" if i == 0 else f"Question {i}: where is section {i}?"
    return {
        "id": f"h-{i:03d}",
        "question": question,
        "answerable": answerable,
        "expected_key_facts": [f"section {i}"] if answerable else [],
        "gold_supports": [{"rel_path": HOSTILE_PATH if i == 0 else f"notes/n{i}.md", "heading_path": f"# N{i} > ## S{i}"}]
        if answerable
        else [],
        "tags": ["hostile", HOSTILE_TAG] if i == 0 else ["plain", f"t{i % 3}"],
        "category": CATEGORIES[i % len(CATEGORIES)],
        "difficulty": ("easy", "medium", "hard")[i % 3],
        "domain": HOSTILE_DOMAIN if i == 0 else "work" if i % 2 else "personal",
    }


def write_eval_set(path: Path, n: int = 12) -> Path:
    """An eval set of `n` cases (case 0 is the hostile one; every fifth is unanswerable)."""
    path.write_text("".join(json.dumps(_case(i)) + "\n" for i in range(n)), encoding="utf-8")
    return path


def ask(request: dict) -> dict:
    """Deterministic target: odd cases find their gold chunk at rank 1, even ones at rank 3,
    every seventh finds nothing; case 0's chunk text and answer are the hostile payloads."""
    i = int(request["question"].split(":")[0].split()[1])
    k = request.get("k") or 5
    chunks = []
    for rank in range(1, k + 1):
        gold = (rank == (1 if i % 2 else 3)) and i % 7 != 6
        rel_path = (HOSTILE_PATH if i == 0 else f"notes/n{i}.md") if gold else f"other/o{rank}.md"
        heading = f"# N{i} > ## S{i}" if gold else f"# O{rank}"
        text = f"Chunk text {HOSTILE} of case {i}" if i == 0 and gold else f"Plain text of {rel_path}, rank {rank}, section {i}."
        chunks.append({
            "chunk_id": f"c{i}-{rank}", "rel_path": rel_path, "heading_path": heading, "start_line": 1, "end_line": 5,
            "score_vector": 0.0, "score_lexical": 1.0 / rank, "score_final": 1.0 / rank, "text": text, "rank": rank,
        })
    answer = f"The answer is {HOSTILE} [1]." if i == 0 else f"It is in section {i} [1]."
    return {
        "answer": answer,
        "references": [{k_: chunks[0][k_] for k_ in ("chunk_id", "rel_path", "heading_path")}],
        "abstained": i % 5 == 4 and i % 2 == 0,
        "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1.0 + i, "generation": 2.0 + i}},
    }


def make_hostile_run(folder: Path, n: int = 12) -> tuple[Path, str]:
    """Run the hostile eval set against `ask` into `folder/results`. Returns (results_dir, run_id)."""
    from tests.support import run_eval_api

    eval_set = write_eval_set(folder / "eval_set.jsonl", n)
    results = folder / "results"
    result = run_eval_api(
        eval_set=str(eval_set), k=[5, 3], target=f"python:{Path(__file__).resolve()}:ask", results_dir=str(results),
        run_id="hostile", concurrency=2, no_probe=True, quiet=True,
    )
    return results, result.run_id
