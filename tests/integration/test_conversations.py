"""Conversations (issue 40, DESIGN.md §10): an eval-set line with `turns` is one case per
turn; a later turn is asked with the turns before it; each turn is scored as a case and
the run says how conversations fare.

The bundled eval_set.jsonl holds three conversations over sample_vault (tagged
`conversation`; the `conversations` fixture is them alone) whose follow-ups ("What action
items came out of it?") name nothing: the reference chatbot finds their note only when it
searches with the earlier questions (ReferenceConfig.history_questions).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.support import ROOT, bundled_lines, read_records, run_eval_api, write_eval_set

from evalkit.errors import BadConfig, InputError
from evalkit.evalset.load import load_eval_set, read_eval_set

VAULT = ROOT / "sample_vault"


@pytest.fixture(scope="module")
def conversations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled eval set's three conversations alone (7 turns)."""
    path = tmp_path_factory.mktemp("conversations") / "conversations.jsonl"
    path.write_text("".join(line + "\n" for line in bundled_lines(turns=True)), encoding="utf-8")
    return path

# A python: target that answers each turn with the history it was sent, so the test can
# read what each request carried; it sleeps a little at random to shuffle the workers.
BOT = '''
import json, random, time
SEEN = []

def ask(request):
    time.sleep(random.random() / 200)
    history = request.get("history")
    n = len(history or [])
    return {"answer": f"answer to {request['question']} after {n} messages",
            "references": [], "abstained": False,
            "debug": {"retrieved_chunks": [], "history_sent": history, "conversation_id": request.get("conversation_id")}}
'''


def _turns(**conv):
    return {"id": "c1", "tags": ["t"], "turns": [
        {"question": "First?", "answerable": True, "expected_answer": "One."},
        {"question": "Second?", "answerable": True, "follow_up": "follow-up", "tags": ["late"]},
        {"question": "Third?", "answerable": False, "follow_up": "clarification"},
    ], **conv}


def test_a_line_with_turns_is_one_case_per_turn(tmp_path: Path) -> None:
    es = load_eval_set([write_eval_set(tmp_path / "es.jsonl", [_turns(), {"id": "q", "question": "Alone?", "answerable": True}])])
    assert list(es.ids) == ["c1#1", "c1#2", "c1#3", "q"]
    first, second, third, alone = es.cases
    assert second.tags == ["t", "late"] and second.conversation.follow_up == "follow-up"
    assert (third.conversation.turn, third.conversation.turns) == (3, 3) and not third.answerable
    # The reference history: each earlier question and its expected_answer (none for turn 2).
    assert [(m.role, m.content) for m in third.conversation.history] == [
        ("user", "First?"), ("assistant", "One."), ("user", "Second?"), ("assistant", None)]
    assert first.conversation.history == [] and alone.conversation is None
    assert es.turns == {0: ("c1", 1), 1: ("c1", 2), 2: ("c1", 3)}


@pytest.mark.parametrize(("line", "field", "needle"), [
    (_turns(question="Top?"), "question", "belongs in each turn"),
    ({"id": "c1", "turns": []}, "turns", "non-empty list"),
    ({"id": "c1", "turns": [{"question": "Q?", "answerable": "yes"}]}, "turns[0].answerable", "JSON boolean"),
    ({"id": "c1", "turns": [{"question": "Q?", "answerable": True}, 7]}, "turns[1]", "expected an object"),
    ({"id": "c1", "turns": [{"question": "Q?", "answerable": True, "id": "x"}]}, "turns[0].id", "set by evalkit"),
    ({"id": "q", "question": "Q?", "answerable": True, "conversation": {}}, "conversation", "write `turns`"),
    ({"id": "c1", "turns": [{"question": "Q?", "answerable": True, "follow_up": 3}]}, "turns[0].follow_up", "string"),
])
def test_a_bad_conversation_is_named_to_its_turn_and_field(tmp_path: Path, line: dict, field: str, needle: str) -> None:
    es, problems = read_eval_set([write_eval_set(tmp_path / "es.jsonl", [line])])
    assert any(p.field == field and needle in p.message and p.line == 1 for p in problems), problems
    assert len(es) == 0  # a conversation with a bad turn runs not even its good ones


