"""Issue 41 item 2, the queue's batch operations: a renamed note's anchors moved into a new
version (validate --fix's Fix list and apply_fixes), a category or a tag dropped from the
selected cases in place (each at the version the page showed), and the selected cases labeled
from the chatbot's top chunks (label --accept-top --ids)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from evalkit.cli.main import app as evalkit_app
from evalkit.studio.app import create_app
from evalkit.studio.editing import Conflict, case_version
from evalkit.studio.fixing import (
    PlanChanged,
    drop_from_cases,
    rename_view,
    write_rename,
)
from evalkit.studio.guard import csrf_value
from evalkit.studio.project import StudioProject
from tests.studio_project import write_project

PORT, TOKEN = 8768, "batch-token"
BASE = f"http://127.0.0.1:{PORT}"


def _renamed(root: Path) -> dict[str, Path]:
    """The project with car/Car.md renamed vehicles/Car.md since g-2 was labeled."""
    p = write_project(root, run=False)
    (p["vault"] / "vehicles").mkdir()
    shutil.move(p["vault"] / "car" / "Car.md", p["vault"] / "vehicles" / "Car.md")
    return p


def _project(p: dict[str, Path]) -> StudioProject:
    return StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])


def _cases(path: Path) -> dict[str, dict]:
    return {c["id"]: c for c in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def test_a_renamed_notes_anchors_move_into_the_next_version_as_validate_fix_moves_them(tmp_path: Path) -> None:
    p = _renamed(tmp_path / "studio")
    project = _project(p)
    view = rename_view(p["eval_set"], project.notes(), "car/Car.md", "vehicles/Car.md")
    assert view["sources"][0] == {"rel_path": "car/Car.md", "n": 1, "missing": True}  # the old name, first
    assert view["fixes"] == [f"{p['eval_set']}:2: gold_supports[0].rel_path: 'car/Car.md' -> 'vehicles/Car.md'"]
    before = p["eval_set"].read_bytes()
    written = write_rename(p["eval_set"], project.notes(), "car/Car.md", "vehicles/Car.md", view["digest"], results_dir=p["results"])
    assert written == p["root"] / "eval_set.v2.jsonl" and p["eval_set"].read_bytes() == before
    assert _cases(written)["g-2"]["gold_supports"] == [{"rel_path": "vehicles/Car.md", "heading_path": "# Car > ## Service"}]
    assert before.splitlines()[2:] == written.read_bytes().splitlines()[2:]  # every other line byte-identical

    # the terminal's validate --fix finds the same move here (the note kept its name and headings): the same bytes
    q = _renamed(tmp_path / "terminal")
    out = CliRunner().invoke(evalkit_app, ["validate", "--labels", "--fix", "--yes", "--no-retrieval", "--eval-set", str(q["eval_set"]),
                                           "--vault", str(q["vault"]), "--results-dir", str(q["results"])])
    assert out.exit_code == 0, out.output
    assert written.read_bytes() == (q["root"] / "eval_set.v2.jsonl").read_bytes()


def test_a_rename_is_refused_when_the_plan_changed_or_the_target_is_no_note(tmp_path: Path) -> None:
    p = _renamed(tmp_path)
    project = _project(p)
    view = rename_view(p["eval_set"], project.notes(), "car/Car.md", "vehicles/Car.md")
    with pytest.raises(Exception, match="is not a note"):
        write_rename(p["eval_set"], project.notes(), "car/Car.md", "vehicles/Nope.md", view["digest"], results_dir=p["results"])
    lines = p["eval_set"].read_text(encoding="utf-8").splitlines()
    g3 = json.loads(lines[2])
    g3["gold_supports"] = [{"rel_path": "car/Car.md", "heading_path": "# Car > ## Tyres"}]  # labeled meanwhile
    lines[2] = json.dumps(g3)
    p["eval_set"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(PlanChanged):
        write_rename(p["eval_set"], project.notes(), "car/Car.md", "vehicles/Car.md", view["digest"], results_dir=p["results"])
    assert not (p["root"] / "eval_set.v2.jsonl").exists()


def test_dropping_a_category_or_a_tag_from_the_selected_cases(tmp_path: Path) -> None:
    p = write_project(tmp_path, run=False)
    cases = _cases(p["eval_set"])
    versions = {i: case_version(cases[i]) for i in ("g-1", "g-2", "g-3")}
    done = drop_from_cases(p["eval_set"], versions, category="factual", results_dir=p["results"])
    assert done == {"changed": ["g-1", "g-2"], "kept": [], "written": True}  # g-3 had none
    now = _cases(p["eval_set"])
    assert "category" not in now["g-1"] and "category" not in now["g-2"] and now["g-4"] == cases["g-4"]
    # a case changed since the page showed it: refused, nothing written
    stale = {"g-1": versions["g-1"], "g-4": case_version(cases["g-4"])}
    before = p["eval_set"].read_bytes()
    with pytest.raises(Conflict):
        drop_from_cases(p["eval_set"], stale, tag="garden", results_dir=p["results"])
    assert p["eval_set"].read_bytes() == before
    fresh = {i: case_version(now[i]) for i in ("g-1", "g-3", "g-4")}
    assert drop_from_cases(p["eval_set"], fresh, tag="garden", results_dir=p["results"])["changed"] == ["g-1", "g-3"]
    now = _cases(p["eval_set"])
    assert now["g-1"]["tags"] == [] and now["g-4"]["tags"] == ["car"]
    with pytest.raises(Exception, match="one category or one tag"):
        drop_from_cases(p["eval_set"], fresh, results_dir=p["results"])
    # a conversation's turn keeps a tag its conversation's line gives every turn: said, not dropped
    from evalkit.authoring.labeling import EvalSetFile

    turn = EvalSetFile(p["eval_set"]).case("c-1#1")
    before = p["eval_set"].read_bytes()
    done = drop_from_cases(p["eval_set"], {"c-1#1": case_version(turn)}, tag="conversation", results_dir=p["results"])
    assert done == {"changed": [], "kept": ["c-1#1"], "written": False} and p["eval_set"].read_bytes() == before


def test_batch_operations_through_the_server(tmp_path: Path) -> None:
    p = _renamed(tmp_path)
    project = _project(p)
    client = TestClient(create_app(project, token=TOKEN, port=PORT), base_url=BASE, follow_redirects=False)
    assert client.get(f"/?token={TOKEN}").status_code == 303
    queue = client.get("/queue", params={"set": "eval_set.jsonl"}).text
    assert 'data-pick="g-1"' in queue and 'data-drop="category"' in queue and "/rename?set=eval_set.jsonl" in queue
    page = client.get("/rename", params={"set": "eval_set.jsonl", "from": "car/Car.md", "to": "vehicles/Car.md"})
    assert page.status_code == 200 and "gold_supports[0].rel_path" in page.text
    digest = rename_view(p["eval_set"], project.notes(), "car/Car.md", "vehicles/Car.md")["digest"]
    headers = {"origin": BASE, "x-studio-csrf": csrf_value(TOKEN)}
    body = {"set": "eval_set.jsonl", "from": "car/Car.md", "to": "vehicles/Car.md", "digest": digest}
    assert client.post("/api/rename", json=body).status_code == 403  # no CSRF value
    assert client.post("/api/rename", json={**body, "digest": "0"}, headers=headers).status_code == 409
    done = client.post("/api/rename", json=body, headers=headers)
    assert done.status_code == 200 and done.json() == {"written": "eval_set.v2.jsonl"}
    assert client.get("/queue", params={"set": "eval_set.v2.jsonl"}).status_code == 200  # served now
    cases = _cases(p["eval_set"])
    drop = {"set": "eval_set.jsonl", "versions": {"g-2": case_version(cases["g-2"])}, "tag": "car"}
    assert client.post("/api/drop", json=drop, headers=headers).json() == {"changed": ["g-2"], "kept": [], "written": True}
    again = client.post("/api/drop", json=drop, headers=headers)  # the version the page showed is gone
    assert again.status_code == 409 and again.json()["conflict"]
    assert client.post("/api/drop", json={**drop, "versions": ["g-2"]}, headers=headers).status_code == 400
    assert client.post("/api/drop", json={**drop, "set": "../eval_set.jsonl"}, headers=headers).status_code == 404


def test_the_selected_cases_are_labeled_as_label_accept_top_ids_labels_them(tmp_path: Path) -> None:
    from evalkit.studio.asking import LiveTarget
    from evalkit.targets import build_target

    p = write_project(tmp_path / "studio", run=False)
    live = LiveTarget(lambda: build_target(target=None, api_url=None, vault=p["vault"], timeout=10, retries=0, rps=None, params={}),
                      20, "the reference chatbot over notes")
    client = TestClient(create_app(_project(p), token=TOKEN, port=PORT, live=live), base_url=BASE, follow_redirects=False)
    client.get(f"/?token={TOKEN}")
    assert 'id="accept-picked"' in client.get("/queue", params={"set": "eval_set.jsonl"}).text
    headers = {"origin": BASE, "x-studio-csrf": csrf_value(TOKEN)}
    body = {"set": "eval_set.jsonl", "n": 2, "ids": ["g-2", "g-3"]}  # g-2 is labeled already: replaced, as --ids does
    done = client.post("/api/accept-top", json=body, headers=headers)
    assert done.status_code == 200, done.text
    assert sorted(done.json()["labeled"]) == ["g-2", "g-3"]
    assert client.post("/api/accept-top", json={**body, "ids": "g-2"}, headers=headers).status_code == 400

    q = write_project(tmp_path / "terminal", run=False)
    out = CliRunner().invoke(evalkit_app, ["label", "--accept-top", "2", "--ids", "g-2,g-3", "--eval-set", str(q["eval_set"]),
                                           "--vault", str(q["vault"]), "--results-dir", str(q["results"])])
    assert out.exit_code in (0, 3), out.output
    assert p["eval_set"].read_bytes() == q["eval_set"].read_bytes()
