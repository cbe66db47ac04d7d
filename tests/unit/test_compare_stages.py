"""Per-case failure stage and its movement (issue 30 item 7; EVAL.md "Failure stages"): the
stage rule, case by case; the baseline -> candidate transition matrix on a hand-built pair of
runs with every stage on both sides; and the matrix's cells summing to the paired case count
in the JSON, the markdown, the terminal and the HTML report, with hostile ids escaped."""

from __future__ import annotations

import html as htmllib
import io
import math
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

from evalkit.compare import compare_runs
from evalkit.compare.cases import CaseTable
from evalkit.metrics.stages import STAGE_CODE, STAGES, case_stage, record_stage
from evalkit.report.compare import STAGE_CORNER, print_comparison, render_markdown, stage_label
from evalkit.report.html.compare import write_compare_report
from tests.unit.test_compare import R, make_run, rec

NAN = math.nan


# ---------------------------------------------------------------- the rule, case by case

ANSWERED_HIT = {"error": 0.0, "answerable": True, "labeled": True, "abstained": 0.0, "recall_hit": 1.0, "cited": 1.0,
                "groundedness": 4.0, "correctness": 4.0}


@pytest.mark.parametrize(("change", "stage"), [
    pytest.param({}, "pass", id="clean"),
    # precedence: a target error beats every other check
    pytest.param({"error": 1.0, "recall_hit": 0.0, "abstained": None}, "error", id="error-first"),
    # unanswerable: the decision is its only check
    pytest.param({"answerable": False, "labeled": False, "abstained": 1.0, "recall_hit": None}, "pass", id="unanswerable-abstained"),
    pytest.param({"answerable": False, "labeled": False, "abstained": 0.0, "correctness": 0.0}, "answered_unanswerable",
                 id="unanswerable-answered"),
    pytest.param({"answerable": False, "labeled": False, "abstained": None}, "unknown", id="unanswerable-abstention-unknown"),
    pytest.param({"answerable": False, "labeled": False, "abstained": NAN}, "unknown", id="nan-is-unknown"),
    # answerable: abstaining beats the retrieval check (an abstention has nothing to cite or judge)
    pytest.param({"abstained": 1.0, "recall_hit": 0.0, "cited": 0.0}, "abstained_answerable", id="abstained-before-miss"),
    pytest.param({"labeled": False, "recall_hit": None, "cited": None}, "unlabeled", id="no-gold"),
    pytest.param({"abstained": 1.0, "labeled": False}, "abstained_answerable", id="abstained-before-unlabeled"),
    pytest.param({"recall_hit": 0.0, "cited": 0.0, "groundedness": 0.0}, "retrieval_miss", id="miss-before-citation"),
    pytest.param({"cited": 0.0, "groundedness": 1.0}, "not_cited", id="not-cited-before-judges"),
    pytest.param({"groundedness": 2.999}, "unsupported", id="groundedness-below-3"),
    pytest.param({"correctness": 2.0}, "incorrect", id="correctness-below-3"),
    pytest.param({"groundedness": 1.0, "correctness": 0.0}, "unsupported", id="unsupported-before-incorrect"),
    pytest.param({"groundedness": 3.0, "correctness": 3.0}, "pass", id="3-passes"),
    # a check not measured is skipped: the case falls through to the next
    pytest.param({"abstained": None}, "pass", id="abstention-unknown-answerable"),
    pytest.param({"recall_hit": None, "cited": 0.0}, "not_cited", id="recall-not-measured"),
    pytest.param({"cited": None, "groundedness": 1.0}, "unsupported", id="no-references"),
    pytest.param({"groundedness": None, "correctness": 2.0}, "incorrect", id="groundedness-not-judged"),
    pytest.param({"groundedness": None, "correctness": NAN}, "pass", id="not-judged"),
    # --trials: a share of trials, yes at >= 0.5
    pytest.param({"recall_hit": 0.5}, "pass", id="trials-half-hit"),
    pytest.param({"recall_hit": 1 / 3}, "retrieval_miss", id="trials-third-hit"),
    pytest.param({"error": 1 / 3, "recall_hit": 1.0}, "pass", id="trials-one-error-in-three"),
])
def test_case_stage(change: dict[str, Any], stage: str) -> None:
    assert STAGES[case_stage(**{**ANSWERED_HIT, **change})] == stage


