"""The re-scoring fast paths give exactly what the general paths give.

score_retrieval's lean records hold only the case and the new retrieval metrics:
`RecordTable.add_retrieval(case, rm)` must store the very row (and file it under the very
groups) that `add_record({"case": case, "retrieval_metrics": rm})` does. The inputs mix
what `extract_case` reads differently: unanswerable and unlabeled cases, graded-only
supports, seed-shaped metrics without `at_k`, missing K blocks, bools, ints, NaN and
junk values, recency dicts and non-dicts, tags, groups and languages of every kind.
"""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from evalkit.metrics.aggregate import RecordTable
from evalkit.metrics.retrieval import AT_K_METRICS, score_case_retrieval

VALUES = [None, 0.0, 1.0, 0.25, 1 / 3, True, False, 0, 1, 2, float("nan"), "0.5", [], {}]


def _value(rng: random.Random) -> object:
    return rng.choice(VALUES)


def _case(rng: random.Random) -> dict:
    case: dict = {"id": f"c{rng.randint(0, 99)}"}
    if rng.random() < 0.8:
        case["answerable"] = rng.choice([True, True, True, False, None, 0])
    if rng.random() < 0.8:
        case["gold_supports"] = rng.choice([[], None, [{"rel_path": "a.md"}], [{"chunk_id": "x"}, {"rel_path": "b.md"}]])
    if rng.random() < 0.6:
        case["tags"] = rng.choice([None, [], ["a"], ["a", "b"], ["a", "a"], [1, "1"], ("t",)])
    for field, choices in (
        ("category", ["factual", "reasoning", None, 3]),
        ("difficulty", ["easy", "hard", None]),
        ("domain", ["ops", None, ""]),
        ("language", ["de", "en", None, "", 7]),
        ("doc_language", ["de", "en", None, ""]),
    ):
        if rng.random() < 0.5:
            case[field] = rng.choice(choices)
    return case


def _rm(rng: random.Random, ks: list[int]) -> dict:
    """Retrieval metrics as score_case_retrieval writes them, or odder shapes."""
    rm: dict = {}
    shape = rng.random()
    if shape < 0.6:
        blocks = {str(k): {m: _value(rng) for m in AT_K_METRICS if rng.random() < 0.95} for k in ks if rng.random() < 0.9}
        if rng.random() < 0.1:
            blocks[str(rng.choice(ks))] = None
        rm["at_k"] = blocks
    elif shape < 0.7:
        rm["at_k"] = {}
    if rng.random() < 0.7:
        rm["k"] = rng.choice([ks[0], ks[-1], 99])
    seed_names = ("recall_at_k", "mrr", "precision_at_k", "ndcg_at_k", "recall_all", "recall_frac")
    for name in (*seed_names, "scope_miss", "attribution_hit"):
        if rng.random() < 0.7:
            rm[name] = _value(rng)
    if rng.random() < 0.6:
        rm["recency"] = rng.choice([None, {"pass": _value(rng)}, {}, "cite_both", {"pass": True, "rule": "cite_both"}])
    return rm


def _table_state(t: RecordTable) -> tuple:
    return (
        t.n,
        t.data.tobytes(),  # NaN for None in both: the same constant, so the same bytes
        t.unlabeled.tobytes(),
        t.empty.tobytes(),
        t.abstention.tobytes(),
        t.tokens.tobytes(),
        t.error_kinds,
        t.judge_errors,
        t.groups,
        t.answerable_n,
        t.coverage,
    )


def _same_result(a: RecordTable, b: RecordTable) -> None:
    for full in (False, True):
        assert orjson.dumps(a.result(full_slices=full), option=orjson.OPT_SERIALIZE_NUMPY) == orjson.dumps(
            b.result(full_slices=full), option=orjson.OPT_SERIALIZE_NUMPY
        )


@pytest.mark.parametrize("seed", range(3))
def test_add_retrieval_equals_add_record_on_odd_shapes(seed: int) -> None:
    rng = random.Random(seed)
    for ks in ([10, 20], [5], [3, 1, 7]):
        general, lean = RecordTable(ks), RecordTable(ks)
        for _ in range(400):
            case, rm = _case(rng), _rm(rng, ks)
            general.add_record({"case": case, "retrieval_metrics": rm})
            lean.add_retrieval(case, rm)
        assert _table_state(lean) == _table_state(general)
        _same_result(lean, general)


