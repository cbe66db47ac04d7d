"""The Markdown reader (issue 26 item 1): CommonMark structure plus Obsidian's comments,
callouts, front matter and wikilinks, with line numbers into the file.

Notes are written with their line numbers beside them; every expectation is read off those
numbers by hand. Real notes from the shared corpora are in test_real_notes.py.
"""

from __future__ import annotations

import pytest

from evalkit.evalset.anchors import normalize_heading_path
from evalkit.notes.markdown import Callout, Comment, FrontMatter, WikiLink, read_note, split_lines
from evalkit.reference.chunker import chunk_markdown


def _headings(text: str) -> list[tuple[int, str]]:
    return [(h.line, h.path) for h in read_note(text).headings]


# ---------------------------------------------------------------- code


def test_inline_code_holding_percent_percent_opens_no_comment() -> None:
    # regression: issue 26, a `%%` in a code span hid every later heading
    note = (
        "# A\n"  # 1
        "| Situation | Obsidian |\n"  # 2
        "| --- | --- |\n"  # 3
        "| Tag-like text in `%%` comments | Ignored |\n"  # 4  a table cell
        "Text with `%%` in code and ``a %% b`` too.\n"  # 5
        "## B\n"  # 6
    )
    n = read_note(note)
    assert n.comments == () and n.comment_lines == frozenset()
    assert _headings(note) == [(1, "# A"), (6, "# A > ## B")]


@pytest.mark.parametrize("fence", ["```", "~~~", "````"])
def test_fenced_code_holds_no_heading_and_no_comment(fence: str) -> None:
    note = (
        "# A\n"  # 1
        f"{fence}bash\n"  # 2
        "# not a heading\n"  # 3
        "%% not a comment\n"  # 4
        "\n"  # 5  a blank line inside the fence
        f"{fence}\n"  # 6
        "## B\n"  # 7
        "%% a real comment %%\n"  # 8
    )
    n = read_note(note)
    assert _headings(note) == [(1, "# A"), (7, "# A > ## B")]
    assert n.code_lines == frozenset({2, 3, 4, 5, 6})
    assert n.comments == (Comment(8, 8),) and n.comment_lines == frozenset({8})


def test_a_shorter_or_other_fence_does_not_close_a_fence() -> None:
    note = "# A\n````\n```\n# inside\n~~~~\n````\n# B\n"  # lines 2-6 are one code block
    assert _headings(note) == [(1, "# A"), (7, "# B")]
    assert read_note(note).code_lines == frozenset(range(2, 7))


def test_unclosed_fence_runs_to_the_end() -> None:
    n = read_note("# A\n\n```\ncode\n# B\n")
    assert [h.path for h in n.headings] == ["# A"] and n.code_lines == frozenset({3, 4, 5})


def test_indented_code_holds_no_heading() -> None:
    note = (
        "# A\n"  # 1
        "\n"  # 2
        "    ## Tasks\n"  # 3  indented code (4 spaces)
        "    ```tasks\n"  # 4
        "\n"  # 5  blank inside the code block
        "\t# tab-indented\n"  # 6
        "\n"  # 7
        "## B\n"  # 8
    )
    n = read_note(note)
    assert _headings(note) == [(1, "# A"), (8, "# A > ## B")]
    assert n.code_lines == frozenset({3, 4, 5, 6})


def test_four_spaces_after_a_paragraph_continue_it_and_are_no_code() -> None:
    n = read_note("# A\ntext\n    # continued\n")  # CommonMark: no indented code interrupts a paragraph
    assert n.code_lines == frozenset() and [h.line for h in n.headings] == [1]


# ---------------------------------------------------------------- HTML


def test_html_blocks_hold_no_heading() -> None:
    note = (
        "# A\n"  # 1
        "<!--\n"  # 2  HTML block (comment): runs to the line with -->
        "# nope\n"  # 3
        "\n"  # 4
        "## nope either\n"  # 5
        "-->\n"  # 6
        "<details>\n"  # 7  HTML block (block tag): runs to a blank line
        "# not a heading\n"  # 8
        "</details>\n"  # 9
        "\n"  # 10
        "## B\n"  # 11
    )
    assert _headings(note) == [(1, "# A"), (11, "# A > ## B")]


