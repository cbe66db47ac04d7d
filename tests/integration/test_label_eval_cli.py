"""label_eval.py end to end over the in-process reference chatbot: a renamed heading found
and fixed into a new version, the freeze rule, --accept-top and --review-auto."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.label_eval import app
from evalkit.evalset.load import load_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
SOURDOUGH = "personal/recipes/Sourdough.md"


def _invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


@pytest.fixture()
def renamed(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of sample_vault with sv-002's heading `## The starter` renamed, and of eval_set.jsonl."""
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    note = vault / SOURDOUGH
    text = note.read_text(encoding="utf-8")
    assert text.count("\n## The starter\n") == 1
    note.write_text(text.replace("\n## The starter\n", "\n## Our starter\n"), encoding="utf-8")
    es = tmp_path / "eval_set.jsonl"
    shutil.copy(ROOT / "eval_set.jsonl", es)
    return vault, es


def test_renamed_heading_is_reported_then_fixed_into_a_v2_that_validates_clean(renamed: tuple[Path, Path], tmp_path: Path) -> None:
    vault, es = renamed
    line = next(n for n, raw in enumerate(es.read_text(encoding="utf-8").splitlines(), 1) if '"sv-002"' in raw)

    out = _invoke("--validate", "--eval-set", es, "--vault", vault)
    assert out.exit_code == 1, out.output
    assert (
        f"{es}:{line}: gold_supports[0].heading_path: stale: heading_gone: no heading chain "
        f"'# Sourdough > ## The starter' in {SOURDOUGH}; did you mean '# Sourdough > ## Our starter'?"
    ) in out.stdout.splitlines()
    assert f"{es}:{line}: gold_supports: stale: all_stale: answerable case 'sv-002': its only gold support is stale; relabel it" in out.stdout
    stale = [ln for ln in out.stdout.splitlines() if ": stale: " in ln]
    assert len(stale) == 2  # nothing else in the set is stale (retrieval misses are warnings only)

    declined = _invoke("--fix", "--eval-set", es, "--vault", vault, "--no-retrieval", input="n\n")
    assert declined.exit_code == 1 and "nothing written" in declined.stdout
    v2 = tmp_path / "eval_set.v2.jsonl"
    assert not v2.exists()

    before = es.read_bytes()
    fixed = _invoke("--fix", "--yes", "--eval-set", es, "--vault", vault)
    assert fixed.exit_code == 0, fixed.output
    assert es.read_bytes() == before  # the old version is never touched
    old_lines, new_lines = before.splitlines(keepends=True), v2.read_bytes().splitlines(keepends=True)
    assert [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b] == [line - 1]
    assert json.loads(new_lines[line - 1])["gold_supports"][0]["heading_path"] == "# Sourdough > ## Our starter"

    clean = _invoke("--validate", "--eval-set", v2, "--vault", vault)
    assert clean.exit_code == 0, clean.output
    assert ": stale: " not in clean.stdout


def _tiny(tmp_path: Path) -> Path:
    es = tmp_path / "tiny.jsonl"
    es.write_text(
        '{"id": "t1", "question": "What is the name of my sourdough starter?", "answerable": true, "reviewer": "ana"}\n'
        '{"id":"t2","question":"Who leads Harbor?","answerable":true,"gold_supports":[{"rel_path":"work/projects/Harbor.md","heading_path":"# Harbor > ## Team"}]}\n'
        '{"id": "t3", "question": "What is my bank PIN?", "answerable": false, "gold_supports": []}\n',
        encoding="utf-8",
    )
    return es


