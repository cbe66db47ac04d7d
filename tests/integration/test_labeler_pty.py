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


def _spawn(path: Path, tmp_path: Path, *flags: str):
    """scripts/label_eval.py in a 40x120 pseudo-terminal, as a person starts it."""
    return pexpect.spawn(
        sys.executable,
        ["scripts/label_eval.py", *flags, "--eval-set", str(path), "--results-dir", str(tmp_path / "results")],
        cwd=str(ROOT),
        env={"TERM": "xterm-256color", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        dimensions=(40, 120),
        timeout=30,
    )


def test_select_the_top_chunk_and_quit_in_a_real_terminal(tmp_path: Path) -> None:
    lines = (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:3]
    case = json.loads(lines[1])  # sv-002: "What's the name of my bread starter?"
    case["gold_supports"] = []
    lines[1] = (json.dumps(case) + "\n").encode()
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(lines))

    child = _spawn(path, tmp_path)
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
    child = _spawn(path, tmp_path, "--review-auto")
    try:
        child.expect("sv-003")  # the auto-labeled case is shown, not sv-001 or sv-002
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert path.read_bytes() == b"".join(lines)  # reviewed without a change: nothing rewritten


def _unlabel(line: bytes) -> bytes:
    obj = json.loads(line)
    obj["gold_supports"] = []
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


def _label(path: Path, tmp_path: Path, keys: list[str], first_screen: str) -> None:
    import time

    child = _spawn(path, tmp_path)
    try:
        child.expect(first_screen)
        child.expect("Sourdough|Dentist|rank|#", timeout=30)  # the chunks have arrived
        time.sleep(0.5)
        for key in keys:
            child.send(key)
            time.sleep(0.3)  # one key per frame, as a person types
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_the_issue_scenario_in_a_real_terminal(tmp_path: Path) -> None:
    # The same scenario as the pilot test, typed into a real pseudo-terminal: select two
    # chunks, make one shallower, add a snippet, quit; resume, mark a case unanswerable, quit.
    before = (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:5]
    before[1], before[3] = _unlabel(before[1]), _unlabel(before[3])
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(before))
    down, up, enter = "\x1b[B", "\x1b[A", "\r"
    _label(path, tmp_path, [" ", down, " ", "d", up, "s", enter, "q"], "bread starter")
    after = path.read_bytes().splitlines(keepends=True)
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [1]
    assert json.loads(after[1])["gold_supports"] == [
        {"rel_path": "personal/recipes/Sourdough.md", "heading_path": "# Sourdough > ## The starter", "snippets": ["Her name is Gus (yes, her)."]},
        {"rel_path": "personal/recipes/Sourdough.md", "heading_path": "# Sourdough > ## Country loaf"},
    ]
    # resume: only sv-004 is left unlabeled
    question4 = json.loads(before[3])["question"].split()[0]
    _label(path, tmp_path, ["u", "q"], question4)
    final = path.read_bytes().splitlines(keepends=True)
    assert [i for i, (a, b) in enumerate(zip(before, final)) if a != b] == [1, 3]
    assert final[1] == after[1]
    case4 = json.loads(final[3])
    assert (case4["answerable"], case4["gold_supports"]) == (False, [])
