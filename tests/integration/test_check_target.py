"""`evalkit check-target` (issue 26 item 3): the reference chatbot passes; a chatbot that breaks
one rule of the contract fails that rule, and only that one (one test per rule). The bots are
Python callables written here; what each must fail is read off docs/api-contract.md by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.targets.conformance import check_target

ROOT = Path(__file__).resolve().parents[2]

GOOD_BOT = '''
BREAK = {breaks!r}

def ask(request):
    chunks = [
        {{"chunk_id": "a1", "rel_path": "Getting Started/Tags.md", "heading_path": "# Tags > ## Tags in comments",
          "text": "## Tags in comments\\n\\nTag-like text", "rank": 1, "start_line": 50, "end_line": 60}},
        {{"chunk_id": "a2", "rel_path": "Getting Started/Tags.md", "heading_path": "# Tags",
          "text": "# Tags\\n\\nIntro", "rank": 2, "start_line": 1, "end_line": 10}},
    ]
    if BREAK == "heading_path_form":
        chunks[0]["heading_path"] = "/Tags/"            # LlamaIndex MarkdownNodeParser's header_path
    elif BREAK == "heading_path_own_section":
        chunks[0]["heading_path"] = "# Tags"            # the parents only
    elif BREAK == "chunk_id_unique":
        chunks[1]["chunk_id"] = "a1"
    elif BREAK == "rank_order":
        chunks[0]["rank"], chunks[1]["rank"] = 0, 1
    elif BREAK == "rel_path_relative":
        chunks[0]["rel_path"] = "/home/me/vault/Getting Started/Tags.md"
    elif BREAK == "retrieved_chunks":
        chunks = []
    if BREAK == "answers" or (BREAK == "conversation" and "history" in request):
        return {{"no_answer": True}}
    answer = {{"answer": "Tags live in comments.", "abstained": False,
               "debug": {{"retrieved_chunks": chunks[: request["k"]], "versions": {{"retriever_version": "t"}}}}}}
    return answer


def index_stats():
    return {{"docs_processed": 1, "files": ["Getting Started/Tags.md"]}}
'''


def _bot(tmp_path: Path, breaks: str | None) -> str:
    path = tmp_path / f"bot_{breaks or 'good'}.py"
    path.write_text(GOOD_BOT.format(breaks=breaks))
    return f"python:{path}:ask"


def _status(report) -> dict[str, str]:
    return {row.rule: row.status for row in report.rows}


def test_the_reference_chatbot_passes() -> None:
    report = check_target(vault=str(ROOT / "sample_vault"))
    assert report.passed, [r.to_json() for r in report.rows if r.status != "pass"]
    assert set(_status(report).values()) == {"pass"}


def test_a_conformant_bot_passes(tmp_path: Path) -> None:
    report = check_target(target=_bot(tmp_path, None))
    assert set(_status(report).values()) == {"pass"}, report.to_json()


@pytest.mark.parametrize(
    ("breaks", "status"),
    [
        ("heading_path_form", "FAIL"),
        ("heading_path_own_section", "FAIL"),
        ("chunk_id_unique", "FAIL"),
        ("rank_order", "warn"),
        ("rel_path_relative", "FAIL"),
        ("retrieved_chunks", "FAIL"),
    ],
)
def test_a_bot_that_breaks_one_rule_fails_that_rule_alone(tmp_path: Path, breaks: str, status: str) -> None:
    report = check_target(target=_bot(tmp_path, breaks))
    got = _status(report)
    assert got.pop(breaks) == status
    assert set(got.values()) == {"pass"}, report.to_json()
    row = next(r for r in report.rows if r.rule == breaks)
    assert row.detail and row.fix  # an example from the response, and what to do
    assert report.passed is (status != "FAIL")


def test_a_bot_that_does_not_answer_the_contract_fails_answers(tmp_path: Path) -> None:
    report = check_target(target=_bot(tmp_path, "answers"))
    assert [r.rule for r in report.rows] == ["answers"] and not report.passed
    assert "invalid_response" in report.rows[0].detail


def test_the_report_is_json(tmp_path: Path) -> None:
    body = json.loads(json.dumps(check_target(target=_bot(tmp_path, "chunk_id_unique")).to_json()))
    assert body["passed"] is False and body["questions"] == 5
    (row,) = [r for r in body["rows"] if r["rule"] == "chunk_id_unique"]
    assert "'a1' at positions 1 and 2" in row["detail"]


def test_the_command_exits_1_on_a_failed_rule_and_0_on_a_pass(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evalkit.cli.main import app

    bad = CliRunner().invoke(app, ["check-target", "--target", _bot(tmp_path, "heading_path_form"), "--json"])
    assert bad.exit_code == 1, bad.output
    body = json.loads(bad.stdout)
    (row,) = [r for r in body["rows"] if r["rule"] == "heading_path_form"]
    assert row["status"] == "FAIL" and "'/Tags/'" in row["detail"]
    good = CliRunner().invoke(app, ["check-target", "--vault", str(ROOT / "sample_vault"),
                                    "--eval-set", str(ROOT / "eval_set.jsonl")])
    assert good.exit_code == 0, good.output
    assert "passed" in good.stdout


def test_a_bot_that_refuses_conversations_is_warned_not_failed(tmp_path: Path) -> None:
    # Issue 40: a conversation's turn carries history and conversation_id; a bot that breaks on
    # them still answers single questions, so the row warns and the target passes.
    report = check_target(target=_bot(tmp_path, "conversation"))
    row = next(r for r in report.rows if r.rule == "conversation")
    assert row.status == "warn" and "--history none" in row.fix and report.passed
    assert next(r for r in check_target(target=_bot(tmp_path, None)).rows if r.rule == "conversation").status == "pass"
