"""eval_sets.lock keeps every writer's entry when writers run at once (issue 29 item 1).

Six processes lock six files of one folder at the same moment, over several trials: before
the manifest was read, changed and rewritten with nothing between processes, and 4-6 of 6
entries survived. Each process waits on a barrier file so they really start together."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
N, TRIALS = 6, 4

CHILD = """
import os, sys, time
from pathlib import Path
from evalkit.evalset.lock import lock_eval_set
path, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
lock_eval_set(path, "run-" + path.stem)
"""


@pytest.mark.parametrize("trial", range(TRIALS))
def test_parallel_lockers_lose_no_entry(tmp_path: Path, trial: int) -> None:
    files = []
    for i in range(N):
        f = tmp_path / f"set{i}.v1.jsonl"
        f.write_text(json.dumps({"id": f"c{i}", "question": f"q{i}?", "answerable": False, "gold_supports": []}) + "\n")
        files.append(f)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(f), str(go)], cwd=ROOT) for f in files]
    time.sleep(0.5)  # every child imported evalkit and is waiting
    go.touch()
    assert [p.wait(timeout=60) for p in procs] == [0] * N
    manifest = json.loads((tmp_path / "eval_sets.lock").read_text())
    assert sorted(manifest["eval_sets"]) == sorted(f.name for f in files)
