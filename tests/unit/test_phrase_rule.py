"""One rule for "a phrase occurs in a text" (issue 37 item 4; EVAL.md, "Phrases"): gold
snippets, `must_include` expectations and the Hindsight importer agree on the same phrase
and the same text. Before, snippets compared in NFKC and the other two did not, so a
ligature or a full-width phrase matched as a snippet and was missing as an expectation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.evalset.anchors import match_support, normalize_phrase, phrase_in
from evalkit.interop.importers import import_cases
from evalkit.interop.importers.base import ImportOptions
from evalkit.metrics.expectations import score_expectations

TEXT = "Top-K FILE settings: recall\u00a0at five, Straße 9"

# (phrase, does it occur in TEXT); expected by hand from NFKC + casefold + no whitespace:
# TEXT -> "top-kfilesettings:recallatfive,strasse9"
CASES = [
    pytest.param("ﬁle settings", True, id="fi-ligature"),  # "ﬁ" -> "fi"
    pytest.param("Ｒｅｃａｌｌ", True, id="full-width"),  # "Ｒ" -> "R", then casefold
    pytest.param("recall at five", True, id="nbsp-in-text"),  # U+00A0 is whitespace
    pytest.param("recall\u00a0at\u2003five", True, id="nbsp-and-em-space-in-phrase"),
    pytest.param("STRASSE", True, id="sharp-s"),  # casefold: "ß" -> "ss"
    pytest.param("settingsrecall", False, id="not-there"),  # ":" sits between them
]


def test_normal_form_by_hand() -> None:
    assert normalize_phrase(TEXT) == "top-kfilesettings:recallatfive,strasse9"
    assert normalize_phrase("Ｒｅｃａｌｌ") == "recall"
    assert normalize_phrase("ﬁle") == "file"
    assert normalize_phrase(None) == ""


@pytest.mark.parametrize(("phrase", "occurs"), CASES)
def test_snippet_and_must_include_agree(phrase: str, occurs: bool) -> None:
    assert phrase_in(phrase, TEXT) is occurs
    chunk = {"rel_path": "a.md", "heading_path": "# A", "text": TEXT}
    support = {"rel_path": "a.md", "heading_path": "# A", "snippets": [phrase]}
    assert match_support(support, chunk, require_snippets=True) is occurs
    case = {"id": "c", "expected": {"must_include": [phrase]}}
    scored = score_expectations(case, [chunk], answer=TEXT)
    assert scored is not None
    # by hand: one item, found in the only chunk (rank 1) or not at all
    assert scored["retrieved"]["include_recall"] == (1.0 if occurs else 0.0)
    assert scored["answer"]["include_recall"] == (1.0 if occurs else 0.0)


@pytest.mark.parametrize(("phrase", "occurs"), CASES)
def test_hindsight_importer_agrees(tmp_path: Path, phrase: str, occurs: bool) -> None:
    line = {"id": "c1", "scenario": "follow_up_recall", "query": "q?", "seedFacts": [{"content": TEXT}],
            "expected": {"mustInclude": [phrase]}}
    fixture = tmp_path / "f.jsonl"
    fixture.write_text(json.dumps(line) + "\n", encoding="utf-8")
    [imported] = import_cases("hindsight", [fixture], ImportOptions())
    # the fact note holding the phrase is the case's gold support; none when no fact holds it
    assert len(imported.case.get("gold_supports", [])) == (1 if occurs else 0)
    assert bool(imported.warnings) is not occurs