def test_follow_ups_fail_without_history_and_pass_with_it(tmp_path: Path, conversations: Path) -> None:
    runs = {mode: run_eval_api(eval_set=conversations, vault=VAULT, retrieval_only=True, results_dir=tmp_path,
                               run_id=mode, history=mode) for mode in ("live", "none", "reference")}
    recall = {mode: {k: v["recall_at_k_avg"] for k, v in r.metrics["by_turn"].items()} for mode, r in runs.items()}
    # Measured with the reference chatbot (history_questions = 3) on sample_vault at K = 5.
    assert recall["live"] == recall["reference"] == {"first": 1.0, "follow-up": 1.0}
    assert recall["none"] == {"first": 1.0, "follow-up": 0.0}
    for mode, r in runs.items():
        assert r.metrics["invariants"]["history"] == mode
        conv = r.metrics["conversations"]
        assert (conv["n_conversations"], conv["n_turns"]) == (3, 7)
        # Independently: per conversation, the mean hit@5 over its turns, then the mean of those.
        per: dict[str, list[float]] = {}
        for rec in read_records(r.run_dir):
            per.setdefault(rec["case"]["conversation"]["id"], []).append(rec["retrieval_metrics"]["at_k"]["5"]["recall_any"])
        assert conv["recall_at_k_avg"] == pytest.approx(math.fsum(sum(v) / len(v) for v in per.values()) / 3)
    # The summary says it in the per-position table.
    assert "## By turn" in (runs["none"].run_dir / "summary.md").read_text()
    # Without history three follow-ups' gold is retrieved by no question of the run: that is
    # said as what it is, not as "the anchors and the target probably disagree" (3 of 7 is
    # more than a third; every one of them a follow-up sent without its history).
    (never,) = [w for w in runs["none"].metrics["warnings"] if w["kind"] == "gold_never_retrieved"]
    assert (never["n"], never["n_without_history"], never["severity"]) == (3, 3, "info")
    assert "probably disagree" not in never["message"]
    assert never["message"].endswith("3 of them are follow-up turns asked without the turns before it (--history none), "
                                      "whose question may name nothing to search by")
    assert not [w for w in runs["live"].metrics["warnings"] if w["kind"] == "gold_never_retrieved"]


def test_each_turn_is_sent_the_turns_before_it(tmp_path: Path) -> None:
    (tmp_path / "bot.py").write_text(BOT)
    cases = [_turns(id=f"c{i}") for i in range(6)]
    es = write_eval_set(tmp_path / "es.jsonl", [{**c, "turns": [{**t, "answerable": True} for t in c["turns"]]} for c in cases])
    run = run_eval_api(eval_set=es, target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True, results_dir=tmp_path / "r",
                       run_id="live", concurrency=4, no_probe=True)
    records = {r["test_case_id"]: r for r in read_records(run.run_dir)}
    for i in range(6):
        third = records[f"c{i}#3"]
        # Live history: the questions and the chatbot's own answers, oldest first.
        assert third["history"] == [
            {"role": "user", "content": "First?"}, {"role": "assistant", "content": "answer to First? after 0 messages"},
            {"role": "user", "content": "Second?"}, {"role": "assistant", "content": "answer to Second? after 2 messages"},
        ]
        assert third["answer"] == "answer to Third? after 4 messages"
        assert records[f"c{i}#1"]["history"] == []
    # The request carried the conversation's id too; a single question carries neither.
    # --history reference: the eval set's answers instead of the chatbot's.
    answered = _turns()
    answered["turns"][1]["expected_answer"] = "Two."
    es = write_eval_set(tmp_path / "answered.jsonl", [answered])
    reference = run_eval_api(eval_set=es, target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True,
                             results_dir=tmp_path / "r", run_id="ref", history="reference", no_probe=True)
    again = {r["test_case_id"]: r for r in read_records(reference.run_dir)}
    assert again["c1#3"]["history"] == [{"role": "user", "content": "First?"}, {"role": "assistant", "content": "One."},
                                        {"role": "user", "content": "Second?"}, {"role": "assistant", "content": "Two."}]
    assert again["c1#3"]["answer"] == "answer to Third? after 4 messages"


def test_reference_history_needs_every_earlier_answer(tmp_path: Path) -> None:
    es = write_eval_set(tmp_path / "es.jsonl", [_turns()])
    with pytest.raises(BadConfig, match="turn\\(s\\) 2 of conversation 'c1' have none"):
        run_eval_api(eval_set=es, vault=VAULT, retrieval_only=True, results_dir=tmp_path, history="reference")


def test_selection_keeps_conversations_whole(tmp_path: Path, conversations: Path) -> None:
    both = dict(eval_set=conversations, vault=VAULT, retrieval_only=True, results_dir=tmp_path)
    assert [r["test_case_id"] for r in read_records(run_eval_api(**both, run_id="one", ids=["sv-conv-02"]).run_dir)] == [
        "sv-conv-02#1", "sv-conv-02#2"]
    # --limit counts a conversation once; a turn's id brings its whole conversation.
    assert len(read_records(run_eval_api(**both, run_id="lim", limit=2).run_dir)) == 5
    assert len(read_records(run_eval_api(**both, run_id="turn", ids=["sv-conv-03#2"]).run_dir)) == 2


