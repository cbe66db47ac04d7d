"""`--target python:tests.integration.waiting_bot:ask`: a target that counts its calls and can be held.

Each call appends its question, one line, to the file `$WAITING_BOT_CALLS` names (when set),
then waits until the file `$WAITING_BOT_RELEASE` names exists (when set), so a test holds a
run_eval at work on a run for as long as it needs, whatever the machine's load. It answers
with the case's gold chunk (`notes/<case id>.md`, `# H`) at rank 2 of k.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

# Only for a test that never releases: the run then fails instead of hanging the suite.
_GIVE_UP_S = 300.0


def _wait_for_release() -> None:
    release = os.environ.get("WAITING_BOT_RELEASE")
    if not release:
        return
    deadline = time.monotonic() + _GIVE_UP_S
    while not Path(release).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{release} never appeared")
        time.sleep(0.01)


def ask(request: dict[str, Any]) -> dict[str, Any]:
    question = request["question"]
    calls = os.environ.get("WAITING_BOT_CALLS")
    if calls:
        with open(calls, "a", encoding="utf-8") as f:  # one short line: appends do not interleave
            f.write(question + "\n")
    _wait_for_release()
    case = question.split()[-1].rstrip("?")
    k = request.get("k") or 5
    chunks = [
        {"chunk_id": f"{case}-{rank}", "rel_path": f"notes/{case}.md" if rank == 2 else f"other/o{rank}.md",
         "heading_path": "# H", "start_line": 1, "end_line": 2, "score_vector": 0.0, "score_lexical": 1.0 / rank,
         "score_final": 1.0 / rank, "text": f"Text about {case}, rank {rank}.", "rank": rank}
        for rank in range(1, k + 1)
    ]
    return {
        "answer": f"It is in the notes about {case} [1].",
        "references": [{"chunk_id": f"{case}-2", "rel_path": f"notes/{case}.md", "heading_path": "# H"}],
        "debug": {"retrieved_chunks": chunks},
    }
