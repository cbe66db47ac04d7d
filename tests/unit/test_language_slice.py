"""by_language (issue 13, item 5): `language` alone for a same-language case, `de->en` for a
cross-language one (seed 002's multilingual cases: DE query -> EN doc), in every consumer of
the groupings: aggregate_records, compare scopes, baseline slim records, the HTML report, the
eval-set loader's near-miss keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.compare.cases import _scopes
from evalkit.compare.sources import slim_record
from evalkit.errors import InputError
from evalkit.evalset.load import load_eval_set
from evalkit.metrics.aggregate import GROUPINGS, aggregate_records, language_key
from evalkit.schema import EvalCase


def rec(cid: str, *, recall: float, language: str | None = None, doc_language: str | None = None) -> dict:
    case: dict = {"id": cid, "answerable": True, "gold_supports": [{"rel_path": "a.md"}]}
    if language is not None:
        case["language"] = language
    if doc_language is not None:
        case["doc_language"] = doc_language
    return {
        "test_case_id": cid,
        "case": case,
        "answer": "x",
        "retrieval_metrics": {"at_k": {"5": {"recall_any": recall, "mrr": recall}}},
    }


@pytest.mark.parametrize(
    ("language", "doc_language", "key"),
    [
        ("de", None, "de"),
        ("de", "de", "de"),  # same language given twice: not cross-language
        ("de", "en", "de->en"),
        ("en", "de", "en->de"),
        (None, "en", None),  # the query's language unknown: no slice
        (None, None, None),
        ("", None, None),
    ],
)
def test_language_key(language, doc_language, key) -> None:
    assert language_key({"language": language, "doc_language": doc_language}) == key


def test_by_language_cells_by_hand() -> None:
    records = [
        rec("a", recall=1.0, language="en"),
        rec("b", recall=0.0, language="en"),
        rec("c", recall=1.0, language="de", doc_language="en"),  # Kündigungsklausel -> EN doc
        rec("d", recall=0.0, language="de", doc_language="en"),
        rec("e", recall=0.0, language="de", doc_language="en"),
        rec("f", recall=1.0),  # no language: in no by_language cell
    ]
    out = aggregate_records(records, ks=[5])
    assert "by_language" in GROUPINGS
    by = out["by_language"]
    assert list(by) == ["de->en", "en"]  # sorted keys
    assert by["en"]["n_cases"] == 2 and by["en"]["recall_at_k_avg"] == 0.5
    assert by["de->en"]["n_cases"] == 3
    assert by["de->en"]["recall_at_k_avg"] == pytest.approx(1 / 3)
    assert by["de->en"]["n"]["recall_at_k_avg"] == 3


def test_no_language_gives_an_empty_grouping() -> None:
    out = aggregate_records([rec("a", recall=1.0), rec("b", recall=0.0)], ks=[5])
    assert out["by_language"] == {}
    assert out["by_domain"] == {}  # like the other groupings


def test_compare_scope_and_baseline_record_keep_the_language() -> None:
    case = {"id": "c", "answerable": True, "language": "de", "doc_language": "en"}
    assert "language:de->en" in _scopes(case, True)
    assert not any(s.startswith("language:") for s in _scopes({"id": "c"}, True))
    slim = slim_record({"test_case_id": "c", "case": case, "response_validity": {"valid": False, "errors": ["$: x"]}})
    assert slim["case"]["language"] == "de" and slim["case"]["doc_language"] == "en"
    assert slim["response_validity"] == {"valid": False}  # the messages are not needed to aggregate
    assert language_key(slim["case"]) == "de->en"


def test_eval_case_fields_and_near_miss_keys(tmp_path: Path) -> None:
    case = EvalCase.model_validate({"id": "1", "question": "Kündigungsklausel?", "answerable": True,
                                    "language": "de", "doc_language": "en"})
    assert (case.language, case.doc_language) == ("de", "en")
    path = tmp_path / "es.jsonl"
    path.write_text(json.dumps({"id": "1", "question": "q", "answerable": True, "lang": "de", "doc_lang": "en"}) + "\n")
    with pytest.raises(InputError) as e:
        load_eval_set([str(path)])
    text = str(e.value)
    assert "unknown field 'lang'; did you mean 'language'?" in text
    assert "unknown field 'doc_lang'; did you mean 'doc_language'?" in text


def test_html_report_has_a_language_table() -> None:
    from evalkit.report.html.run import GROUPS

    assert ("language", "Language") in GROUPS
