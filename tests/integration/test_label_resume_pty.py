"""Every interactive mode of label_eval.py in a real 80x24 pseudo-terminal, as a person runs
it (issue 28 items 1, 2 and 10): answer one case, with one bad answer that is asked again,
quit; rerun the very same command, answer another; both saved cases are in the file, what
was saved in between is kept, and the bad answer never reached the file.

The modes: --new (line prompts, then the labeler), the labeler with --output, --review-auto
in a terminal with --output, --review-auto --into (accept / edit / reject prompts),
--grade-answers, and --fix's y/N question (a non-interactive writer: its rerun is refused,
and --force keeps .bak copies)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.support import write_run

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("textual")

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"


def _spawn(tmp_path: Path, *args: object):
    """scripts/label_eval.py in an 80x24 pseudo-terminal (the smallest usual terminal)."""
    return pexpect.spawn(
        sys.executable,
        ["scripts/label_eval.py", *map(str, args)],
        cwd=str(ROOT),
        env={"TERM": "xterm-256color", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        dimensions=(24, 80),
        timeout=60,
        encoding="utf-8",
        codec_errors="replace",
    )


def _answer(child, steps: list[tuple[str, str]]) -> None:
    """Each step: wait for the text (exactly), then type the answer and Enter."""
    for shown, typed in steps:
        child.expect_exact(shown)
        child.sendline(typed)


def _keys(child, ready: str, keys: list[str]) -> None:
    """In the labeler: wait for `ready` (a chunk's path: the chunks have arrived), then press keys."""
    child.expect(ready)
    time.sleep(0.5)
    for key in keys:
        child.send(key)
        time.sleep(0.3)  # one key per frame, as a person types


def _end(child) -> str:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


def _lines(n: int, unlabel: tuple[int, ...] = (), auto: tuple[int, ...] = ()) -> list[bytes]:
    """The first `n` lines of eval_set.jsonl; the cases at `unlabel` lose their supports, those
    at `auto` are marked label_source auto."""
    lines = (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:n]
    for i in set(unlabel) | set(auto):
        obj = json.loads(lines[i])
        if i in unlabel:
            obj["gold_supports"] = []
        if i in auto:
            obj["label_source"] = "auto"
        lines[i] = (json.dumps(obj, ensure_ascii=False) + "\n").encode()
    return lines


def _cases(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _supports(case: dict) -> list[tuple[str, str]]:
    return [(s["rel_path"], s["heading_path"]) for s in case["gold_supports"]]


def test_new_asks_bad_answers_again_and_the_same_command_appends(tmp_path: Path) -> None:
    src = tmp_path / "set.jsonl"
    src.write_bytes(b"".join(_lines(3)))
    v2 = tmp_path / "set.v2.jsonl"
    command = ("--new", "--eval-set", src, "--output", v2, "--results-dir", tmp_path / "results")

    child = _spawn(tmp_path, *command)
    _answer(child, [
        ("question: ", "What's the name of my bread starter?"),
        ("[Y/n]: ", "maybe"), ("answer y or n, got 'maybe'; asked again", ""),
        ("blank = none): ", "multi-hop"), ("unknown category 'multi-hop'", "factual"),
        ("difficulty (easy, medium, hard; blank = none): ", "easy"),
        ("tags (comma-separated; blank = none): ", "bread"),
    ])
    _keys(child, "Sourdough", [" ", "q"])  # the labeler opens on the new case: select rank 1
    assert "saved" in _end(child)
    after_first = v2.read_bytes()

    child = _spawn(tmp_path, *command)  # the same command again: a second case, appended
    _answer(child, [
        ("question: ", "How wet is my country loaf dough?"),
        ("[Y/n]: ", "y"),
        ("blank = none): ", ""),
        ("difficulty (easy, medium, hard; blank = none): ", "hardest"), ("unknown difficulty 'hardest'", "hard"),
        ("tags (comma-separated; blank = none): ", ""),
    ])
    _keys(child, "Sourdough", [" ", "q"])
    _end(child)

    assert src.read_bytes() == b"".join(_lines(3))  # --eval-set is never written
    assert v2.read_bytes().startswith(after_first)  # the first session's file, byte for byte, then the new case
    cases = _cases(v2)
    assert [c["id"] for c in cases] == ["sv-001", "sv-002", "sv-003", "sv-004", "sv-005"]
    first, second = cases[3], cases[4]
    assert (first["question"], first["answerable"], first["category"], first["difficulty"], first["tags"]) == (
        "What's the name of my bread starter?", True, "factual", "easy", ["bread"])
    assert (second["question"], second["difficulty"], "category" in second) == ("How wet is my country loaf dough?", "hard", False)
    assert len(first["gold_supports"]) == 1 and len(second["gold_supports"]) == 1  # labeled in the labeler
    text = v2.read_text(encoding="utf-8")
    assert "maybe" not in text and "multi-hop" not in text and "hardest" not in text
    assert not list(tmp_path.glob("*.bak*"))


def test_the_labeler_goes_on_in_its_output_when_the_same_command_is_rerun(tmp_path: Path) -> None:
    # Before: the rerun the labeler itself suggests ("saved set.v2.jsonl; rerun the same
    # command to go on") exited 2: "--output: already exists".
    src = tmp_path / "set.jsonl"
    before = _lines(4, unlabel=(1, 2))  # sv-002 (bread starter) and sv-003 (loaf hydration) unlabeled
    src.write_bytes(b"".join(before))
    v2 = tmp_path / "set.v2.jsonl"
    command = ("--eval-set", src, "--output", v2, "--results-dir", tmp_path / "results")

    child = _spawn(tmp_path, *command)
    child.expect("bread starter")
    _keys(child, "Sourdough", ["x", " ", "q"])  # x is no key: nothing happens; space selects rank 1
    assert "rerun the same command to go on" in _end(child)
    after_first = v2.read_bytes().splitlines(keepends=True)

    child = _spawn(tmp_path, *command)
    child.expect("going on in")
    child.expect("hydration")  # sv-002 is labeled in v2: the walk starts at sv-003
    _keys(child, "Sourdough", [" ", "q"])
    _end(child)

    assert src.read_bytes() == b"".join(before)
    final = v2.read_bytes().splitlines(keepends=True)
    assert [i for i, (a, b) in enumerate(zip(before, final, strict=True)) if a != b] == [1, 2]
    assert final[1] == after_first[1]  # the first session's label, byte for byte
    assert _supports(json.loads(final[1])) == [("personal/recipes/Sourdough.md", "# Sourdough > ## The starter")]
    assert len(json.loads(final[2])["gold_supports"]) == 1
    assert not list(tmp_path.glob("*.bak*"))


def test_review_auto_in_a_terminal_goes_on_in_its_output(tmp_path: Path) -> None:
    src = tmp_path / "set.jsonl"
    before = _lines(3, unlabel=(1, 2), auto=(1, 2))
    src.write_bytes(b"".join(before))
    v2 = tmp_path / "set.v2.jsonl"
    command = ("--review-auto", "--eval-set", src, "--output", v2, "--results-dir", tmp_path / "results")

    child = _spawn(tmp_path, *command)
    child.expect("bread starter")
    _keys(child, "Sourdough", [" ", "q"])  # an edit: the auto mark goes
    _end(child)

    child = _spawn(tmp_path, *command)
    child.expect(r"\[1/1\] sv-003")  # only sv-003 is still marked auto, in v2
    _keys(child, "Sourdough", [" ", "q"])
    _end(child)

    cases = _cases(v2)
    assert src.read_bytes() == b"".join(before)
    assert v2.read_bytes().splitlines(keepends=True)[0] == before[0]  # sv-001 was never shown
    assert [("label_source" in c, len(c["gold_supports"])) for c in cases[1:]] == [(False, 1), (False, 1)]
    assert _supports(cases[1]) == [("personal/recipes/Sourdough.md", "# Sourdough > ## The starter")]


@pytest.fixture(scope="module")
def candidates_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from evalkit.cli.main import app as main_app

    out = tmp_path_factory.mktemp("gen") / "candidates.jsonl"
    res = CliRunner().invoke(main_app, ["generate", "--vault", str(SAMPLE_VAULT), "--output", str(out), "--no-retrieval", "--limit", "4", "--seed", "3"])
    assert res.exit_code == 0, res.output
    return out


def test_review_into_asks_bad_answers_again_and_a_rerun_appends_to_the_new_version(candidates_file: Path, tmp_path: Path) -> None:
    # Before: the second session rebuilt v2 from eval_set.v1 + the log, so a label added in
    # v2 between the sessions (here: a snippet, as the labeler adds one) was lost.
    from evalkit.authoring.labeling import EvalSetFile

    cand = tmp_path / "candidates.jsonl"
    shutil.copy(candidates_file, cand)
    cands = _cases(cand)
    into = tmp_path / "eval_set.v1.jsonl"
    into.write_bytes(b"".join(_lines(3)))
    v2 = tmp_path / "eval_set.v2.jsonl"
    command = ("--review-auto", "--eval-set", cand, "--into", into, "--results-dir", tmp_path / "results")

    child = _spawn(tmp_path, *command)
    _answer(child, [
        ("[a]ccept [e]dit [r]eject [s]kip [q]uit? ", "x"), ("got 'x'; asked again", "e"),
        ("  question [", ""), ("  expected key facts", ""),
        ("  category (", "multi-hop"), ("unknown category 'multi-hop'", "reasoning"),
        ("  difficulty (", "medium"), ("  answerable (y/n) [", ""),
        ("[a]ccept [e]dit [r]eject [s]kip [q]uit? ", "q"),
    ])
    _end(child)
    [first] = _cases(v2)[3:]
    assert (first["id"], first["category"], first["difficulty"]) == (cands[0]["id"], "reasoning", "medium")

    # between the sessions, a person labels the accepted case in v2
    doc = EvalSetFile(v2)
    labeled = doc.case(first["id"])
    labeled["notes"] = "checked by hand"
    doc.replace(first["id"], labeled)
    doc.write()
    edited = v2.read_bytes()

    child = _spawn(tmp_path, *command)  # the same command: it goes on at candidate 2
    child.expect_exact(f"] {cands[1]['id']}")
    _answer(child, [("[a]ccept [e]dit [r]eject [s]kip [q]uit? ", "a"), ("[a]ccept [e]dit [r]eject [s]kip [q]uit? ", "q")])
    _end(child)

    assert into.read_bytes() == b"".join(_lines(3))  # --into is never written
    assert v2.read_bytes().startswith(edited)  # what was saved, the hand edit included, then the new case
    added = _cases(v2)[3:]
    assert [c["id"] for c in added] == [cands[0]["id"], cands[1]["id"]]
    assert added[0]["notes"] == "checked by hand"
    assert "multi-hop" not in v2.read_text(encoding="utf-8")
    assert not list(tmp_path.glob("*.bak*"))


def test_grade_answers_asks_junk_again_and_a_rerun_goes_on(tmp_path: Path) -> None:
    from evalkit.judges.grades import GRADES_FILE
    from tests.integration.test_judge_answers_cli import _record

    results = write_run(tmp_path / "results", "r1", [_record(i, f"q{i}", f"Answer {i} on port 8080.") for i in range(4)],
                        config=None)
    command = ("--grade-answers", "--run-id", "r1", "--results-dir", results, "--sample", "3", "--seed", "0")

    child = _spawn(tmp_path, *command)
    _answer(child, [
        ("(blank = skip, q = quit): ", "7"), ("expected a whole number 0-5", "4"),
        ("correctness 0-5: ", "x"), ("expected a whole number 0-5", "3"),
        ("(blank = skip, q = quit): ", "q"),
    ])
    _end(child)
    child = _spawn(tmp_path, *command)
    _answer(child, [("(blank = skip, q = quit): ", "2"), ("correctness 0-5: ", "1"), ("(blank = skip, q = quit): ", "q")])
    _end(child)

    grades = [json.loads(line) for line in (results / "r1" / GRADES_FILE).read_text().splitlines()]
    assert [(g["groundedness"], g["correctness"]) for g in grades] == [(4, 3), (2, 1)]
    assert len({g["test_case_id"] for g in grades}) == 2  # the rerun graded the next case, not the first again


def test_fix_asks_y_n_again_and_never_replaces_its_new_version_without_force(tmp_path: Path) -> None:
    # Before: "maybe" at the y/N question counted as no ("nothing written", exit 1), and
    # there was no --force to replace a new version.
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    note = vault / "personal/recipes/Sourdough.md"
    note.write_text(note.read_text(encoding="utf-8").replace("\n## The starter\n", "\n## Our starter\n"), encoding="utf-8")
    es = tmp_path / "eval_set.jsonl"
    es.write_bytes(b"".join(_lines(3)))
    v2 = tmp_path / "eval_set.v2.jsonl"
    command = ("--fix", "--eval-set", es, "--vault", vault, "--no-retrieval", "--results-dir", tmp_path / "results")

    child = _spawn(tmp_path, *command)
    _answer(child, [("[y/N] ", "maybe"), ("answer y or n, got 'maybe'; asked again", "y")])
    _end(child)
    fixed = v2.read_bytes()
    assert b"## Our starter" in fixed and b"maybe" not in fixed

    v2.write_bytes(fixed + b'{"id": "mine", "question": "Added by hand?", "answerable": false}\n')
    mine = v2.read_bytes()
    child = _spawn(tmp_path, *command)  # the same command: refused, v2 kept
    child.expect("already exists")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2 and v2.read_bytes() == mine

    for bak in ["eval_set.v2.jsonl.bak", "eval_set.v2.jsonl.bak.1"]:
        child = _spawn(tmp_path, *command, "--force")
        _answer(child, [("[y/N] ", "y")])
        assert f"kept as {tmp_path / bak}" in _end(child)
        assert v2.read_bytes() == fixed
    assert (tmp_path / "eval_set.v2.jsonl.bak").read_bytes() == mine  # the older backup is never overwritten
    assert (tmp_path / "eval_set.v2.jsonl.bak.1").read_bytes() == fixed