def test_accept_top_labels_unlabeled_cases_and_review_auto_lists_them(tmp_path: Path) -> None:
    es = _tiny(tmp_path)
    before = es.read_bytes().splitlines(keepends=True)
    out = _invoke("--accept-top", "3", "--eval-set", es, "--vault", SAMPLE_VAULT, "--results-dir", tmp_path / "results")
    assert out.exit_code == 0, out.output
    after = es.read_bytes().splitlines(keepends=True)
    assert after[1:] == before[1:]  # the labeled and the unanswerable case are left alone, byte for byte
    t1 = json.loads(after[0])
    assert t1["label_source"] == "auto" and t1["reviewer"] == "ana"
    anchors = t1["gold_supports"]
    assert 1 <= len(anchors) <= 3
    assert all(set(a) == {"rel_path", "heading_path"} for a in anchors)  # anchors, never chunk ids
    assert len({(a["rel_path"], a["heading_path"]) for a in anchors}) == len(anchors)
    assert [c.id for c in load_eval_set([es]).cases] == ["t1", "t2", "t3"]

    review = _invoke("--review-auto", "--eval-set", es)
    assert review.exit_code == 0, review.output
    lines = review.stdout.splitlines()
    assert lines[0] == f"{es}:1: t1: What is the name of my sourdough starter?"
    assert lines[1].startswith("    [0] ") and lines[-1].startswith("evalkit: 1 auto-labeled case")
    assert "t2" not in review.stdout

    again = _invoke("--accept-top", "3", "--eval-set", es, "--vault", SAMPLE_VAULT, "--results-dir", tmp_path / "results")
    assert again.exit_code == 0 and "no case to label" in again.stdout  # a rerun resumes: nothing left


def test_accept_top_with_ids_relabels_and_skips_unanswerable(tmp_path: Path) -> None:
    es = _tiny(tmp_path)
    out = _invoke("--accept-top", "1", "--ids", "t2,t3", "--eval-set", es, "--vault", SAMPLE_VAULT,
                  "--output", tmp_path / "tiny.v2.jsonl", "--results-dir", tmp_path / "results")
    assert out.exit_code == 0, out.output
    assert "skipped t3: answerable is false" in out.stdout
    t2 = json.loads((tmp_path / "tiny.v2.jsonl").read_text(encoding="utf-8").splitlines()[1])
    assert t2["label_source"] == "auto" and len(t2["gold_supports"]) == 1


def test_a_frozen_eval_set_is_refused_with_the_new_version_suggested(tmp_path: Path) -> None:
    from evalkit.evalset.lock import lock_eval_set

    es = _tiny(tmp_path)
    lock_eval_set(es, "baseline")  # the one freeze rule: locked in eval_sets.lock
    before = es.read_bytes()

    out = _invoke("--accept-top", "2", "--eval-set", es, "--vault", SAMPLE_VAULT, "--results-dir", tmp_path / "results")
    assert out.exit_code == 2
    assert "baselined by run baseline" in out.stderr
    assert f"--output {tmp_path / 'tiny.v2.jsonl'}" in out.stderr
    assert es.read_bytes() == before

    ok = _invoke("--accept-top", "2", "--eval-set", es, "--vault", SAMPLE_VAULT, "--results-dir", tmp_path / "results",
                 "--output", tmp_path / "tiny.v2.jsonl")
    assert ok.exit_code == 0, ok.output
    assert es.read_bytes() == before


def test_without_a_mode_and_without_a_terminal_the_labeler_exits_2(tmp_path: Path) -> None:
    es = tmp_path / "set.jsonl"
    es.write_bytes(b'{"id": "a", "question": "Q?", "answerable": true, "gold_supports": []}\n')
    out = _invoke("--eval-set", es, "--results-dir", tmp_path / "results")
    assert out.exit_code == 2
    assert "the interactive labeler needs a terminal" in out.stderr and "--accept-top" in out.stderr


def test_the_labeler_refuses_a_frozen_file_before_the_ui_opens(tmp_path: Path) -> None:
    from evalkit.evalset.lock import lock_eval_set

    es = tmp_path / "set.jsonl"
    es.write_bytes(b'{"id": "a", "question": "Q?", "answerable": true, "gold_supports": []}\n')
    lock_eval_set(es, "20250101T000000Z-abcdef")
    out = _invoke("--eval-set", es, "--results-dir", tmp_path / "results")
    assert out.exit_code == 2
    assert "baselined" in out.stderr and "--output" in out.stderr and "set.v2.jsonl" in out.stderr


