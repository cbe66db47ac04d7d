"""`evalkit label --review-auto --eval-set CANDIDATES --into EVAL_SET`: generated candidates
reviewed with accept / edit / reject at line prompts, decisions logged (resumable), and only
the accepted ones appended to a new version of the eval set (issue 16, item 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.label_eval import app as label_app
from evalkit.cli.main import app as main_app
from evalkit.evalset.load import read_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"


def _label(*args: object, input: str | None = None):
    return CliRunner().invoke(label_app, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "candidates.jsonl"
    res = CliRunner().invoke(main_app, ["generate", "--vault", str(SAMPLE_VAULT), "--output", str(out), "--no-retrieval", "--limit", "6", "--seed", "3"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture()
def files(generated: Path, tmp_path: Path) -> tuple[Path, Path, list[dict]]:
    """(candidates, into, the candidates' JSON): a copy of the generated file, and the first
    4 lines of eval_set.jsonl as the eval set (named eval_set.v1.jsonl)."""
    cand = tmp_path / "candidates.jsonl"
    shutil.copy(generated, cand)
    into = tmp_path / "eval_set.v1.jsonl"
    into.write_bytes(b"".join((ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:4]))
    cases = [json.loads(line) for line in cand.read_text(encoding="utf-8").splitlines()]
    assert len(cases) >= 5 and all(c["label_source"] == "generated" for c in cases)
    return cand, into, cases


def _review(cand: Path, into: Path, input: str, *extra: object):
    return _label("--review-auto", "--eval-set", cand, "--into", into, "--results-dir", cand.parent / "results", *extra, input=input)


def _log(cand: Path) -> list[dict]:
    return [json.loads(line) for line in (cand.parent / "candidates.review.jsonl").read_text(encoding="utf-8").splitlines()]


def _appended(dest: Path, into: Path) -> list[dict]:
    data, base = dest.read_bytes(), into.read_bytes()
    assert data.startswith(base)  # every line of into, byte for byte, first
    return [json.loads(line) for line in data[len(base):].splitlines()]


def test_accept_edit_reject_writes_only_accepted_to_the_next_version(files) -> None:
    cand, into, cases = files
    before = into.read_bytes()
    res = _review(cand, into, "a\ne\nWhat exactly is asked here?\n\n\n\n\nr\n", "--vault", SAMPLE_VAULT, "--reviewer", "ana")
    assert res.exit_code == 0, res.output
    dest = into.parent / "eval_set.v2.jsonl"
    assert dest.exists() and into.read_bytes() == before
    added = _appended(dest, into)
    assert [c["id"] for c in added] == [cases[0]["id"], cases[1]["id"]]
    assert cases[2]["id"] not in dest.read_text(encoding="utf-8")  # rejected
    assert added[0] == {k: v for k, v in cases[0].items() if k != "label_source"}
    assert added[1]["question"] == "What exactly is asked here?"
    assert all("label_source" not in c and "generated" in c["tags"] for c in added)
    es, problems = read_eval_set([dest])
    assert problems == [] and len(es.cases) == 4 + 2
    # the log: one line per decision, the edit marked, the reviewer kept
    log = _log(cand)
    assert [(d["id"], d["decision"], d["edited"]) for d in log] == [
        (cases[0]["id"], "accept", False), (cases[1]["id"], "accept", True), (cases[2]["id"], "reject", False)]
    assert all(d["reviewer"] == "ana" and d["at"].endswith("Z") for d in log)
    # the screen: the section text from the vault, the summary and the lock hint
    assert "      | " in res.stdout
    assert "this session: 2 accepted (1 edited), 1 rejected, 0 skipped" in res.stdout
    assert f"evalkit lock {dest}" in res.stdout


def test_resume_continues_at_the_first_undecided_candidate(files) -> None:
    cand, into, cases = files
    first = _review(cand, into, "a\nq\n")
    assert first.exit_code == 0, first.output
    dest = into.parent / "eval_set.v2.jsonl"
    assert [c["id"] for c in _appended(dest, into)] == [cases[0]["id"]]  # written on quit

    second = _review(cand, into, "a\na\n")  # end of input after two decisions
    assert second.exit_code == 0, second.output
    assert f"[1/{len(cases) - 1}] {cases[1]['id']}" in second.stdout
    assert cases[0]["id"] not in second.stdout.split("evalkit: this session")[0].split("to review")[1]
    log_ids = [d["id"] for d in _log(cand)]
    assert log_ids == [c["id"] for c in cases[:3]]  # no decision twice
    assert [c["id"] for c in _appended(dest, into)] == [c["id"] for c in cases[:3]]  # same v2, extended
    assert not (into.parent / "eval_set.v3.jsonl").exists()


def test_end_of_input_mid_edit_keeps_earlier_decisions(files) -> None:
    cand, into, cases = files
    res = _review(cand, into, "r\na\ne\nhalf an edit")
    assert res.exit_code == 0, res.output
    assert [(d["id"], d["decision"]) for d in _log(cand)] == [(cases[0]["id"], "reject"), (cases[1]["id"], "accept")]
    assert [c["id"] for c in _appended(into.parent / "eval_set.v2.jsonl", into)] == [cases[1]["id"]]
    assert f"{len(cases) - 2} left" in res.stdout


def test_skip_leaves_undecided_and_nothing_accepted_writes_nothing(files) -> None:
    cand, into, cases = files
    res = _review(cand, into, "s\nr\nq\n")
    assert res.exit_code == 0, res.output
    assert [d["id"] for d in _log(cand)] == [cases[1]["id"]]
    assert not (into.parent / "eval_set.v2.jsonl").exists()
    assert "nothing written" in res.stdout
    again = _review(cand, into, "q\n")
    assert f"[1/{len(cases) - 1}] {cases[0]['id']}" in again.stdout  # the skipped one comes back


def test_invalid_edit_is_asked_again(files) -> None:
    # A bad category or difficulty is asked again at its own prompt (issue 28 item 2), the
    # answers before it are kept: question, facts, then category "no-such-category" (asked
    # again) "factual", difficulty "hardest" (asked again) "hard", answerable kept; then q.
    cand, into, cases = files
    res = _review(cand, into, "e\nEdited question?\n\nno-such-category\nfactual\nhardest\nhard\n\nq\n")
    assert res.exit_code == 0, res.output
    assert "unknown category 'no-such-category'; one of factual, " in res.stdout
    assert "unknown difficulty 'hardest'" in res.stdout
    assert res.stdout.count("  question [") == 1  # not the whole form again
    [added] = _appended(into.parent / "eval_set.v2.jsonl", into)
    assert (added["question"], added["category"], added["difficulty"]) == ("Edited question?", "factual", "hard")
    assert "no-such-category" not in (into.parent / "eval_set.v2.jsonl").read_text(encoding="utf-8")


def test_locked_into_is_kept_and_a_locked_dest_is_refused(files) -> None:
    from evalkit.evalset.lock import lock_eval_set

    cand, into, cases = files
    lock_eval_set(into)
    before = into.read_bytes()
    res = _review(cand, into, "a\nq\n")
    assert res.exit_code == 0, res.output
    dest = into.parent / "eval_set.v2.jsonl"
    assert into.read_bytes() == before and dest.exists()
    assert read_eval_set([into])[1] == []  # still what was locked

    lock_eval_set(dest)
    locked_bytes = dest.read_bytes()
    refused = _review(cand, into, "a\n")
    assert refused.exit_code == 2
    assert "--output " + str(into.parent / "eval_set.v3.jsonl") in refused.output
    assert f"--into {dest}" in refused.output
    assert dest.read_bytes() == locked_bytes and len(_log(cand)) == 1  # refused before any question

    # the way on: review into the locked v2, into a v3
    on = _review(cand, dest, "a\nq\n")
    assert on.exit_code == 0, on.output
    v3 = into.parent / "eval_set.v3.jsonl"
    assert dest.read_bytes() == locked_bytes
    assert [c["id"] for c in _appended(v3, dest)] == [cases[1]["id"]]  # cases[0] is already in v2: a duplicate
    assert f"duplicate_id: {cases[0]['id']}" in on.stdout


def test_duplicate_id_is_not_appended_and_is_reported(files) -> None:
    cand, into, cases = files
    into.write_bytes(into.read_bytes() + (json.dumps({k: v for k, v in cases[0].items() if k != "label_source"}) + "\n").encode())
    res = _review(cand, into, "a\na\nq\n")
    assert res.exit_code == 0, res.output
    assert "already has id " + cases[0]["id"] in res.stdout  # said before the choice
    assert f"duplicate_id: {cases[0]['id']}" in res.stdout
    assert [c["id"] for c in _appended(into.parent / "eval_set.v2.jsonl", into)] == [cases[1]["id"]]


def test_output_and_a_foreign_existing_dest(files) -> None:
    cand, into, cases = files
    out = into.parent / "custom.jsonl"
    assert _review(cand, into, "a\nq\n", "--output", out).exit_code == 0
    assert [c["id"] for c in _appended(out, into)] == [cases[0]["id"]]
    other = into.parent / "other.jsonl"
    other.write_text('{"id": "x", "question": "Q?", "answerable": false}\n', encoding="utf-8")
    res = _review(cand, into, "a\n", "--output", other)
    assert res.exit_code == 2 and "not a review of it" in res.output
    assert _review(cand, into, "a\n", "--output", into).exit_code == 2  # into itself is never the destination


def test_usage_errors(files) -> None:
    cand, into, _ = files
    no_mode = _label("--eval-set", cand, "--into", into)
    assert no_mode.exit_code == 2 and "--into" in no_mode.output
    two = _label("--review-auto", "--eval-set", cand, "--eval-set", cand, "--into", into)
    assert two.exit_code == 2 and "give one --eval-set" in two.output
    with_mode = _label("--validate", "--review-auto", "--eval-set", cand, "--into", into)
    assert with_mode.exit_code == 2


def test_a_malformed_log_line_is_named(files) -> None:
    cand, into, _ = files
    (cand.parent / "candidates.review.jsonl").write_text('{"id": "x", "decision": "reject"}\n{"id": "y", "decision": "maybe"}\n', encoding="utf-8")
    res = _review(cand, into, "q\n")
    assert res.exit_code == 2
    assert f"{cand.parent / 'candidates.review.jsonl'}:2: " in res.output and "decision" in res.output


def test_review_auto_without_into_still_lists(files) -> None:
    cand, _, cases = files
    res = _label("--review-auto", "--eval-set", cand)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == f"{cand}:1: {cases[0]['id']}: {cases[0]['question']}"
    assert f"evalkit: {len(cases)} auto-labeled cases" in res.stdout