def test_stage_codes_fit_a_signed_byte() -> None:
    assert [STAGE_CODE[s] for s in STAGES] == list(range(len(STAGES))) and len(STAGES) < 128


# ---------------------------------------------------------------- a hand-built pair of runs


def _unlabeled(cid: str) -> dict[str, Any]:
    r = rec(cid, rank=None)
    r["case"]["gold_supports"] = []
    r["retrieval_metrics"]["at_k"] = {"5": dict.fromkeys(("recall_any", "recall_all", "recall_frac", "precision", "mrr", "ndcg"))}
    r["retrieval_metrics"]["attribution_hit"] = None
    return r


def _unknown(cid: str) -> dict[str, Any]:
    r = rec(cid, answerable=False, g=None, c=None)
    r["abstention"] = None
    return r


def _unanswerable(cid: str, abstained: bool) -> dict[str, Any]:
    return rec(cid, answerable=False, abstained=abstained, g=None, c=None)


# id: (run a's record, run b's record); the comment is each side's stage, by hand.
PAIRS = {
    "s01": (rec("s01", rank=1), rec("s01", rank=2)),                                  # pass -> pass
    "s02": (rec("s02", rank=1), rec("s02", rank=None)),                               # pass -> retrieval_miss
    "s03": (rec("s03", rank=None), rec("s03", rank=1)),                               # retrieval_miss -> pass
    "s04": (rec("s04", rank=None), rec("s04", rank=3, attribution=False)),            # retrieval_miss -> not_cited
    "s05": (rec("s05", rank=1, attribution=False), rec("s05", rank=1, g=2.0)),        # not_cited -> unsupported
    "s06": (rec("s06", rank=1, c=1.0), rec("s06", rank=1)),                           # incorrect -> pass
    "s07": (rec("s07", abstained=True), rec("s07", rank=None)),                       # abstained_answerable -> retrieval_miss
    "s08": (rec("s08", rank=1), rec("s08", abstained=True)),                          # pass -> abstained_answerable
    "s09": (rec("s09", error="timeout"), rec("s09", rank=1)),                         # error -> pass
    "s10": (rec("s10", rank=1), rec("s10", error="empty_answer")),                    # pass -> error (an empty answer too)
    "s11": (_unlabeled("s11"), _unlabeled("s11")),                                    # unlabeled -> unlabeled
    # no references (attribution not measured) and a failed groundedness judge: both checks skipped
    "s12": (rec("s12", rank=1, attribution=None, judge_error="groundedness"),
            rec("s12", rank=1, attribution=None, judge_error="groundedness")),        # pass -> pass
    "s13": (rec("s13", rank=2), rec("s13", rank=None)),                               # pass -> retrieval_miss
    "s14": (rec("s14", rank=1, g=2.9), rec("s14", rank=1, g=3.0)),                    # unsupported -> pass (3 passes)
    "s15": (rec("s15", rank=1), rec("s15", rank=1, c=2.5)),                           # pass -> incorrect
    "u01": (_unanswerable("u01", True), _unanswerable("u01", False)),                 # pass -> answered_unanswerable
    "u02": (_unanswerable("u02", False), _unanswerable("u02", True)),                 # answered_unanswerable -> pass
    "u03": (_unknown("u03"), _unknown("u03")),                                        # unknown -> unknown
}
# One case in each run only (same case counts, so no invariant breaks): unpaired, in no cell.
ONLY_A, ONLY_B = rec("x-a", rank=None), rec("x-b", rank=None)

