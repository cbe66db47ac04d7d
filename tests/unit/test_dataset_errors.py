"""Eval set loading: every problem located by file, line and field; nothing runs on a bad set."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evalkit.errors import BadEvalSet, InputError
from evalkit.evalset.load import load_eval_set

DATA = Path(__file__).resolve().parents[1] / "data" / "eval_sets"


def test_valid_set_loads_in_order_and_keeps_unknown_fields() -> None:
    es = load_eval_set([DATA / "valid.jsonl"], extra_categories=())
    assert [c.id for c in es.cases] == ["v-001", "v-002", "v-003"]
    assert es.cases[0].model_dump()["reviewer"] == "kept-unknown-field"
    assert es.cases[2].required_support_groups == [[0, 1]]
    assert es.cases[2].gold_supports[1].date == "2025-03-04"
    assert len(es.version) == 64 and es.files[0]["sha256"]


def test_version_changes_with_bytes(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"id": "x", "question": "q?", "answerable": true}\n')
    v1 = load_eval_set([a], extra_categories=()).version
    # reference: the single-file version is what `sha256sum a.jsonl` prints
    assert v1 == hashlib.sha256(a.read_bytes()).hexdigest()
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_bytes(a.read_bytes())
    assert load_eval_set([renamed], extra_categories=()).version == v1
    a.write_text('{"id": "x", "question": "q2?", "answerable": true}\n')
    assert load_eval_set([a], extra_categories=()).version != v1


def test_every_problem_is_reported_with_file_line_field() -> None:
    path = DATA / "malformed.jsonl"
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([path], extra_categories=())
    lines = exc.value.render().splitlines()
    p = str(path)
    expected = [
        f"{p}:2: not valid JSON",
        f"{p}:3: id: required field is missing",
        f"{p}:4: id: id 'm-001' duplicates {p}:1",
        f"{p}:5: category: unknown category 'trivia'",
        f"{p}:6: required_support_groups[0][1]: index 2 is out of range: the case has 1 gold supports (0..0)",
        f"{p}:7: gold_supports: answerable is false but 1 gold supports are given",
        f"{p}:8: recency_conflict_rule: must be one of cite_newer, cite_both, acknowledge_both, got 'cite_latest'",
        f"{p}:9: gold_supports[2].heading_path: Input should be a valid string, got 42",
        f"{p}:10: expected a JSON object, got list",
    ]
    assert len(lines) == len(expected)
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), (line, start)


def test_missing_file_and_empty_set(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or folder"):
        load_eval_set([tmp_path / "nope.jsonl"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(BadEvalSet, match="eval set has no cases"):
        load_eval_set([empty], extra_categories=())


def test_problem_list_is_capped(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n" * 30)
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([bad], extra_categories=())
    lines = exc.value.render().splitlines()
    assert len(lines) == 21 and lines[-1] == "… and 10 more problems"


def test_folder_of_domain_files_and_bob_format() -> None:
    es = load_eval_set([DATA / "domains"], extra_categories=())
    by_id = {c.id: c for c in es.cases}
    # domain = file stem unless the case says otherwise
    assert by_id["1"].domain == "food" and by_id["t-1"].domain == "lisbon-trip"
    # B.O.B expected_chunks -> chunk_id gold supports; [] -> negative example
    assert [g.chunk_id for g in by_id["1"].gold_supports] == ["5", "6"] and by_id["1"].answerable
    assert by_id["99"].answerable is False and by_id["99"].gold_supports == []


def test_categories_from_project_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = tmp_path / "c.jsonl"
    cases.write_text('{"id": "a", "question": "q?", "answerable": true, "category": "installation"}\n')
    with pytest.raises(BadEvalSet, match="unknown category 'installation'"):
        load_eval_set([cases])
    (tmp_path / "evalkit.toml").write_text('[eval_set]\ncategories = ["installation"]\n')
    monkeypatch.chdir(tmp_path)
    assert load_eval_set([cases]).cases[0].category == "installation"


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": "same", "question": "q1?", "answerable": true}\n')
    (tmp_path / "b.jsonl").write_text('{"id": "x", "question": "q?", "answerable": true}\n{"id": "same", "question": "q2?", "answerable": true}\n')
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([tmp_path], extra_categories=())
    assert exc.value.render() == f"{tmp_path / 'b.jsonl'}:2: id: id 'same' duplicates {tmp_path / 'a.jsonl'}:1"


def test_bad_date_is_caught_at_load(tmp_path: Path) -> None:
    # regression: review finding 3 — "2025-02-30" passed validation and crashed scoring mid-run
    bad = tmp_path / "d.jsonl"
    bad.write_text(
        '{"id": "r", "question": "q?", "answerable": true, "recency_conflict_rule": "cite_newer", "gold_supports": '
        '[{"rel_path": "a.md", "date": "2024-01-01"}, {"rel_path": "b.md", "date": "2025-02-30"}]}\n'
    )
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([bad], extra_categories=())
    assert exc.value.render() == (
        f"{bad}:1: gold_supports[1].date: not an ISO date (YYYY-MM-DD or ISO 8601), got '2025-02-30'"
    )


def test_seed_004_expectations_and_constraints_load_in_both_spellings(tmp_path: Path) -> None:
    # Seed 004 writes camelCase (mustInclude, tokenBudget, topK); evalkit's own files snake_case.
    path = tmp_path / "h.jsonl"
    path.write_text(
        '{"id": "c", "question": "q?", "answerable": true, "scenario": "temporal_narrative", '
        '"expected": {"mustInclude": ["a"], "mustExclude": ["b"], "orderedHints": ["x", "y"]}, '
        '"constraints": {"tokenBudget": 64, "topK": 3}}\n'
        '{"id": "d", "question": "q?", "answerable": true, '
        '"expected": {"must_include": ["a"]}, "constraints": {"token_budget": 10, "top_k": 1}}\n'
    )
    c, d = load_eval_set([path], extra_categories=()).cases
    assert c.scenario == "temporal_narrative"
    assert (c.expected.must_include, c.expected.must_exclude, c.expected.ordered_hints) == (["a"], ["b"], ["x", "y"])
    assert (c.constraints.token_budget, c.constraints.top_k) == (64, 3)
    assert (d.constraints.token_budget, d.constraints.top_k, d.expected.must_include) == (10, 1, ["a"])


def test_expectation_and_constraint_mistakes_are_named(tmp_path: Path) -> None:
    # A misspelt key would otherwise score nothing without a word.
    bad = tmp_path / "e.jsonl"
    bad.write_text(
        '{"id": "a", "question": "q?", "answerable": true, "expected": {"must_includes": ["x"]}}\n'
        '{"id": "b", "question": "q?", "answerable": true, "expected": {"orderedHints": ["only"]}}\n'
        '{"id": "c", "question": "q?", "answerable": true, "constraints": {"token_budjet": 5}}\n'
        '{"id": "d", "question": "q?", "answerable": true, "expected": {"must_include": ["x"], "must_exclude": ["X"]}}\n'
        '{"id": "e", "question": "q?", "answerable": true, "expected": {"must_include": [" "]}}\n'
    )
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([bad], extra_categories=())
    assert exc.value.render().splitlines() == [
        f"{bad}:1: expected.must_includes: unexpected field; did you mean 'must_include'?",
        f"{bad}:2: expected: ordered_hints needs at least two hints to have an order",
        f"{bad}:3: constraints.token_budjet: unknown field 'token_budjet'; did you mean 'token_budget'?",
        f"{bad}:4: expected: ['x'] is both in must_include and must_exclude",
        f"{bad}:5: expected.must_include: must not hold an empty string (it would match any text)",
    ]
