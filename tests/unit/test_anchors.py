"""Anchor rules (EVAL.md "Anchors"): normalization, the heading-boundary prefix rule,
the three gold forms, rank order and duplicates. Table-driven; each id names the trap."""

from __future__ import annotations

import pytest

from evalkit.evalset.anchors import (
    match_ranking,
    match_support,
    normalize_heading_path,
    normalize_rel_path,
    normalize_phrase,
    order_chunks,
)

# ---------------------------------------------------------------- normalization


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("notes/a.md", "notes/a.md", id="plain"),
        pytest.param("  notes/a.md\t", "notes/a.md", id="trim"),
        pytest.param("./notes/a.md", "notes/a.md", id="dot-slash-prefix"),
        pytest.param("././notes/a.md", "notes/a.md", id="dot-slash-twice"),
        pytest.param("notes\\sub\\a.md", "notes/sub/a.md", id="backslashes"),
        pytest.param(".\\notes\\a.md", "notes/a.md", id="dot-backslash"),
        pytest.param("notes//sub///a.md", "notes/sub/a.md", id="duplicate-slashes"),
        pytest.param("notes/./a.md", "notes/a.md", id="inner-dot-segment"),
        pytest.param("/notes/a.md/", "notes/a.md", id="leading-trailing-slash"),
        pytest.param("notes/../a.md", "notes/../a.md", id="dotdot-kept"),
        pytest.param("Notes/A.md", "Notes/A.md", id="case-kept"),
        pytest.param("cafe\u0301.md", "caf\u00e9.md", id="unicode-nfc"),
        pytest.param("", "", id="empty"),
        pytest.param(None, "", id="none"),
    ],
)
def test_normalize_rel_path(raw, expected):
    assert normalize_rel_path(raw) == expected


def test_normalize_rel_path_case_insensitive_is_explicit():
    assert normalize_rel_path("Notes/A.md", case_sensitive=False) == "notes/a.md"
    assert normalize_rel_path("Notes/A.md") != normalize_rel_path("notes/a.md")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("# A > ## B", "# A > ## B", id="canonical"),
        pytest.param("  # A  >  ## B  ", "# A > ## B", id="extra-spaces"),
        pytest.param("# A>## B", "# A > ## B", id="no-space-around-delimiter"),
        pytest.param("#A > ##B", "# A > ## B", id="hash-without-space"),
        pytest.param("#   A   long   title", "# A long title", id="collapse-inner-spaces"),
        pytest.param("## A ##", "## A", id="closing-hashes"),
        pytest.param("# C#", "# C#", id="csharp-not-closing"),
        pytest.param("# A >  > ## B", "# A > ## B", id="empty-component-dropped"),
        pytest.param("# A > ", "# A", id="trailing-delimiter"),
        pytest.param("## x -> y", "## x -> y", id="arrow-inside-heading"),
        pytest.param("# a>b", "# a>b", id="gt-inside-heading"),
        pytest.param("Overview > Details", "Overview > Details", id="no-hashes"),
        pytest.param("# A\t>\n## B", "# A > ## B", id="tabs-newlines"),
        pytest.param("", "", id="empty"),
        pytest.param(None, "", id="none"),
    ],
)
def test_normalize_heading_path(raw, expected):
    assert normalize_heading_path(raw) == expected


def test_normalize_heading_path_keeps_depth():
    assert normalize_heading_path("# A") != normalize_heading_path("## A")


def test_normalize_phrase():
    assert normalize_phrase("  RAG\n  Systems ") == "ragsystems"


# ---------------------------------------------------------------- match_support

A = "notes/a.md"


def chunk(rel_path=A, heading_path="", text="", **kw):
    return {"rel_path": rel_path, "heading_path": heading_path, "text": text, **kw}


