"""The run report's case table as data (evalkit/report/html/cases.py), read back the way the
page's script reads it: every case is there (no cut), rows in eval-set order, each row's
details found in its block, packing safe for any text. Issue 27 item 1; the browser side is
tests/browser/test_run_report_scale.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalkit.report.html.cases import (
    ALPHABET,
    BLOCK,
    FIRST_ROWS,
    case_detail,
    case_row,
    pack,
    text_ranks,
    unpack,
)
from evalkit.report.html.run import render_run_report, write_run_report
from evalkit.store.runs import RunDir
from tests.browser import synthetic
from tests.browser.hostile import HOSTILE, HOSTILE_PATH, SCRIPT, make_hostile_run


def _page_data(html: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The packed rows and blocks of a run page, unpacked: {"details": [...], "chunks": [...],
    "anchors": [...]}, split as the rows' `blocks` counts say."""
    (rows,) = re.findall(r'<template id="case-rows">([^<]*)</template>', html)
    (details,) = re.findall(r'<template id="case-details">(.*?)</template>', html, re.S)
    rows = unpack(rows)
    blocks = [unpack(p) for p in re.findall(r"<p>([^<]*)</p>", details)]
    counts = rows["blocks"]
    assert len(blocks) == counts["details"] + counts["chunks"] + counts["anchors"]
    d, c = counts["details"], counts["details"] + counts["chunks"]
    return rows, {"details": blocks[:d], "chunks": blocks[d:c], "anchors": blocks[c:]}


