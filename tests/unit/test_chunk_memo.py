"""The derive's per-chunk memo (issue 39 item 3): the contract check and the run warnings
remember the chunks a run returns again and again (`contract.chunk_keys`), and an answer of
chunks already seen is told in a few C calls. The findings and warnings must be exactly
those of checking every chunk field by field, as before: random runs over tricky chunks
(repeated values of other types — 1, True, 1.0 —, falsy and missing ids, unhashable values,
texts that open with a heading or with spaces, missing fields, chunks that are not dicts,
ranks out of order or absent) are checked both ways, the slow way by turning the memo off
(`chunk_keys` returning None sends every answer field by field, as the code was)."""

from __future__ import annotations

import random
from typing import Any

import pytest

import evalkit.derive.health as health
import evalkit.targets.contract as contract
from evalkit.derive.health import RunHealth
from evalkit.targets.contract import ContractCheck, check_answer

_PATHS = ["a.md", "b/c.md", "/abs/d.md", "../up.md", "C:\\win.md", "", None, 7]
_HEADINGS = ["# A", "# A > ## B", "/A/B/", "A > B", "# A > C", "", "  ", None, ["# A"], "# T > ## Tags"]
_TEXTS = ["plain text", "## Tags\n\nbody", "  ## B\nx", "\n# A\n", "", "#hashtag", "## B", None, 3]
_IDS = ["x1", "x2", "x3", "", None, 1, True, 1.0, 0, False, "1", "True", "0", ["u"]]
# Values equal to each other (so equal in a memo's key) whose str() differs.
_TWINS = {1: [1, True, 1.0], 0: [0, False, 0.0]}  # True and 1.0 find 1: equal keys
_LINES = [1, True, 1.0, 2, None, "3"]


def _chunk(rng: random.Random, pool: list[dict], wild: bool) -> Any:
    """A chunk; `wild`: also unhashable values and chunks that are not dicts, which the
    contract check takes and the run warnings never did (a stored record has neither)."""
    if pool and rng.random() < (0.5 if len(pool) < 40 else 0.95):  # a run's chunks repeat
        c = dict(rng.choice(pool))  # the same values again, a new dict as a parsed record has
        for field in ("chunk_id", "start_line"):
            twins = _TWINS.get(c.get(field)) if not isinstance(c.get(field), list) else None
            if twins and rng.random() < 0.5:
                c[field] = rng.choice(twins)  # equal, but another type
    else:
        pick = (lambda xs: rng.choice(xs)) if wild else (lambda xs: rng.choice([x for x in xs if not isinstance(x, list)]))
        c = {
            "chunk_id": pick(_IDS), "rel_path": pick(_PATHS), "heading_path": pick(_HEADINGS),
            "start_line": pick(_LINES), "end_line": pick(_LINES), "text": pick(_TEXTS),
        }
        pool.append(c)
    r = rng.random()
    if r < 0.03:
        c.pop(rng.choice(["chunk_id", "text", "heading_path", "end_line"]), None)
    elif r < 0.05 and wild:
        return rng.choice(["not a chunk", None, ["a", "list"]])
    return c


def _answer(rng: random.Random, pool: list[dict], wild: bool = True) -> list[Any]:
    chunks = [_chunk(rng, pool, wild) for _ in range(rng.randint(0, 6))]
    how = rng.random()
    for pos, c in enumerate(chunks, start=1):
        if isinstance(c, dict):
            if how < 0.7:
                c["rank"] = pos
            elif how < 0.8:
                c["rank"] = None
            elif how < 0.9:
                c["rank"] = rng.choice([0, pos, pos + 1, None, True])
            # else: no rank field at all
    return chunks


def _run(rng: random.Random, n: int) -> list[dict]:
    pool: list[dict] = []
    records = []
    for i in range(n):
        case: dict[str, Any] = {"id": f"q{i}", "answerable": rng.random() < 0.9}
        if rng.random() < 0.8:
            c = rng.choice(pool) if pool else {"rel_path": "a.md", "heading_path": "# A"}
            case["gold_supports"] = [{k: c.get(k) for k in ("rel_path", "heading_path", "chunk_id", "start_line", "end_line")
                                      if isinstance(c, dict)}]
        rec: dict[str, Any] = {"test_case_id": f"q{i}", "case": case, "retrieved_chunks": _answer(rng, pool, wild=False)}
        if rng.random() < 0.03:
            rec["error"] = {"kind": "timeout"}
        records.append(rec)
    return records


