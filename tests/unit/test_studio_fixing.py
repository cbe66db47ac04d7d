"""Issue 41 item 2, batch work: the studio writes anchorcheck's suggested anchors into a new
version byte for byte as `evalkit validate --labels --fix` writes them, only the fixes the page
showed, and never over a version that exists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from evalkit.cli.main import app as evalkit_app
from evalkit.errors import BadConfig
from evalkit.studio.app import create_app
from evalkit.studio.fixing import PlanChanged, fix_view, write_fixes
from evalkit.studio.guard import csrf_value
from evalkit.studio.project import StudioProject
from tests.studio_project import write_project


def _stale_project(root: Path) -> dict[str, Path]:
    p = write_project(root, run=False)
    lines = p["eval_set"].read_text(encoding="utf-8").splitlines()
    case = json.loads(lines[1])  # g-2: a heading renamed in the note since it was labeled
    case["gold_supports"][0]["heading_path"] = "# Car > ## Servicing"
    lines[1] = json.dumps(case)
    p["eval_set"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_the_fixes_are_the_ones_validate_fix_writes(tmp_path: Path) -> None:
    p = _stale_project(tmp_path / "studio")
    view = fix_view(p["eval_set"], p["vault"])
    assert view["fixes"] == [f"{p['eval_set']}:2: gold_supports[0].heading_path: '# Car > ## Servicing' -> '# Car > ## Service'"]
    assert view["dest"] == "eval_set.v2.jsonl" and view["left"] == []
    before = p["eval_set"].read_bytes()
    written = write_fixes(p["eval_set"], p["vault"], view["digest"], results_dir=p["results"])
    assert written == p["root"] / "eval_set.v2.jsonl" and p["eval_set"].read_bytes() == before  # the file itself: untouched

    q = _stale_project(tmp_path / "terminal")
    out = CliRunner().invoke(evalkit_app, ["validate", "--labels", "--fix", "--yes", "--no-retrieval", "--eval-set", str(q["eval_set"]),
                                           "--vault", str(q["vault"]), "--results-dir", str(q["results"])])
    assert out.exit_code == 0, out.output
    assert written.read_bytes() == (q["root"] / "eval_set.v2.jsonl").read_bytes()


def test_fixes_other_than_the_ones_shown_are_not_written(tmp_path: Path) -> None:
    p = _stale_project(tmp_path)
    view = fix_view(p["eval_set"], p["vault"])
    shutil.copy(p["vault"] / "car" / "Car.md", p["vault"] / "car" / "Car copy.md")
    (p["vault"] / "car" / "Car.md").unlink()  # the note moved since the page loaded: another plan now
    with pytest.raises(PlanChanged):
        write_fixes(p["eval_set"], p["vault"], view["digest"], results_dir=p["results"])
    assert not (p["root"] / "eval_set.v2.jsonl").exists()


def test_a_new_version_that_exists_is_not_replaced(tmp_path: Path) -> None:
    p = _stale_project(tmp_path)
    (p["root"] / "eval_set.v2.jsonl").write_text("mine\n", encoding="utf-8")
    with pytest.raises(BadConfig, match="already exists"):
        write_fixes(p["eval_set"], p["vault"], fix_view(p["eval_set"], p["vault"])["digest"], results_dir=p["results"])
    assert (p["root"] / "eval_set.v2.jsonl").read_text(encoding="utf-8") == "mine\n"


def test_the_new_version_is_served_once_written(tmp_path: Path) -> None:
    p = _stale_project(tmp_path)
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    client = TestClient(create_app(project, token="t", port=8768), base_url="http://127.0.0.1:8768", follow_redirects=False)
    client.get("/?token=t")
    assert client.get("/queue", params={"set": "eval_set.v2.jsonl"}).status_code == 404
    page = client.get("/fixes", params={"set": "eval_set.jsonl"})
    assert page.status_code == 200 and "Write 1 fix to eval_set.v2.jsonl" in page.text
    headers = {"origin": "http://127.0.0.1:8768", "x-studio-csrf": csrf_value("t")}
    digest = fix_view(p["eval_set"], p["vault"])["digest"]
    assert client.post("/api/fixes", json={"set": "eval_set.jsonl", "digest": "0"}, headers=headers).status_code == 409
    done = client.post("/api/fixes", json={"set": "eval_set.jsonl", "digest": digest}, headers=headers)
    assert done.status_code == 200 and done.json() == {"written": "eval_set.v2.jsonl"}
    assert client.get("/queue", params={"set": "eval_set.v2.jsonl"}).status_code == 200
    again = client.post("/api/fixes", json={"set": "eval_set.jsonl", "digest": digest}, headers=headers)
    assert again.status_code == 422 and "already exists" in again.json()["error"]