@pytest.mark.parametrize(
    ("gold", "retrieved", "expected"),
    [
        # heading-boundary prefix rule
        pytest.param({"rel_path": A, "heading_path": "# A"}, chunk(heading_path="# A"), True, id="same-heading"),
        pytest.param({"rel_path": A, "heading_path": "# A"}, chunk(heading_path="# A > ## B"), True,
                     id="A-prefixes-A>B"),
        pytest.param({"rel_path": A, "heading_path": "# A"}, chunk(heading_path="# AB"), False, id="A-vs-AB"),
        pytest.param({"rel_path": A, "heading_path": "# A"}, chunk(heading_path="# AB > ## C"), False, id="A-vs-AB>C"),
        pytest.param({"rel_path": A, "heading_path": "# A"}, chunk(heading_path="## A"), False, id="depth-1-vs-2"),
        pytest.param({"rel_path": A, "heading_path": "## A"}, chunk(heading_path="# A"), False, id="depth-2-vs-1"),
        pytest.param({"rel_path": A, "heading_path": "# A > ## B"}, chunk(heading_path="# A"), False,
                     id="chunk-shallower-than-gold"),
        pytest.param({"rel_path": A, "heading_path": "# A > ## B"}, chunk(heading_path="# A > ## B > ### C"), True,
                     id="two-level-prefix"),
        pytest.param({"rel_path": A, "heading_path": "# A > ## B"}, chunk(heading_path="# A > ## BC"), False,
                     id="A>B-vs-A>BC"),
        pytest.param({"rel_path": A, "heading_path": "  # A   >   ## B "}, chunk(heading_path="# A > ## B"), True,
                     id="extra-spaces-gold"),
        pytest.param({"rel_path": A, "heading_path": "# A > ## B"}, chunk(heading_path="#A>##B"), True,
                     id="hash-without-space-chunk"),
        pytest.param({"rel_path": A, "heading_path": "#Heading"}, chunk(heading_path="# Heading"), True,
                     id="hash-without-space-gold"),
        pytest.param({"rel_path": A, "heading_path": "# a"}, chunk(heading_path="# A"), False, id="heading-case"),
        pytest.param({"rel_path": A, "heading_path": ""}, chunk(heading_path="# Anything > ## Deep"), True,
                     id="empty-gold-heading-is-whole-file"),
        pytest.param({"rel_path": A}, chunk(heading_path="# X"), True, id="missing-gold-heading-is-whole-file"),
        pytest.param({"rel_path": A, "heading_path": "# A"}, chunk(heading_path=""), False, id="preamble-chunk"),
        # paths
        pytest.param({"rel_path": "Notes/a.md", "heading_path": ""}, chunk(rel_path="notes/a.md"), False,
                     id="path-case-sensitive"),
        pytest.param({"rel_path": "./notes/a.md", "heading_path": "# A"}, chunk(heading_path="# A"), True,
                     id="dot-slash"),
        pytest.param({"rel_path": "notes\\a.md", "heading_path": "# A"}, chunk(heading_path="# A"), True,
                     id="backslashes"),
        pytest.param({"rel_path": "notes//a.md", "heading_path": "# A"}, chunk(heading_path="# A"), True,
                     id="double-slash"),
        pytest.param({"rel_path": "notes/b.md", "heading_path": "# A"}, chunk(heading_path="# A"), False,
                     id="other-file"),
        pytest.param({"rel_path": "a.md", "heading_path": ""}, chunk(rel_path="notes/a.md"), False,
                     id="basename-is-not-enough"),
        # chunk_id form
        pytest.param({"chunk_id": "c1"}, chunk(chunk_id="c1"), True, id="chunk-id-equal"),
        pytest.param({"chunk_id": "c1"}, chunk(chunk_id="c2"), False, id="chunk-id-differs"),
        pytest.param({"chunk_id": "c1"}, chunk(), False, id="chunk-id-chunk-has-none"),
        pytest.param({"chunk_id": "c1", "rel_path": A, "heading_path": "# A"}, chunk(chunk_id="c9", heading_path="# A"),
                     True, id="chunk-id-or-anchor"),
        # line-span form (inclusive ranges)
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=15, end_line=18), True,
                     id="span-inside"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=5, end_line=12), True,
                     id="span-overlap-left"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=20, end_line=30), True,
                     id="span-touching-end-line"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=1, end_line=10), True,
                     id="span-touching-start-line"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=21, end_line=30), False,
                     id="span-adjacent-after"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=1, end_line=9), False,
                     id="span-adjacent-before"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(start_line=40, end_line=50), False,
                     id="span-disjoint"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20},
                     chunk(rel_path="notes/b.md", start_line=10, end_line=20), False, id="span-other-file"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20}, chunk(), False, id="span-chunk-without-lines"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20, "heading_path": "# A"},
                     chunk(heading_path="# A"), True, id="span-falls-back-to-anchor-without-lines"),
        pytest.param({"rel_path": A, "start_line": 10, "end_line": 20, "heading_path": "# A"},
                     chunk(heading_path="# A", start_line=30, end_line=40), False,
                     id="span-decides-when-chunk-has-lines"),
    ],
)
def test_match_support(gold, retrieved, expected):
    assert match_support(gold, retrieved) is expected


SNIP = {"rel_path": A, "heading_path": "# A", "snippets": ["RAG systems", "llama.cpp"]}