# By hand, from the comments above: {(stage in a, stage in b): ids}, in STAGES order.
EXPECTED_CELLS = {
    ("pass", "pass"): ["s01", "s12"],
    ("pass", "retrieval_miss"): ["s02", "s13"],
    ("pass", "incorrect"): ["s15"],
    ("pass", "abstained_answerable"): ["s08"],
    ("pass", "answered_unanswerable"): ["u01"],
    ("pass", "error"): ["s10"],
    ("retrieval_miss", "pass"): ["s03"],
    ("retrieval_miss", "not_cited"): ["s04"],
    ("not_cited", "unsupported"): ["s05"],
    ("unsupported", "pass"): ["s14"],
    ("incorrect", "pass"): ["s06"],
    ("abstained_answerable", "retrieval_miss"): ["s07"],
    ("answered_unanswerable", "pass"): ["u02"],
    ("error", "pass"): ["s09"],
    ("unlabeled", "unlabeled"): ["s11"],
    ("unknown", "unknown"): ["u03"],
}
PAIRED = len(PAIRS)  # 18 = 15 answerable + 3 unanswerable; x-a and x-b are unpaired


@pytest.fixture
def stages_cmp(tmp_path: Path):
    make_run(tmp_path, "a", [a for a, _ in PAIRS.values()] + [ONLY_A])
    make_run(tmp_path, "b", [b for _, b in PAIRS.values()] + [ONLY_B])
    return compare_runs("a", "b", results_dir=tmp_path, resamples=R), tmp_path


def test_every_stage_occurs_on_both_sides() -> None:
    # the fixture is what it claims: each run has each stage at least once
    assert {a for a, _ in EXPECTED_CELLS} == set(STAGES) == {b for _, b in EXPECTED_CELLS}
    assert sum(len(ids) for ids in EXPECTED_CELLS.values()) == PAIRED


def test_the_matrix_cells_and_their_ids(stages_cmp) -> None:
    c, _ = stages_cmp
    st = c.stages
    assert st.available and st.k == 5 and st.order == list(STAGES)
    assert c.n["paired"] == PAIRED == st.n and c.n["only_a"] == 1 and c.n["only_b"] == 1
    assert {(x.a, x.b): x.ids for x in st.cells} == EXPECTED_CELLS
    assert [(x.a, x.b) for x in st.cells] == sorted(EXPECTED_CELLS, key=lambda ab: (STAGES.index(ab[0]), STAGES.index(ab[1])))
    assert all(x.n == len(x.ids) for x in st.cells)
    # row totals (run a) and column totals (run b), by hand from EXPECTED_CELLS:
    # a: pass 2+2+1+1+1+1 = 8 (s01 s12, s02 s13, s15, s08, u01, s10), retrieval_miss 2 (s03, s04), one each of the rest
    assert st.a == {"pass": 8, "retrieval_miss": 2, "not_cited": 1, "unsupported": 1, "incorrect": 1,
                    "abstained_answerable": 1, "answered_unanswerable": 1, "error": 1, "unlabeled": 1, "unknown": 1}
    # b: pass 2+1+1+1+1+1 = 7 (s01 s12, s03, s14, s06, u02, s09), retrieval_miss 2+1 = 3 (s02 s13, s07)
    assert st.b == {"pass": 7, "retrieval_miss": 3, "not_cited": 1, "unsupported": 1, "incorrect": 1,
                    "abstained_answerable": 1, "answered_unanswerable": 1, "error": 1, "unlabeled": 1, "unknown": 1}
    assert sum(st.a.values()) == sum(st.b.values()) == PAIRED


def test_the_case_table_agrees_with_the_per_record_rule(stages_cmp) -> None:
    # CaseTable stages from its stored columns; record_stage from one record: the same rule, two doors
    for side in (0, 1):
        table = CaseTable([5], [5])
        for pair in PAIRS.values():
            table.add(pair[side])
        assert {cid: STAGES[table.stages[table.row[cid]]] for cid in PAIRS} == {
            cid: record_stage(pair[side], 5) for cid, pair in PAIRS.items()}


