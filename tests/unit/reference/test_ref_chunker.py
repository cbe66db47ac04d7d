"""Chunker: heading paths, line numbers, byte offsets, budgets, skip reasons, stable ids."""

from __future__ import annotations

import hashlib

import pytest

from evalkit.reference.chunker import ChunkerConfig, chunk_id, chunk_markdown
from evalkit.reference.tokens import count_tokens

# Line numbers are written next to each line; expectations below are read off them by hand.
NOTE = (
    "---\n"  # 1  front matter
    "title: Sample\n"  # 2
    "tags: [a, b]\n"  # 3
    "---\n"  # 4
    "Intro line before any heading.\n"  # 5  -> heading_path ""
    "\n"  # 6
    "# Alpha\n"  # 7
    "\n"  # 8
    "Alpha body text here.\n"  # 9
    "\n"  # 10
    "## Beta  Two\n"  # 11 whitespace collapses to "Beta Two"
    "Beta body.\n"  # 12
    "\n"  # 13
    "````text\n"  # 14 a 4-backtick fence...
    "# not a heading\n"  # 15
    "```\n"  # 16 ...that 3 backticks do not close
    "````\n"  # 17
    "\n"  # 18
    "<!--\n"  # 19
    "# nope\n"  # 20 inside an HTML comment
    "-->\n"  # 21
    "#NoSpace is a tag, not a heading\n"  # 22 CommonMark: no space, no heading
    "\n"  # 23
    "### Gamma ###\n"  # 24 closing hashes dropped
    "Gamma body.\n"  # 25
    "\n"  # 26
    "#### Delta\n"  # 27 depth 4
    "Delta body.\n"  # 28
    "\n"  # 29
    "## Epsilon\n"  # 30 pops Gamma and Delta
    "Epsilon body.\n"  # 31
    "%%\n"  # 32 Obsidian comment
    "## hidden\n"  # 33
    "%%\n"  # 34
    "~~~\n"  # 35 tilde fence
    "## tilde not heading\n"  # 36
    "~~~\n"  # 37
    "# Zeta\n"  # 38 only a sub-heading below: structure, no chunk
    "\n"  # 39
    "## Empty leaf\n"  # 40 nothing under it: skipped as empty
)

EXPECTED = [  # (heading_path, start_line, end_line, first text, last text)
    ("", 5, 5, "Intro line", "any heading."),
    ("# Alpha", 7, 9, "# Alpha", "text here."),
    ("# Alpha > ## Beta Two", 11, 22, "## Beta  Two", "not a heading"),
    ("# Alpha > ## Beta Two > ### Gamma", 24, 25, "### Gamma ###", "Gamma body."),
    ("# Alpha > ## Beta Two > ### Gamma > #### Delta", 27, 28, "#### Delta", "Delta body."),
    ("# Alpha > ## Epsilon", 30, 37, "## Epsilon", "~~~"),
]


def test_heading_paths_and_lines_match_hand_written_expectations() -> None:
    doc = chunk_markdown(NOTE.encode(), "notes/n.md")
    got = [(c.heading_path, c.start_line, c.end_line) for c in doc.chunks]
    assert got == [e[:3] for e in EXPECTED]
    for c, (_, _, _, head, tail) in zip(doc.chunks, EXPECTED, strict=True):
        assert c.text.startswith(head) and c.text.endswith(tail)
    assert [(s.heading_path, s.start_line, s.reason) for s in doc.skipped] == [("# Zeta > ## Empty leaf", 40, "empty")]


def test_offsets_point_into_the_original_file() -> None:
    data = NOTE.encode()
    doc = chunk_markdown(data, "n.md")
    # by hand: the intro starts right after the 4 front-matter lines
    assert doc.chunks[0].start_byte == len("---\ntitle: Sample\ntags: [a, b]\n---\n")
    for c in doc.chunks:
        assert data[c.start_byte : c.end_byte].decode() == c.text
        lines = NOTE.split("\n")
        assert lines[c.start_line - 1] == c.text.split("\n")[0]
        assert lines[c.end_line - 1] == c.text.split("\n")[-1]
        assert c.token_count == count_tokens(c.text)