def _scored_case(rng: random.Random) -> tuple[dict, list, list]:
    n = rng.randint(0, 4)
    supports = [{"chunk_id": f"g{i}", "relevance": rng.choice([0, 1, 2])} for i in range(n)]
    for s in supports:
        if rng.random() < 0.2:
            s["graded_only"] = True
    case = _case(rng)
    case["gold_supports"] = supports
    if n and rng.random() < 0.3 and not any(s.get("graded_only") for s in supports):
        case["required_support_groups"] = [rng.sample(range(n), rng.randint(0, n))]
    pool = [f"g{i}" for i in range(n)] + [f"d{j}" for j in range(6)]
    chunks = [{"chunk_id": c, "rank": r} for r, c in enumerate(rng.sample(pool, rng.randint(0, len(pool))), start=1)]
    refs = [{"chunk_id": rng.choice(pool)}] if rng.random() < 0.5 else []
    return case, chunks, refs


@pytest.mark.parametrize("seed", range(3))
def test_add_retrieval_equals_add_record_on_scored_cases(seed: int) -> None:
    rng = random.Random(50 + seed)
    ks = rng.choice([[10, 20], [3, 1], [5]])
    general, lean = RecordTable(ks), RecordTable(ks)
    for _ in range(600):
        case, chunks, refs = _scored_case(rng)
        rm = score_case_retrieval(case, chunks, refs, None, "off", ks)
        general.add_record({"case": case, "retrieval_metrics": rm})
        lean.add_retrieval(case, rm)
    assert _table_state(lean) == _table_state(general)
    _same_result(lean, general)
    assert np.count_nonzero(np.frombuffer(lean.unlabeled, dtype=np.int8)) > 0


# --------------------------------------------------------------------------- _rescore_part


def _stored_record(rng: random.Random, i: int) -> dict:
    """A results.jsonl record: stored chunks (mostly in the column-wise fast path's shape),
    and the fields of a judged run that a lean re-scoring must not read."""
    case, chunks, refs = _scored_case(rng)
    for c in chunks:
        c["rel_path"] = rng.choice(["n/a.md", "./n/a.md", "n/b.md", None])
        c["heading_path"] = rng.choice(["# A", "# A > ## B", "#A>## B", "", None])
    if chunks and rng.random() < 0.2:
        chunks.append(dict(chunks[0]))  # a duplicate: the general loop
    for s in case["gold_supports"]:
        if rng.random() < 0.4:
            s["rel_path"], s["heading_path"] = rng.choice(["n/a.md", "n/b.md"]), rng.choice(["# A", "# A > ## B", None])
    rec = {"test_case_id": case["id"], "case": case, "retrieved_chunks": chunks, "references": refs, "question": f"q{i}"}
    if rng.random() < 0.3:
        rec["error"] = rng.choice([{"kind": "timeout"}, "boom"])
    if rng.random() < 0.3:
        rec["abstention"] = {"abstained": rng.choice([True, False]), "hallucinated": rng.random() < 0.5}
    if rng.random() < 0.3:
        rec["groundedness"] = {"score": rng.choice([1, 3, 5])}
    if rng.random() < 0.2:
        rec["judge_errors"] = [{"judge": "correctness"}]
    if rng.random() < 0.5:
        rec["folder_selection"] = {"selected_folders": rng.choice([["n"], [], ["m"]])}
    rec["latency"] = {"total_ms": rng.random() * 100}
    rec["answer"] = rng.choice(["yes [1]", "", None])
    return rec


@pytest.mark.parametrize("seed", range(2))
def test_rescore_part_lean_table_equals_the_general_reduction(tmp_path, seed: int) -> None:
    from evalkit.report.summary_md import WorstCases
    from evalkit.rescore.scoring import _rescore_part, _RescoreJob
    from evalkit.store.runs import RunDir

    rng = random.Random(200 + seed)
    records = [_stored_record(rng, i) for i in range(500)]
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    ks = [3, 1]
    for snippets, cs in ((False, True), (True, False)):
        job = _RescoreJob(run=RunDir(folder), given_cases=None, ks=ks, snippets=snippets, folder_mode="on", case_sensitive=cs,
                          lean=True)
        part = _rescore_part(job)
        expected, worst = RecordTable(ks), WorstCases(ks[0])
        for rec in records:
            rec = orjson.loads(orjson.dumps(rec))
            rm = score_case_retrieval(
                rec["case"], rec["retrieved_chunks"], rec["references"], rec.get("folder_selection"), "on", ks,
                require_snippets=snippets, case_sensitive=cs,
            )
            expected.add_record({"case": rec["case"], "retrieval_metrics": rm})
            rec["retrieval_metrics"] = rm
            worst.add(rec)
        assert _table_state(part.table) == _table_state(expected)
        assert part.worst.rows() == worst.rows() and part.counts["records"] == len(records)