@pytest.mark.parametrize("seed", range(12))
def test_each_answer_is_what_check_answer_says(seed: int) -> None:
    rng = random.Random(seed)
    pool: list[dict] = []
    check = ContractCheck()
    for _ in range(400):
        chunks = _answer(rng, pool)
        assert check.add(chunks, "q") == check_answer(chunks), chunks


@pytest.mark.parametrize("seed", range(12))
def test_run_warnings_are_those_of_reading_every_chunk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _run(random.Random(seed), 500)
    fast = RunHealth()
    for rec in records:
        fast.add(rec)
    assert fast.contract.known  # the memo was used
    # The slow way: every answer field by field (as the code was before the memo).
    monkeypatch.setattr(health, "chunk_keys", lambda chunks: None)
    monkeypatch.setattr(contract, "chunk_keys", lambda chunks: None)
    slow = RunHealth()
    for rec in records:
        slow.add(rec)
    assert not slow.contract.known
    assert fast.warnings() == slow.warnings()
    assert fast.seen_ids == slow.seen_ids
    assert {f: list(v) for f, v in fast.seen_by_file.items()} == {f: list(v) for f, v in slow.seen_by_file.items()}


def test_a_full_memo_starts_over_and_stays_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contract, "MEMO_CHUNKS", 8)
    test_run_warnings_are_those_of_reading_every_chunk(99, monkeypatch)


def test_an_equal_chunk_whose_id_reads_otherwise_is_recorded_again() -> None:
    # 1 == True == 1.0 (one memo key), but a gold chunk_id "True" matches only the second.
    chunk = {"chunk_id": 1, "rel_path": "a.md", "heading_path": "# A", "start_line": 1, "end_line": 2, "text": "x", "rank": 1}
    h = RunHealth()
    for i, cid in enumerate([1, 1, True, 1.0]):
        h.add({"test_case_id": f"q{i}", "case": {}, "retrieved_chunks": [{**chunk, "chunk_id": cid}]})
    assert h.seen_ids == {"1", "True", "1.0"}
    # The same for a str id: "1" is not the int 1's key, and two chunks "1" and 1 share an id.
    check = ContractCheck()
    assert check.add([{**chunk, "chunk_id": "1"}]) == {}
    assert "chunk_id_unique" in check.add([{**chunk, "chunk_id": "1"}, {**chunk, "chunk_id": 1, "rank": 2}])


def test_one_lookup_a_chunk_serves_the_contract_and_the_run_warnings() -> None:
    # The run warnings take "recorded already" from the contract check's memo: an answer of
    # chunks it held before, all clean, is not read field by field again; an answer with a
    # new chunk, or an unclean one, is (recording is idempotent, so the result is the same).
    reads: list[str] = []

    class Chunk(dict):  # counts the field-by-field reads (`get`); chunk_keys takes items
        def get(self, key, default=None):
            reads.append(key)
            return super().get(key, default)

    chunk = {"chunk_id": "x1", "rel_path": "a.md", "heading_path": "# A", "start_line": 1, "end_line": 2,
             "text": "x", "rank": 1}
    other = {**chunk, "chunk_id": "x2", "rel_path": "b.md", "rank": 2}
    bad = {**chunk, "chunk_id": "x3", "heading_path": "A > B"}  # a heading out of form: not clean
    h = RunHealth()

    def add(*chunks: dict) -> int:
        reads.clear()
        h.add({"test_case_id": "q", "case": {}, "retrieved_chunks": [Chunk(c) for c in chunks]})
        return len(reads)

    assert add(chunk) > 0 and h.contract.known
    assert add(chunk) == 0  # all known and clean: one lookup a chunk, no reading
    assert add(chunk, other) > 0  # a new chunk: the answer is read whole
    assert add(chunk, other) == 0
    assert add(bad) > 0 and add(bad) > 0  # not clean: read every time, as before the memo
    assert h.seen_ids == {"x1", "x2", "x3"}
    assert sorted(h.seen_by_file) == ["a.md", "b.md"]