def _detail(rows: dict[str, Any], blocks: dict[str, list[Any]], row: int) -> dict[str, Any]:
    """Row `row`'s details, as cases.js finds them: the `detail` column (else the row's own
    position) names a detail block and a slot; chunk 0 in `chunk` means "the next new one"
    (numbered from the block's `base`), else 1 + a chunk number; chunk n is item n % size of
    chunk block n // size, and so are anchors; a rank is stored less its position.
    A chunk comes back as (anchor text, text, cut, score, rank)."""
    slot = rows["detail"][row] if "detail" in rows else row
    blk, k = blocks["details"][slot // rows["block"]], slot % rows["block"]

    def anchor(a: int) -> str:
        return blocks["anchors"][a // rows["anchor_block"]][a % rows["anchor_block"]]

    def chunk(x: int) -> tuple[str, str, bool]:
        c, i = blocks["chunks"][x // rows["chunk_block"]], x % rows["chunk_block"]
        return anchor(c["anchor"][i]), c["text"][i], bool(c["cut"][i])

    start = sum(blk["n_chunks"][:k])
    bodies, stored = [], blk["base"]
    for ref in blk["chunk"]:
        bodies.append(stored if ref == 0 else ref - 1)
        stored += ref == 0
    chunks = [
        (*chunk(bodies[j]), blk["score"][j], None if blk["rank"][j] is None else blk["rank"][j] + j - start + 1)
        for j in range(start, start + blk["n_chunks"][k])
    ]
    return {"turn": blk["turn"][k], "history": blk["history"][k],
            "answer": blk["answer"][k], "answer_cut": bool(blk["answer_cut"][k]), "chunks": chunks,
            "refs": [anchor(a) for a in blk["refs"][k]], "gold": [anchor(a) for a in blk["gold"][k]], "judge": blk["judge"][k],
            "traces": blk["traces"][k]}


def _shown(detail: dict[str, Any]) -> dict[str, Any]:
    """`case_detail`'s value as the page shows it: a chunk's path and heading as one anchor text."""
    return {**detail, "chunks": [(f"{p} › {h}" if h else p, t, cut, score, rank) for p, h, t, cut, score, rank in detail["chunks"]]}


@pytest.mark.parametrize("value", [
    {}, [], "", "a", "ab", "abc", "abcd",  # every fill (0-3 zero bytes) of the last group
    {"text": HOSTILE, "path": HOSTILE_PATH, "more": "</template></p>&amp;<!-- é ☃ \u2028 \x00"},
    list(range(1000)), [0.1 * i for i in range(50)] + [None, True, 2**40],
])
def test_packing_round_trips_and_uses_only_safe_characters(value: Any) -> None:
    text = pack(value)
    assert unpack(text) == value
    assert text[0] in "0123" and set(text[1:].encode()) <= set(ALPHABET) and (len(text) - 1) % 5 == 0
    assert not set("<>&\"'()@\\") & set(text)  # nothing that ends an element, or spells "url(" or "@import"


def test_the_alphabet_is_85_printable_characters() -> None:
    assert len(ALPHABET) == len(set(ALPHABET)) == 85
    assert all(33 <= c < 127 for c in ALPHABET)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A 6,000-case run (above the old 5,000-case cut), written out of order, and its page."""
    results = synthetic.write_run(tmp_path_factory.mktemp("big"), 6000, chunks=4)
    return results, write_run_report("big", results_dir=results).read_text(encoding="utf-8")


def test_every_case_is_in_the_table_in_eval_set_order(big: tuple[Path, str]) -> None:
    _, html = big
    rows, blocks = _page_data(html)
    assert rows["n"] == 6000 and rows["index"] == list(range(6000))  # no cut; the file's order was not this
    assert rows["id"][:2] == ["q000000", "q000001"]
    assert len(blocks["details"]) == -(-6000 // BLOCK)
    assert "Showing the first" not in html
    assert len(re.findall(r"<tr data-category=", html)) == FIRST_ROWS  # drawn before the script runs


def test_the_columns_hold_each_case_rows_values(big: tuple[Path, str]) -> None:
    _, html = big
    rows, _ = _page_data(html)
    for i in (0, 1, 9, 13, 100, 5999):
        want = case_row(synthetic.record(i, 4))
        assert rows["categories"][rows["category"][i]] == want.category
        assert rows["outcomes"][rows["outcome"][i]] == want.outcome
        assert (rows["ndcg"][i], rows["recall"][i], rows["first_rank"][i]) == (want.ndcg, want.recall, want.first_rank)
        assert rows["latency"][i] == want.latency_ms and rows["question"][i] == want.question
        assert rows["abstained"][i] == (None if want.abstained is None else int(want.abstained))
        assert rows["error"].get(str(i)) == want.error
    assert len(rows["error"]) == sum(1 for i in range(6000) if synthetic.error(i))  # only rows with an error


def test_each_row_finds_its_own_details_though_the_file_is_out_of_order(big: tuple[Path, str]) -> None:
    _, html = big
    rows, blocks = _page_data(html)
    assert "detail" in rows  # the file's order differs from the table's
    for i in (0, 7, 8, 255, 256, 3001, 5999):
        want = case_detail(synthetic.record(i, 4))
        assert _detail(rows, blocks, i) == _shown(want), i


def test_a_chunk_retrieved_again_is_stored_once_in_the_page(tmp_path: Path) -> None:
    n = 3 * BLOCK  # the popular chunks repeat across detail blocks too
    results = synthetic.write_run(tmp_path, n, chunks=3)
    path = results / "big" / "results.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for r in records:  # every case retrieves the same two notes, then one of its own
        r["retrieved_chunks"][0]["text"] = r["retrieved_chunks"][1]["text"] = "the popular note"
        r["retrieved_chunks"][0]["rel_path"] = r["retrieved_chunks"][1]["rel_path"] = "popular.md"
        r["retrieved_chunks"][0]["heading_path"] = "# A"
        r["retrieved_chunks"][1]["heading_path"] = "# B"
        r["retrieved_chunks"][2]["rank"] = 7  # a rank that is not its position
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    rows, blocks = _page_data(write_run_report("big", results_dir=results).read_text(encoding="utf-8"))
    texts = [t for blk in blocks["chunks"] for t in blk["text"]]
    assert len(texts) == 2 + n and texts.count("the popular note") == 2  # the two popular chunks once in the page
    anchors = [a for blk in blocks["anchors"] for a in blk]
    assert len(anchors) == len(set(anchors)) and {"popular.md › # A", "popular.md › # B"} <= set(anchors)
    first, second = blocks["details"][:2]
    assert first["chunk"][:6] == [0, 0, 0, 1, 2, 0]  # case 1 refers back to the first two
    assert second["chunk"][:3] == [1, 2, 0] and second["base"] == 2 + BLOCK  # so does every later block
    assert first["rank"][:6] == [0, 0, 4, 0, 0, 4]  # ranks less their position
    by_id = {r["test_case_id"]: r for r in records}
    for row in (*range(40), BLOCK, n - 1):
        assert _detail(rows, blocks, row) == _shown(case_detail(by_id[rows["id"][row]])), row


def test_chunks_beyond_the_remembered_ones_are_stored_again_and_read_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.report.html import cases

    monkeypatch.setattr(cases, "KEPT", 5)  # remember 5 chunks and 5 anchors only
    results = synthetic.write_run(tmp_path, 40, chunks=3)
    rows, blocks = _page_data(write_run_report("big", results_dir=results).read_text(encoding="utf-8"))
    texts = [t for blk in blocks["chunks"] for t in blk["text"]]
    assert len(texts) == 40 * 3  # nothing repeats in this run: every chunk is new either way
    anchors = [a for blk in blocks["anchors"] for a in blk]
    assert len(anchors) > len(set(anchors))  # an anchor seen after the first 5 is stored again
    for row in range(40):
        assert _detail(rows, blocks, row) == _shown(case_detail(synthetic.record(row, 3))), row


def test_a_cap_keeps_the_lowest_case_indexes_and_only_their_details(tmp_path: Path) -> None:
    results = synthetic.write_run(tmp_path, 30)
    html = write_run_report("big", results_dir=results, max_cases=5).read_text(encoding="utf-8")
    rows, blocks = _page_data(html)
    assert rows["index"] == [0, 1, 2, 3, 4] and sum(len(b["answer"]) for b in blocks["details"]) == 5
    for i in range(5):
        assert _detail(rows, blocks, i)["answer"] == synthetic.record(i)["answer"]
    assert "Showing the first 5 of 30 cases" in html


def test_the_written_page_is_the_rendered_page_with_data_after_the_one_script(big: tuple[Path, str]) -> None:
    results, written = big
    rendered = render_run_report(RunDir.open(results, "big"))
    stamp = re.compile(r"report made \S+")
    assert stamp.sub("", rendered) == stamp.sub("", written)  # streamed to disk, or built as one string
    assert written.count("<script") == 1
    assert written.index('<template id="case-rows">') < written.index("<script>") < written.index('<template id="case-details">')


def test_hostile_text_survives_packing_exactly(tmp_path: Path) -> None:
    results, run_id = make_hostile_run(tmp_path, n=3)
    html = write_run_report(run_id, results_dir=results).read_text(encoding="utf-8")
    assert SCRIPT not in html
    rows, blocks = _page_data(html)
    row = rows["id"].index("h-000")
    assert SCRIPT in rows["question"][row]
    detail = _detail(rows, blocks, row)
    assert HOSTILE in detail["answer"]
    assert any(HOSTILE in text for _, text, *_ in detail["chunks"])
    assert any(anchor.startswith(HOSTILE_PATH + " › ") for anchor, *_ in detail["chunks"])


def test_a_run_with_no_records_has_an_empty_table(tmp_path: Path) -> None:
    synthetic.write_run(tmp_path, 0)
    html = write_run_report("big", results_dir=tmp_path).read_text(encoding="utf-8")
    rows, blocks = _page_data(html)
    assert rows["n"] == 0 and blocks == {"details": [], "chunks": [], "anchors": []}


def test_chunks_of_unusual_types_show_what_case_detail_says(tmp_path: Path) -> None:
    """The page finds a chunk seen before by its fields as they come; a field that is missing,
    of another type or unhashable takes the long way, and what a row shows does not change."""
    results = synthetic.write_run(tmp_path, 6, chunks=2)
    path = results / "big" / "results.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    odd = [
        {"rel_path": "a.md", "heading_path": None, "text": "same", "text_truncated": True, "rank": 1, "score_final": 0.5},
        {"rel_path": "a.md", "heading_path": "", "text": "same", "text_truncated": 1, "rank": 2, "score_final": 1},  # = the first
        {"rel_path": 7, "heading_path": "# H", "text": ["not", "text"], "rank": "3", "score_final": float("nan")},
        {"rel_path": 7.0, "heading_path": "# H", "text": "t", "text_truncated": "yes", "rank": 4, "score_final": True},
        {"rel_path": "7", "heading_path": "# H", "text": "t", "text_truncated": False, "rank": None, "score_final": 1e300},
        "not a chunk",
        {"rel_path": "b.md", "heading_path": "# B", "text": "same", "text_truncated": False, "rank": 9, "score_final": -0.00005},
    ]
    for r in records:
        r["retrieved_chunks"] = odd + r["retrieved_chunks"]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    rows, blocks = _page_data(write_run_report("big", results_dir=results).read_text(encoding="utf-8"))
    by_id = {r["test_case_id"]: r for r in records}
    for row in range(6):
        assert _detail(rows, blocks, row) == _shown(case_detail(by_id[rows["id"][row]])), row
    texts = [t for blk in blocks["chunks"] for t in blk["text"]]
    assert texts.count("same") == 2  # a.md's chunk once (None and "" headings, True and 1 the same), b.md's once
    assert texts.count("t") == 2  # "7" and 7 are one path as text; 7.0 shows as "7.0"


def test_scores_are_rounded_as_pythons_round_does() -> None:
    import math
    import random

    from evalkit.report.html.cases import _round_scores, _score

    rng = random.Random(39)
    values: list[Any] = [rng.random() for _ in range(20_000)] + [rng.uniform(-2e4, 2e4) for _ in range(5_000)]
    values += [k / 1e4 + 5e-5 for k in range(-2_000, 2_000)] + [k / 2e4 for k in range(-5_000, 5_000)]  # at and near ties
    values += [rng.random() * 10 ** rng.randint(-8, 8) for _ in range(10_000)]
    values += [0.0, -0.0, math.inf, -math.inf, math.nan, None, 1e300, -1e-300, 5e-5, 1.5e-4, 2.5e-4]
    got, want = _round_scores(values), [_score(v) for v in values]
    assert [None if g is None else (g, math.copysign(1, g)) for g in got] == [
        None if w is None else (w, math.copysign(1, w)) for w in want]


def test_text_ranks_sort_as_the_page_does() -> None:
    # lower case, digit runs as numbers (zeros in front tie), blanks none, equal keys one rank;
    # past U+FFFF after U+FF01 by code point, before it by UTF-16 code unit (as the browser)
    assert text_ranks(["b10", "B9", "a", "", "A", "b09"]) == [2, 1, 0, None, 0, 1]
    assert text_ranks(["x\uff01", "x\U0001f600", "x"]) == [2, 1, 0]
    assert text_ranks(["ΑΣ", "ας", "İ", "i\u0307"]) == [1, 1, 0, 0]
    assert text_ranks([]) == []
    # the browser's own test: tests/browser/test_run_report_text_sort.py


def test_text_this_python_cannot_lower_case_as_the_browser_is_left_to_the_page(big: tuple[Path, str]) -> None:
    assert text_ranks(["a", "\u0378b"]) is None  # unassigned in every Unicode so far
    rows, _ = _page_data(big[1])
    assert rows["ranks"]["id"] == list(range(len(rows["id"])))  # q000000, q000001, ... in eval-set order


def test_a_long_text_packed_in_pieces_side_by_side_is_one_stream() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from evalkit.report.html import cases

    value = {"question": [f"question {i}: what does note {i * 7919 % 997} say?" for i in range(60_000)]}  # > 2 pieces
    assert len(orjson.dumps(value)) > 2 * cases._PIECE
    with ThreadPoolExecutor(2) as pool:
        text, again = pack(value, pool), pack(value, pool)
    assert unpack(text) == value and text == again  # the same pieces however the threads ran
    assert abs(len(text) - len(pack(value))) < 100  # each piece primed with the 32 kB before it


# ---- read side by side (issue 39 item 2): forked readers of byte ranges, merged in order


def _varied_run(tmp_path: Path, n: int = 2_000) -> tuple[Path, list[dict[str, Any]]]:
    """A run whose chunks repeat across the whole file (so across every byte range), with
    records out of order, without a case index, with odd chunks, judges' words, conversation
    turns, and a partial last line (a killed writer's)."""
    results = synthetic.write_run(tmp_path, n, chunks=5)
    path = results / "big" / "results.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for k, r in enumerate(records):
        i = r["case_index"]
        for c in r["retrieved_chunks"]:  # 60 distinct chunks, seen again and again
            c["text"] = f"popular text {(i + c['rank']) % 60}"
            c["rel_path"] = f"notes/p{(i + c['rank']) % 60 % 7}.md"
            c["score_final"] = (i * 7 + c["rank"]) % 1000 / 997
        if k % 97 == 5:
            del r["case_index"]  # sorts by its line
        if k % 89 == 3:
            r["retrieved_chunks"] = [{"rel_path": 7, "text": ["x"], "rank": "2", "score_final": True}, "not a chunk",
                                     *r["retrieved_chunks"]]
        if k % 53 == 1:
            r["groundedness"] = {"score": 4, "reasoning": "fine", "unsupported_claims": ["one claim"]}
            r["references"].append({"rel_path": f"new/{k}.md", "heading_path": "# N"})  # an anchor first seen late
        if k % 71 == 2:
            r["case"]["conversation"] = {"id": f"conv-{k}", "turn": 2, "turns": 3}
            r["history"] = [{"role": "user", "content": "earlier " * 40}, {"role": "assistant", "content": "reply"}]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + b'{"test_case_id": "torn')
    return results, records


def _table_of(results: Path, **kwargs: Any) -> tuple[Any, ...]:
    from evalkit.report.html.cases import read_case_table

    with read_case_table(RunDir.open(results, "big"), **kwargs) as t:
        return t.rows, t.first, t.total, t.shown, t.categories, t.outcomes, t.blocks, b"".join(t.detail_pieces())


@pytest.mark.parametrize("processes", [2, 3])
def test_read_side_by_side_the_case_table_is_the_one_process_table_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: int
) -> None:
    from evalkit.report.html import cases

    monkeypatch.setattr(cases, "BATCH", 300)  # several batches a reader, not a multiple of BLOCK
    monkeypatch.setattr(cases._Collector, "block_size", 300)
    results, records = _varied_run(tmp_path)
    alone = _table_of(results, processes=1)
    forks = _forks(monkeypatch)
    side_by_side = _table_of(results, processes=processes)
    assert len(forks) == processes - 1
    assert side_by_side == alone  # columns, first rows, counts and every packed block
    rows, blocks = _page_data(render_run_report(RunDir.open(results, "big")))
    by_id = {r["test_case_id"]: r for r in records}
    stored = [(a, t, cut) for blk in blocks["chunks"] for a, t, cut in zip(blk["anchor"], blk["text"], blk["cut"])]
    assert len(stored) == len(set(stored)) < 400  # each distinct chunk once, across the ranges too
    for row in range(0, rows["n"], 37):
        assert _detail(rows, blocks, row) == _shown(case_detail(by_id[rows["id"][row]])), row


def test_side_by_side_with_few_chunks_remembered_every_row_still_shows_its_details(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from evalkit.report.html import cases

    monkeypatch.setattr(cases, "KEPT", 5)  # the readers and this process each remember 5 chunks and anchors
    results, records = _varied_run(tmp_path, 600)
    monkeypatch.setattr(cases, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    pids = _forks(monkeypatch)
    rows, blocks = _page_data(render_run_report(RunDir.open(results, "big")))
    by_id = {r["test_case_id"]: r for r in records}
    for row in range(rows["n"]):
        assert _detail(rows, blocks, row) == _shown(case_detail(by_id[rows["id"][row]])), row
    assert len(pids) == 1


def test_a_small_run_or_a_running_thread_is_read_by_this_process_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import threading

    from evalkit.report.html import cases

    results, _ = _varied_run(tmp_path, 300)
    run = RunDir.open(results, "big")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert run.results_path.stat().st_size < cases.PARALLEL_MIN_BYTES and cases._spans(run, None) is None
    monkeypatch.setattr(cases, "PARALLEL_MIN_BYTES", 0)
    spans = cases._spans(run, None)
    assert spans is not None and len(spans) == 2 and spans[0][0] == 0 and spans[-1][1] is None
    assert spans[0][1] == spans[1][0] and run.results_path.read_bytes()[spans[1][0] - 1:spans[1][0]] == b"\n"
    assert spans[0][1] < run.results_path.stat().st_size / 2  # this process, which also merges and packs, reads less
    assert cases._spans(run, 1) is None
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert cases._spans(run, 2) is None  # forking a process with another thread running can deadlock
    finally:
        stop.set()
        other.join()


def _no_child_left(pids: list[int]) -> None:
    import os

    for pid in pids:
        with pytest.raises(ChildProcessError):  # ended and reaped: no zombie, nothing running
            os.waitpid(pid, os.WNOHANG)


@pytest.fixture(autouse=True)
def _threads_of_this_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report forks readers only when no other thread runs (cases.other_threads). A thread
    an earlier test of this pytest worker left behind (a loopback server's, a pool's) would
    make that depend on test order: count only the threads this test starts."""
    import threading

    from evalkit.report.html import cases

    before = set(threading.enumerate())
    monkeypatch.setattr(cases, "other_threads",
                        lambda: any(t.is_alive() and t not in before for t in threading.enumerate()))


def _forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import os

    pids: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return pids


def test_a_corrupt_record_in_a_readers_range_is_reported_at_its_line_as_by_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from evalkit.errors import InputError

    results, _ = _varied_run(tmp_path / "run", 400)
    path = results / "big" / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[350] = b'{"test_case_id": "q-bad", oops}\n'  # in the last range
    path.write_bytes(b"".join(lines))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(InputError) as alone:
        _table_of(results, processes=1)
    pids = _forks(monkeypatch)
    with pytest.raises(InputError) as side_by_side:
        _table_of(results, processes=2)
    assert len(pids) == 1
    assert str(side_by_side.value) == str(alone.value) and ":351: corrupt record" in str(alone.value)
    _no_child_left(pids)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_reader_that_dies_leaves_the_page_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from evalkit.report.html import cases

    results, _ = _varied_run(tmp_path, 500)
    alone = _table_of(results, processes=1)
    monkeypatch.setattr(cases, "BATCH", 100)
    monkeypatch.setattr(cases._Collector, "block_size", 100)
    real = cases._read_range

    def dies_after_a_batch(run: RunDir, start: int, end: int | None, spool: Any, done: int) -> None:
        real(run, start, start + 20_000, spool, done)  # a batch or two handed over, then
        os.kill(os.getpid(), 9)

    monkeypatch.setattr(cases, "_read_range", dies_after_a_batch)
    pids = _forks(monkeypatch)
    assert _table_of(results, processes=2) == alone
    assert len(pids) == 1
    _no_child_left(pids)


def test_ctrl_c_while_readers_run_ends_them_and_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile
    import time

    from evalkit.report.html import cases

    results, _ = _varied_run(tmp_path / "run", 400)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def slow(run: RunDir, start: int, end: int | None, spool: Any, done: int) -> None:
        time.sleep(600)  # still reading when Ctrl-C comes

    monkeypatch.setattr(cases, "_read_range", slow)

    pids = _forks(monkeypatch)
    real_batches = cases._Reader.batches

    def batches(self: Any) -> Any:  # Ctrl-C while this process waits for a reader's first batch
        raise KeyboardInterrupt
        yield from real_batches(self)

    monkeypatch.setattr(cases._Reader, "batches", batches)
    with pytest.raises(KeyboardInterrupt):
        _table_of(results, processes=3)
    assert len(pids) == 2
    _no_child_left(pids)
    assert list((tmp_path / "tmp").iterdir()) == []
