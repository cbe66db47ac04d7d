"""The Markdown reader on real notes written by others: the Tasks plugin's user guide
(../shared/corpora/obsidian-tasks, SOURCE.md there). Line numbers below were read off the
files; the whole module is skipped when the shared corpora are absent."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.evalset.anchorcheck import check_anchors, corpus_from_vault, outline_note
from evalkit.evalset.anchors import normalize_heading_path
from evalkit.notes.markdown import Callout, Comment, WikiLink, read_note
from evalkit.reference.chunker import chunk_markdown

ROOT = Path(__file__).resolve().parents[3]
TASKS = ROOT.parent / "shared" / "corpora" / "obsidian-tasks" / "vault"

if not TASKS.is_dir():
    pytest.skip(f"shared corpora not present ({TASKS})", allow_module_level=True)

TAGS = "Getting Started/Tags.md"
RECOGNISING = "# Tags > ## Tasks and your task lines > ### Recognising Tags"
YAML = "# Tags > ## Tasks and your task lines > ### Using tags in YAML, Frontmatter or file Properties"
ORDER = "# Tags > ## Tasks and your task lines > ### Order of tags in task lines"


def _read(rel: str):
    return read_note((TASKS / rel).read_bytes())


# ---------------------------------------------------------------- issue 26: Tags.md


def test_tags_heading_after_percent_percent_in_inline_code_is_found() -> None:
    # regression: issue 26, line 52's table cell "Tag-like text in `%%` comments" opened a
    # comment that hid every later heading (line 55 first)
    n = _read(TAGS)
    assert "`%%`" in n.lines[52 - 1] and n.comments == ()
    assert (55, YAML) in [(h.line, h.path) for h in n.headings]
    # by hand, from the file: lines 50-100 and the sections they are in
    expected = {**{i: RECOGNISING for i in range(50, 55)}, **{i: YAML for i in range(55, 78)},
                **{i: ORDER for i in range(78, 85)}, **{i: "# Tags > ## Limitations" for i in range(85, 94)},
                **{i: "# Tags > ## Tags and the Global Filter" for i in range(94, 100)},
                100: "# Tags > ## Related Tasks Block Instructions"}
    assert {i: n.section_at(i).path for i in range(50, 101)} == expected


def test_tags_front_matter_example_in_a_fence_is_code() -> None:
    n = _read(TAGS)
    # lines 63-68: "```text / --- / tags: / ... / --- / ```": no front matter, break or heading
    assert n.lines[64 - 1] == "---" and {63, 64, 68, 69} <= n.code_lines
    assert n.front_matter is not None and n.front_matter.end_line == 3


def test_the_reference_chunker_labels_tags_lines_50_to_100_with_their_headings() -> None:
    doc = chunk_markdown((TASKS / TAGS).read_bytes(), TAGS)
    got = [(c.heading_path, c.start_line, c.end_line) for c in doc.chunks if c.end_line >= 50 and c.start_line <= 100]
    assert got == [
        (RECOGNISING, 50, 53),
        (YAML, 55, 76),
        (ORDER, 78, 83),
        ("# Tags > ## Limitations", 85, 92),
        ("# Tags > ## Tags and the Global Filter", 94, 98),
        ("# Tags > ## Related Tasks Block Instructions", 100, 119),
    ]


def _tags_case() -> dict:
    return {"id": "tags-yaml", "question": "How do I put tags in YAML frontmatter properties?", "answerable": True,
            "gold_supports": [{"rel_path": TAGS, "heading_path": YAML,
                               "snippets": ["These properties are also referred to as Frontmatter or YAML"]}]}


def test_validate_vault_finds_the_tags_heading(tmp_path: Path) -> None:
    assert check_anchors([_tags_case()], corpus_from_vault(TASKS)) == []
    assert outline_note((TASKS / TAGS).read_bytes(), TAGS).spans[tuple(YAML.split(" > "))] == (55, 76)
    from evalkit.cli.main import app

    eval_set = tmp_path / "eval.jsonl"
    eval_set.write_text(json.dumps(_tags_case() | {"category": "factual"}) + "\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["validate", "--eval-set", str(eval_set), "--vault", str(TASKS)])
    assert res.exit_code == 0, res.output
    assert "all found" in res.output


def test_the_reference_chatbot_retrieves_the_tags_section_under_its_heading() -> None:
    from evalkit.reference.chatbot import ReferenceChatbot, ReferenceConfig

    bot = ReferenceChatbot(TASKS, config=ReferenceConfig())
    chunks = bot.ask({"question": _tags_case()["question"], "k": 5})["debug"]["retrieved_chunks"]
    hits = [c for c in chunks if c["rel_path"] == TAGS and c["start_line"] <= 76 and c["end_line"] >= 55]
    assert hits and all(c["heading_path"] == YAML for c in hits)


# ---------------------------------------------------------------- other real notes


def test_block_comment_hides_a_heading() -> None:
    # lines 83-91 are `%%` ... `%%` around "#### Duplicate `id` values" (line 84)
    n = _read("Getting Started/Task Dependencies.md")
    assert n.comments == (Comment(83, 91),) and n.comment_lines == frozenset(range(83, 92))
    assert n.lines[84 - 1] == "#### Duplicate `id` values"
    assert all(h.line != 84 for h in n.headings)
    assert n.section_at(84).path == "# Task Dependencies > ## Defining dependencies > ### `id`"  # from line 63


def test_inline_comments_in_table_cells() -> None:
    # line 131: "| Name for `group by status.type` | %%2%%TODO | %%1%%IN_PROGRESS | ..." six comments
    n = _read("Getting Started/Statuses/Status Types.md")
    assert n.comments == (Comment(131, 131),) * 6 and n.comment_lines == frozenset()


def test_a_comment_around_a_fence_and_html_comments() -> None:
    # line 114 "%% ----" opens; 117 and 130 HTML comments; 118-129 a ```text fence; 131 "---- %%" closes
    n = _read("Scripting/Placeholders.md")
    assert n.comments == (Comment(114, 131),) and n.comment_lines == frozenset(range(114, 132))
    assert set(range(118, 130)) <= n.code_lines


def test_percent_percent_only_in_code_makes_no_comment() -> None:
    # Grouping.md has `%%` in ```javascript fences and in inline code (`[%%]`, `2023%%-05%% May`)
    n = _read("Queries/Grouping.md")
    assert sum("%%" in ln for ln in n.lines) >= 20 and n.comments == ()


def test_headings_in_an_html_comment_are_not_headings() -> None:
    # lines 77-107 are an HTML comment holding "# Manually testing views" (93) and two "##"
    n = _read("Queries/Views.md")
    assert [h.line for h in n.headings] == [5, 18, 29, 46, 50]


def test_indented_code_holds_no_heading() -> None:
    # lines 34-63: an indented (4-space) template whose first line is "    ## Tasks"
    n = _read("Advanced/Daily Agenda.md")
    assert n.lines[34 - 1] == "    ## Tasks" and set(range(34, 64)) <= n.code_lines
    assert [h.line for h in n.headings] == [5, 32, 65, 67]


def test_callout_with_headings_inside() -> None:
    # lines 11-33: "> [!Info] Navigation" with "> ### Basics" and others inside: not sections
    n = _read("Introduction.md")
    assert n.callouts == (Callout("info", "Navigation", "", 11, 33),)
    assert [h.line for h in n.headings] == [5, 7, 35, 43]


def test_fences_in_a_callout_and_in_a_list_item() -> None:
    assert set(range(22, 33)) <= _read("Getting Started/Getting Started.md").code_lines  # "> ```text" ... "> ```"
    assert set(range(300, 304)) <= _read("Getting Started/Obsidian Properties.md").code_lines  # "    ```javascript" in "1."


def test_wikilinks_of_a_real_note() -> None:
    links = _read(TAGS).wikilinks
    assert links[0] == WikiLink("", "Recognising Tags", None, 32)
    assert WikiLink("Obsidian Properties", None, None, 75) in links


# ---------------------------------------------------------------- the whole vault


def test_heading_counts_match_source_md_but_for_the_commented_one() -> None:
    # SOURCE.md counts 105 H1, 505 H2, 411 H3, 60 H4, 2 H5 outside code fences and HTML
    # comments; one H4 (Task Dependencies.md line 84) sits inside a %% comment
    levels = Counter(h.level for p in TASKS.rglob("*.md") for h in read_note(p.read_bytes()).headings)
    assert dict(levels) == {1: 105, 2: 505, 3: 411, 4: 60 - 1, 5: 2}


def test_every_note_sections_tile_the_body_and_chunks_agree() -> None:
    for p in sorted(TASKS.rglob("*.md")):
        data = p.read_bytes()
        n = read_note(data)
        spans = [(s.start_line, s.end_line) for s in n.sections]
        assert spans[0][0] == n.body_start and spans[-1][1] == n.n_lines, p
        assert all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:], strict=False)), p
        assert all(normalize_heading_path(h.path) == h.path for h in n.headings), p
        for c in chunk_markdown(data, p.name, note=n).chunks:
            assert n.section_at(c.start_line).path == n.section_at(c.end_line).path == c.heading_path, (p, c)
