"""evalkit/judges/grades.py: human grades file, seeded resumable sample, judge-vs-human agreement
(issue 11, item 5). Agreement figures are checked against a hand computation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import InputError
from evalkit.judges import grades
from evalkit.store.runs import RunDir
from tests.support import write_run


def _rec(i: int, cid: str, g: Any = None, c: Any = None, *, answer: str = "an answer", error: Any = None) -> dict[str, Any]:
    def verdict(v: Any) -> Any:
        if v is None or isinstance(v, dict):
            return v
        return {"score": v, "method": "llm"}

    return {"test_case_id": cid, "case_index": i, "question": f"question {cid}?", "answer": answer, "error": error,
            "case": {"id": cid, "expected_key_facts": ["fact A"], "expected_answer": "the answer"},
            "retrieved_chunks": [{"rank": 2, "rel_path": "b.md", "heading_path": "# B", "text": "bee " * 200},
                                 {"rank": 1, "rel_path": "a.md", "heading_path": "# A > ## x", "text": "alpha text"}],
            "groundedness": verdict(g), "correctness": verdict(c)}


def _run(tmp_path: Path, records: list[dict[str, Any]]) -> RunDir:
    return RunDir.open(write_run(tmp_path, "r1", records, config=None), "r1")


def _grade(run: RunDir, cid: str, g: int, c: int) -> None:
    grades.append_grade(run, {"test_case_id": cid, "groundedness": g, "correctness": c})


def test_agreement_matches_hand_computation(tmp_path: Path):
    run = _run(tmp_path, [
        _rec(0, "q1", 4.5, 3), _rec(1, "q2", 4, 3), _rec(2, "q3", 3, 4), _rec(3, "q4", 1, 2.49),
        # rule-scored groundedness and an unjudged correctness: not the judge's opinion
        _rec(4, "q5", {"score": 0, "method": "rule"}, None),
    ])
    _grade(run, "q1", 0, 0)  # superseded: the last grade of a case wins
    for cid, g, c in (("q1", 5, 3), ("q2", 4, 1), ("q3", 2, 4), ("q4", 0, 2), ("q5", 1, 1)):
        _grade(run, cid, g, c)
    a = grades.agreement(run)

    # Groundedness: human h = [5, 4, 2, 0]; judge j = [4.5, 4, 3, 1] -> grades (round half up) [5, 4, 3, 1].
    # by hand: k = 6, w_ij = (i - j)^2 / (k - 1)^2 = (i - j)^2 / 25.
    #   observed pairs (5,5) (4,4) (2,3) (0,1): Σ w O = (0 + 0 + 1 + 1) / 25
    #   expected E_ij = row_i * col_j / n = 1 * 1 / 4 for i in {5,4,2,0}, j in {5,4,3,1}:
    #   Σ_ij (i-j)^2 = 21 (i=5: 0+1+4+16) + 11 (i=4: 1+0+1+9) + 15 (i=2: 9+4+1+1) + 51 (i=0: 25+16+9+1) = 98
    #   Σ w E = 98 / (4 * 25);  kappa = 1 - (2/25) / (98/100) = 1 - 8/98
    #   MAE on raw scores = (0.5 + 0 + 1 + 1) / 4
    g = a["groundedness"]
    assert g["n"] == 4 and g["n_without_judge_score"] == 1
    assert g["kappa_quadratic"] == pytest.approx(1 - 8 / 98)
    assert g["mae"] == pytest.approx((0.5 + 0 + 1 + 1) / 4)

    # Correctness: human [3, 1, 4, 2]; judge [3, 3, 4, 2.49] -> grades [3, 3, 4, 2] (2.49 rounds down).
    # by hand: observed Σ w O = (1-3)^2 / 25 = 4/25.
    #   col marginals (judge): 3 -> 2, 4 -> 1, 2 -> 1; rows (human) 1 each; E_ij = col_j / 4.
    #   Σ_i Σ_j (i-j)^2 col_j: i=3: 0*2+1+1 = 2; i=1: 4*2+9+1 = 18; i=4: 1*2+0+4 = 6; i=2: 1*2+4+0 = 6; total 32
    #   Σ w E = 32 / (4 * 25);  kappa = 1 - (4/25) / (32/100) = 1 - 16/32
    #   MAE = (0 + 2 + 0 + 0.49) / 4
    c = a["correctness"]
    assert c["n"] == 4 and c["n_without_judge_score"] == 1
    assert c["kappa_quadratic"] == pytest.approx(1 - 16 / 32)
    assert c["mae"] == pytest.approx((0 + 2 + 0 + 0.49) / 4)


def test_agreement_without_pairs_is_null_not_zero(tmp_path: Path):
    run = _run(tmp_path, [_rec(0, "q1", None, None)])
    empty = {"kappa_quadratic": None, "kappa": None, "spearman": None, "confusion": [[0] * 6] * 6, "mae": None, "n": 0,
             "n_stale": 0, "humans": None, "by_grader": [], "mean_kappa_quadratic_by_grader": None}
    assert grades.agreement(run)["groundedness"] == {**empty, "n_without_judge_score": 0}
    _grade(run, "q1", 3, 3)
    assert grades.agreement(run)["correctness"] == {**empty, "n_without_judge_score": 1}


def test_sample_is_seeded_eligible_only_and_resumes(tmp_path: Path):
    recs = [_rec(i, f"q{i}") for i in range(8)]
    recs[1] = _rec(1, "q1", error={"kind": "timeout"})
    recs[2] = _rec(2, "q2", answer="  ")
    run = _run(tmp_path, recs)
    first = [r["test_case_id"] for r in grades.sample_cases(run, 4, seed=7)]
    assert first == [r["test_case_id"] for r in grades.sample_cases(run, 4, seed=7)]
    assert len(first) == 4 and not {"q1", "q2"} & set(first)
    assert first == sorted(first, key=lambda s: int(s[1:]))  # eval-set order
    _grade(run, first[0], 3, 3)
    assert [r["test_case_id"] for r in grades.sample_cases(run, 4, seed=7)] == first[1:]
    assert len(grades.sample_cases(run, 100, seed=0)) == 5  # 6 eligible, 1 graded


def test_grades_file_lines_and_torn_tail(tmp_path: Path):
    run = _run(tmp_path, [_rec(0, "q1")])
    line = grades.append_grade(run, {"test_case_id": "q1", "groundedness": 2, "correctness": 5, "grader": "ana"})
    assert line["schema_version"] == 2 and line["grader"] == "ana" and line["graded_at"]
    path = tmp_path / "r1" / grades.GRADES_FILE
    with open(path, "ab") as f:
        f.write(b'{"test_case_id": "q1", "groundedn')  # killed mid-write
    assert grades.read_grades(run)["q1"]["ana"]["groundedness"] == 2
    grades.append_grade(run, {"test_case_id": "q1", "groundedness": 4, "correctness": 4, "grader": "ana"})  # cuts the torn tail
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["groundedness"] == 4
    assert grades.read_grades(run)["q1"]["ana"]["correctness"] == 4


@pytest.mark.parametrize("bad", [{"test_case_id": "q1", "groundedness": 6, "correctness": 1},
                                 {"test_case_id": "q1", "groundedness": 2.5, "correctness": 1},
                                 {"test_case_id": "", "groundedness": 1, "correctness": 1},
                                 {"test_case_id": "q1", "groundedness": True, "correctness": 1}])
def test_append_refuses_bad_grades(tmp_path: Path, bad: dict):
    run = _run(tmp_path, [_rec(0, "q1")])
    with pytest.raises(ValueError):
        grades.append_grade(run, bad)
    assert grades.read_grades(run) == {}


def test_hand_edited_bad_line_names_file_and_line(tmp_path: Path):
    run = _run(tmp_path, [_rec(0, "q1")])
    _grade(run, "q1", 1, 1)
    path = tmp_path / "r1" / grades.GRADES_FILE
    with open(path, "a") as f:
        f.write('{"test_case_id": "q1", "groundedness": 9, "correctness": 1}\nnot json\n')
    with pytest.raises(InputError) as e:
        grades.read_grades(run)
    text = str(e.value)
    assert "human_grades.jsonl" in text and ":2" in text and ":3" in text and "groundedness" in text


def test_parse_grade():
    assert grades.parse_grade("4\n", allow_skip=True) == 4
    assert grades.parse_grade("\n", allow_skip=True) is None
    assert grades.parse_grade("Q", allow_skip=False) == grades.QUIT
    assert grades.parse_grade(None, allow_skip=False) == grades.QUIT  # end of input
    for junk in ("6", "-1", "4.5", "four", ""):
        with pytest.raises(ValueError, match="whole number 0-5"):
            grades.parse_grade(junk, allow_skip=False)


def test_format_case_shows_chunks_cut_in_rank_order_and_expectations():
    text = grades.format_case(_rec(0, "q1", answer="line one\n\x1b[31mred"))
    assert text.index("[1] a.md > # A > ## x") < text.index("[2] b.md > # B")
    bee = next(ln for ln in text.splitlines() if ln.strip().startswith("bee"))
    assert len(bee.strip()) == 400 and bee.endswith("…")
    assert "expected answer: the answer" in text and "key facts: fact A" in text
    assert "\x1b" not in text and "\\x1b" in text
    assert "score" not in text  # the judge's verdict is not shown to the grader


def test_graders_kept_apart_last_line_wins_per_grader(tmp_path: Path):
    run = _run(tmp_path, [_rec(0, "q1", 2, 2), _rec(1, "q2", 5, 5)])
    for who, g, c in (("ana", 0, 0), ("bob", 4, 3), ("ana", 2, 2)):  # ana regrades q1
        grades.append_grade(run, {"test_case_id": "q1", "groundedness": g, "correctness": c, "grader": who})
    by = grades.read_grades(run)["q1"]
    assert {who: g["groundedness"] for who, g in by.items()} == {"ana": 2, "bob": 4}
    # the humans' value of q1 is the graders' mean: (2 + 4) / 2 = 3; judge 2 -> |3 - 2| = 1
    a = grades.agreement(run)["groundedness"]
    assert a["n"] == 1 and a["mae"] == pytest.approx(1.0)
    # a second grader is given the same sample, less what they graded
    assert [r["test_case_id"] for r in grades.sample_cases(run, 2, seed=0, grader="bob")] == ["q2"]
    assert [r["test_case_id"] for r in grades.sample_cases(run, 2, seed=0, grader="cy")] == ["q1", "q2"]


def test_schema_1_lines_still_read(tmp_path: Path):
    run = _run(tmp_path, [_rec(0, "q1", 3, 3)])
    path = tmp_path / "r1" / grades.GRADES_FILE
    path.write_text('{"schema_version": 1, "test_case_id": "q1", "groundedness": 1, "correctness": 2, "graded_at": "x"}\n'
                    '{"schema_version": 1, "test_case_id": "q1", "groundedness": 3, "correctness": 2, "graded_at": "y"}\n')
    assert grades.read_grades(run) == {"q1": {grades.UNNAMED: {"schema_version": 1, "test_case_id": "q1", "groundedness": 3,
                                                               "correctness": 2, "graded_at": "y"}}}
    # schema 1 held both grades: a line without one is refused, as before
    path.write_text('{"schema_version": 1, "test_case_id": "q1", "groundedness": 1}\n')
    with pytest.raises(InputError, match="correctness"):
        grades.read_grades(run)


def test_grade_records_what_was_graded_and_a_stale_grade_is_left_out(tmp_path: Path):
    rec = _rec(0, "q1", 4, 4)
    run = _run(tmp_path, [rec])
    line = grades.append_grade(run, {"test_case_id": "q1", "groundedness": 4, "grader": "ana"}, record=rec)
    assert line["answer_sha256"] == hashlib.sha256(b"an answer").hexdigest()
    assert line["context_sha256"] == grades.graded_item(rec)["context_sha256"] and len(line["facts_sha256"]) == 64
    assert line.get("correctness") is None  # one aspect graded
    assert grades.agreement(run)["groundedness"]["n"] == 1 and grades.agreement(run)["correctness"]["n"] == 0
    # the case is answered again: the grade is of another answer
    run2 = _run(tmp_path / "again", [_rec(0, "q1", 4, 4, answer="a new answer")])
    grades.append_lines(run2, [line])
    a = grades.agreement(run2)["groundedness"]
    assert a["n"] == 0 and a["n_stale"] == 1


def test_agreement_among_graders_equals_the_kernels(tmp_path: Path):
    from evalkit.metrics.agreement import fleiss_kappa, krippendorff_alpha

    run = _run(tmp_path, [_rec(i, f"q{i}", 3, 3) for i in range(4)])
    table = {"q0": (5, 5, 4), "q1": (2, 3, 2), "q2": (0, 1, None), "q3": (4, 4, 4)}
    for cid, vals in table.items():
        for who, v in zip(("ana", "bob", "cy"), vals, strict=True):
            if v is not None:
                grades.append_grade(run, {"test_case_id": cid, "groundedness": v, "grader": who})
    h = grades.agreement(run)["groundedness"]["humans"]
    units = [[v for v in vals if v is not None] for vals in table.values()]
    assert h["n_cases"] == 4 and h["n_grades"] == 11 and h["n_graders"] == 3
    assert h["alpha_ordinal"] == pytest.approx(krippendorff_alpha(units, "ordinal"))
    assert h["alpha_interval"] == pytest.approx(krippendorff_alpha(units, "interval"))
    # Fleiss over the cases with the commonest number of graders (3): q0, q1, q3
    assert h["fleiss_raters"] == 3 and h["fleiss_n"] == 3
    rows = [[u.count(c) for c in range(6)] for u in (units[0], units[1], units[3])]
    assert h["fleiss_kappa"] == pytest.approx(fleiss_kappa(rows))
    assert [p["graders"] for p in h["pairwise_kappa_quadratic"]] == [["ana", "bob"], ["ana", "cy"], ["bob", "cy"]]
    # the judge (3 on every case) against each grader alone: cy graded 3 cases, the others 4
    by = grades.agreement(run)["groundedness"]["by_grader"]
    assert [(b["grader"], b["n"]) for b in by] == [("ana", 4), ("bob", 4), ("cy", 3)]
    # by hand: a constant judge against ana's (5, 2, 0, 4): Σ w E = Σ w O (E = O when one side is constant) -> kappa 0
    assert by[0]["kappa_quadratic"] == pytest.approx(0.0)


def test_corrected_means_is_ppi_over_the_scored_cases(tmp_path: Path):
    from evalkit.metrics.ppi import classical_mean_ci, ppi_mean_ci

    recs = [_rec(i, f"q{i}", g, c) for i, (g, c) in enumerate([(4, 3), (5, 4), (3, 3), (4, 5), (2, None), (5, 2)])]
    recs.append(_rec(6, "q6", {"score": 0, "method": "rule"}, {"score": 0, "method": "rule"}))  # rule scores count
    run = _run(tmp_path, recs)
    for cid, who, g, c in (("q0", "ana", 3, 2), ("q0", "bob", 4, 2), ("q1", "ana", 4, 4), ("q4", "ana", 1, 3)):
        grades.append_grade(run, {"test_case_id": cid, "groundedness": g, "correctness": c, "grader": who}, record=recs[int(cid[1])])
    # a grade of another answer: stale, so q2 counts as ungraded
    grades.append_grade(run, {"test_case_id": "q2", "groundedness": 0, "correctness": 0, "answer_sha256": "0" * 64})
    out = grades.corrected_means(grades.read_grades(run), [grades.score_row(r) for r in recs])
    assert out["method"] == "ppi++" and out["confidence"] == 0.95
    # groundedness: labeled q0 (h = (3 + 4) / 2), q1, q4; unlabeled q2, q3, q5, q6
    g = out["groundedness"]
    assert g == ({**ppi_mean_ci([3.5, 4, 1], [4, 5, 2], [3, 4, 5, 0]),
                               "judge": classical_mean_ci([4, 5, 2, 3, 4, 5, 0]), "humans": classical_mean_ci([3.5, 4, 1])})
    # correctness: q4 has no score, so only q0 and q1 are labeled
    assert out["correctness"]["n_labeled"] == 2 and out["correctness"]["n_unlabeled"] == 4
    # every scored case graded: the humans' mean and interval
    only = grades.corrected_means(grades.read_grades(run), [grades.score_row(r) for r in recs[:2]])["groundedness"]
    assert only["estimate"] == pytest.approx(3.75) and only["lambda"] == 0.0 and only["n_unlabeled"] == 0
    # under two graded cases: nothing to correct with
    assert grades.corrected_means({}, [grades.score_row(r) for r in recs])["groundedness"] is None
