"""Records stay bounded: a runaway answer and a flood of chunks (hardening issue, item 5).

regression: hardening issue item 5, a 20 MB answer was stored four times in one record
(84 MB) and 20,000 chunks returned for k=5 were all stored.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from evalkit import run_eval
from evalkit.config import ANSWER_STORE_CHARS, CLAIM_STORE_CHARS, LIST_STORE_ITEMS, TRUNCATE_CHARS, RunSettings
from evalkit.evalset.load import EvalSet
from evalkit.run.records import build_record, build_request
from evalkit.schema import EvalCase, ResultRecord
from evalkit.targets.base import parse_ask_response

ANSWER_CHARS = 20_000_000
N_CHUNKS = 20_000
PREFIX = "The server listens on port 8080 [1] and "
RECORD_BOUND = 1_000_000  # bytes of one results.jsonl line (this record is ~40 KB once bounded; 95 MB before)

# One sentence of 20 MB (one claim for the heuristic judge), and 20,000 chunks for k=5,
# listed in reverse rank order: the top 5 by rank are the last five in the list.
BOT = textwrap.dedent(
    f'''
    ANSWER = {PREFIX!r} + "x" * {ANSWER_CHARS - len(PREFIX)}

    def ask(request):
        chunks = [
            {{"chunk_id": f"c{{r}}", "rel_path": "ops/server.md" if r == 1 else f"other/n{{r}}.md",
              "heading_path": "# Server", "start_line": 1, "end_line": 3, "score_vector": 0.5,
              "score_lexical": 0.5, "score_final": 1 / r, "token_count": 10, "rank": r,
              "text": "The server listens on port 8080 by default." if r == 1 else "unrelated " * 40}}
            for r in range({N_CHUNKS}, 0, -1)
        ]
        refs = [{{"chunk_id": f"c{{r}}", "rel_path": f"other/n{{r}}.md", "heading_path": "# Server"}}
                for r in range(1, {N_CHUNKS} + 1)]
        return {{"answer": ANSWER, "references": refs, "abstained": False,
                 "debug": {{"retrieved_chunks": chunks}}}}
    '''
)


def test_huge_answer_and_chunk_flood_give_a_bounded_record(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bot = tmp_path / "bot.py"
    bot.write_text(BOT)
    es = tmp_path / "es.jsonl"
    # expected facts: correctness without them is unscoreable (EVAL.md), and this test reads its score
    case = {"id": "q1", "question": "Which port does the server listen on?", "answerable": True,
            "expected_key_facts": ["port 8080"], "gold_supports": [{"rel_path": "ops/server.md", "heading_path": "# Server"}]}
    es.write_text(json.dumps(case) + "\n")

    result = run_eval(
        eval_set=str(es), target=f"python:{bot}:ask", k=[5], results_dir=str(tmp_path / "results"), no_probe=True,
    )

    line = (result.run_dir / "results.jsonl").read_bytes().splitlines()[0]
    assert len(line) < RECORD_BOUND
    rec = json.loads(line)
    ResultRecord.model_validate(rec)

    # Chunks: the top 5 by rank (not the first 5 listed), and the rest counted.
    assert [c["rank"] for c in rec["retrieved_chunks"]] == [1, 2, 3, 4, 5]
    assert rec["retrieved_chunks_dropped"] == N_CHUNKS - 5
    # by hand: the gold note is the rank-1 chunk -> hit at position 1
    assert rec["retrieval_metrics"]["recall_at_k"] == 1.0 and rec["retrieval_metrics"]["mrr"] == 1.0
    assert len(rec["references"]) == LIST_STORE_ITEMS and rec["references_dropped"] == N_CHUNKS - LIST_STORE_ITEMS

    # The answer: stored once, cut, with its marker and its full length.
    assert rec["answer"] == PREFIX + "x" * (ANSWER_STORE_CHARS - len(PREFIX))
    assert rec["answer_truncated"] is True and rec["answer_chars"] == ANSWER_CHARS
    rest = line.replace(json.dumps(rec["answer"]).encode(), b"", 1)
    assert b"x" * CLAIM_STORE_CHARS not in rest  # no second copy of the answer, nor a long piece of it

    # Judged on the full answer, in-run: one claim of 20 MB, stored cut.
    ji = rec["judge_input"]
    assert ji["answer_chars"] == ANSWER_CHARS and ji["answer_was_truncated"] is False
    assert ji["context_chunk_ids"] == ["c1", "c2", "c3", "c4", "c5"]  # the judge saw the top K
    g = rec["groundedness"]
    assert g["method"] == "heuristic" and g["score"] is not None
    assert g["citations"]["claims"] == 1
    texts = g["supported_claims"] + g["unsupported_claims"]
    assert len(texts) == 1 and len(texts[0]) == CLAIM_STORE_CHARS and g["claim_texts_cut"] == 1
    assert rec["correctness"]["score"] is not None


# --------------------------------------------------------------------------- build_record

EVAL_SET = EvalSet(cases=[], files=[], version="v" * 64, commit_hash=None)


def _chunk(name: str, rank: int | None) -> dict:
    return {"chunk_id": name, "rel_path": f"{name}.md", "heading_path": "# H", "start_line": 1, "end_line": 2,
            "score_vector": 0.5, "score_lexical": 0.5, "score_final": 0.5, "text": f"text of {name}", "rank": rank,
            "token_count": 3}


def _build(raw: dict, **settings):
    gold = [{"rel_path": "gold.md", "heading_path": "# H"}]
    case = EvalCase.model_validate({"id": "c1", "question": "Where?", "answerable": True, "gold_supports": gold})
    s = RunSettings(**settings)
    result = parse_ask_response(raw, build_request(case, s))
    return build_record(0, case, result, settings=s, total_ms=1.0, run_versions={}, judge_desc=None, coverage=None,
                        eval_set=EVAL_SET)


def _raw(chunks, answer="It is in gold [1].", references=()):
    return {"answer": answer, "references": list(references), "abstained": False, "debug": {"retrieved_chunks": chunks}}


def test_chunks_are_cut_to_the_top_k_by_rank_not_list_order():
    # a chunk without a rank takes its list position (3), then all sort by rank
    chunks = [_chunk("r7", 7), _chunk("r3", 3), _chunk("none", None), _chunk("gold", 1), _chunk("r2", 2)]
    rec, context = _build(_raw(chunks), k=[2, 3])
    assert [c["chunk_id"] for c in rec["retrieved_chunks"]] == ["gold", "r2", "r3"]
    assert [c["chunk_id"] for c in context] == ["gold", "r2", "r3"]  # the judges' context: the same top K
    assert rec["retrieved_chunks_dropped"] == 2
    # by hand: the gold chunk is at position 1 of the top 3
    assert rec["retrieval_metrics"]["mrr"] == 1.0 and rec["retrieval_metrics"]["n_retrieved"] == 3
    ResultRecord.model_validate(rec)


def test_references_are_stored_up_to_the_cap_and_all_count_for_attribution():
    refs = [{"chunk_id": f"x{i}", "rel_path": f"x{i}.md", "heading_path": "# H"} for i in range(149)]
    refs.append({"chunk_id": "gold", "rel_path": "gold.md", "heading_path": "# H"})  # the 150th
    rec, _ = _build(_raw([_chunk("gold", 1)], references=refs), k=[5])
    assert len(rec["references"]) == LIST_STORE_ITEMS and rec["references_dropped"] == 150 - LIST_STORE_ITEMS
    assert rec["retrieval_metrics"]["attribution_hit"] is True
    rec, _ = _build(_raw([_chunk("gold", 1)], references=refs), k=[120])
    assert len(rec["references"]) == 120 and rec["references_dropped"] == 30  # max(100, K)


def test_retrieval_only_cuts_the_answer_here_a_judged_run_in_the_judge_runner():
    answer = "a" * (ANSWER_STORE_CHARS + 1)
    rec, _ = _build(_raw([_chunk("gold", 1)], answer=answer), retrieval_only=True)
    assert rec["answer"] == answer[:ANSWER_STORE_CHARS]
    assert rec["answer_truncated"] is True and rec["answer_chars"] == len(answer)
    ResultRecord.model_validate(rec)
    rec, _ = _build(_raw([_chunk("gold", 1)], answer=answer))
    assert rec["answer"] == answer  # whole, for the judge; the judge runner cuts it after judging


def test_nested_strings_of_a_chunk_are_cut_too():
    chunk = {**_chunk("gold", 1), "metadata": {"body": "b" * 5_000, "tags": ["t" * 300, "ok"]}}
    rec, _ = _build(_raw([chunk]))
    # by hand: every string past 200 characters is cut, at any depth
    assert rec["retrieved_chunks"][0]["metadata"] == {"body": "b" * TRUNCATE_CHARS, "tags": ["t" * TRUNCATE_CHARS, "ok"]}
    rec, _ = _build(_raw([chunk]), store_full_text=True)
    assert rec["retrieved_chunks"][0]["metadata"] == chunk["metadata"]


def test_a_chunk_is_stored_alike_with_or_without_extra_fields():
    # Without extras a chunk is copied with its text cut (its other strings are ids and
    # locations, kept whole); with one, every string is walked. Both must store the same.
    long = "y" * (TRUNCATE_CHARS + 50)
    plain = {**_chunk("c" * 300, 1), "rel_path": "p" * 300 + ".md", "heading_path": "# " + "h" * 300, "text": long}
    with_extra = {**plain, "meta": {"body": long}}
    refs = [{"chunk_id": "r" * 300, "rel_path": "q" * 300, "heading_path": "# " + "h" * 300, "start_line": 1,
             "end_line": 2}]
    for full_text in (False, True):
        a, _ = _build(_raw([plain], references=refs), store_full_text=full_text)
        b, _ = _build(_raw([with_extra], references=[{**refs[0], "text": long}]), store_full_text=full_text)
        stored_a, stored_b = a["retrieved_chunks"][0], b["retrieved_chunks"][0]
        assert stored_b.pop("meta") == {"body": long if full_text else long[:TRUNCATE_CHARS]}
        assert stored_a == stored_b and list(stored_a) == list(stored_b)
        assert stored_a["text"] == (long if full_text else long[:TRUNCATE_CHARS])
        assert stored_a["text_truncated"] is (not full_text)
        assert stored_a["chunk_id"] == plain["chunk_id"] and stored_a["heading_path"] == plain["heading_path"]
        assert b["references"][0].pop("text") == (long if full_text else long[:TRUNCATE_CHARS])
        assert a["references"] == b["references"] == refs