def test_a_resumed_conversation_goes_on_from_its_first_unfinished_turn(tmp_path: Path) -> None:
    # As a kill leaves it: turn 1 of c0 written, the rest not.
    (tmp_path / "bot.py").write_text(BOT)
    es = write_eval_set(tmp_path / "es.jsonl", [{**_turns(id="c0"), "turns": [{**t, "answerable": True} for t in _turns()["turns"]]}])
    settings = dict(eval_set=es, target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True, results_dir=tmp_path / "r",
                    no_probe=True)
    run = run_eval_api(**settings, run_id="cut")
    results = run.run_dir / "results.jsonl"
    results.write_bytes(results.read_bytes().splitlines(keepends=True)[0])
    (run.run_dir / "metrics.json").unlink()
    resumed = run_eval_api(eval_set=es, results_dir=tmp_path / "r", resume="cut")
    records = read_records(resumed.run_dir)
    assert [r["test_case_id"] for r in records] == ["c0#1", "c0#2", "c0#3"]
    # Turn 2 was sent turn 1 as stored: its question and the chatbot's stored answer.
    assert records[1]["history"] == [{"role": "user", "content": "First?"},
                                     {"role": "assistant", "content": "answer to First? after 0 messages"}]
    assert records[2]["answer"] == "answer to Third? after 4 messages"


def test_compare_refuses_runs_asked_with_other_history(tmp_path: Path, conversations: Path) -> None:
    from evalkit.compare import compare_runs

    for mode in ("live", "none"):
        run_eval_api(eval_set=conversations, vault=VAULT, retrieval_only=True, results_dir=tmp_path, run_id=mode, history=mode)
    with pytest.raises(InputError, match="history modes differ"):
        compare_runs("live", "none", results_dir=tmp_path)
    # Asked for (with and without the history is the comparison a user wants), every number
    # stays comparable and the report says how each run was asked.
    c = compare_runs("live", "none", results_dir=tmp_path, ignore_invariants=True)
    assert c.invariants.ignored and any("history modes differ" in v for v in c.invariants.violations)
    row = next(r for r in c.deltas if r.scope == "turn:follow-up" and r.metric == "recall_any" and r.k == 5)
    assert row.comparable and row.paired_delta == -1.0


def test_a_single_question_request_is_unchanged(tmp_path: Path) -> None:
    from evalkit.schema import AskRequest
    from evalkit.targets.base import request_body

    assert set(request_body(AskRequest(question="Q?"))) == {"question", "k", "folder_mode", "vaults", "folders",
                                                           "rerank_weights", "options"}
    body = request_body(AskRequest(question="Q?", history=[{"role": "user", "content": "P?"}], conversation_id="c1"))
    assert body["history"] == [{"role": "user", "content": "P?"}] and body["conversation_id"] == "c1"
    json.dumps(body)


def test_compare_resamples_conversations(tmp_path: Path, conversations: Path) -> None:
    from evalkit.compare import compare_runs

    both = dict(eval_set=conversations, vault=VAULT, retrieval_only=True, results_dir=tmp_path)
    run_eval_api(**both, run_id="a")
    run_eval_api(**both, run_id="b", params={"history_questions": 0})
    c = compare_runs("a", "b", results_dir=tmp_path)
    assert c.stats.unit == "conversation"
    row = next(r for r in c.deltas if r.scope == "overall" and r.metric == "recall_any" and r.k == 5)
    # 4 follow-ups lost, over 3 conversations: the sign-flip test has 2^3 patterns, not 2^4.
    assert row.paired_delta == pytest.approx(-4 / 7) and row.p_value == pytest.approx(2 / 8)
    # Each flipped turn says where it sits and what each run sent it (item 8, the compare page).
    flip = next(f for f in c.flips.regressions if f.id == "sv-conv-01#2")
    assert flip.turn == "sv-conv-01 · turn 2 of 3"
    assert flip.history_a[0] == flip.history_b[0] == ["user", "What happened in the invoice export outage?"]
    from evalkit.report.html.compare import write_compare_report

    page = write_compare_report("a", "b", results_dir=tmp_path).read_text(encoding="utf-8")
    assert "sv-conv-01 · turn 2 of 3: run a was sent" in page and "you: What happened in the invoice export outage?" in page
    single = dict(eval_set=ROOT / "eval_set.jsonl", vault=VAULT, retrieval_only=True, results_dir=tmp_path / "s", limit=5)
    run_eval_api(**single, run_id="a")
    run_eval_api(**single, run_id="b")
    assert compare_runs("a", "b", results_dir=tmp_path / "s").stats.unit == "case"