def test_a_stored_run_does_not_freeze_the_file_it_used(tmp_path: Path) -> None:
    # issue 28 item 3: the quick start's first run froze eval_set.jsonl, so every labeling
    # example after it was refused ("frozen: stored run(s) ... used this file"). One rule now:
    # only a lock (a baseline, or evalkit lock) freezes a file.
    from evalkit import run_eval

    es = _tiny(tmp_path)
    run_eval(str(es), vault=str(SAMPLE_VAULT), results_dir=str(tmp_path / "results"), retrieval_only=True, quiet=True)
    out = _invoke("--accept-top", "2", "--eval-set", es, "--vault", SAMPLE_VAULT, "--results-dir", tmp_path / "results")
    assert out.exit_code == 0, out.output


def test_over_http_without_the_notes_a_support_the_retriever_never_finds_is_stale(tmp_path: Path, reference_server: str) -> None:
    # The server's index stats list its files but not headings: retrieval is the only look at them.
    if not (SAMPLE_VAULT / SOURDOUGH).is_file():
        pytest.skip("needs sample_vault")
    es = tmp_path / "es.jsonl"
    good = {"rel_path": SOURDOUGH, "heading_path": "# Sourdough > ## The starter"}
    gone = {"rel_path": SOURDOUGH, "heading_path": "# Sourdough > ## The levain"}
    es.write_text(
        json.dumps({"id": "h1", "question": "What's the name of my bread starter?", "answerable": True, "gold_supports": [good, gone]}) + "\n",
        encoding="utf-8",
    )
    out = _invoke("--validate", "--eval-set", es, "--api-url", reference_server, "--retries", "0")
    assert out.exit_code == 1, out.output
    lines = [ln for ln in out.stdout.splitlines() if ": stale: " in ln]
    assert lines == [
        f"{es}:1: gold_supports[1]: stale: not_retrieved: '{SOURDOUGH}' > '# Sourdough > ## The levain' "
        "matches none of the top 50 chunks the target retrieved for the question"
    ]
    assert "file existence only" in out.stdout