def test_a_trial_case_is_staged_on_its_means() -> None:
    table = CaseTable([5], [5])
    # t1 found its gold in 2 of 3 trials (mean 0.667: a hit); t2 in 1 of 3 (0.333: a miss)
    for trial, (hit1, hit2) in enumerate(((True, False), (False, True), (True, False))):
        for cid, hit in (("t1", hit1), ("t2", hit2)):
            table.add({**rec(cid, rank=1 if hit else None), "trial": trial})
    assert [STAGES[table.stages[table.row[c]]] for c in ("t1", "t2")] == ["pass", "retrieval_miss"]


# ---------------------------------------------------------------- every format sums to the paired count


def _cell_number(text: str) -> int:
    text = text.strip().strip("*")
    return 0 if text in ("·", "") else int(text)


def _check_grid(header: list[str], rows: list[list[str]], totals: list[str], c) -> None:
    """Rows of [stage, n, ..., n, row total] and the totals row: the cells sum to the paired
    count, each row to its total, each column to its total, and they match the JSON's cells."""
    stages = header[1:-1]
    assert header[0] == STAGE_CORNER and header[-1] == "total"
    assert stages == [stage_label(s) for s in STAGES if c.stages.a.get(s) or c.stages.b.get(s)]
    rows = [[r[0].strip("*"), *r[1:]] for r in rows]  # markdown's row labels are bold
    grid = {(r[0], stages[j]): _cell_number(v) for r in rows for j, v in enumerate(r[1:-1])}
    assert sum(grid.values()) == c.n["paired"]
    for r in rows:
        assert sum(_cell_number(v) for v in r[1:-1]) == _cell_number(r[-1])
    assert [_cell_number(v) for v in totals[1:-1]] == [sum(grid[(r[0], s)] for r in rows) for s in stages]
    assert _cell_number(totals[-1]) == c.n["paired"]
    expected = {(stage_label(x.a), stage_label(x.b)): x.n for x in c.stages.cells}
    assert {key: n for key, n in grid.items() if n} == expected


def test_json_cells_sum_to_the_paired_count(stages_cmp) -> None:
    c, _ = stages_cmp
    body = orjson.loads(c.model_dump_json())["stages"]
    assert sum(cell["n"] for cell in body["cells"]) == body["n"] == c.n["paired"]
    ids = [i for cell in body["cells"] for i in cell["ids"]]
    assert sorted(ids) == sorted(PAIRS) and len(set(ids)) == len(ids)  # every paired case once, all ids listed


def test_markdown_matrix_sums_to_the_paired_count(stages_cmp) -> None:
    c, _ = stages_cmp
    lines = render_markdown(c).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#### Failure stages"))
    assert "changed stage" in lines[start] and "(K = 5)" in lines[start]
    table = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split(" | ")])
    header, body = table[0], table[2:]
    _check_grid(header, body[:-1], body[-1], c)
    # the moved cells with their ids, in the visible part; the kept ones folded
    section = "\n".join(lines[start:])
    assert "| pass → retrieval miss | 2 | s02, s13 |" in section
    assert "| cited, unsupported → pass | 1 | s14 |" in section and "| pass → supported, incorrect | 1 | s15 |" in section
    # kept: pass (s01, s12), unlabeled (s11), unknown (u03): 2 + 1 + 1 = 4
    assert "<details><summary>Cases that kept their stage (4)</summary>" in section


def test_terminal_matrix_sums_to_the_paired_count(stages_cmp) -> None:
    c, _ = stages_cmp
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=300, color_system=None, force_terminal=False))
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(STAGE_CORNER))
    header = [cell.strip() for cell in lines[start].split("┃")]
    rows = []
    for line in lines[start + 2:]:
        if "│" not in line:
            break
        rows.append([cell.strip() for cell in line.split("│")])
    _check_grid(header, rows[:-1], rows[-1], c)
    text = "\n".join(lines[start:])
    assert "pass → retrieval miss: 2  s02, s13" in text and "unknown → unknown: 1  u03" in text


