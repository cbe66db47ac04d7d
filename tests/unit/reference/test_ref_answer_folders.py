"""Abstention evidence, extractive answers, citation renumbering and folder selection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.reference.answer import evidence, extractive_answer, is_decline, renumber_citations
from evalkit.reference.folders import in_folders, note_folder, select_folders

IDF = {"water": 2.0, "tomato": 1.0, "mongolia": 4.0}.get


def idf(t: str) -> float:
    return IDF(t, 3.0)


def test_evidence_is_the_matched_share_of_idf_mass() -> None:
    top = [frozenset({"water", "plant"}), frozenset({"tomato"})]
    # by hand: Q = {water, tomato, mongolia}; matched water + tomato = 2 + 1 of 2 + 1 + 4
    assert evidence(["water", "tomato", "mongolia"], top, idf) == pytest.approx((2 + 1) / (2 + 1 + 4))
    assert evidence(["water", "water"], top, idf) == 1.0
    assert evidence([], top, idf) == 0.0
    assert evidence(["water"], [], idf) == 0.0


def test_extractive_picks_overlapping_sentences_and_cites_them() -> None:
    chunks = [
        {"text": "# Tomatoes\n\nWater the tomato deeply. Stake it early."},
        {"text": "- Water in the morning.\n- Mulch keeps the soil cool."},
    ]
    answer, cited = extractive_answer(["water", "tomato"], chunks, idf, max_sentences=2)
    # by hand: "Water the tomato deeply." scores 2 + 1, "Water in the morning." scores 2; list marker dropped
    assert answer == "Water the tomato deeply. [1] Water in the morning. [2]"
    assert cited == [0, 1]


def test_extractive_same_chunk_cited_once_and_heading_only_match_quotes_the_opening() -> None:
    chunks = [{"text": "## Watering\n\nWater daily. Water more in heat."}]
    answer, cited = extractive_answer(["water"], chunks, idf, max_sentences=3)
    assert answer == "Water daily. [1] Water more in heat. [1]" and cited == [0]
    answer, cited = extractive_answer(["tomato"], [{"text": "# Tomato\n\nKeep them warm."}], idf)
    assert answer == "Keep them warm. [1]" and cited == [0]
    assert extractive_answer(["x"], [], idf) == ("", [])


def test_renumber_citations_by_first_use() -> None:
    text, cited = renumber_citations("A [3]. B [1][3]. C [9].", 3)
    assert text == "A [1]. B [2][1]. C [9]." and cited == [2, 0]


@pytest.mark.parametrize(("reply", "declined"), [("I don't know.", True), ("I do not know", True),
                                                 ("I don’t know", True), ("It is 4 [1].", False)])
def test_is_decline(reply: str, declined: bool) -> None:
    assert is_decline(reply) is declined


# ---------------------------------------------------------------- folders

FOLDERS = ["Garden", "Kitchen", "Work"]
CHUNK_FOLDERS = ["Garden", "Garden", "Kitchen", None, "Work"]


def test_note_folder_and_membership() -> None:
    assert note_folder("a/b/c.md") == "a/b" and note_folder("root.md") is None
    assert in_folders(None, set()) and in_folders("a/b", {"a"}) and in_folders("a", {"a"})
    assert not in_folders("ab", {"a"}) and not in_folders("a", {"a/b"})


def test_off_selects_nothing_and_means_no_restriction() -> None:
    sel = select_folders("off", np.zeros(5), CHUNK_FOLDERS, FOLDERS, [])
    assert sel["selected_folders"] == [] and sel["fallback_used"] is False


def test_on_keeps_folders_up_to_sixty_percent() -> None:
    lex = np.array([3.0, 3.0, 2.0, 9.0, 2.0])
    sel = select_folders("on", lex, CHUNK_FOLDERS, FOLDERS, ["water"])
    # by hand: Garden 6, Kitchen 2, Work 2 (root ignored): shares .6, .2, .2 -> Garden reaches 60%
    assert sel["selected_folders"] == ["Garden"]
    assert sel["confidence"] == pytest.approx(6 / 10)
    assert not sel["fallback_used"]


def test_folder_name_bonus() -> None:
    lex = np.array([3.0, 0.0, 2.0, 0.0, 0.0])
    sel = select_folders("on", lex, CHUNK_FOLDERS, FOLDERS, ["kitchen"])
    # by hand: Kitchen 2 * (1 + 0.5) = 3 ties Garden 3; names break the tie: Garden, then Kitchen
    assert sel["selected_folders"] == ["Garden", "Kitchen"]
    assert sel["confidence"] == pytest.approx(3 / 6)


def test_fallback_when_confidence_is_low() -> None:
    lex = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    sel = select_folders("on_with_fallback", lex, CHUNK_FOLDERS, FOLDERS, ["x"], confidence_threshold=0.35)
    # by hand: three folders with 1/3 each < 0.35
    assert sel["fallback_used"] is True and sel["selected_folders"] == FOLDERS
    assert sel["confidence"] == pytest.approx(round(1 / 3, 6))
    sel = select_folders("on", lex, CHUNK_FOLDERS, FOLDERS, ["x"])
    assert sel["fallback_used"] is False and sel["selected_folders"] == ["Garden", "Kitchen"]


def test_nothing_scored() -> None:
    zero = np.zeros(5)
    assert select_folders("on", zero, CHUNK_FOLDERS, FOLDERS, [])["selected_folders"] == []
    fb = select_folders("on_with_fallback", zero, CHUNK_FOLDERS, FOLDERS, [])
    assert fb["fallback_used"] and fb["selected_folders"] == FOLDERS and not math.isnan(fb["confidence"])


def test_table_rows_are_read_with_their_header() -> None:
    chunks = [{"text": "## Ports\n\n| Service | Port |\n| --- | ---: |\n| Jellyfin | 8096 |\n| Syncthing | 8384 |\n"}]
    answer, cited = extractive_answer(["jellyfin"], chunks, idf)
    assert answer == "Service: Jellyfin; Port: 8096 [1]" and cited == [0]
