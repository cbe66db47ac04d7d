"""Issue 41 item 3: reviewing generated candidates in the studio writes what `label
--review-auto --into` writes for the same choices (review.ReviewSession: the review log, then
the new version from `into` and the accepted cases), and a candidate decided meanwhile (in
another tab or the terminal) is refused, not decided twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from evalkit.authoring.review import Choice, ReviewSession, apply_edits, run_review
from evalkit.studio.app import create_app
from evalkit.studio.guard import csrf_value
from evalkit.studio.project import StudioProject
from evalkit.studio.reviewing import (
    AlreadyDecided,
    Review,
    decide,
    review_rows,
    review_view,
)
from tests.studio_project import SCRIPT, write_project

CANDIDATES = [
    {"id": "gen-1", "question": "When are tomatoes planted?", "answerable": True, "expected_key_facts": ["in May"],
     "gold_supports": [{"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Tomatoes"}], "tags": ["generated"],
     "label_source": "generated"},
    {"id": "gen-2", "question": f"When are roses pruned? {SCRIPT}", "answerable": True, "expected_key_facts": [],
     "gold_supports": [{"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Roses"}], "tags": ["generated"],
     "label_source": "generated"},
    {"id": "gen-3", "question": "When do winter tyres come off?", "answerable": True,
     "gold_supports": [{"rel_path": "car/Car.md", "heading_path": "# Car > ## Tyres"}], "tags": ["generated", "unretrievable"],
     "label_source": "generated"},
]


def _project(root: Path) -> tuple[dict[str, Path], Review]:
    p = write_project(root, run=False)
    cands = root / "candidates" / "candidates.jsonl"
    cands.parent.mkdir()
    cands.write_text("".join(json.dumps(c) + "\n" for c in CANDIDATES), encoding="utf-8")
    return p, Review(cands, p["eval_set"], p["results"])


def _log(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in json.loads(x).items() if k != "at"} for x in path.read_text(encoding="utf-8").splitlines()]


def test_decisions_write_what_the_terminal_review_writes(tmp_path: Path) -> None:
    p, review = _project(tmp_path / "studio")
    decide(review, "gen-1", "accept", question="When are tomatoes planted?", facts=["in May"], reviewer="ana")  # as shown
    decide(review, "gen-2", "accept", question="When are roses pruned?", facts=["in March", " "], reviewer="ana")  # edited
    done = decide(review, "gen-3", "reject", reviewer="ana")
    assert done == {"dest": "eval_set.v2.jsonl", "appended": 2}

    q, _ = _project(tmp_path / "terminal")
    session = ReviewSession(q["root"] / "candidates" / "candidates.jsonl", q["eval_set"], results_dir=q["results"], reviewer="ana")
    edited = apply_edits(session.candidates_all[1], question="When are roses pruned?", key_facts=["in March"])
    choices = iter([Choice("accept"), Choice("accept", edited), Choice("reject")])
    run_review(session, lambda c, n, total: next(choices))
    assert (p["root"] / "eval_set.v2.jsonl").read_bytes() == (q["root"] / "eval_set.v2.jsonl").read_bytes()
    assert _log(p["root"] / "candidates" / "candidates.review.jsonl") == _log(q["root"] / "candidates" / "candidates.review.jsonl")
    assert p["eval_set"].read_bytes() == q["eval_set"].read_bytes() == (q["root"] / "eval_set.jsonl").read_bytes()  # into: never written


def test_a_candidate_decided_meanwhile_is_refused(tmp_path: Path) -> None:
    p, review = _project(tmp_path)
    decide(review, "gen-1", "reject")
    log = (p["root"] / "candidates" / "candidates.review.jsonl").read_bytes()
    with pytest.raises(AlreadyDecided, match="decided meanwhile"):  # a second tab, same page
        decide(review, "gen-1", "accept")
    # the terminal review decided gen-2 while the page was open
    ReviewSession(review.candidates, review.into, results_dir=review.results_dir).accept(dict(CANDIDATES[1]))
    with pytest.raises(AlreadyDecided):
        decide(review, "gen-2", "reject")
    assert (p["root"] / "candidates" / "candidates.review.jsonl").read_bytes().startswith(log)
    assert [r["decision"] for r in review_rows(review)["rows"]] == ["reject", "accept", None]


def test_a_blank_question_keeps_the_candidates_as_the_terminal_edit_does(tmp_path: Path) -> None:
    _, review = _project(tmp_path)
    decide(review, "gen-1", "accept", question="  ", facts=[])  # the question kept; no facts: the field dropped
    accepted = ReviewSession(review.candidates, review.into, results_dir=review.results_dir).accepted()
    assert accepted == [apply_edits(CANDIDATES[0], key_facts=[])]
    assert accepted[0]["question"] == CANDIDATES[0]["question"] and "expected_key_facts" not in accepted[0]


def test_the_review_pages_through_the_server(tmp_path: Path) -> None:
    p, review = _project(tmp_path)
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"], review=review)
    client = TestClient(create_app(project, token="t", port=8767), base_url="http://127.0.0.1:8767", follow_redirects=False)
    client.get("/?token=t")
    page = client.get("/review/case", params={"id": "gen-2"})
    assert page.status_code == 200 and SCRIPT not in page.text and "&lt;script&gt;" in page.text
    view = review_view(review, "gen-3", project.corpus)
    assert view["supports"][0]["preview"].startswith("## Tyres") and view["next"] is None
    headers = {"origin": "http://127.0.0.1:8767", "x-studio-csrf": csrf_value("t")}
    assert client.post("/api/review", json={"id": "gen-3", "decision": "reject"}, headers=headers).json() == {"dest": None, "appended": 0}
    again = client.post("/api/review", json={"id": "gen-3", "decision": "accept"}, headers=headers)
    assert again.status_code == 409 and again.json()["conflict"] is True
    assert client.post("/api/review", json={"id": "gen-1", "decision": "maybe"}, headers=headers).status_code == 422
    assert client.post("/api/review", json={"id": "gen-1", "decision": "accept", "facts": "x"}, headers=headers).status_code == 400
    assert client.get("/review/case", params={"id": "../eval_set"}).status_code == 404
