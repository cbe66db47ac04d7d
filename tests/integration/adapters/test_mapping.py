"""The adapters' mapping from a framework's chunk to a contract chunk, without any framework:
heading-path conversions of the frameworks' metadata, finding a chunk in its note (line
spans, the section it begins in), paths relative to the notes folder, stable unique ids,
and the install hint when an extra is missing. Expected values are written by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.adapters import langchain, llamaindex
from evalkit.adapters.base import Hit, contract_chunks
from evalkit.adapters.notes import Note, Notes, chunk_id, outline
from evalkit.evalset.anchors import match_support

# A note with the traps: front matter, a heading in a code fence, one in a %% comment, a
# `%%` inside a code span (no comment), an empty parent section, a repeated paragraph.
NOTE = """\
---
aliases: [x]
---
# Garden

Intro to the garden.

## Tomatoes

Water deeply. Uses `%%` in code.

```sh
# not a heading
```

### Pruning

Remove suckers.
Again and again.

%%
## Hidden
%%

## Beans
### Climbing

Water deeply. Uses `%%` in code.
See [the guide](https://example.org/beans) for more.
Last line.
"""
# Line numbers of NOTE, by hand: 4 "# Garden", 8 "## Tomatoes", 10 first "Water deeply",
# 13 "# not a heading", 16 "### Pruning", 18 "Remove suckers.", 19 "Again and again.",
# 22 "## Hidden" (in a comment), 25 "## Beans", 26 "### Climbing", 28 second "Water deeply",
# 29 "See [the guide]...", 30 "Last line."


# ---------------------------------------------------------------- the frameworks' metadata


def test_llamaindex_header_path_gets_levels_and_the_sections_own_heading() -> None:
    # MarkdownNodeParser: header_path "/A/B/" names the parents without levels; the node's
    # text starts with its own heading.
    assert llamaindex.heading_path_from_metadata("/Garden/Tomatoes/", "### Pruning\n\nRemove suckers.") == (
        "# Garden > ## Tomatoes > ### Pruning"
    )
    assert llamaindex.heading_path_from_metadata("/", "# Garden\n\nIntro") == "# Garden"
    assert llamaindex.heading_path_from_metadata("/", "---\naliases: [x]\n---") == ""
    # a sub-split piece of a section: its text does not start with the heading
    assert llamaindex.heading_path_from_metadata("/Garden/", "more text") == "# Garden"
    # a note that skips H2: parents cut to the levels above the own heading
    assert llamaindex.heading_path_from_metadata("/Garden/Tomatoes/", "## Beans\n") == "# Garden > ## Beans"
    assert llamaindex.heading_path_from_metadata("|A|B|", "### C", separator="|") == "# A > ## B > ### C"


def test_langchain_metadata_in_the_contract_form_with_levels_from_the_separators() -> None:
    headers = [("#", "Header 1"), ("##", "Header 2"), ("###", "Header 3")]
    meta = {"Header 1": "Garden", "Header 2": "Tomatoes", "Header 3": "Pruning", "source": "x.md"}
    assert langchain.heading_path_from_metadata(meta, headers) == "# Garden > ## Tomatoes > ### Pruning"
    # levels come from the separators, not from the names or the order given
    assert langchain.heading_path_from_metadata({"h2": "B", "h1": "A"}, [("##", "h2"), ("#", "h1")]) == "# A > ## B"
    assert langchain.heading_path_from_metadata({"Header 2": "B"}) == "## B"
    assert langchain.heading_path_from_metadata({"source": "x.md"}) == ""
    # custom separators (`**`) have no level: left out
    custom = [("**", "Bold"), ("#", "Header 1")]
    assert langchain.heading_path_from_metadata({"Bold": "B", "Header 1": "A"}, custom) == "# A"


def test_the_raw_header_path_matches_no_gold_and_the_converted_one_does() -> None:
    # The symptom: "/Garden/Tomatoes/" as heading_path scores 0 on every metric.
    gold = {"rel_path": "n.md", "heading_path": "# Garden > ## Tomatoes > ### Pruning"}
    raw = {"rel_path": "n.md", "heading_path": "/Garden/Tomatoes/"}
    converted = {**raw, "heading_path": llamaindex.heading_path_from_metadata(raw["heading_path"], "### Pruning")}
    assert not match_support(gold, raw)
    assert match_support(gold, converted)


# ---------------------------------------------------------------- the note's outline


def test_outline_reads_headings_as_evalkits_markdown_reader_does() -> None:
    out = outline(NOTE)
    assert out.starts == (4, 8, 16, 25, 26)  # not line 13 (code) nor 22 (comment)
    assert out.path_at(3) == ""  # front matter
    assert out.path_at(10) == "# Garden > ## Tomatoes"
    assert out.path_at(13) == "# Garden > ## Tomatoes"
    assert out.path_at(22) == "# Garden > ## Tomatoes > ### Pruning"
    assert out.path_at(28) == "# Garden > ## Beans > ### Climbing"
    assert out.is_heading(16) and not out.is_heading(13) and not out.is_heading(22)


# ---------------------------------------------------------------- finding a chunk in its note


def test_locate_at_the_frameworks_offset_or_by_its_text() -> None:
    note = Note("n.md", NOTE)
    section = "### Pruning\n\nRemove suckers.\nAgain and again."
    offset = NOTE.index(section)
    assert note.locate(section, char_start=offset) == (16, 19)
    assert note.locate(section) == (16, 19)
    assert note.locate("\n" + section + "\n\n") == (16, 19)  # surrounding whitespace
    assert note.locate(section, char_start=offset + 7) == (16, 19)  # a wrong offset is only a hint
    assert note.locate("not in the note") is None
    assert note.locate("   \n") is None


def test_locate_a_text_that_occurs_twice_by_the_metadata_then_the_offset() -> None:
    note = Note("n.md", NOTE)
    twice = "Water deeply. Uses `%%` in code."
    assert note.locate(twice) == (10, 10)  # the first
    assert note.locate(twice, heading_path="# Garden > ## Beans") == (28, 28)
    assert note.locate(twice, heading_path="/Garden/Beans/") == (10, 10)  # unreadable as a path: no help
    assert note.locate(twice, char_start=NOTE.rindex(twice) - 3) == (28, 28)  # nearest the offset


def test_locate_langchains_stripped_lines_and_dropped_headings() -> None:
    note = Note("n.md", NOTE)
    # MarkdownHeaderTextSplitter (strip_headers=True, lines stripped, joined by "  \n"), and
    # two sections with the same headers merged: the heading lines between are gone.
    assert note.locate("Remove suckers.  \nAgain and again.") == (18, 19)
    merged = "Water deeply. Uses `%%` in code.\nSee [the guide](https://example.org/beans) for more.  \nLast line."
    assert note.locate(merged) == (28, 30)
    assert note.locate("Intro to the garden.\nWater deeply. Uses `%%` in code.") == (6, 10)  # over "## Tomatoes"


def test_locate_a_chunk_cut_inside_its_first_and_last_lines() -> None:
    note = Note("n.md", NOTE)
    # a text splitter's window, from the middle of line 18 to the middle of line 19, whitespace changed
    assert note.locate("suckers.\n  Again and") == (18, 19)
    assert note.locate("Again and") == (19, 19)


def test_locate_a_rewritten_chunk_by_its_first_and_last_lines() -> None:
    # A reader that removes links (LlamaIndex's MarkdownReader does) leaves other lines alone.
    note = Note("n.md", NOTE)
    rewritten = "### Climbing\n\nWater deeply. Uses `%%` in code.\nSee the guide for more.\nLast line."
    assert note.locate(rewritten) == (26, 30)
    assert note.locate("### Climbing\n\nSee the guide for more.") == (26, None)  # the end was rewritten
    assert note.locate("See the guide for more.\nLast line.") is None  # the first line was rewritten
    assert note.locate("---\nrewritten") is None  # too short a first line to place a chunk by


def test_the_heading_path_is_the_section_where_the_text_begins() -> None:
    note = Note("n.md", NOTE)
    assert note.heading_path(8, 14) == "# Garden > ## Tomatoes"  # starts with its own heading
    assert note.heading_path(25, 30) == "# Garden > ## Beans > ### Climbing"  # an empty parent first
    assert note.heading_path(25, 26) == "# Garden > ## Beans > ### Climbing"  # headings only: the last
    assert note.heading_path(13, 13) == "# Garden > ## Tomatoes"  # a fake heading in code is text
    assert note.heading_path(1, 3) == ""
    assert note.heading_path(16, None) == "# Garden > ## Tomatoes > ### Pruning"


# ---------------------------------------------------------------- paths, ids, chunks


def test_rel_path_is_relative_to_the_notes_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes" / "Sub dir").mkdir(parents=True)
    (tmp_path / "notes" / "Sub dir" / "n.md").write_text(NOTE, encoding="utf-8")
    notes = Notes(tmp_path / "notes")
    assert notes.rel_path(tmp_path / "notes" / "Sub dir" / "n.md") == "Sub dir/n.md"
    assert notes.rel_path("Sub dir/n.md") == "Sub dir/n.md"  # already relative to the notes
    monkeypatch.chdir(tmp_path)
    assert notes.rel_path("notes/Sub dir/n.md") == "Sub dir/n.md"  # relative to the current directory
    assert notes.rel_path(str(tmp_path / "notes" / "Sub dir" / ".." / "Sub dir" / "n.md")) == "Sub dir/n.md"
    with pytest.raises(ValueError, match="not inside the notes folder"):
        notes.rel_path(tmp_path / "elsewhere.md")
    with pytest.raises(NotADirectoryError):
        Notes(tmp_path / "missing")


def test_contract_chunks_from_hits(tmp_path: Path) -> None:
    (tmp_path / "n.md").write_text(NOTE, encoding="utf-8")
    notes = Notes(tmp_path)
    pruning = "### Pruning\n\nRemove suckers.\nAgain and again."
    hits = [
        Hit(str(tmp_path / "n.md"), pruning, score=2.5, heading_path="# Garden > ## Tomatoes > ### Pruning"),
        Hit("n.md", "Remove suckers.", score=1.0),
        # not in the note: the heading path is the framework's, and no line span
        Hit("n.md", "Text the reader made up.", heading_path="# Garden > ## Made up"),
    ]
    chunks = contract_chunks(hits, notes)
    assert [(c["rank"], c["rel_path"], c["heading_path"], c["start_line"], c["end_line"]) for c in chunks] == [
        (1, "n.md", "# Garden > ## Tomatoes > ### Pruning", 16, 19),
        (2, "n.md", "# Garden > ## Tomatoes > ### Pruning", 18, 18),
        (3, "n.md", "# Garden > ## Made up", None, None),
    ]
    assert chunks[0]["score_final"] == 2.5 and chunks[0]["text"] == pruning
    assert chunks[0]["chunk_id"] == chunk_id("n.md", "# Garden > ## Tomatoes > ### Pruning", 16, 19, pruning)
    assert len({c["chunk_id"] for c in chunks}) == 3
    # stable: the same hits give the same ids in a new Notes (a restarted bot)
    assert [c["chunk_id"] for c in contract_chunks(hits, Notes(tmp_path))] == [c["chunk_id"] for c in chunks]


def test_one_text_in_two_places_gets_two_ids() -> None:
    text = "Water deeply. Uses `%%` in code."
    assert chunk_id("n.md", "# Garden > ## Tomatoes", 10, 10, text) != chunk_id(
        "n.md", "# Garden > ## Beans > ### Climbing", 28, 28, text
    )


# ---------------------------------------------------------------- imports and the install hint


def test_importing_the_adapters_loads_no_framework() -> None:
    code = (
        "import sys, evalkit, evalkit.adapters, evalkit.adapters.llamaindex, evalkit.adapters.langchain\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('llama_index', 'langchain_core', "
        "'langchain_text_splitters', 'langchain')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "blocked", "hint"),
    [
        (llamaindex, "llama_index.core", "pip install 'evalkit[llamaindex]'"),
        (langchain, "langchain_core", "pip install 'evalkit[langchain]'"),
    ],
)
def test_a_missing_framework_names_the_extra(
    module, blocked: str, hint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # `import` now raises ImportError
    with pytest.raises(ImportError) as err:
        module.target(object(), notes_dir=tmp_path)
    assert hint in str(err.value)
