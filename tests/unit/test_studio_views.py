"""Issue 41 items 1 and 2: what the studio's pages show (views.py, no server): the queue and
its filters, a case with the run's chunks and the notes, a conversation turn by turn; and that
the command stays out of `evalkit --help`'s way (Starlette is imported only when it runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.studio.project import StudioProject
from evalkit.studio.views import case_view, queue_ids, queue_view
from tests.studio_project import write_project

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> StudioProject:
    p = write_project(tmp_path_factory.mktemp("views"))
    return StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])


def test_the_queue_filters_unlabeled_and_failed_cases(project: StudioProject) -> None:
    path = project.eval_sets[0]
    assert queue_ids(project, path, "all", None) == ["g-1", "g-2", "g-3", "g-4", "g-5", "c-1#1", "c-1#2"]
    # the labeler's rule (choose_cases): answerable and no gold support
    assert queue_ids(project, path, "unlabeled", None) == ["g-1", "g-3", "g-4", "g-5", "c-1#1", "c-1#2"]
    assert queue_ids(project, path, "failed", None) == []  # no run chosen: nothing failed in it
    stages = {r["id"]: r["stage"] for r in queue_view(project, "eval_set.jsonl", path, "all", "r1")["rows"]}
    # metrics.stages.record_stage: g-2 found at rank 1; g-4 has no gold (not a failure of the
    # chatbot); the reference chatbot abstained on the others, which are answerable
    assert stages == {"g-1": "abstained_answerable", "g-2": "pass", "g-3": "abstained_answerable", "g-4": "unlabeled",
                      "g-5": "abstained_answerable", "c-1#1": "abstained_answerable", "c-1#2": "abstained_answerable"}
    view = queue_view(project, "eval_set.jsonl", path, "failed", "r1")
    assert [r["id"] for r in view["rows"]] == ["g-1", "g-3", "g-5", "c-1#1", "c-1#2"]
    assert (view["n_all"], view["n_unlabeled"], view["n_failed"]) == (7, 6, 5)


def test_a_case_shows_the_runs_chunks_with_what_covers_them_and_the_notes(project: StudioProject) -> None:
    view = case_view(project, "eval_set.jsonl", project.eval_sets[0], "g-2", "r1", "car/Car.md", "tyres", "all")
    assert [(c["heading_path"], c["covered_by"]) for c in view["chunks"]] == [("# Car > ## Service", 0), ("# Car > ## Tyres", None)]
    assert [(h["heading_path"], h["covered_by"]) for h in view["headings"]] == [
        ("# Car", None), ("# Car > ## Service", 0), ("# Car > ## Tyres", None)]
    # every line holding the words, under the heading chain of its piece
    assert [(h.rel_path, h.line, h.heading_path) for h in view["hits"]] == [("car/Car.md", 7, "# Car > ## Tyres"),
                                                                          ("car/Car.md", 9, "# Car > ## Tyres")]
    assert (view["prev"], view["next"], view["position"], view["total"]) == ("g-1", "g-3", 2, 7)
    assert view["stage"] == "pass" and view["warnings"] == []
    assert [s["can_go_up"] for s in view["supports"]] == [True]  # "# Car > ## Service" -> "# Car"


def test_a_conversation_turn_shows_its_turns(project: StudioProject) -> None:
    view = case_view(project, "eval_set.jsonl", project.eval_sets[0], "c-1#2", None, None, "", "unlabeled")
    assert view["conversation"] == [{"id": "c-1#1", "question": "What is planted in May?", "here": False},
                                    {"id": "c-1#2", "question": "And when are they watered?", "here": True}]
    assert view["question"] == "And when are they watered?" and view["next"] is None and view["prev"] == "c-1#1"


def test_help_and_the_command_module_import_no_server() -> None:
    code = (
        "import sys\nfrom evalkit.cli.main import app\nsys.argv = ['evalkit', 'serve-studio', '--help']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2', 'evalkit.studio.app') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "Listens on 127.0.0.1 only" in out.stdout
    assert out.stdout.splitlines()[-1] == "[]"


def test_the_next_case_is_found_after_this_one_has_left_the_filter(tmp_path: Path) -> None:
    p = write_project(tmp_path, run=False)
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    from evalkit.authoring.labeling import EvalSetFile
    from evalkit.studio.editing import case_version, edit_case

    version = case_version(EvalSetFile(p["eval_set"]).case("g-3"))
    edit_case(p["eval_set"], "g-3", version, "answerable", {"value": False}, results_dir=p["results"])
    view = case_view(project, "eval_set.jsonl", p["eval_set"], "g-3", None, None, "", "unlabeled")
    assert (view["position"], view["prev"], view["next"]) == (None, "g-1", "g-4")  # labeled now: out of the queue


def test_the_stale_filter_lists_the_cases_validate_calls_stale(tmp_path: Path) -> None:
    import json

    p = write_project(tmp_path, run=False)
    lines = p["eval_set"].read_text(encoding="utf-8").splitlines()
    case = json.loads(lines[2])  # g-3: a support under a heading the note does not have
    case["gold_supports"] = [{"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Tulips"}]
    lines[2] = json.dumps(case)
    p["eval_set"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    view = queue_view(project, "eval_set.jsonl", p["eval_set"], "stale", None)
    assert [r["id"] for r in view["rows"]] == ["g-3"] and view["n_stale"] == 1
    from evalkit.authoring.labeling import validate_labels

    said = validate_labels([p["eval_set"]], vault=p["vault"])
    assert sorted({i.case_id for i in said.stale}) == ["g-3"]  # the terminal's check agrees


def test_only_the_last_runs_read_are_kept_in_memory(tmp_path: Path) -> None:
    import shutil

    from evalkit.studio.project import KEPT_RUNS

    p = write_project(tmp_path)
    for n in range(KEPT_RUNS + 1):
        shutil.copytree(p["results"] / "r1", p["results"] / f"copy{n}")
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    for n in range(KEPT_RUNS + 1):
        assert set(project.run_records(f"copy{n}") or {}) >= {"g-1", "c-1#2"}
    assert list(project._records) == [f"copy{n}" for n in range(1, KEPT_RUNS + 1)]