@pytest.mark.parametrize(
    ("text", "require", "expected"),
    [
        pytest.param("nothing here", False, True, id="snippets-not-required"),
        pytest.param("Built on RAG systems with llama.cpp.", True, True, id="snippets-all-present"),
        pytest.param("Built on rag\n   SYSTEMS with LLAMA.CPP", True, True, id="snippets-case-and-whitespace"),
        pytest.param("Built on RAG systems only", True, False, id="snippets-one-missing"),
        pytest.param("nothing here", True, False, id="snippets-required-absent"),
    ],
)
def test_snippet_requirement(text, require, expected):
    assert match_support(SNIP, chunk(heading_path="# A > ## B", text=text), require_snippets=require) is expected


def test_snippet_on_truncated_text_cannot_disprove():
    c = chunk(heading_path="# A", text="Built on RAG systems", text_truncated=True)
    assert match_support(SNIP, c, require_snippets=True) is True


def test_snippets_empty_list_needs_nothing():
    gold = {"rel_path": A, "heading_path": "# A", "snippets": []}
    assert match_support(gold, chunk(heading_path="# A"), require_snippets=True) is True


def test_snippets_never_needed_for_heading_mismatch_rescue():
    # Snippets narrow a match; they never make a wrong heading match.
    assert match_support(SNIP, chunk(heading_path="# AB", text="RAG systems llama.cpp"), require_snippets=True) is False


def test_case_insensitive_option():
    gold = {"rel_path": "Notes/A.md", "heading_path": "# Overview"}
    c = chunk(rel_path="notes/a.md", heading_path="# OVERVIEW")
    assert match_support(gold, c) is False
    assert match_support(gold, c, case_sensitive=False) is True


def test_pydantic_models_are_accepted():
    from evalkit.schema import GoldSupport, RetrievedChunk

    gold = GoldSupport(rel_path=A, heading_path="# A")
    assert match_support(gold, RetrievedChunk(rel_path=A, heading_path="# A > ## B")) is True


# ---------------------------------------------------------------- ranking


def test_order_by_rank_then_list_order():
    chunks = [chunk(chunk_id="x", rank=3), chunk(chunk_id="y", rank=1), chunk(chunk_id="z"),
              chunk(chunk_id="w", rank=2)]
    assert [c["chunk_id"] for c in order_chunks(chunks)] == ["y", "w", "x", "z"]


def test_order_list_when_no_rank():
    chunks = [chunk(chunk_id="x"), chunk(chunk_id="y")]
    assert [c["chunk_id"] for c in order_chunks(chunks)] == ["x", "y"]


def test_match_ranking_table():
    golds = [
        {"rel_path": A, "heading_path": "# A", "relevance": 2},
        {"rel_path": A, "heading_path": "# A > ## B"},
        {"chunk_id": "k"},
    ]
    chunks = [
        chunk(heading_path="# A > ## B", chunk_id="1", rank=2),
        chunk(heading_path="# Z", chunk_id="2", rank=1),
        chunk(heading_path="# A > ## C", chunk_id="k", rank=3),
    ]
    table = match_ranking(chunks, golds)
    # by hand: rank 1 is "# Z" (nothing), rank 2 "# A > ## B" (golds 0 and 1), rank 3 "# A > ## C" id k (golds 0, 2)
    assert table.matches == [frozenset(), frozenset({0, 1}), frozenset({0, 2})]
    assert table.relevance == [2.0, 1.0, 1.0]
    assert table.n_supports == 3
    assert table.duplicates == frozenset()


@pytest.mark.parametrize(
    "dup",
    [
        pytest.param({"chunk_id": "1", "rel_path": A, "heading_path": "# A"}, id="same-chunk-id"),
        pytest.param({"rel_path": A, "heading_path": "#A", "text": "t"}, id="same-location-no-id"),
    ],
)
def test_duplicates_match_nothing(dup):
    first = {"chunk_id": "1", "rel_path": A, "heading_path": "# A", "text": "t"}
    if "chunk_id" not in dup:
        first = {k: v for k, v in first.items() if k != "chunk_id"}
    table = match_ranking([first, dup], [{"rel_path": A, "heading_path": "# A"}])
    assert table.matches == [frozenset({0}), frozenset()]
    assert table.duplicates == frozenset({1})


def test_same_section_different_text_is_not_a_duplicate():
    c1 = {"rel_path": A, "heading_path": "# A", "text": "part one"}
    c2 = {"rel_path": A, "heading_path": "# A", "text": "part two"}
    table = match_ranking([c1, c2], [{"rel_path": A, "heading_path": "# A"}])
    assert table.matches == [frozenset({0}), frozenset({0})]
    assert table.duplicates == frozenset()


def test_empty_inputs():
    assert match_ranking([], []).matches == []
    assert match_ranking([chunk()], []).matches == [frozenset()]