def _html_grid(html: str) -> tuple[list[str], list[list[str]], list[str]]:
    """The stage table of the HTML page as text cells (a folded cell: its summary's count)."""
    table = html[html.index('<table id="stage-table">'):]
    table = table[: table.index("</table>")]
    def cells(row: str) -> list[str]:
        found = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        return [htmllib.unescape(re.sub(r"<details><summary>(\d+)</summary>.*", r"\1", x, flags=re.S)) for x in found]
    rows = [cells(r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)]
    return rows[0], rows[1:-1], rows[-1]


def test_html_matrix_sums_to_the_paired_count_and_lists_every_id(stages_cmp) -> None:
    c, root = stages_cmp
    html = write_compare_report("a", "b", results_dir=root, resamples=R).read_text(encoding="utf-8")
    header, rows, totals = _html_grid(html)
    _check_grid(header, rows, totals, c)
    ids = re.findall(r'<div class="mono stage-ids">(.*?)</div>', html, re.S)
    assert sorted(i for group in ids for i in group.split(", ")) == sorted(PAIRS)
    assert 'href="#stages"' in html  # in the page's nav


# ---------------------------------------------------------------- many ids, hostile ids

HOSTILE = "<script>alert(1)</script>"


def test_many_and_hostile_ids_all_in_json_and_html_escaped_first_few_elsewhere(tmp_path: Path) -> None:
    # seven cases that each lose their gold (pass -> retrieval miss), one with a hostile id
    ids = [HOSTILE, *(f"m{i}" for i in range(6))]
    make_run(tmp_path, "a", [rec(i, rank=1) for i in ids])
    make_run(tmp_path, "b", [rec(i, rank=None) for i in ids])
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    [cell] = c.stages.cells
    assert (cell.a, cell.b, cell.n) == ("pass", "retrieval_miss", 7) and cell.ids == sorted(ids)  # JSON: all of them
    # markdown: the first five, escaped, and how many more
    md = render_markdown(c)
    row = next(line for line in md.splitlines() if line.startswith("| pass → retrieval miss |"))
    assert row == "| pass → retrieval miss | 7 | &lt;script>alert(1)&lt;/script>, m0, m1, m2, m3 … and 2 more |"
    # terminal: the same, printed literally
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=300, color_system=None, force_terminal=False))
    assert f"pass → retrieval miss: 7  {HOSTILE}, m0, m1, m2, m3 … and 2 more" in out.getvalue()
    # HTML: every id behind the fold, escaped; never markup
    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=R).read_text(encoding="utf-8")
    [folded] = re.findall(r'<div class="mono stage-ids">(.*?)</div>', html, re.S)
    assert folded == "&lt;script&gt;alert(1)&lt;/script&gt;, m0, m1, m2, m3, m4, m5"
    assert HOSTILE not in html and len(re.findall(r"<script\b", html)) == 1  # only the page's own script


def test_a_bare_metrics_baseline_has_no_matrix(tmp_path: Path) -> None:
    make_run(tmp_path, "a", [rec("c1")])
    make_run(tmp_path, "b", [rec("c1", rank=None)])
    bare = tmp_path / "baseline.json"  # a metrics.json away from its results.jsonl
    bare.write_bytes((tmp_path / "a" / "metrics.json").read_bytes())
    c = compare_runs(bare, "b", results_dir=tmp_path, resamples=R)
    assert c.n["paired"] == 0 and not c.stages.available and c.stages.cells == [] and c.stages.n == 0
    assert "Failure stages" not in render_markdown(c)
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=200, color_system=None, force_terminal=False))
    assert "Failure stages" not in out.getvalue()
