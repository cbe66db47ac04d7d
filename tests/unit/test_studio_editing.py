"""Issue 41 items 1 and 5: an edit from the studio writes what the terminal labeler writes for
the same choices (its own LabelSession methods, through EvalSetFile), and two editors (two
tabs, or a tab and the terminal labeler) never lose a label: an edit made against a version
of the case that is gone is refused with the case as it is now, and nothing is written."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from evalkit.authoring.labeler import LabelSession, open_session
from evalkit.authoring.labeling import EvalSetFile
from evalkit.errors import BadConfig, InputError
from evalkit.studio.editing import (
    Conflict,
    EditRefused,
    case_version,
    edit_case,
    support_warnings,
)
from tests.studio_project import write_project

TOMATOES = {"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Tomatoes"}
ROSES = {"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Roses"}


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    return write_project(tmp_path, run=False)


def _edit(paths: dict[str, Path], case_id: str, op: str, args: dict | None = None, version: str | None = None):
    if version is None:
        version = case_version(EvalSetFile(paths["eval_set"]).case(case_id))
    return edit_case(paths["eval_set"], case_id, version, op, args or {}, results_dir=paths["results"])


# ---------------------------------------------------------------- the terminal's bytes


def test_edits_write_the_bytes_the_terminal_labeler_writes(paths: dict[str, Path], tmp_path: Path) -> None:
    terminal = tmp_path / "terminal.jsonl"
    terminal.write_bytes(paths["eval_set"].read_bytes())
    # studio: g-1 gets two supports, grouped, key facts; g-3 is unanswerable; g-2 loses its support
    _edit(paths, "g-1", "toggle", TOMATOES)
    _edit(paths, "g-1", "toggle", ROSES)
    _edit(paths, "g-1", "group")
    _edit(paths, "g-1", "key_facts", {"facts": ["in May", " after the last frost ", ""]})
    _edit(paths, "g-3", "answerable", {"value": False})
    _edit(paths, "g-2", "drop_support", {"index": 0})
    # the terminal labeler, same choices, one session, one save (`w`)
    session = LabelSession(EvalSetFile(terminal), ["g-1", "g-3", "g-2"])
    session.set_chunks([dict(TOMATOES), dict(ROSES)])  # set_chunks ranks the dicts it is given
    session.toggle(0)
    session.toggle(1)
    session.group()
    session.set_key_facts(["in May", "after the last frost"])
    session.next()
    session.unanswerable()
    session.next()
    session.drop_support(0)
    session.save()
    assert paths["eval_set"].read_bytes() == terminal.read_bytes()
    # and only the edited lines changed
    before = (tmp_path / "eval_set.jsonl").read_bytes()  # the same file: compare with a fresh project
    fresh = write_project(tmp_path / "fresh", run=False)["eval_set"].read_bytes().splitlines()
    after = before.splitlines()
    assert [i for i, (a, b) in enumerate(zip(fresh, after, strict=True)) if a != b] == [0, 1, 2]


def test_a_snippet_is_added_as_the_terminals_s_adds_it(paths: dict[str, Path], tmp_path: Path) -> None:
    terminal = tmp_path / "terminal.jsonl"
    terminal.write_bytes(paths["eval_set"].read_bytes())
    _edit(paths, "g-1", "snippet", {**TOMATOES, "text": " after the last frost "})  # selects the support first
    _edit(paths, "g-1", "snippet", {**TOMATOES, "text": "Water them daily."})
    session = LabelSession(EvalSetFile(terminal), ["g-1"])
    session.set_chunks([dict(TOMATOES)])
    session.add_snippet(" after the last frost ", 0)
    session.add_snippet("Water them daily.", 0)
    session.save()
    assert paths["eval_set"].read_bytes() == terminal.read_bytes()
    assert EvalSetFile(terminal).case("g-1")["gold_supports"] == [{**TOMATOES, "snippets": ["after the last frost", "Water them daily."]}]
    with pytest.raises(EditRefused, match="blank"):
        _edit(paths, "g-1", "snippet", {**TOMATOES, "text": "  "})


def test_one_heading_up_is_the_terminals_d(paths: dict[str, Path], tmp_path: Path) -> None:
    terminal = tmp_path / "terminal.jsonl"
    terminal.write_bytes(paths["eval_set"].read_bytes())
    _edit(paths, "g-1", "toggle", TOMATOES)
    _edit(paths, "g-1", "snippet", {**ROSES, "text": "Prune the roses"})
    _edit(paths, "g-1", "shallower", TOMATOES)  # -> # Garden
    # Roses is covered by "# Garden" now: `d` there acts on that support, already at the top
    _edit(paths, "g-1", "shallower", ROSES)
    session = LabelSession(EvalSetFile(terminal), ["g-1"])
    session.set_chunks([dict(TOMATOES), dict(ROSES)])
    session.toggle(0)
    session.add_snippet("Prune the roses", 1)
    session.shallower(0)
    session.shallower(1)
    session.save()
    assert paths["eval_set"].read_bytes() == terminal.read_bytes()
    assert EvalSetFile(terminal).case("g-1")["gold_supports"] == [
        {"rel_path": "garden/Garden.md", "heading_path": "# Garden"}, {**ROSES, "snippets": ["Prune the roses"]}]


def test_a_toggle_again_drops_the_support_and_marks_a_reviewed_auto_label(paths: dict[str, Path]) -> None:
    doc = EvalSetFile(paths["eval_set"])
    case = doc.case("g-1") | {"label_source": "auto"}
    doc.replace("g-1", case)
    doc.write()
    first = _edit(paths, "g-1", "toggle", TOMATOES)
    assert first.case["gold_supports"] == [TOMATOES] and "label_source" not in first.case  # a person reviewed it
    second = _edit(paths, "g-1", "toggle", TOMATOES)
    assert second.case["gold_supports"] == [] and second.version != first.version


def test_a_conversation_turn_is_labeled_in_its_own_turn(paths: dict[str, Path]) -> None:
    done = _edit(paths, "c-1#2", "toggle", TOMATOES)
    assert done.case["gold_supports"] == [TOMATOES]
    line = EvalSetFile(paths["eval_set"]).case("c-1")
    assert line["turns"][1]["gold_supports"] == [TOMATOES] and line["turns"][0]["gold_supports"] == []
    assert _edit(paths, "c-1#1", "answerable", {"value": False}).case["answerable"] is False
    assert EvalSetFile(paths["eval_set"]).case("c-1#2")["gold_supports"] == [TOMATOES]  # the other turn kept


def test_an_edit_that_changes_nothing_writes_nothing(paths: dict[str, Path]) -> None:
    before = paths["eval_set"].stat().st_mtime_ns, paths["eval_set"].read_bytes()
    done = _edit(paths, "g-2", "answerable", {"value": True})
    assert done.written is False
    assert (paths["eval_set"].stat().st_mtime_ns, paths["eval_set"].read_bytes()) == before


@pytest.mark.parametrize("op, args", [
    ("rename", {}), ("toggle", {"rel_path": 3, "heading_path": "# A"}), ("answerable", {"value": "no"}),
    ("drop_support", {"index": "0"}), ("key_facts", {"facts": "in May"}),
])
def test_a_bad_edit_is_refused_and_nothing_is_written(paths: dict[str, Path], op: str, args: dict) -> None:
    before = paths["eval_set"].read_bytes()
    with pytest.raises(EditRefused):
        _edit(paths, "g-1", op, args)
    assert paths["eval_set"].read_bytes() == before


def test_a_frozen_eval_set_is_not_written(paths: dict[str, Path]) -> None:
    from evalkit.evalset.lock import lock_eval_set

    lock_eval_set(paths["eval_set"])
    before = paths["eval_set"].read_bytes()
    with pytest.raises(BadConfig, match="--output"):
        _edit(paths, "g-1", "toggle", TOMATOES)
    assert paths["eval_set"].read_bytes() == before


# ---------------------------------------------------------------- two editors


def test_two_tabs_on_one_case_the_second_edit_is_refused_and_shown_not_written(paths: dict[str, Path]) -> None:
    loaded = case_version(EvalSetFile(paths["eval_set"]).case("g-1"))  # both tabs loaded this
    _edit(paths, "g-1", "toggle", TOMATOES, version=loaded)  # tab A
    with pytest.raises(Conflict) as refused:  # tab B, same page load
        _edit(paths, "g-1", "toggle", ROSES, version=loaded)
    assert refused.value.current["gold_supports"] == [TOMATOES]  # what B is shown
    assert EvalSetFile(paths["eval_set"]).case("g-1")["gold_supports"] == [TOMATOES]
    _edit(paths, "g-1", "toggle", ROSES, version=refused.value.version)  # B redoes it on the case as it is now
    assert EvalSetFile(paths["eval_set"]).case("g-1")["gold_supports"] == [TOMATOES, ROSES]


def test_two_tabs_on_different_cases_both_edits_are_kept(paths: dict[str, Path]) -> None:
    doc = EvalSetFile(paths["eval_set"])  # one page load: every version from the same file
    versions = {i: case_version(doc.case(i)) for i in ("g-1", "g-3")}
    _edit(paths, "g-1", "toggle", TOMATOES, version=versions["g-1"])
    _edit(paths, "g-3", "toggle", ROSES, version=versions["g-3"])  # the file changed, this case did not
    now = EvalSetFile(paths["eval_set"])
    assert now.case("g-1")["gold_supports"] == [TOMATOES] and now.case("g-3")["gold_supports"] == [ROSES]


def test_concurrent_editors_lose_no_label(paths: dict[str, Path]) -> None:
    # 2 editors x 5 cases, started together: every edit made against the version both loaded;
    # per case, exactly one editor wins and the other is refused (a Conflict), never overwritten.
    doc = EvalSetFile(paths["eval_set"])
    ids = ["g-1", "g-3", "g-4", "g-5", "c-1#1"]
    loaded = {i: case_version(doc.case(i)) for i in ids}
    anchors = {"A": TOMATOES, "B": ROSES}
    won: dict[str, list[str]] = {i: [] for i in ids}
    refused: dict[str, list[str]] = {i: [] for i in ids}
    start = threading.Barrier(2 * len(ids))

    def editor(name: str, case_id: str) -> None:
        start.wait()
        try:
            _edit(paths, case_id, "toggle", anchors[name], version=loaded[case_id])
            won[case_id].append(name)
        except Conflict:
            refused[case_id].append(name)

    threads = [threading.Thread(target=editor, args=(n, i)) for i in ids for n in anchors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = EvalSetFile(paths["eval_set"])
    for case_id in ids:
        assert len(won[case_id]) == 1 and len(refused[case_id]) == 1, case_id
        assert final.case(case_id)["gold_supports"] == [anchors[won[case_id][0]]], case_id


def test_the_terminal_labeler_and_the_studio_on_one_file_lose_no_label(paths: dict[str, Path]) -> None:
    terminal = open_session(paths["eval_set"], results_dir=paths["results"], ids=["g-1", "g-3"])
    page = case_version(EvalSetFile(paths["eval_set"]).case("g-1"))  # a tab loaded g-1
    terminal.set_chunks([dict(TOMATOES)])
    terminal.toggle(0)
    terminal.save()  # the terminal labels g-1
    with pytest.raises(Conflict):  # the tab's edit of g-1 is refused, not written over it
        _edit(paths, "g-1", "toggle", ROSES, version=page)
    _edit(paths, "g-3", "toggle", ROSES)  # the studio labels g-3 (a case the terminal has open too)
    terminal.next()
    terminal.set_chunks([dict(ROSES)])
    terminal.toggle(0)
    terminal.toggle(0)
    with pytest.raises(InputError, match="changed on disk"):  # the terminal's save refuses in turn
        terminal.save()
    final = EvalSetFile(paths["eval_set"])
    assert final.case("g-1")["gold_supports"] == [TOMATOES] and final.case("g-3")["gold_supports"] == [ROSES]


# ---------------------------------------------------------------- the labeler's helpers and warnings


def test_drop_support_reindexes_the_groups_as_toggle_does(paths: dict[str, Path]) -> None:
    session = LabelSession(EvalSetFile(paths["eval_set"]), ["g-1"])
    session.case.obj["gold_supports"] = [TOMATOES, ROSES, {"rel_path": "car/Car.md", "heading_path": "# Car"}]
    session.case.obj["required_support_groups"] = [[0, 2], [1]]
    session.drop_support(0)
    assert session.case.obj["required_support_groups"] == [[1], [0]]
    session.drop_support(7)  # out of range: nothing
    assert len(session.supports) == 2


def test_set_key_facts_writes_them_as_review_does(paths: dict[str, Path]) -> None:
    from evalkit.authoring.review import apply_edits

    session = LabelSession(EvalSetFile(paths["eval_set"]), ["g-2"])
    original = dict(session.case.obj)
    session.set_key_facts(["  October ", ""])
    assert session.case.obj == apply_edits(original, key_facts=["October"]) and session.case.changed
    session.set_key_facts([])
    assert "expected_key_facts" not in session.case.obj


def test_warnings_say_what_validate_says(paths: dict[str, Path]) -> None:
    from evalkit.evalset.anchorcheck import corpus_from_vault

    corpus = corpus_from_vault(paths["vault"])
    case = {"answerable": True, "gold_supports": [TOMATOES, {"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Tulips"}]}
    said = support_warnings(case, corpus, chunks=[{"rel_path": "car/Car.md", "heading_path": "# Car > ## Service"}])
    assert said[0] == "gold_supports[0]: warning: matches none of the run's 1 retrieved chunks"
    assert said[1].startswith("gold_supports[1].heading_path: stale: no heading chain '# Garden > ## Tulips' in garden/Garden.md")
    assert support_warnings({"answerable": True, "gold_supports": []}, corpus) == ["gold_supports: answerable, but no support labeled yet"]


def test_a_write_the_os_refuses_is_a_507_naming_the_reason_and_the_file_is_unchanged(tmp_path: Path, monkeypatch: Any) -> None:
    import errno

    from starlette.testclient import TestClient

    from evalkit.authoring import labeling
    from evalkit.studio.app import create_app
    from evalkit.studio.editing import case_version
    from evalkit.studio.guard import csrf_value
    from evalkit.studio.project import StudioProject
    from tests.studio_project import write_project

    p = write_project(tmp_path, run=False)
    before = p["eval_set"].read_bytes()

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(p["eval_set"]))

    monkeypatch.setattr(labeling, "write_bytes_atomic", full)  # the disk is full
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    base = "http://127.0.0.1:8771"
    client = TestClient(create_app(project, token="t", port=8771), base_url=base, follow_redirects=False)
    client.get("/?token=t")
    case = labeling.EvalSetFile(p["eval_set"]).case("g-1")
    done = client.post("/api/edit", json={"set": "eval_set.jsonl", "id": "g-1", "version": case_version(case), "op": "answerable",
                                          "args": {"value": False}}, headers={"origin": base, "x-studio-csrf": csrf_value("t")})
    assert done.status_code == 507 and "No space left on device" in done.json()["error"]
    assert p["eval_set"].read_bytes() == before
