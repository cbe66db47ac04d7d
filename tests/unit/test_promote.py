"""`evalkit promote` (issue 42 item 6): questions of a run or a log, chosen by id or by a filter
on their judge scores, appended to an eval set as cases waiting for gold, through the
labeling tools' write rules (untouched lines byte-identical, versions, .bak, the lock)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.authoring.promote import Candidate, parse_filters, select
from evalkit.cli.main import app
from evalkit.errors import BadConfig
from evalkit.evalset.load import load_eval_set
from tests.support import write_run

RUN_ID = "20250101T000000Z-pr0001"
EXISTING = (
    '{"id": "sv-001", "question": "Which port does the server listen on?", "answerable": true, '
    '"gold_supports": [{"rel_path": "ops/server.md"}],   "tags": ["ops"]}\n'
)


def _record(case_id: str, question: str, cr: float | None, g: float | None = 4.0) -> dict:
    return {
        "test_case_id": case_id, "question": question,
        "case": {"id": case_id, "question": question, "answerable": True, "gold_supports": []},
        "answer": "x", "retrieved_chunks": [],
        "context_relevance": None if cr is None else {"score": cr, "method": "heuristic"},
        "groundedness": None if g is None else {"score": g, "method": "heuristic"},
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_run(tmp_path / "results", RUN_ID, [
        _record("p1", "Which port does the server listen on?", 0.2),  # already in the eval set
        _record("p2", "How is the database backed up?", 0.0),
        _record("p3", "Who rotates the TLS certificates?", 0.4, g=1.0),
        _record("p4", "What is the deploy window?", 0.9),
        _record("p5", "Where do the logs go?", None),  # not judged for context relevance
    ])
    (tmp_path / "eval_set.jsonl").write_text(EXISTING, encoding="utf-8")
    return tmp_path


def _promote(project: Path, *args: str):
    return CliRunner().invoke(app, ["promote", "--eval-set", str(project / "eval_set.jsonl"),
                                    "--results-dir", str(project / "results"), *args])


def test_low_context_relevance_from_a_run(project: Path):
    res = _promote(project, "--run-id", RUN_ID, "--where", "context_relevance<0.5", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["promoted"] == [{"id": "sv-002", "source_id": "p2"}, {"id": "sv-003", "source_id": "p3"}]
    assert out["skipped"] == [{"source_id": "p1", "reason": "already in the eval set as 'sv-001'"}]
    data = (project / "eval_set.jsonl").read_bytes()
    assert data.startswith(EXISTING.encode())  # the untouched line keeps its bytes (its odd spacing too)
    new = [json.loads(line) for line in data.decode().splitlines()[1:]]
    assert new[0] == {
        "id": "sv-002", "question": "How is the database backed up?", "answerable": True, "gold_supports": [],
        "tags": ["promoted"], "label_source": "promoted",
        "promoted_from": {"run_id": RUN_ID, "id": "p2", "scores": {"context_relevance": 0.0, "groundedness": 4.0},
                          "where": ["context_relevance<0.5"]},
    }
    # The eval set loads, and the new cases are unlabeled: the labeler's default queue.
    es = load_eval_set([project / "eval_set.jsonl"])
    assert [c.id for c in es.cases if c.answerable and not c.gold_supports] == ["sv-002", "sv-003"]


def test_filters_and_limit_and_ids(project: Path):
    res = _promote(project, "--run-id", RUN_ID, "--where", "context_relevance<1,groundedness<=2", "--json", "--dry-run")
    assert [p["source_id"] for p in json.loads(res.output)["promoted"]] == ["p3"]
    assert (project / "eval_set.jsonl").read_text() == EXISTING  # a dry run writes nothing
    # --limit: the worst N by the first filter's score
    res = _promote(project, "--run-id", RUN_ID, "--where", "context_relevance<1", "--limit", "1", "--json", "--dry-run")
    assert [p["source_id"] for p in json.loads(res.output)["promoted"]] == ["p2"]
    # a question skipped (p1: already in the eval set, first by groundedness 4.0 in source order) takes no place
    res = _promote(project, "--run-id", RUN_ID, "--where", "groundedness>=4", "--limit", "1", "--json", "--dry-run")
    out = json.loads(res.output)
    assert [p["source_id"] for p in out["promoted"]] == ["p2"] and out["skipped"][0]["source_id"] == "p1"
    res = _promote(project, "--run-id", RUN_ID, "--ids", "p5,p4", "--json", "--dry-run")
    assert [p["source_id"] for p in json.loads(res.output)["promoted"]] == ["p5", "p4"]
    bad = _promote(project, "--run-id", RUN_ID, "--ids", "nope")
    assert bad.exit_code == 2 and "no question with id 'nope'" in bad.output


def test_output_version_and_bak(project: Path):
    out = project / "eval_set.v2.jsonl"
    res = _promote(project, "--run-id", RUN_ID, "--ids", "p2", "--output", str(out))
    assert res.exit_code == 0, res.output
    assert (project / "eval_set.jsonl").read_text() == EXISTING  # the source is left as it was
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["sv-001", "sv-002"]
    # An existing version is added to
    res = _promote(project, "--run-id", RUN_ID, "--ids", "p3", "--output", str(out))
    assert res.exit_code == 0 and [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["sv-001", "sv-002", "sv-003"]
    # A file that is not a version of it: refused, --force keeps it as .bak
    other = project / "other.jsonl"
    other.write_text('{"id": "zz", "question": "q?", "answerable": true, "gold_supports": []}\n')
    assert _promote(project, "--run-id", RUN_ID, "--ids", "p4", "--output", str(other)).exit_code == 2
    res = _promote(project, "--run-id", RUN_ID, "--ids", "p4", "--output", str(other), "--force")
    assert res.exit_code == 0 and (project / "other.jsonl.bak").exists()


def test_a_locked_eval_set_is_not_written(project: Path):
    lock = CliRunner().invoke(app, ["lock", str(project / "eval_set.jsonl")])
    assert lock.exit_code == 0, lock.output
    res = _promote(project, "--run-id", RUN_ID, "--ids", "p2")
    assert res.exit_code == 2
    assert (project / "eval_set.jsonl").read_text() == EXISTING


def test_from_a_log_of_questions(project: Path, tmp_path: Path):
    log = tmp_path / "questions.jsonl"
    log.write_text(json.dumps({"id": "prod-9", "question": "Is there a staging database?", "context_relevance": 0.1}) + "\n"
                   + json.dumps({"question": "  How is the database   backed up?"}) + "\n", encoding="utf-8")
    res = _promote(project, "--log", str(log), "--json")
    assert res.exit_code == 0, res.output
    assert [p["source_id"] for p in json.loads(res.output)["promoted"]] == ["prod-9", "line-2"]
    case = json.loads((project / "eval_set.jsonl").read_text().splitlines()[1])
    assert case["promoted_from"] == {"log": str(log), "id": "prod-9", "scores": {"context_relevance": 0.1}, "where": []}
    # The same question again (whitespace and case aside) is skipped
    res = _promote(project, "--log", str(log), "--json")
    assert json.loads(res.output)["promoted"] == [] and len(json.loads(res.output)["skipped"]) == 2
    log.write_text('{"id": 1}\n')
    bad = _promote(project, "--log", str(log))
    assert bad.exit_code == 2 and "question" in bad.output
    assert _promote(project).exit_code == 2  # neither --run-id nor --log


def test_parse_filters():
    assert [str(f) for f in parse_filters(["context_relevance<0.5, groundedness>=3"])] == [
        "context_relevance<0.5", "groundedness>=3"]
    for bad in ("recall<0.5", "context_relevance<<1", "context_relevance"):
        with pytest.raises(BadConfig):
            parse_filters([bad])
    cands = [Candidate("a", "q", {"groundedness": 1.0}), Candidate("b", "q", {"groundedness": None})]
    assert [c.source_id for c in select(cands, filters=parse_filters(["groundedness<5"]))] == ["a"]


def test_a_conversation_turn_is_skipped(project: Path):
    rec = _record("c1#2", "And after that?", 0.0)
    rec["case"]["conversation"] = {"id": "c1", "turn": 2}
    write_run(project / "results", "20250101T000000Z-pr0002", [rec])
    res = _promote(project, "--run-id", "20250101T000000Z-pr0002", "--json")
    out = json.loads(res.output)
    assert out["promoted"] == [] and "conversation" in out["skipped"][0]["reason"]