def test_an_html_comment_inside_a_paragraph_is_inline_and_a_heading_ends_the_paragraph() -> None:
    # CommonMark: `<!--` after text starts no HTML block, and an ATX heading interrupts a paragraph
    assert _headings("# A\ntext <!-- c\n# B\n-->\n") == [(1, "# A"), (3, "# B")]


# ---------------------------------------------------------------- headings


def test_setext_headings() -> None:
    note = (
        "Title\n"  # 1
        "=====\n"  # 2  level 1
        "\n"  # 3
        "Part one\n"  # 4
        "of two lines\n"  # 5
        "---\n"  # 6  level 2: the paragraph above is its text
        "Body.\n"  # 7
        "### Three ###\n"  # 8
    )
    n = read_note(note)
    got = [(h.level, h.text, h.line, h.end_line, h.setext) for h in n.headings]
    assert got == [(1, "Title", 1, 2, True), (2, "Part one of two lines", 4, 6, True), (3, "Three", 8, 8, False)]
    assert [h.path for h in n.headings] == ["# Title", "# Title > ## Part one of two lines", "# Title > ## Part one of two lines > ### Three"]
    assert [(s.start_line, s.end_line) for s in n.sections] == [(1, 3), (4, 7), (8, 8)]


@pytest.mark.parametrize(
    ("line", "path"),
    [
        pytest.param("# Title", "# Title", id="h1"),
        pytest.param("   ### Three spaces", "### Three spaces", id="3-spaces"),
        pytest.param("#NoSpace", None, id="tag-not-heading"),
        pytest.param("####### seven", None, id="seven-hashes"),
        pytest.param("## Closing ##  ", "## Closing", id="closing-run"),
        pytest.param("## C#", "## C#", id="hash-in-word"),
        pytest.param("## Esc \\#", "## Esc \\#", id="escaped-hash-kept"),
        pytest.param("#\tTab", "# Tab", id="tab"),
        pytest.param("##   Many   spaces  ", "## Many spaces", id="collapsed"),
        pytest.param("#", "#", id="empty"),
        pytest.param("> # quoted", None, id="blockquote"),
        pytest.param("- # in a list", None, id="list-item"),
    ],
)
def test_atx_headings_and_their_paths(line: str, path: str | None) -> None:
    n = read_note(f"{line}\nbody\n")
    assert [h.path for h in n.headings] == ([path] if path else [])


def test_paths_are_in_the_normal_form_and_pop_at_each_level() -> None:
    note = "## B first\n# A\n### C\n## D\n#### E\n# F\n"
    paths = [h.path for h in read_note(note).headings]
    assert paths == ["## B first", "# A", "# A > ### C", "# A > ## D", "# A > ## D > #### E", "# F"]
    assert all(normalize_heading_path(p) == p for p in paths)


# ---------------------------------------------------------------- front matter


def test_front_matter_is_read_and_parsed_as_blank_lines() -> None:
    note = (
        "---\n"  # 1
        "title: x\n"  # 2
        "# yaml comment\n"  # 3  not a heading
        "---\n"  # 4
        "# A\n"  # 5
    )
    n = read_note(note)
    assert n.front_matter == FrontMatter(1, 4, "title: x\n# yaml comment") and n.body_start == 5
    assert _headings(note) == [(5, "# A")]
    assert n.section_at(2) is None and n.section_at(5).path == "# A"


def test_front_matter_may_close_with_dots() -> None:
    assert read_note("---\na: 1\n...\nText\n").front_matter == FrontMatter(1, 3, "a: 1")


def test_unclosed_front_matter_is_a_thematic_break_and_text() -> None:
    n = read_note("---\nnot: closed\n# H\nbody\n")
    assert n.front_matter is None and [(s.path, s.start_line) for s in n.sections] == [("", 1), ("# H", 3)]


def test_a_later_thematic_break_is_no_front_matter_but_text_above_it_is_a_setext_heading() -> None:
    note = (
        "Intro\n"  # 1
        "\n"  # 2
        "---\n"  # 3  thematic break (a blank line above it)
        "\n"  # 4
        "Becomes a heading\n"  # 5
        "---\n"  # 6  CommonMark: a setext underline, level 2
        "text\n"  # 7
    )
    n = read_note(note)
    assert n.front_matter is None
    assert _headings(note) == [(5, "## Becomes a heading")]


