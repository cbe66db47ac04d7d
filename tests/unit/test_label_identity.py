"""Labels are part of a run's identity (issue 36 item 5): the eval set's cases apart from their
labels (`cases_version`), and the invariant that tells a relabel from another eval set."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.evalset.load import load_eval_set
from evalkit.gate.invariants import check_invariants, invariant_warnings, label_change, relabelled_from
from evalkit.gate.regressions import gate_result

V1, V2 = "1" * 64, "2" * 64  # two dataset_versions (file hashes)
CASES = "c" * 64  # one cases_version


def _run(run_id: str, version: str, cases: str | None = CASES, rescored_with: str | None = None) -> dict:
    m = {"run_id": run_id, "dataset_version": version, "total_tests": 3}
    if cases is not None:
        m["cases_version"] = cases
    if rescored_with is not None:  # what score_retrieval --eval-set records
        m["retrieval_scoring"] = {"eval_set": {"paths": [rescored_with], "version": version, "run_version": V1,
                                               "origin": "--eval-set", "changed": True}}
    return m


def test_the_same_cases_with_other_labels_are_named_apart_from_another_eval_set():
    base, new = _run("a", V1), _run("b", V2, rescored_with="relabelled.jsonl")
    assert label_change(base, new) and relabelled_from(new) == ["relabelled.jsonl"] and relabelled_from(base) is None
    assert check_invariants(base, new) == [
        "gold labels differ (dataset_version 111111111111… vs 222222222222…): the runs hold the same cases (ids and "
        "questions) scored with other labels; the new run was re-scored with relabelled.jsonl: retrieval deltas "
        "would mix the label change with the chatbot's; re-score one run with the other's eval set (score_retrieval.py "
        "--run-id RUN --eval-set FILE), or pass --allow-label-change"
    ]
    # accepted: no violation, and a warning says what the deltas now mix
    assert check_invariants(base, new, allow_label_change=True) == []
    assert invariant_warnings(base, new, allow_label_change=True) == [
        "gold labels differ (dataset_version 111111111111… vs 222222222222…): the runs hold the same cases (ids and "
        "questions) scored with other labels; the new run was re-scored with relabelled.jsonl "
        "(--allow-label-change): every delta that reads the labels (retrieval above all) mixes the label change with "
        "the chatbot's"
    ]
    assert invariant_warnings(base, new) == []  # refused instead
    g = gate_result(base, new, allow_label_change=True)
    assert g["invariants"]["violations"] == [] and g["invariants"]["warnings"][0].startswith("gold labels differ")


def test_other_cases_or_an_unrecorded_cases_version_stay_eval_sets_differ():
    differ = ["eval sets differ (dataset_version 111111111111… vs 222222222222…)"]
    assert check_invariants(_run("a", V1), _run("b", V2, cases="d" * 64), allow_label_change=True) == differ
    # a run made before evalkit recorded cases_version cannot show the cases are the same
    assert check_invariants(_run("a", V1, cases=None), _run("b", V2), allow_label_change=True) == differ
    # the same dataset_version: nothing to say
    assert check_invariants(_run("a", V1), _run("b", V1)) == [] and not label_change(_run("a", V1), _run("b", V1))


def test_cases_version_holds_the_ids_and_questions_only(tmp_path: Path):
    cases = [
        {"id": "q1", "question": "Who leads Harbor?", "answerable": True,
         "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]},
        {"id": "q2", "question": "Where is the office?", "answerable": False},
    ]

    def version(name: str, rows: list[dict]) -> tuple[str, str, list[str]]:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        loaded = load_eval_set([path])
        return loaded.version, loaded.cases_version, loaded.gold_forms

    base = version("base.jsonl", cases)
    relabelled = version("relabelled.jsonl", [
        {**cases[0], "gold_supports": [{"rel_path": "b.md", "start_line": 3, "end_line": 9}]}, {**cases[1], "answerable": True},
    ])
    reordered = version("reordered.jsonl", list(reversed(cases)))
    asked_otherwise = version("other.jsonl", [{**cases[0], "question": "Who runs Harbor?"}, cases[1]])
    # other labels (and another order): another file hash, the same cases
    assert relabelled[0] != base[0] and relabelled[1] == base[1]
    assert reordered[0] != base[0] and reordered[1] == base[1]
    # another question: other cases
    assert asked_otherwise[1] != base[1]
    # the forms the labels use: an anchor, then a line span without a heading
    assert (base[2], relabelled[2]) == (["anchor"], ["span"])
