"""Issue 41 item 1: a case page can ask the chatbot now, as the terminal labeler asks it
(labeler.retrieve: the question with its history, k, debug on), once per case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from evalkit.studio.app import create_app
from evalkit.studio.asking import LiveTarget
from evalkit.studio.project import StudioProject
from tests.studio_project import write_project


def test_a_case_page_asks_the_chatbot_once_and_shows_its_chunks(tmp_path: Path) -> None:
    from evalkit.targets import build_target

    p = write_project(tmp_path, run=False)
    made: list[Any] = []

    def make() -> Any:
        made.append(build_target(target=None, api_url=None, vault=p["vault"], timeout=10, retries=0, rps=None, params={}))
        return made[-1]

    live = LiveTarget(make, 3, "the reference chatbot over notes")
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    client = TestClient(create_app(project, token="t", port=8769, live=live), base_url="http://127.0.0.1:8769", follow_redirects=False)
    client.get("/?token=t")
    page = client.get("/case", params={"set": "eval_set.jsonl", "id": "g-1", "run": "live"})
    assert page.status_code == 200
    assert "Retrieved by the chatbot now (the reference chatbot over notes)" in page.text
    assert 'data-heading-path="# Garden &gt; ## Tomatoes"' in page.text and "Select as support (1)" in page.text
    turn = client.get("/case", params={"set": "eval_set.jsonl", "id": "c-1#2", "run": "live"})  # asked with its history
    assert turn.status_code == 200 and "Select as support (1)" in turn.text
    client.get("/case", params={"set": "eval_set.jsonl", "id": "g-1", "run": "live"})
    assert len(made) == 1 and len(live._asked) == 2  # one target; each case asked once
    assert client.get("/case", params={"set": "eval_set.jsonl", "id": "nope", "run": "live"}).status_code == 404
    plain = client.get("/case", params={"set": "eval_set.jsonl", "id": "g-1"})
    assert 'ask the chatbot now' in plain.text and "Select as support" not in plain.text