def test_chunk_id_is_option_a_hash() -> None:
    c = chunk_markdown(NOTE.encode(), "n.md", vault_id="v1").chunks[1]
    key = f"v1|n.md|# Alpha|{c.start_byte}|{c.end_byte}|{c.text}"
    assert c.chunk_id == hashlib.sha256(key.encode()).hexdigest()[:32]
    assert c.chunk_id == chunk_id("v1", "n.md", "# Alpha", c.start_byte, c.end_byte, c.text)
    assert len(c.chunk_id) == 32 and int(c.chunk_id, 16) >= 0


def test_ids_are_stable_and_depend_on_vault_and_path() -> None:
    a = [c.chunk_id for c in chunk_markdown(NOTE.encode(), "n.md").chunks]
    b = [c.chunk_id for c in chunk_markdown(NOTE.encode(), "n.md").chunks]
    assert a == b and len(set(a)) == len(a)
    assert set(a).isdisjoint(c.chunk_id for c in chunk_markdown(NOTE.encode(), "m.md").chunks)
    assert set(a).isdisjoint(c.chunk_id for c in chunk_markdown(NOTE.encode(), "n.md", vault_id="x").chunks)


def test_crlf_and_bom_keep_the_same_structure() -> None:
    data = b"\xef\xbb\xbf" + NOTE.replace("\n", "\r\n").encode()
    doc = chunk_markdown(data, "n.md")
    assert [(c.heading_path, c.start_line, c.end_line) for c in doc.chunks] == [e[:3] for e in EXPECTED]
    for c in doc.chunks:
        assert data[c.start_byte : c.end_byte].decode() == c.text
        assert not c.text.endswith("\r")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("# Title", "# Title", id="h1"),
        pytest.param("   ### Indented three", "### Indented three", id="3-spaces-ok"),
        pytest.param("    # four spaces is code", None, id="4-spaces-code"),
        pytest.param("#NoSpace", None, id="no-space-is-a-tag"),
        pytest.param("####### seven", None, id="seven-hashes"),
        pytest.param("## Closing ##  ", "## Closing", id="closing-seq"),
        pytest.param("## C#", "## C#", id="hash-in-word-kept"),
        pytest.param("#\tTab", "# Tab", id="tab-separator"),
        pytest.param("> # quoted", None, id="blockquote"),
    ],
)
def test_atx_heading_rules(line: str, expected: str | None) -> None:
    doc = chunk_markdown(f"{line}\nbody text here\n".encode(), "h.md")
    assert doc.chunks[0].heading_path == (expected or "")


def test_unclosed_fence_hides_later_headings_commonmark() -> None:
    doc = chunk_markdown(b"# A\n\n```\ncode\n# B\n", "f.md")
    assert [c.heading_path for c in doc.chunks] == ["# A"]


def test_backtick_fence_info_with_backtick_is_not_a_fence() -> None:
    doc = chunk_markdown(b"# A\n\n``` a`b\n# B\nbody\n", "f.md")
    assert [c.heading_path for c in doc.chunks] == ["# A", "# B"]


def test_inline_comment_closing_on_the_same_line_does_not_hide_headings() -> None:
    doc = chunk_markdown(b"# A\ntext <!-- c --> more\n# B\nbody\n", "f.md")
    assert [c.heading_path for c in doc.chunks] == ["# A", "# B"]


def test_unclosed_front_matter_is_text() -> None:
    doc = chunk_markdown(b"---\nnot: closed\n# H\nbody\n", "f.md")
    assert [(c.heading_path, c.start_line) for c in doc.chunks] == [("", 1), ("# H", 3)]


def test_note_without_headings_is_whole_file_scope() -> None:
    doc = chunk_markdown(b"first paragraph here\n\nsecond paragraph\n", "plain.md")
    assert [(c.heading_path, c.start_line, c.end_line) for c in doc.chunks] == [("", 1, 3)]


