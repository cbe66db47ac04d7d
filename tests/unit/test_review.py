"""evalkit/authoring/review.py without a terminal: the log, resume, the new version's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.authoring import review
from evalkit.errors import BadConfig, BadEvalSet

INTO = (
    b'{"id":"e1" , "question": "Gr\\u00f6\\u00dfe?", "answerable": true, "reviewer": "z\xc3\xbc"}\n'
    b'{"id": "e2", "question": "Who?", "answerable": false}'  # no final newline
)


def _cand(i: int, **extra) -> dict:
    return {"id": f"gen-{i}", "question": f"What is {i}?", "answerable": True,
            "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}], "category": "factual",
            "tags": ["generated"] + (["unretrievable"] if i == 2 else []), "label_source": "generated", **extra}


@pytest.fixture()
def paths(tmp_path: Path) -> tuple[Path, Path]:
    cand = tmp_path / "cand.jsonl"
    lines = [_cand(1), _cand(2), {"id": "plain", "question": "Kept?", "answerable": False}, _cand(3)]
    cand.write_text("".join(json.dumps(c) + "\n" for c in lines), encoding="utf-8")
    into = tmp_path / "set.jsonl"
    into.write_bytes(INTO)
    return cand, into


def _session(paths, **kw) -> review.ReviewSession:
    cand, into = paths
    return review.ReviewSession(cand, into, results_dir=cand.parent / "results", **kw)


def test_log_path() -> None:
    assert review.log_path("x/candidates.jsonl") == Path("x/candidates.review.jsonl")
    assert review.log_path("c.v2.jsonl") == Path("c.v2.review.jsonl")


def test_pending_skips_non_candidates_and_decided(paths) -> None:
    s = _session(paths)
    assert [c["id"] for c in s.pending()] == ["gen-1", "gen-2", "gen-3"]
    s.reject(s.pending()[0])
    assert [c["id"] for c in _session(paths).pending()] == ["gen-2", "gen-3"]  # a new session resumes


def test_write_keeps_into_bytes_and_appends_accepted_without_label_source(paths) -> None:
    cand, into = paths
    s = _session(paths, reviewer="ana")
    c1, c2, c3 = s.pending()
    s.accept(c2)
    s.reject(c1)
    s.accept(c3, review.apply_edits(c3, question="Edited?", key_facts=["x", "y"], difficulty="easy"))
    dest, appended, dups = s.write()
    assert dest == cand.parent / "set.v2.jsonl" and dups == []
    data = dest.read_bytes()
    assert data.startswith(INTO + b"\n")
    added = [json.loads(x) for x in data[len(INTO) + 1:].splitlines()]
    assert [c["id"] for c in added] == ["gen-2", "gen-3"]  # log order
    assert added[0]["tags"] == ["generated", "unretrievable"] and "label_source" not in added[0]
    assert added[1]["question"] == "Edited?" and added[1]["expected_key_facts"] == ["x", "y"] and added[1]["difficulty"] == "easy"
    assert into.read_bytes() == INTO
    log = review.read_log(review.log_path(cand))
    assert log["gen-3"].edited and not log["gen-2"].edited and log["gen-1"].decision == "reject" and log["gen-1"].reviewer == "ana"


def test_a_later_decision_overrides(paths) -> None:
    cand, _ = paths
    s = _session(paths)
    c1 = s.pending()[0]
    s.accept(c1)
    s.reject(c1)
    assert review.read_log(review.log_path(cand))["gen-1"].decision == "reject"
    assert s.write()[0] is None  # nothing accepted: nothing written
    assert not (cand.parent / "set.v2.jsonl").exists()


def test_invalid_edit_is_refused_and_not_logged(paths) -> None:
    cand, _ = paths
    s = _session(paths)
    c1 = s.pending()[0]
    assert review.case_problems(dict(c1, question="  "))
    with pytest.raises(BadEvalSet):
        s.accept(c1, dict(c1, question="  "))
    with pytest.raises(BadEvalSet):
        s.accept(c1, dict(c1, id="other"))
    assert review.read_log(review.log_path(cand)) == {}
    unanswerable = review.apply_edits(c1, answerable=False)
    assert unanswerable["gold_supports"] == [] and review.case_problems(unanswerable) == []


@pytest.mark.parametrize("line", ["{nope", '["a"]', '{"id": "gen-1", "decision": "accept"}', '{"id": "gen-1", "decision": "ok"}',
                                  '{"id": "gen-1", "decision": "accept", "case": {"id": "gen-2"}}'])
def test_malformed_log_line_names_file_and_line(paths, line: str) -> None:
    cand, _ = paths
    log = review.log_path(cand)
    log.write_text('{"id": "gen-2", "decision": "reject"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(BadConfig) as e:
        review.read_log(log)
    assert f"{log}:3: " in str(e.value)


def test_run_review_callbacks_and_summary(paths) -> None:
    s = _session(paths)
    choices = iter([review.Choice("skip"), review.Choice("accept"), None])
    summary = review.run_review(s, lambda case, n, total: next(choices))
    assert (summary.reviewed, summary.accepted, summary.skipped, summary.left, summary.appended) == (1, 1, 1, 2, 1)
    assert summary.dest == s.dest and summary.changed
    again = review.run_review(_session(paths), lambda case, n, total: review.Choice("quit"))
    assert again.dest == s.dest and not again.changed and again.left == 2


def test_into_is_never_the_destination(paths) -> None:
    cand, into = paths
    with pytest.raises(BadConfig):
        review.ReviewSession(cand, into, output=into, results_dir=cand.parent / "results")
    with pytest.raises(BadConfig):
        review.ReviewSession(cand, into, output=cand, results_dir=cand.parent / "results")


def test_section_preview(tmp_path: Path) -> None:
    from evalkit.evalset.anchorcheck import corpus_from_vault

    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "a.md").write_text("# A\n\nintro\n\n## B\n\n" + "word " * 300 + "\n", encoding="utf-8")
    corpus = corpus_from_vault(tmp_path / "v")
    text = review.section_preview(corpus, {"rel_path": "a.md", "heading_path": "# A > ## B"})
    assert text is not None and text.startswith("## B") and len(text) <= review.PREVIEW_CHARS + 2
    assert review.section_preview(corpus, {"rel_path": "a.md", "heading_path": "# A > ## Nope"}) is None
    assert review.section_preview(corpus, {"rel_path": "gone.md", "heading_path": "# A"}) is None


def test_the_review_log_is_never_written_through_a_symlink(paths, tmp_path: Path) -> None:
    # issue 29 item 8: a planted link made the log append to a file outside the folder
    cand, _ = paths
    outside = tmp_path / "elsewhere.txt"
    outside.write_bytes(b"someone else's file\n")
    review.log_path(cand).symlink_to(outside)
    with pytest.raises(BadConfig, match="symbolic link"):
        _session(paths)
    assert outside.read_bytes() == b"someone else's file\n"


def test_a_later_session_appends_to_the_new_version_and_keeps_edits_made_in_it(paths) -> None:
    # issue 28 item 1: a later session rebuilt the new version from `into` + the log, so a
    # case labeled in it between the sessions lost its labels.
    cand, _ = paths
    s = _session(paths)
    c1, c2, _ = s.pending()
    s.accept(c1)
    dest = s.write()[0]
    assert dest is not None
    labeled = dest.read_bytes().replace(b'"question": "What is 1?"', b'"question": "What is 1?", "notes": "relabeled"')
    dest.write_bytes(labeled + b'{"id": "hand", "question": "Added by hand?", "answerable": false}\n')
    kept = dest.read_bytes()

    s2 = _session(paths)
    s2.accept(c2)
    assert s2.write()[0] == dest
    data = dest.read_bytes()
    assert data.startswith(kept)  # every saved byte, the edit and the hand-added case included
    assert [json.loads(x)["id"] for x in data[len(kept):].splitlines()] == ["gen-2"]
    assert review.run_review(_session(paths), lambda *a: review.Choice("quit")).changed is False  # nothing new: not rewritten
    assert dest.read_bytes() == data


def test_force_replaces_a_foreign_destination_after_a_backup(paths) -> None:
    cand, _ = paths
    dest = cand.parent / "set.v2.jsonl"
    dest.write_bytes(b'{"id": "x", "question": "Other?", "answerable": false}\n')
    (cand.parent / "set.v2.jsonl.bak").write_bytes(b"an older backup\n")
    with pytest.raises(BadConfig, match="--force to replace it"):
        _session(paths)
    s = _session(paths, force=True)
    s.accept(s.pending()[0])
    assert s.write()[0] == dest
    assert s.backed_up == cand.parent / "set.v2.jsonl.bak.1"  # .bak was taken: never overwritten
    assert s.backed_up.read_bytes() == b'{"id": "x", "question": "Other?", "answerable": false}\n'
    assert (cand.parent / "set.v2.jsonl.bak").read_bytes() == b"an older backup\n"
    assert dest.read_bytes().startswith(INTO + b"\n") and b"gen-1" in dest.read_bytes()
