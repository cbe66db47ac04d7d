"""Issue 41 item 4: grading a run's answers in the studio writes what `label_eval
--grade-answers` writes (judges.grades.append_grade: the grader, and the hashes of the answer,
context and facts graded), refuses a grade of an answer that changed since the page showed
it, and shows a grade of another answer as stale."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from evalkit.judges.grades import grade_cases, read_grade_lines
from evalkit.store.runs import RunDir
from evalkit.studio.app import create_app
from evalkit.studio.grading import GradeConflict, grade_rows, grade_view, save_grade
from evalkit.studio.guard import csrf_value
from evalkit.studio.project import StudioProject
from tests.studio_project import SCRIPT, write_project

PORT, TOKEN = 8766, "grading-token"
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture
def made(tmp_path: Path) -> tuple[dict[str, Path], StudioProject]:
    p = write_project(tmp_path)
    return p, StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])


def _item(project: StudioProject, case_id: str) -> dict[str, str]:
    view = grade_view(project, "r1", case_id, "ana", "all")
    assert view is not None
    return view["item"]


def _lines(results: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in g.items() if k != "graded_at"} for g in read_grade_lines(RunDir.open(results, "r1"))]


def test_a_grade_is_the_line_the_terminal_grader_writes(made: tuple[dict[str, Path], StudioProject], tmp_path: Path) -> None:
    p, project = made
    terminal = tmp_path / "terminal-results"
    shutil.copytree(p["results"], terminal)
    save_grade(project, "r1", "g-2", "ana", 5, 4, _item(project, "g-2"))
    save_grade(project, "r1", "g-1", "", 2, 3, _item(project, "g-1"))  # the unnamed grader names none
    run = RunDir.open(terminal, "r1")
    records = {r["test_case_id"]: r for r in run.read_results()}
    answers = iter(["5", "4"])
    grade_cases(run, [records["g-2"]], ask=lambda _: next(answers), show=lambda _: None, grader="ana")
    answers = iter(["2", "3"])
    grade_cases(run, [records["g-1"]], ask=lambda _: next(answers), show=lambda _: None)
    # the same lines but their time
    assert _lines(p["results"]) == _lines(terminal)
    assert [(g.get("grader"), g["groundedness"], g["correctness"]) for g in _lines(p["results"])] == [("ana", 5, 4), (None, 2, 3)]


def test_the_queue_says_graded_and_stale(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    save_grade(project, "r1", "g-2", "ana", 5, 5, _item(project, "g-2"))
    assert {r["id"]: r["status"] for r in grade_rows(project, "r1", "ana")}["g-2"] == "graded"
    assert {r["id"]: r["status"] for r in grade_rows(project, "r1", "bo")}["g-2"] == "to grade"  # graders kept apart
    # the run is answered again: g-2's answer is another one now
    path = p["results"] / "r1" / "results.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for r in records:
        if r["test_case_id"] == "g-2":
            r["answer"] = "Every October, at Bosch. [1]"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    assert {r["id"]: r["status"] for r in grade_rows(project, "r1", "ana")}["g-2"] == "stale"
    assert grade_view(project, "r1", "g-2", "ana", "all")["status"] == "stale"


def test_a_grade_of_an_answer_that_changed_is_refused_and_nothing_written(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    shown = _item(project, "g-2")
    with pytest.raises(GradeConflict) as refused:
        save_grade(project, "r1", "g-2", "ana", 4, 4, {**shown, "answer_sha256": "0" * 64})
    assert refused.value.item == shown  # what the page is told the run holds now
    assert _lines(p["results"]) == []


@pytest.mark.parametrize("g, c", [(6, 4), ("3", 4), (True, 4), (None, 4), (2.0, 4), (3, -1)])
def test_a_grade_off_the_scale_is_refused(made: tuple[dict[str, Path], StudioProject], g: Any, c: Any) -> None:
    p, project = made
    with pytest.raises(Exception, match="expected a whole number 0-5"):
        save_grade(project, "r1", "g-2", "ana", g, c, _item(project, "g-2"))
    assert _lines(p["results"]) == []


def test_grading_through_the_server(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    client = TestClient(create_app(project, token=TOKEN, port=PORT), base_url=BASE, follow_redirects=False)
    assert client.get(f"/?token={TOKEN}").status_code == 303
    page = client.get("/grade", params={"run": "r1", "id": "g-4", "grader": "ana"})
    assert page.status_code == 200 and SCRIPT not in page.text and "&lt;script&gt;" in page.text
    body = {"run": "r1", "id": "g-2", "grader": "ana", "groundedness": 5, "correctness": 5, "item": _item(project, "g-2")}
    headers = {"origin": BASE, "x-studio-csrf": csrf_value(TOKEN)}
    assert client.post("/api/grade", json=body).status_code == 403  # no Origin, no CSRF value: refused by the guard
    assert client.post("/api/grade", json=body, headers=headers).status_code == 200
    stale = client.post("/api/grade", json={**body, "item": {**body["item"], "facts_sha256": "1" * 64}}, headers=headers)
    assert stale.status_code == 409 and stale.json()["current"] == body["item"]
    assert client.post("/api/grade", json={**body, "groundedness": 9}, headers=headers).status_code == 422
    assert client.post("/api/grade", json={**body, "run": "../r1"}, headers=headers).status_code == 404
    assert client.get("/grade", params={"run": "nope", "id": "g-2"}).status_code == 404
    assert [(g["grader"], g["groundedness"]) for g in _lines(p["results"])] == [("ana", 5)]
    listing = client.get("/grades", params={"run": "r1", "grader": "ana", "filter": "ungraded"})
    assert listing.status_code == 200 and ">g-2<" not in listing.text and ">g-1<" in listing.text


def test_the_sample_is_the_terminal_graders_sample(made: tuple[dict[str, Path], StudioProject]) -> None:
    from evalkit.judges.grades import sample_cases
    from evalkit.studio.grading import sample_ids, shown_ids

    p, project = made
    run = RunDir.open(p["results"], "r1")
    drawn = [r["test_case_id"] for r in sample_cases(run, 3, 1, grader="ana")]
    assert sample_ids(project, "r1", 3, 1) == drawn and len(drawn) == 3
    save_grade(project, "r1", drawn[0], "ana", 4, 4, _item(project, drawn[0]))
    assert [r["test_case_id"] for r in sample_cases(run, 3, 1, grader="ana")] == drawn[1:]  # the terminal resumes it
    rows = grade_rows(project, "r1", "ana")
    assert shown_ids(project, "r1", rows, "sample", (3, 1)) == drawn  # the studio shows it whole, graded or not
    client = TestClient(create_app(project, token=TOKEN, port=PORT), base_url=BASE, follow_redirects=False)
    client.get(f"/?token={TOKEN}")
    listing = client.get("/grades", params={"run": "r1", "grader": "ana", "n": "3", "seed": "1"}).text  # the default filter: the sample
    assert [i for i in ("g-1", "g-2", "g-3", "g-4", "g-5", "c-1#1", "c-1#2") if f">{i}<" in listing] == drawn
    assert client.get("/grades", params={"run": "r1", "n": "x", "seed": "-5"}).status_code == 200  # junk: the defaults