def test_new_asks_for_a_case_and_appends_it_with_a_fresh_id(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    src = (root / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:3]
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(src))
    answers = "\n".join([
        "How long do I proof the country loaf?",  # question
        "",          # answerable: default yes
        "factual",   # category
        "hard-ish",  # difficulty: not one of easy/medium/hard, asked again
        "medium",
        "baking, recipes",
    ]) + "\n"
    proc = subprocess.run(
        [sys.executable, "scripts/label_eval.py", "--new", "--eval-set", str(path), "--results-dir", str(tmp_path / "r")],
        cwd=root, input=answers, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # by hand: the file's ids are sv-001..sv-003, so the next is sv-004
    assert "added sv-004" in proc.stdout and "--ids sv-004" in proc.stdout
    after = path.read_bytes().splitlines(keepends=True)
    assert after[:3] == src  # untouched lines, byte for byte
    added = json.loads(after[3])
    assert added == {"id": "sv-004", "question": "How long do I proof the country loaf?", "answerable": True,
                     "gold_supports": [], "tags": ["baking", "recipes"], "category": "factual", "difficulty": "medium"}
    # issue 43: its correctness is unscoreable until facts are added, and the command says so
    assert "warning: sv-004 has no expected_key_facts: its correctness is unscoreable" in proc.stderr


def test_fresh_ids_follow_the_files_own_style():
    from evalkit.authoring.labeling import fresh_id

    assert fresh_id(["sv-001", "sv-002", "sv-010"]) == "sv-011"
    assert fresh_id(["q1", "q2", "other"]) == "q3"
    assert fresh_id([]) == "case-1"
    assert fresh_id(["alpha", "beta"]) == "case-3"


def test_new_asks_a_bad_category_again_and_never_overwrites_its_output(tmp_path):
    # issue 28 items 1 and 2: `multi-hop` (the builtin is multi_hop) used to end the command with
    # exit 2 and every answer lost; and rerunning `--new ... --output v2` replaced v2, losing the
    # case labeled there since.
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    src = (root / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:3]
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(src))
    v2 = tmp_path / "set.v2.jsonl"

    def new(question: str, category_answers: list[str]):
        answers = "\n".join([question, "", *category_answers, "", ""]) + "\n"
        return subprocess.run(
            [sys.executable, "scripts/label_eval.py", "--new", "--eval-set", str(path), "--output", str(v2),
             "--results-dir", str(tmp_path / "r")],
            cwd=root, input=answers, capture_output=True, text=True, timeout=60,
        )

    first = new("First question?", ["multi-hop", "multi_hop"])
    assert first.returncode == 0, first.stderr
    assert "unknown category 'multi-hop'" in first.stdout
    # a person labels the new case in v2 meanwhile (a support, a snippet)
    lines = v2.read_text().splitlines()
    labeled = json.loads(lines[-1])
    labeled["gold_supports"] = [{"rel_path": "a.md", "heading_path": "# A", "snippets": ["kept"]}]
    v2.write_text("\n".join([*lines[:-1], json.dumps(labeled)]) + "\n")

    second = new("Second question?", [""])
    assert second.returncode == 0, second.stderr
    cases = [json.loads(line) for line in v2.read_text().splitlines()]
    # by hand: the 3 source cases, the first new one with its labels, then the second new one
    assert [c["question"] for c in cases[3:]] == ["First question?", "Second question?"]
    assert cases[3]["category"] == "multi_hop" and cases[3]["gold_supports"][0]["snippets"] == ["kept"]
    assert path.read_bytes() == b"".join(src)  # the source is never written


def test_accept_top_refuses_an_existing_output_and_force_keeps_a_backup(tmp_path: Path) -> None:
    # issue 28 item 1: no writer replaces a file of labels unless told, and then keeps a copy.
    es = _tiny(tmp_path)
    v2 = tmp_path / "tiny.v2.jsonl"
    v2.write_bytes(b'{"id": "mine", "question": "Labeled by hand?", "answerable": false}\n')
    common = ("--accept-top", "1", "--eval-set", es, "--vault", SAMPLE_VAULT, "--output", v2, "--results-dir", tmp_path / "results")
    refused = _invoke(*common)
    assert refused.exit_code == 2 and "already exists" in refused.stderr and "--force replaces it" in refused.stderr
    assert v2.read_bytes() == b'{"id": "mine", "question": "Labeled by hand?", "answerable": false}\n'

    forced = _invoke(*common, "--force")
    assert forced.exit_code == 0, forced.output
    assert f"the old {v2} is kept as {tmp_path / 'tiny.v2.jsonl.bak'}" in forced.stdout
    assert (tmp_path / "tiny.v2.jsonl.bak").read_bytes() == b'{"id": "mine", "question": "Labeled by hand?", "answerable": false}\n'
    assert [json.loads(x)["id"] for x in v2.read_text(encoding="utf-8").splitlines()] == ["t1", "t2", "t3"]


def test_force_where_nothing_is_replaced_is_refused(tmp_path: Path) -> None:
    es = _tiny(tmp_path)
    out = _invoke("--validate", "--force", "--eval-set", es, "--vault", SAMPLE_VAULT, "--no-retrieval")
    assert out.exit_code == 2 and "--force replaces an existing --output; --validate writes none" in out.stderr


def test_help_says_what_opens_the_labeler_and_how_files_are_kept() -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    text = " ".join(out.stdout.split())
    assert "No mode flag opens the full-screen interactive labeler (it needs a terminal)" in text
    assert "--new and --review-auto (in a terminal) then open the labeler" in text
    assert "--force" in text and "<file>.bak" in text and "rerunning the same command goes on in it" in text
