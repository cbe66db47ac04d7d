"""The labeler in a real pseudo-terminal, as a person runs it: the script starts, draws the
case and its chunks, takes keys, saves and exits; the file on disk holds the anchor chosen
and every other line is byte-identical."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("textual")

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_select_the_top_chunk_and_quit_in_a_real_terminal(tmp_path: Path) -> None:
    lines = (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:3]
    case = json.loads(lines[1])  # sv-002: "What's the name of my bread starter?"
    case["gold_supports"] = []
    lines[1] = (json.dumps(case) + "\n").encode()
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(lines))

    child = pexpect.spawn(
        sys.executable,
        ["scripts/label_eval.py", "--eval-set", str(path), "--results-dir", str(tmp_path / "results")],
        cwd=str(ROOT),
        env={"TERM": "xterm-256color", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        dimensions=(40, 120),
        timeout=30,
    )
    try:
        # the case's question and the reference chatbot's top chunk are on screen
        child.expect("bread starter")
        child.expect("Sourdough")
        child.send(" ")  # select rank 1 as a gold support
        child.send("q")  # save and quit
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before
    after = path.read_bytes().splitlines(keepends=True)
    assert after[0] == lines[0] and after[2] == lines[2]  # untouched lines, byte for byte
    saved = json.loads(after[1])
    assert [(s["rel_path"], s["heading_path"]) for s in saved["gold_supports"]] == [
        ("personal/recipes/Sourdough.md", "# Sourdough > ## The starter")
    ]
    assert "chunk_id" not in saved["gold_supports"][0]


def test_review_auto_walks_only_the_auto_labeled_cases(tmp_path: Path) -> None:
    lines = (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:3]
    case = json.loads(lines[2])  # sv-003, about the country loaf's hydration
    case["label_source"] = "auto"
    lines[2] = (json.dumps(case) + "\n").encode()
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(lines))
    child = pexpect.spawn(
        sys.executable,
        ["scripts/label_eval.py", "--review-auto", "--eval-set", str(path), "--results-dir", str(tmp_path / "results")],
        cwd=str(ROOT),
        env={"TERM": "xterm-256color", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        dimensions=(40, 120),
        timeout=30,
    )
    try:
        child.expect("sv-003")  # the auto-labeled case is shown, not sv-001 or sv-002
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert path.read_bytes() == b"".join(lines)  # reviewed without a change: nothing rewritten
