"""The contract's rules on what a chatbot returns (issue 26 item 2), each broken on purpose.

Expected findings are written by hand from docs/api-contract.md: a chunk list that breaks one
rule yields that rule and no other, and the reference chatbot's own answers break none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.derive.health import UNMEASURABLE, run_warnings
from evalkit.targets.contract import RULES, ContractCheck, check_answer

ROOT = Path(__file__).resolve().parents[2]


def chunk(n: int, **kw) -> dict:
    base = {"chunk_id": f"c{n}", "rel_path": "Getting Started/Tags.md",
            "heading_path": "# Tags > ## Tags in comments", "text": "## Tags in comments\n\nbody", "rank": n}
    return {**base, **kw}


GOOD = [chunk(1), chunk(2, heading_path="# Tags", text="# Tags\n\nintro")]


def test_a_conformant_answer_breaks_nothing() -> None:
    assert check_answer(GOOD) == {}
    assert check_answer([]) == {} and check_answer(None) == {}


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        # LlamaIndex's MarkdownNodeParser header_path: '/'-separated, no # levels
        ({"heading_path": "/Tags/"}, "heading_path_form"),
        ({"heading_path": "Tags > Tags in comments"}, "heading_path_form"),
        ({"heading_path": "# Tags > Tags in comments"}, "heading_path_form"),
        # the parents only: the chunk's text opens its own section, which the path leaves out
        ({"heading_path": "# Tags"}, "heading_path_own_section"),
        ({"chunk_id": "c1"}, "chunk_id_unique"),  # the second chunk repeats the first's id
        ({"rank": 0}, "rank_order"),  # 0-based: [1, 0]
        ({"rel_path": "/home/me/vault/Getting Started/Tags.md"}, "rel_path_relative"),
        ({"rel_path": "C:\\vault\\Tags.md"}, "rel_path_relative"),
        ({"rel_path": "../other/Tags.md"}, "rel_path_relative"),
    ],
)
def test_each_rule_is_found_alone(bad: dict, rule: str) -> None:
    answer = [chunk(1), chunk(2, **bad)]
    found = check_answer(answer)
    assert list(found) == [rule], found
    assert found[rule]  # an example from the response


def test_headings_a_reader_would_call_the_same_are_not_a_breach() -> None:
    # spacing and case differ between the text's heading and the path's last component
    assert check_answer([chunk(1, heading_path="# Tags > ## tags  in comments")]) == {}
    # a chunk cut mid-section does not start with a heading: nothing to compare
    assert check_answer([chunk(1, heading_path="# Tags", text="more of the intro")]) == {}


def test_findings_count_answers_and_name_the_fix() -> None:
    check = ContractCheck()
    check.add([chunk(1, heading_path="/Tags/")], "q1")
    check.add(GOOD, "q2")
    check.add([chunk(1, heading_path="/Tags/Sub/")], "q3")
    (f,) = check.findings()
    assert (f.rule.id, f.n, f.of, f.ids) == ("heading_path_form", 2, 3, ["q1", "q3"])
    w = f.to_warning()
    assert w["kind"] == "contract_heading_path_form" and "'/Tags/'" in w["message"]
    assert RULES["heading_path_form"].fix in w["message"]


def test_the_reference_chatbots_answers_break_no_rule(tmp_path: Path) -> None:
    from evalkit import run_eval

    run_eval(str(ROOT / "eval_set.jsonl"), run_id="r", results_dir=str(tmp_path), retrieval_only=True,
             vault=str(ROOT / "sample_vault"), quiet=True, k=[10])
    check = ContractCheck()
    for line in (tmp_path / "r" / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        check.add(rec["retrieved_chunks"], rec["test_case_id"])
    assert check.checked > 40 and check.findings() == []


def _record(cid: str, chunks: list[dict], gold_path: str = "Getting Started/Tags.md") -> dict:
    case = {"id": cid, "answerable": True,
            "gold_supports": [{"rel_path": gold_path, "heading_path": "# Tags > ## Tags in comments"}]}
    return {"test_case_id": cid, "case": case, "retrieved_chunks": chunks}


def test_a_run_where_nothing_matched_is_unmeasurable() -> None:
    # LlamaIndex-style heading paths: the right notes, and not one chunk matches a gold support
    records = [_record(f"q{i}", [chunk(1, heading_path="/Tags/Tags in comments/")]) for i in range(3)]
    kinds = [w["kind"] for w in run_warnings(records)]
    assert kinds[0] == UNMEASURABLE
    assert "contract_heading_path_form" in kinds
    # one match anywhere and the run measured something
    records.append(_record("q9", [chunk(1)]))
    assert UNMEASURABLE not in [w["kind"] for w in run_warnings(records)]


def test_gold_notes_retrieved_under_another_path_form_are_named() -> None:
    records = [_record("q1", [chunk(1, rel_path="/home/me/vault/Getting Started/Tags.md")])]
    by_kind = {w["kind"]: w for w in run_warnings(records)}
    assert "gold_path_forms" in by_kind
    assert "'Getting Started/Tags.md' retrieved as '/home/me/vault/Getting Started/Tags.md'" in by_kind["gold_path_forms"]["message"]
    assert "contract_rel_path_relative" in by_kind and UNMEASURABLE in by_kind


def test_own_section_rule_spares_what_correct_chunkers_do() -> None:
    # LangChain strip_headers=False: the parents' headings open the text, then the chunk's own
    assert check_answer([chunk(1, heading_path="# Urgency > ## Introduction",
                               text="# Urgency\n\n## Introduction\n\nbody")]) == {}
    # a chunk cut inside a code block whose first line is a shell comment
    assert check_answer([chunk(1, heading_path="# A > ## Setup", text="# install it first\npip install x")]) == {}
    # but a path that stops above the chunk's own, deeper heading is named
    assert list(check_answer([chunk(1, heading_path="# A > ## Setup", text="### Linux\n\nsteps")])) == [
        "heading_path_own_section"
    ]
