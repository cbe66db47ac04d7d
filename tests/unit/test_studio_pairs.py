"""Issue 41 item 4, side by side: two runs' answers to the cases that changed (compare's flips
and answer drift), a choice a | b | equal kept in run b's pairwise_review.jsonl with the sha256
of both answers, refused when an answer changed since the page loaded, stale when a run is
answered again, and counted by `evalkit compare`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from evalkit.compare import compare_runs
from evalkit.compare.pairwise import (
    PAIRWISE_FILE,
    answer_sha256,
    append_choice,
    read_choice_lines,
)
from evalkit.store.runs import RunDir
from evalkit.studio.app import create_app
from evalkit.studio.guard import csrf_value
from evalkit.studio.pairs import PairConflict, pair_rows, pair_view, save_choice
from evalkit.studio.project import StudioProject
from tests.studio_project import IMG, SCRIPT, write_project

PORT, TOKEN = 8767, "pairs-token"
BASE = f"http://127.0.0.1:{PORT}"
NEW_G2 = "Every October, at the Bosch garage."


def _edit(results: Path, run_id: str, case_id: str, **changes: Any) -> None:
    path = results / run_id / "results.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for r in records:
        if r["test_case_id"] == case_id:
            for k, v in changes.items():
                if k == "recall_any":  # a retrieval flip: the stored per-case value compare pairs
                    r["retrieval_metrics"]["at_k"]["3"]["recall_any"] = v
                    r["retrieval_metrics"]["recall_at_k"] = v
                else:
                    r[k] = v
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


@pytest.fixture
def made(tmp_path: Path) -> tuple[dict[str, Path], StudioProject]:
    """r1 and r2: r2 answers g-2 otherwise, g-4 with hostile text, and misses g-2's gold (a flip)."""
    p = write_project(tmp_path)
    shutil.copytree(p["results"] / "r1", p["results"] / "r2")
    _edit(p["results"], "r2", "g-2", answer=NEW_G2, recall_any=0.0)
    _edit(p["results"], "r2", "g-4", answer=f"Tyres {SCRIPT} {IMG}")
    return p, StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])


def _shown(project: StudioProject, case_id: str) -> dict[str, str]:
    view = pair_view(project, "r1", "r2", case_id, "ana", "changed")
    assert view is not None
    return view["sha"]