@pytest.mark.parametrize("data", [b"", b"\n\n  \n", b"---\ntitle: x\n---\n", b"---\na: 1\n---\n\n\n"])
def test_empty_note_gives_no_chunks(data: bytes) -> None:
    doc = chunk_markdown(data, "e.md")
    assert doc.chunks == [] and doc.skipped == []


def test_too_small() -> None:
    doc = chunk_markdown(b"ok\n", "s.md")
    assert doc.chunks == [] and [s.reason for s in doc.skipped] == ["too_small"]
    # two tokens is enough for a tiny note (min_tokens=2)
    assert len(chunk_markdown(b"Buy milk\n", "s.md").chunks) == 1


def test_long_section_splits_on_paragraphs_under_the_budget() -> None:
    paragraph = " ".join(f"word{i}" for i in range(20))  # 20 tokens
    body = "\n\n".join(f"P{n} {paragraph}." for n in range(30))  # each paragraph: 20 + 2 = 22 tokens
    data = f"# Long\n\n{body}\n".encode()
    cfg = ChunkerConfig(max_tokens=64)
    doc = chunk_markdown(data, "long.md", config=cfg)
    assert len(doc.chunks) > 5 and not doc.skipped
    assert {c.heading_path for c in doc.chunks} == {"# Long"}
    assert all(c.token_count <= 64 for c in doc.chunks)
    # by hand: "# Long" (2) + two paragraphs (44) fit in 64, a third (66) does not
    assert doc.chunks[0].token_count == 2 + 22 + 22
    # every paragraph lands whole in exactly one chunk, in order, with no overlap
    for n in range(30):
        assert sum(f"P{n} word0" in c.text and f"P{n} {paragraph}." in c.text for c in doc.chunks) == 1
    for a, b in zip(doc.chunks, doc.chunks[1:], strict=False):
        assert a.end_byte < b.start_byte and a.end_line < b.start_line


def test_one_huge_line_is_cut_into_token_windows() -> None:
    line = " ".join(f"w{i}" for i in range(1000))
    data = f"# Big\n\n{line}\n".encode()
    doc = chunk_markdown(data, "big.md", config=ChunkerConfig(max_tokens=100))
    assert all(c.token_count <= 100 for c in doc.chunks)
    # by hand: 2 heading tokens + 1000 words = 1002 tokens -> 10 full windows of 100 and one of 2;
    # the first window holds the heading and w0..w97
    assert [c.token_count for c in doc.chunks] == [100] * 10 + [2]
    assert doc.chunks[0].text.startswith("# Big\n\nw0 ") and doc.chunks[0].text.endswith(" w97")
    assert all(c.start_line == c.end_line == 3 for c in doc.chunks[1:])
    assert " ".join(c.text for c in doc.chunks[1:]).split() == line.split()[98:]
    for c in doc.chunks:
        assert data[c.start_byte : c.end_byte].decode() == c.text


def test_windows_respect_multibyte_offsets() -> None:
    line = " ".join("é✓" + str(i) for i in range(300))
    data = f"{line}\n".encode()
    doc = chunk_markdown(data, "u.md", config=ChunkerConfig(max_tokens=50))
    for c in doc.chunks:
        assert data[c.start_byte : c.end_byte].decode() == c.text


def test_a_token_over_the_byte_limit_is_skipped_as_context_limit_exceeded() -> None:
    data = ("# H\n\nsmall words here\n\n" + "x" * 300 + "\n\nafter words\n").encode()
    doc = chunk_markdown(data, "c.md", config=ChunkerConfig(max_tokens=50, max_chunk_bytes=100))
    assert [s.reason for s in doc.skipped] == ["context_limit_exceeded"]
    assert doc.skipped[0].start_line == 5
    assert [c.text for c in doc.chunks] == ["# H\n\nsmall words here", "after words"]


def test_editing_one_section_keeps_other_ids_of_the_note() -> None:
    before = chunk_markdown(NOTE.encode(), "n.md").chunks
    after = chunk_markdown(NOTE.replace("Epsilon body.", "Epsilon body, edited.").encode(), "n.md").chunks
    assert [c.chunk_id for c in before[:5]] == [c.chunk_id for c in after[:5]]
    assert before[5].chunk_id != after[5].chunk_id