def test_labeling_writes_a_turn_back_into_its_conversation(tmp_path: Path, conversations: Path) -> None:
    # Issue 40 item 6: --accept-top labels an unlabeled turn, asked with the turns before it;
    # the turn's gold supports land in its own object of the line's `turns`, nothing else moves.
    import asyncio

    from evalkit.authoring.labeling import EvalSetFile, accept_top
    from evalkit.targets import build_target

    lines = conversations.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    del first["turns"][1]["gold_supports"]
    es = tmp_path / "es.jsonl"
    es.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    before = es.read_text(encoding="utf-8").splitlines()

    async def go():
        target = build_target(vault=VAULT, timeout=30, retries=0, rps=None, params={}, target=None, api_url=None)
        try:
            return await accept_top(es, target, 1, results_dir=tmp_path / "results")
        finally:
            await target.aclose()

    result = asyncio.run(go())
    assert result.labeled == ["sv-conv-01#2"]
    after = es.read_text(encoding="utf-8").splitlines()
    assert after[1:] == before[1:]
    line = json.loads(after[0])
    turn = line["turns"][1]
    # Asked with the first turn's question and answer, the reference chatbot's top chunk is the note's action items.
    assert turn["gold_supports"][0]["heading_path"].endswith("## Action items") and turn["label_source"] == "auto"
    assert {k: v for k, v in line.items() if k != "turns"} == {k: v for k, v in first.items() if k != "turns"}
    assert line["turns"][0] == first["turns"][0] and "conversation" not in turn and "id" not in turn
    assert EvalSetFile(es).ids == [f"sv-conv-01#{n}" for n in (1, 2, 3)] + ["sv-conv-02#1", "sv-conv-02#2",
                                                                          "sv-conv-03#1", "sv-conv-03#2"]
    load_eval_set([es])  # still a valid eval set


def test_a_turns_judge_sees_the_earlier_turns_chunks_in_a_run_and_a_rejudge_alike(tmp_path: Path, conversations: Path) -> None:
    # Issue 40 item 4: an answer that reuses what an earlier turn retrieved is grounded by it.
    # The run's judge and judge_answers build the same context, so they give one number.
    import subprocess
    import sys

    run = run_eval_api(eval_set=conversations, vault=VAULT, results_dir=tmp_path, run_id="j", judge_provider="heuristic")
    first = {r["test_case_id"]: r for r in read_records(run.run_dir)}
    third = first["sv-conv-01#3"]
    own = [c["chunk_id"] for c in third["retrieved_chunks"]]
    seen = third["judge_input"]["context_chunk_ids"]
    assert seen[: len(own)] == own and len(seen) > len(own)
    earlier = {c["chunk_id"] for t in ("sv-conv-01#1", "sv-conv-01#2") for c in first[t]["retrieved_chunks"]}
    assert set(seen[len(own):]) <= earlier and set(seen) == set(own) | earlier
    assert first["sv-conv-01#1"]["judge_input"]["context_chunk_ids"] == [c["chunk_id"] for c in first["sv-conv-01#1"]["retrieved_chunks"]]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "judge_answers.py"), "--run-id", "j", "--results-dir",
                           str(tmp_path), "--judge-provider", "heuristic", "--no-cache", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    again = {r["test_case_id"]: r for r in read_records(run.run_dir)}
    for case_id, rec in first.items():
        assert again[case_id]["judge_input"]["context_sha256"] == rec["judge_input"]["context_sha256"], case_id
        assert again[case_id]["groundedness"]["score"] == rec["groundedness"]["score"], case_id


def test_validate_counts_turns_and_conversations(conversations: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "validate.py"), "--eval-set", str(conversations), "--vault",
                           str(VAULT)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "8 gold anchors of 7 cases (7 turns of 3 conversations) checked against vault" in done.stdout
    assert done.stdout.rstrip().endswith("evalkit: 7 cases (7 turns of 3 conversations) OK")