def test_the_changed_cases_are_compares_flips_and_changed_answers(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    rows = pair_rows(project, "r1", "r2", "ana", "changed")
    assert [r["id"] for r in rows] == ["g-2", "g-4"]  # the flip first, then the other changed answer
    assert rows[0]["flips"] == ["recall_any@3 worse in b"] and rows[1]["flips"] == [] and rows[1]["answer_changed"]
    assert [r["id"] for r in pair_rows(project, "r1", "r2", "ana", "flips")] == ["g-2"]
    view = pair_view(project, "r1", "r2", "g-4", "ana", "changed")
    assert view["prev"] == "g-2" and view["next"] is None and view["answer_b"] == f"Tyres {SCRIPT} {IMG}"


def test_a_choice_is_a_line_with_both_answers_hashes(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    line = save_choice(project, "r1", "r2", "g-2", "ana", "a", _shown(project, "g-2"))
    run_b = RunDir.open(p["results"], "r2")
    written = read_choice_lines(run_b)
    assert written == [line]
    assert {k: v for k, v in line.items() if k != "reviewed_at"} == {
        "test_case_id": "g-2", "run_a": "r1", "run_b": "r2", "choice": "a", "reviewer": "ana", "schema_version": 1,
        "answer_a_sha256": answer_sha256({"answer": "The car is serviced every October at the Bosch garage. [1]"}),
        "answer_b_sha256": answer_sha256({"answer": NEW_G2}),
    }
    assert not (p["results"] / "r1" / PAIRWISE_FILE).exists()  # kept with run b
    assert {r["id"]: r["status"] for r in pair_rows(project, "r1", "r2", "ana", "changed")} == {"g-2": "a", "g-4": "to review"}
    assert [r["id"] for r in pair_rows(project, "r1", "r2", "ana", "to review")] == ["g-4"]
    assert pair_rows(project, "r1", "r2", "bo", "changed")[0]["status"] == "to review"  # reviewers kept apart


def test_a_choice_between_answers_that_changed_is_refused_and_a_rerun_makes_it_stale(
        made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    shown = _shown(project, "g-2")
    with pytest.raises(PairConflict) as refused:
        save_choice(project, "r1", "r2", "g-2", "ana", "b", {**shown, "answer_a_sha256": "0" * 64})
    assert refused.value.now == shown
    assert read_choice_lines(RunDir.open(p["results"], "r2")) == []
    save_choice(project, "r1", "r2", "g-2", "ana", "b", shown)
    _edit(p["results"], "r2", "g-2", answer="October.")  # run b answered again
    assert pair_rows(project, "r1", "r2", "ana", "changed")[0]["status"] == "stale"
    with pytest.raises(Exception, match="expected one of a, b, equal"):
        save_choice(project, "r1", "r2", "g-2", "ana", "c", _shown(project, "g-2"))


def test_compare_counts_the_review_and_leaves_stale_choices_out(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made

    def note() -> list[str]:
        result = compare_runs("r1", "r2", results_dir=p["results"], ignore_invariants=True, resamples=50)
        return [n for n in result.notes if PAIRWISE_FILE in n]

    assert note() == []  # no file, no line: compare's output as before
    save_choice(project, "r1", "r2", "g-2", "ana", "a", _shown(project, "g-2"))
    save_choice(project, "r1", "r2", "g-4", "ana", "equal", _shown(project, "g-4"))
    save_choice(project, "r1", "r2", "g-4", "bo", "b", _shown(project, "g-4"))
    save_choice(project, "r1", "r2", "g-4", "bo", "a", _shown(project, "g-4"))  # bo changed their mind: the last counts
    assert note() == [f"human pairwise review ({PAIRWISE_FILE}): run a better 2, run b better 0, equal 1 over 2 case(s), "
                      "2 reviewers"]
    _edit(p["results"], "r2", "g-2", answer="October.")
    assert note() == [f"human pairwise review ({PAIRWISE_FILE}): run a better 1, run b better 0, equal 1 over 1 case(s), "
                      "2 reviewers; 1 stale (an answer changed since), left out"]
    # the choices of another pair of runs are not this comparison's
    append_choice(RunDir.open(p["results"], "r2"), {"test_case_id": "g-4", "run_a": "r0", "run_b": "r2", "choice": "b",
                                                     "answer_a_sha256": "0" * 64, "answer_b_sha256": "0" * 64})
    assert "run b better 0" in note()[0]


def test_a_torn_last_line_is_ignored_and_cut_by_the_next_choice(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    save_choice(project, "r1", "r2", "g-2", "ana", "a", _shown(project, "g-2"))
    path = p["results"] / "r2" / PAIRWISE_FILE
    with path.open("ab") as f:
        f.write(b'{"test_case_id": "g-4", "run_a": "r1", "ru')  # killed mid-line
    run_b = RunDir.open(p["results"], "r2")
    assert [x["test_case_id"] for x in read_choice_lines(run_b)] == ["g-2"]
    save_choice(project, "r1", "r2", "g-4", "ana", "b", _shown(project, "g-4"))
    assert [x["test_case_id"] for x in read_choice_lines(run_b)] == ["g-2", "g-4"]
    assert path.read_bytes().count(b"\n") == 2


def test_reviewing_through_the_server(made: tuple[dict[str, Path], StudioProject]) -> None:
    p, project = made
    client = TestClient(create_app(project, token=TOKEN, port=PORT), base_url=BASE, follow_redirects=False)
    assert client.get("/pairs", params={"a": "r1", "b": "r2"}).status_code == 403  # no token yet
    assert client.get(f"/?token={TOKEN}").status_code == 303
    home = client.get("/").text
    assert 'action="/pairs"' in home
    listing = client.get("/pairs", params={"a": "r1", "b": "r2", "reviewer": "ana"})
    assert listing.status_code == 200 and ">g-2<" in listing.text and ">g-4<" in listing.text
    page = client.get("/pair", params={"a": "r1", "b": "r2", "id": "g-4", "reviewer": "ana"})
    assert page.status_code == 200 and SCRIPT not in page.text and IMG not in page.text and "&lt;script&gt;" in page.text
    assert "content-security-policy" in page.headers
    body = {"a": "r1", "b": "r2", "id": "g-4", "reviewer": "ana", "choice": "b", "shown": _shown(project, "g-4")}
    headers = {"origin": BASE, "x-studio-csrf": csrf_value(TOKEN)}
    assert client.post("/api/pair", json=body).status_code == 403  # no Origin, no CSRF value
    assert client.post("/api/pair", json=body, headers={**headers, "origin": "http://evil.example"}).status_code == 403
    assert client.post("/api/pair", json=body, headers=headers).status_code == 200
    stale = client.post("/api/pair", json={**body, "shown": {**body["shown"], "answer_b_sha256": "1" * 64}}, headers=headers)
    assert stale.status_code == 409 and stale.json()["current"] == body["shown"]
    assert client.post("/api/pair", json={**body, "choice": "both"}, headers=headers).status_code == 422
    assert client.post("/api/pair", json={**body, "b": "../r2"}, headers=headers).status_code == 404
    assert client.post("/api/pair", json={**body, "a": "r2"}, headers=headers).status_code == 404  # one run twice
    assert client.get("/pair", params={"a": "r1", "b": "nope", "id": "g-2"}).status_code == 404
    assert [(x["reviewer"], x["choice"]) for x in read_choice_lines(RunDir.open(p["results"], "r2"))] == [("ana", "b")]


def test_evalkit_compare_prints_the_tally(made: tuple[dict[str, Path], StudioProject]) -> None:
    from typer.testing import CliRunner

    from evalkit.cli.main import app as evalkit_app

    p, project = made
    save_choice(project, "r1", "r2", "g-4", "ana", "b", _shown(project, "g-4"))
    for fmt in ("markdown", "rich"):
        out = CliRunner().invoke(evalkit_app, ["compare", "r1", "r2", "--results-dir", str(p["results"]), "--ignore-invariants",
                                               "--resamples", "50", "--format", fmt])
        assert out.exit_code in (0, 1, 4), out.output
        assert "run a better 0, run b better 1, equal 0 over 1 case(s), 1 reviewer" in " ".join(out.output.split()), fmt
