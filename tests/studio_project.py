"""A small project for the studio tests: notes (one hostile), an eval set of single questions
and one conversation (some unlabeled, one with hostile text), and a stored run over them by
the in-process reference chatbot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"

NOTES = {
    "garden/Garden.md": "# Garden\n\nThe garden behind the house.\n\n## Tomatoes\n\nPlant tomatoes in May, after the last frost. "
    "Water them daily.\n\n## Roses\n\nPrune the roses in March.\n",
    "car/Car.md": "# Car\n\n## Service\n\nThe car is serviced every October at the Bosch garage.\n\n## Tyres\n\n"
    "Winter tyres go on in November and come off in April.\n",
    "Hostile.md": f"# Notes {SCRIPT}\n\n## Section {IMG}\n\nText with {SCRIPT} and {IMG} inside.\n",
}

CASES: list[dict[str, Any]] = [
    {"id": "g-1", "question": "When are the tomatoes planted?", "answerable": True, "expected_key_facts": [], "gold_supports": [],
     "tags": ["garden"], "category": "factual"},
    {"id": "g-2", "question": "When is the car serviced?", "answerable": True, "expected_key_facts": ["every October"],
     "gold_supports": [{"rel_path": "car/Car.md", "heading_path": "# Car > ## Service"}], "tags": ["car"], "category": "factual"},
    {"id": "g-3", "question": "When are the roses pruned?", "answerable": True, "gold_supports": [], "tags": ["garden"]},
    {"id": "g-4", "question": f"When do winter tyres go on? {SCRIPT}", "answerable": True, "expected_key_facts": [IMG],
     "gold_supports": [], "tags": ["car"]},
    {"id": "g-5", "question": "What is the wifi password of the moon base?", "answerable": True, "gold_supports": [], "tags": ["other"]},
    {"id": "c-1", "tags": ["conversation"], "turns": [
        {"question": "What is planted in May?", "answerable": True, "gold_supports": []},
        {"question": "And when are they watered?", "answerable": True, "gold_supports": []},
    ]},
]


def write_project(root: Path, *, run: bool = True) -> dict[str, Path]:
    """The notes folder, the eval set (json.dumps lines, as the labeler writes them) and, with
    `run`, results/r1 made by the reference chatbot. Returns their paths."""
    vault = root / "notes"
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    eval_set = root / "eval_set.jsonl"
    eval_set.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in CASES), encoding="utf-8")
    results = root / "results"
    if run:
        from tests.support import run_eval_api

        run_eval_api(eval_set=str(eval_set), vault=str(vault), k=[3], results_dir=str(results), run_id="r1", retrieval_only=True,
                     quiet=True, concurrency=1)
    return {"root": root, "vault": vault, "eval_set": eval_set, "results": results}


@contextmanager
def running_studio(project: Any, token: str = "browser-test-token") -> Iterator[str]:
    """The studio on a real socket (127.0.0.1, a free port) in a thread; yields the printed URL."""
    import threading

    import uvicorn

    from evalkit.studio.app import create_app
    from evalkit.studio.server import bind, studio_url

    sock = bind(0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(project, token=token, port=port), log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            thread.join(0.02)
        yield studio_url(port, token)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def add_second_run(results: Path) -> None:
    """results/r2: r1 with g-2 answered otherwise and missing its gold (a recall flip), and g-4
    answered with hostile text: two changed cases for the side-by-side review."""
    import shutil

    import orjson

    shutil.copytree(results / "r1", results / "r2")
    path = results / "r2" / "results.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for r in records:
        if r["test_case_id"] == "g-2":
            r["answer"] = "Every October, at the Bosch garage."
            r["retrieval_metrics"]["at_k"]["3"]["recall_any"] = 0.0
            r["retrieval_metrics"]["recall_at_k"] = 0.0
        elif r["test_case_id"] == "g-4":
            r["answer"] = f"Tyres {SCRIPT} {IMG}"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