def test_front_matter_only_on_the_first_line() -> None:
    assert read_note("\n---\na: 1\n---\n").front_matter is None


# ---------------------------------------------------------------- lists


def test_nested_lists_hold_no_section_heading_and_their_code_is_code() -> None:
    note = (
        "# A\n"  # 1
        "- item\n"  # 2
        "    - nested\n"  # 3
        "        ```bash\n"  # 4  a fence inside the nested item
        "        # comment, not a heading\n"  # 5
        "        %% not a comment\n"  # 6
        "        ```\n"  # 7
        "    - # a heading inside a list item\n"  # 8  not a section
        "1. ordered\n"  # 9
        "   ```\n"  # 10
        "   ## also code\n"  # 11
        "   ```\n"  # 12
        "## B\n"  # 13
    )
    n = read_note(note)
    assert _headings(note) == [(1, "# A"), (13, "# A > ## B")]
    assert n.code_lines == frozenset({4, 5, 6, 7, 10, 11, 12})
    assert n.comments == ()


# ---------------------------------------------------------------- comments


def test_block_comment_hides_its_headings() -> None:
    note = (
        "# A\n"  # 1
        "Text.\n"  # 2
        "%%\n"  # 3
        "#### Duplicate ids\n"  # 4  inside the comment: no section
        "\n"  # 5
        "Draft.\n"  # 6
        "%%\n"  # 7
        "## B\n"  # 8
    )
    n = read_note(note)
    assert _headings(note) == [(1, "# A"), (8, "# A > ## B")]
    assert n.comments == (Comment(3, 7),) and n.comment_lines == frozenset(range(3, 8))


def test_inline_comments_leave_the_line_text() -> None:
    note = (
        "# A %%note%%\n"  # 1  a comment inside a heading: still a heading
        "Before %%hidden%% after, %%2%%TODO.\n"  # 2  two inline comments
        "Starts here %%\n"  # 3  opens
        "wholly hidden\n"  # 4
        "%% ends here\n"  # 5  closes
        "%%whole line%%\n"  # 6
    )
    n = read_note(note)
    assert [h.path for h in n.headings] == ["# A %%note%%"]  # text kept as written: ids hash it
    assert n.comments == (Comment(1, 1), Comment(2, 2), Comment(2, 2), Comment(3, 5), Comment(6, 6))
    assert n.comment_lines == frozenset({4, 6})


def test_unclosed_comment_runs_to_the_end() -> None:
    n = read_note("# A\n%%\n# B\ntext\n")
    assert [h.path for h in n.headings] == ["# A"]
    assert n.comments == (Comment(2, 4, closed=False),) and n.comment_lines == frozenset({2, 3, 4})


def test_comment_markers_in_code_html_and_escapes_do_not_count() -> None:
    note = (
        "# A\n"  # 1
        "<!-- %% -->\n"  # 2  HTML block
        "Inline <span title='%%'>x</span> and \\%% escaped.\n"  # 3
        "```\n%%\n```\n"  # 4-6
        "## B\n"  # 7
    )
    n = read_note(note)
    assert n.comments == () and _headings(note) == [(1, "# A"), (7, "# A > ## B")]


def test_a_comment_spanning_a_fence_hides_the_heading_after_it() -> None:
    note = "# A\n%% start\n```\n%% in code\n```\n## Hidden\nend %%\n## B\n"
    n = read_note(note)
    assert [h.line for h in n.headings] == [1, 8] and n.comments == (Comment(2, 7),)


# ---------------------------------------------------------------- callouts and wikilinks


def test_callouts() -> None:
    note = (
        "# A\n"  # 1
        "> [!note] Navigation\n"  # 2
        "> ### Basics\n"  # 3  a heading inside a callout: not a section
        "> text\n"  # 4
        "\n"  # 5
        "> [!Warning]- Folded title\n"  # 6
        "> > [!tip]\n"  # 7  nested
        "> > inner\n"  # 8
        "\n"  # 9
        "> plain quote\n"  # 10 not a callout
    )
    n = read_note(note)
    assert [h.line for h in n.headings] == [1]
    assert n.callouts == (
        Callout("note", "Navigation", "", 2, 4),
        Callout("warning", "Folded title", "-", 6, 8),
        Callout("tip", "", "", 7, 8),
    )
    assert read_note("> # [!note] a heading, not a callout\n").callouts == ()


