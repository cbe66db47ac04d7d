"""evalkit.authoring.labeler.LabelSession: every key action on hand-made chunks, no target, no UI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.authoring.labeler import LabelSession, choose_cases, open_session, question_words, sentences
from evalkit.authoring.labeling import EvalSetFile
from evalkit.errors import BadConfig

LINES = [
    b'{"id": "a", "question": "Which port does the home server use?", "answerable": true, "gold_supports": [], "label_source": "auto"}\n',
    b'{"id":"b" , "question": "Done?", "answerable": true, "gold_supports": [{"rel_path": "x.md", "heading_path": "# X"}], "category": "general"}\n',
    b'{"id": "c", "question": "Unknown?", "answerable": true, "gold_supports": [], "tags": ["t1"], "category": "general"}\n',
]
CHUNKS = [
    {"rank": 1, "rel_path": "docs/Home server.md", "heading_path": "# Home server > ## Network > ### Ports", "text": "## Ports\nThe server listens on port 8443. Nothing else."},
    {"rank": 2, "rel_path": "docs/Home server.md", "heading_path": "# Home server > ## Network", "text": "- LAN only"},
    {"rank": 3, "rel_path": "docs/Other.md", "heading_path": "# Other", "text": "Port trivia."},
]


def _session(tmp_path: Path, ids: list[str] | None = None) -> LabelSession:
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(LINES))
    s = LabelSession(EvalSetFile(path), ids or ["a", "c"])
    s.set_chunks([dict(c) for c in CHUNKS])
    return s


def test_toggle_adds_an_anchor_and_removes_it_again(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.toggle(0)
    assert s.supports == [{"rel_path": "docs/Home server.md", "heading_path": "# Home server > ## Network > ### Ports"}]
    assert s.support_for(0) == 0 and s.support_for(1) is None  # "## Network > ### Ports" does not cover "## Network"
    s.toggle(0)
    assert s.supports == []


def test_shallower_drops_one_component_and_stops_at_the_top_heading(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.shallower(0)  # selects rank 1, then one level up
    assert s.supports == [{"rel_path": "docs/Home server.md", "heading_path": "# Home server > ## Network"}]
    assert s.support_for(1) == 0  # now it covers rank 2 as well (heading-boundary prefix)
    s.shallower(0)
    s.shallower(0)
    assert s.supports == [{"rel_path": "docs/Home server.md", "heading_path": "# Home server"}]


def test_shallower_merges_into_an_equal_support(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.toggle(0)  # "... > ## Network > ### Ports"
    s.toggle(1)  # "# Home server > ## Network"
    s.add_snippet("The server listens on port 8443.", 0)  # goes to the first support covering rank 1
    s.shallower(0)  # "### Ports" goes up to "## Network": merged into support 1
    assert s.supports == [{"rel_path": "docs/Home server.md", "heading_path": "# Home server > ## Network", "snippets": ["The server listens on port 8443."]}]


def test_snippet_choices_skip_headings_and_put_question_words_first(tmp_path: Path) -> None:
    s = _session(tmp_path)
    assert s.snippet_choices(0) == ["The server listens on port 8443.", "Nothing else."]
    assert sentences("## H\n- a list item. Two\n| cell |") == ["a list item.", "Two", "cell"]
    assert question_words("Which port does the home server use?") == ["port", "home", "server", "use"]


def test_unanswerable_clears_supports_and_groups_and_toggles_back(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.toggle(0)
    s.toggle(2)
    s.group()
    assert s.case.obj["required_support_groups"] == [[0, 1]]
    s.unanswerable()
    assert (s.case.obj["answerable"], s.supports) == (False, [])
    assert s.case.obj.get("required_support_groups") is None
    s.unanswerable()
    assert s.case.obj["answerable"] is True


def test_group_toggles_and_follows_removed_supports(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.toggle(0)
    s.group()  # one support: no group
    assert s.case.obj.get("required_support_groups") is None
    s.toggle(2)
    s.group()
    s.group()
    assert s.case.obj["required_support_groups"] is None
    s.group()
    s.toggle(0)  # removing support 0 leaves group [1] -> [0]
    assert s.case.obj["required_support_groups"] == [[0]]


def test_save_rewrites_only_edited_cases_and_drops_the_auto_mark(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.toggle(2)
    s.next()  # "c": visited, not edited
    assert s.save() == tmp_path / "set.jsonl"
    lines = (tmp_path / "set.jsonl").read_bytes().splitlines(keepends=True)
    assert lines[1:] == LINES[1:]
    assert json.loads(lines[0]) == {"id": "a", "question": "Which port does the home server use?", "answerable": True, "gold_supports": [{"rel_path": "docs/Other.md", "heading_path": "# Other"}]}
    assert s.save() is None and not s.dirty


def test_navigation_and_cursor_are_clamped(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.move(10)
    assert s.cursor == 2
    s.move(-10)
    assert s.cursor == 0
    assert s.prev() is False and s.next() is True and s.next() is False
    assert s.case.chunks is None  # "c" not retrieved yet: its own cache


def test_choose_cases_unlabeled_first_then_all_and_filters(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(LINES))
    assert choose_cases(path) == ["a", "c"]
    assert choose_cases(path, all_cases=True) == ["a", "c", "b"]
    assert choose_cases(path, ids=["b", "a"]) == ["b", "a"]
    assert choose_cases(path, all_cases=True, category=["general"]) == ["c", "b"]
    assert choose_cases(path, tag=["t1"]) == ["c"]
    with pytest.raises(BadConfig, match="no case with id 'zz'"):
        choose_cases(path, ids=["zz"])


def test_open_session_refuses_a_frozen_file_and_suggests_a_new_version(tmp_path: Path) -> None:

    from evalkit.evalset.lock import lock_eval_set

    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(LINES))
    lock_eval_set(path, "20250101T000000Z-abcdef")
    with pytest.raises(BadConfig, match=r"baselined .*--output .*set\.v2\.jsonl"):
        open_session(path, results_dir=tmp_path / "results")
    s = open_session(path, results_dir=tmp_path / "results", output=tmp_path / "set.v2.jsonl")
    assert s.case_ids == ["a", "c"]