def test_shards_keep_conversations_whole_and_merge(tmp_path: Path, conversations: Path) -> None:
    # A conversation's turns go to the shard of its id; `evalkit merge` checks records by the
    # same rule (it once hashed each turn's own id and refused the merge).
    from evalkit.run.merge import merge_runs

    both = dict(eval_set=conversations, vault=VAULT, retrieval_only=True, results_dir=tmp_path, run_id="s")
    # sha256 of the ids puts sv-conv-01 and -02 in shard 3/3 and sv-conv-03 in 1/3 (2/3 is empty).
    shards = [run_eval_api(**both | {"run_id": f"s-{n}"}, shard=f"{n}/3") for n in (1, 2, 3)]
    held = [[r["case"]["conversation"]["id"] for r in read_records(s.run_dir)] if (s.run_dir / "results.jsonl").exists()
            else [] for s in shards]
    assert held == [["sv-conv-03"] * 2, [], ["sv-conv-01"] * 3 + ["sv-conv-02"] * 2]
    merged = merge_runs(["s-1", "s-2", "s-3"], results_dir=tmp_path, run_id="all")
    ids = [c.id for c in load_eval_set([conversations]).cases]
    assert sorted(r["test_case_id"] for r in read_records(merged.run_dir)) == sorted(ids) and len(ids) == 7
    assert merged.metrics["conversations"]["n_conversations"] == 3



def test_retry_errors_redoes_a_failed_turn_and_the_turns_after_it(tmp_path: Path) -> None:
    # The turns after a failed one were asked with a history that lacked its answer.
    flag = tmp_path / "broken"
    flag.touch()
    (tmp_path / "bot.py").write_text(
        "from pathlib import Path\n"
        + BOT.replace("def ask(request):\n", "def ask(request):\n"
                      f"    if request['question'] == 'Second?' and Path({str(flag)!r}).exists():\n"
                      "        raise RuntimeError('down')\n"))
    es = write_eval_set(tmp_path / "es.jsonl", [{**_turns(id="c0"), "turns": [{**t, "answerable": True} for t in _turns()["turns"]]},
                                                {"id": "q", "question": "Alone?", "answerable": True}])
    settings = dict(eval_set=es, target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True, results_dir=tmp_path / "r",
                    no_probe=True, max_error_rate=1.0)
    run = run_eval_api(**settings, run_id="r1")
    first = {r["test_case_id"]: r for r in read_records(run.run_dir)}
    assert first["c0#2"]["error"] and first["c0#3"]["history"] == [
        {"role": "user", "content": "First?"}, {"role": "assistant", "content": "answer to First? after 0 messages"},
        {"role": "user", "content": "Second?"}]
    flag.unlink()
    again = run_eval_api(eval_set=es, results_dir=tmp_path / "r", resume="r1", retry_errors=True)
    records = read_records(again.run_dir)
    assert [r["test_case_id"] for r in records] == ["c0#1", "c0#2", "c0#3", "q"]
    by_id = {r["test_case_id"]: r for r in records}
    assert not by_id["c0#2"].get("error") and by_id["c0#3"]["answer"] == "answer to Third? after 4 messages"
    assert by_id["c0#1"] == first["c0#1"] and by_id["q"] == first["q"]  # finished ones are not asked again


def test_a_turn_shown_an_earlier_turns_cut_chunk_counts_as_judged_on_cut_text(tmp_path: Path, conversations: Path) -> None:
    # The earlier turns' chunks a turn's judge sees are part of its context: if they stay cut
    # (the notes are gone), the turn is judged on cut text, and judge_answers refuses without
    # --allow-truncated-context even when the turn's own chunks are whole.
    import shutil
    import subprocess
    import sys

    vault = tmp_path / "vault"
    shutil.copytree(VAULT, vault)
    run = run_eval_api(eval_set=conversations, vault=vault, results_dir=tmp_path, run_id="c", retrieval_only=True)
    shutil.rmtree(vault)
    path = run.run_dir / "results.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    cut = {c["chunk_id"] for r in records if r["test_case_id"] in ("sv-conv-01#1", "sv-conv-01#2")
           for c in r["retrieved_chunks"] if c.get("text_truncated")}
    assert cut  # the incident note's long sections are stored cut
    for r in records:  # the third turn's own chunks: none of those, and whole (as --store-full-text stores them)
        if r["test_case_id"] == "sv-conv-01#3":
            r["retrieved_chunks"] = [{**c, "text_truncated": False} for c in r["retrieved_chunks"] if c["chunk_id"] not in cut]
            assert r["retrieved_chunks"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    judge = [sys.executable, str(ROOT / "scripts" / "judge_answers.py"), "--run-id", "c", "--results-dir", str(tmp_path),
             "--judge-provider", "heuristic", "--no-cache", "--ids", "sv-conv-01#3"]
    done = subprocess.run(judge, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "1 of 1 cases to judge hold chunk text cut to 200 characters" in done.stderr
    done = subprocess.run([*judge, "--allow-truncated-context"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "1 of 1 cases are judged on truncated (200-char) context" in done.stdout + done.stderr