def test_rescore_part_names_the_line_of_a_record_without_a_case(tmp_path) -> None:
    from evalkit.errors import InputError
    from evalkit.rescore.scoring import _rescore_part, _RescoreJob
    from evalkit.store.runs import RunDir

    folder = tmp_path / "r"
    folder.mkdir()
    good = {"case": {"id": "a", "gold_supports": [{"chunk_id": "x"}]}, "retrieved_chunks": [{"chunk_id": "x", "rank": 1}]}
    lines = [good, good, {"case": "not a case", "retrieved_chunks": []}]
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    job = _RescoreJob(run=RunDir(folder), given_cases=None, ks=[1], snippets=False, folder_mode=None, case_sensitive=True,
                      lean=True)
    with pytest.raises(InputError, match=r"results\.jsonl:3: record holds no case"):
        _rescore_part(job)


# --------------------------------------------------------------------------- matcher and kernels

HEADINGS = ["# A", "# A > ## B", "#A>## B", "# AB", "# a > ## b", "", None, "# A > ## B > ### C", "# A ##"]


def test_column_wise_matcher_equals_the_general_loop() -> None:
    """GoldIndex._bulk (stored chunks) and GoldIndex._ranking (any chunks) give the same table."""
    from evalkit.evalset.anchors import GoldIndex

    rng = random.Random(9)
    taken = 0
    for _ in range(3000):
        supports = []
        for _ in range(rng.randint(0, 4)):
            s: dict = {"rel_path": rng.choice(["n/a.md", "./N/A.md", "n/b.md", None, ""])}
            if rng.random() < 0.3:
                s["chunk_id"] = rng.choice(["c1", "c2", "", 3])
            if rng.random() < 0.7:
                s["heading_path"] = rng.choice(HEADINGS)
            if rng.random() < 0.3:
                a = rng.randint(1, 20)
                s["start_line"], s["end_line"] = a, a + rng.randint(0, 5)
            if rng.random() < 0.3:
                s["snippets"] = rng.choice([["alpha"], ["zz"], [" "]])
            supports.append(s)
        chunks = []
        for r, cid in enumerate(rng.sample(["c1", "c2", "c3", "c4", "c5", "c6"], rng.randint(0, 6)), start=1):
            c = {"chunk_id": cid, "rank": r, "rel_path": rng.choice(["n/a.md", "n/A.md", "n//b.md", None, 5]),
                 "heading_path": rng.choice(HEADINGS), "text": rng.choice(["alpha beta", "", None])}
            if rng.random() < 0.5:
                a = rng.randint(1, 20)
                c["start_line"], c["end_line"] = a, a + rng.randint(0, 5)
            if rng.random() < 0.2:
                c["text_truncated"] = True
            chunks.append(c)
        for cs in (True, False):
            index = GoldIndex(supports, case_sensitive=cs)
            for rs in (False, True):
                fast = index._bulk(chunks, rs)
                if fast is None:
                    continue
                taken += 1
                assert fast == index._ranking(chunks, rs, check_order=True), (supports, chunks, cs, rs)
    assert taken > 10000


def test_idcg_table_gives_the_same_floats_when_evicted(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.evalset.anchors import match_ranking
    from evalkit.metrics import retrieval
    from evalkit.metrics.retrieval import _score_ks, ndcg

    monkeypatch.setattr(retrieval, "_IDCG_MAX", 4)
    rng = random.Random(4)
    for _ in range(500):
        n = rng.randint(1, 5)
        supports = [{"chunk_id": f"g{i}", "relevance": rng.choice([0, 0.5, 1, 2, 3, 7])} for i in range(n)]
        pool = [f"g{i}" for i in range(n)] + ["d1", "d2", "d3"]
        table = match_ranking([{"chunk_id": rng.choice(pool), "rank": r} for r in range(rng.randint(0, 12))], supports)
        ks = rng.sample([1, 2, 3, 5, 10, 40], rng.randint(1, 3))
        at_k, _, _ = _score_ks(table, ks, None)
        for k in ks:
            assert repr(at_k[str(k)]["ndcg"]) == repr(ndcg(table, k))
    assert len(retrieval._IDCG) <= 4