def test_wikilinks() -> None:
    note = (
        "See [[Getting Started]] and [[Tags#Recognising Tags|tags]].\n"  # 1
        "![[diagram.png]] and [[#Local heading]]\n"  # 2
        "| [[Note\\|alias]] | `[[in code]]` |\n"  # 3  a table row
        "|---|---|\n"  # 4
        "%% [[commented]] %%\n"  # 5
        "```\n[[fenced]]\n```\n"  # 6-8
        "[[ ]] [[unclosed\n"  # 9 nothing
    )
    assert read_note(note).wikilinks == (
        WikiLink("Getting Started", None, None, 1),
        WikiLink("Tags", "Recognising Tags", "tags", 1),
        WikiLink("diagram.png", None, None, 2, embed=True),
        WikiLink("", "Local heading", None, 2),
        WikiLink("Note", None, "alias", 3),
    )


# ---------------------------------------------------------------- lines and sections


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xef\xbb\xbf# A\r\nx\r\n# B\r\n", id="bom-crlf"),
        pytest.param(b"# A\nx\rstill line 2\n# B\n", id="lone-cr"),
        pytest.param(b"# A\nx\x00\x0c\xe2\x80\xa8\xff\n# B", id="nul-ff-u2028-bad-byte-no-final-newline"),
    ],
)
def test_line_numbers_are_the_files(data: bytes) -> None:
    n = read_note(data)
    assert n.n_lines == 3 and [h.line for h in n.headings] == [1, 3]
    assert len(split_lines(data)) == 3


def test_sections_cover_every_body_line_and_section_at_finds_them() -> None:
    note = "---\na: 1\n---\nIntro\n# A\ntext\n## B\n\n"
    n = read_note(note)
    assert [(s.path, s.start_line, s.end_line) for s in n.sections] == [("", 4, 4), ("# A", 5, 6), ("# A > ## B", 7, 8)]
    assert [n.section_at(i).path if n.section_at(i) else None for i in range(1, 10)] == [
        None, None, None, "", "# A", "# A", "# A > ## B", "# A > ## B", None,
    ]
    # no text before the first heading: no "" section
    assert [s.path for s in read_note("# A\n").sections] == ["# A"]
    assert read_note("").sections == () and read_note("").n_lines == 0


# ---------------------------------------------------------------- the chunker reads through it


def test_the_chunker_follows_the_reader() -> None:
    note = (
        "# A\n"  # 1
        "Text with `%%` inside code.\n"  # 2
        "\n"  # 3
        "Setext B\n"  # 4
        "--------\n"  # 5
        "Body of B.\n"  # 6
        "\n"  # 7
        "Empty C\n"  # 8
        "=======\n"  # 9  a level-1 heading with nothing under it
    )
    doc = chunk_markdown(note.encode(), "n.md")
    assert [(c.heading_path, c.start_line, c.end_line) for c in doc.chunks] == [
        ("# A", 1, 2),
        ("# A > ## Setext B", 4, 6),
    ]
    assert [(s.heading_path, s.start_line, s.end_line, s.reason) for s in doc.skipped] == [("# Empty C", 8, 9, "empty")]



def test_llm_generation_reads_sections_and_links_through_the_reader() -> None:
    # By hand: the setext heading's two lines are the heading, not body words; a link in
    # inline code or a %% comment is no link (evalkit.authoring.generate_llm).
    from evalkit.authoring.sections import note_sections, parse_wikilinks
    from evalkit.evalset.anchorcheck import outline_note

    text = b"Title\n=====\n\nIntro words here.\n\nSub\n---\n\none two\n"
    sections = note_sections("n.md", outline_note(text, "n.md"))
    assert [(s.chain, s.body_words) for s in sections] == [(("# Title",), 3), (("# Title", "## Sub"), 2)]
    links = parse_wikilinks("a [[T#H|x]] `[[no]]`\n%% [[hidden]] %%\n[[Z]]", first_line=10)
    assert [(w.target, w.heading, w.alias, w.line) for w in links] == [("T", "H", "x", 10), ("Z", None, None, 12)]
