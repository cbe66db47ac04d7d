"""`extract_case` reduces every record of every derive, so it was made leaner (issue 39 item 3:
the abstract-class checks on the dicts and Nones a record holds, a constant for a case
without `expected`, one C call per row of the table). The reduction must be the one it was:
the function as it was is kept here, verbatim, as the oracle, and random records with every
field present, absent, None, of another type or in a Mapping that is not a dict are reduced
both ways."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from evalkit.metrics.aggregate import (
    _JUDGES,
    _KNOWN_LATENCY_KEYS,
    _PRIMARY,
    _QUALITY_DIMENSIONS,
    _SEED_NAMES,
    AT_K_METRICS,
    LATENCY_PHASES,
    RecordTable,
    _num,
    expectation_values,
    extract_case,
    has_citations,
)
from evalkit.store.runlog import Cell, Rec, Rm

# --------------------------------------------------------------------------- the oracle: as it was

def _old_extract_case(record: Mapping, ks: list[int]) -> dict:
    """Reduce one record to the values it contributes to a cell (compare_runs pairs
    cases on exactly these values, so a paired mean is the aggregate's mean)."""
    case = record.get("case") or {}
    answerable = case.get("answerable", True) is not False
    rm = record.get(Rec.RETRIEVAL_METRICS) or {}
    at_k_in = rm.get(Rm.AT_K) or {}
    at_k: dict[str, dict[str, float | None]] = {}
    for k in ks:
        block = at_k_in.get(str(k))
        if block is None and not at_k_in and rm.get("k", ks[0]) == k:
            # A record in the seed's plain shape (no at_k): its values are at its own K.
            block = {m: rm.get(src) for m, src in _SEED_NAMES.items()}
        block = block or {}
        # Unanswerable cases never count in retrieval means, whatever a record says.
        at_k[str(k)] = {m: (_num(block.get(m)) if answerable else None) for m in AT_K_METRICS}
    prim = at_k[str(ks[0])]
    values: dict[str, float | None] = {name: prim[src] for name, src in _PRIMARY.items()}
    recency = rm.get("recency")
    values["scope_miss_rate"] = _num(rm.get("scope_miss")) if answerable else None
    values["attribution_hit_rate"] = _num(rm.get("attribution_hit")) if answerable else None
    values["recency_pass_rate"] = _num(recency.get("pass")) if answerable and isinstance(recency, Mapping) else None

    abst = record.get("abstention") or {}
    abstained = abst.get("abstained") if isinstance(abst, Mapping) else None
    judge_errors = [e for e in (record.get(Rec.JUDGE_ERRORS) or []) if e is not None]
    failed = {str(e.get("judge")) for e in judge_errors if isinstance(e, Mapping)}
    for judge in _JUDGES:
        verdict = record.get(judge)
        score = _num(verdict.get("score")) if isinstance(verdict, Mapping) else None
        # A judge failure is the instrument's: excluded from the mean, counted apart.
        values[f"{judge}_avg"] = None if judge in failed else score
    quality = record.get("answer_quality")
    for dim in _QUALITY_DIMENSIONS:
        ok = isinstance(quality, Mapping) and "answer_quality" not in failed
        values[f"answer_{dim}_avg"] = _num(quality.get(dim)) if ok else None
    # Judge means are over answered cases; an abstention on an answerable case still
    # counts in correctness (the judge scores it as a failure), see EVAL.md.
    if abstained is True:
        values["groundedness_avg"] = None
        if not answerable:
            values["correctness_avg"] = None
    budget = record.get("latency_budget")
    # None (no budget, or the target failed the case): excluded from the means, never 0.
    budget = budget if isinstance(budget, Mapping) else {}
    values["latency_budget_score_avg"] = _num(budget.get("score"))
    values["within_budget_rate"] = _num(budget.get("within"))
    validity = record.get("response_validity")
    # None (no schema, or the target failed): excluded from the rate, never 0.
    values["response_valid_rate"] = _num(validity.get("valid")) if isinstance(validity, Mapping) else None
    cites = has_citations(record)
    values["has_citations_rate"] = None if cites is None else float(cites)
    # Scored at run time on the full text; None (not applicable) when the case has no `expected`.
    values.update(expectation_values(record.get("expectations")))

    error = record.get("error")
    kind = None
    if isinstance(error, Mapping):
        kind = str(error.get("kind") or "unknown")
    elif error:
        kind = "unknown"
    answer = record.get("answer")
    empty = kind == "empty_answer" or (kind is None and isinstance(answer, str) and not answer.strip())
    latency = record.get("latency") or {}
    cost = record.get("cost") or {}
    # The target's other phases (`<phase>_ms` beyond the known ones, e.g. rerank_ms).
    extra = {k[:-3]: v for k, v in latency.items() if k not in _KNOWN_LATENCY_KEYS and k.endswith("_ms")}
    extra = {p: v for p, v in ((p, _num(v)) for p, v in extra.items()) if v is not None}
    budgets = record.get("phase_budgets")
    return {
        "answerable": answerable,
        "unlabeled": answerable and not case.get("gold_supports"),
        "values": values,
        Cell.AT_K: at_k,
        "error_kind": kind,
        "empty": empty,
        # A case the target failed has no answer to abstain from: excluded, counted in n_errors.
        "abstention": None if kind is not None else (answerable, None if abstained is None else bool(abstained)),
        Rec.JUDGE_ERRORS: [str(e.get("judge")) if isinstance(e, Mapping) else "unknown" for e in judge_errors],
        "latency": {
            "total": _num(latency.get("total_ms")),
            **{p: _num(latency.get(f"{p}_ms")) for p in LATENCY_PHASES},
        },
        "latency_extra": extra,
        # phase -> (budget_ms, score, within) where the phase was measured
        "phase_budgets": {
            p: (float(b["budget_ms"]), float(b["score"]), float(bool(b["within"])))
            for p, b in (budgets.items() if isinstance(budgets, Mapping) else ())
            if isinstance(b, Mapping) and _num(b.get("score")) is not None and _num(b.get("budget_ms")) is not None
        },
        "cost_usd": _num(cost.get("judge_cost_usd")) or 0.0,
        "cost_tokens": int(_num(cost.get("judge_tokens")) or 0),
    }



# --------------------------------------------------------------------------- random records


def _maybe(rng: random.Random, value: Any) -> Any:
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.22:
        return MappingProxyType(value) if isinstance(value, dict) else value
    if r < 0.27:
        return rng.choice([["a list"], "text", 3, True])
    return value


def _record(rng: random.Random) -> dict[str, Any]:
    num = lambda: rng.choice([0.0, 0.5, 1.0, 1, True, False, None, float("nan"), "x"])  # noqa: E731
    at_k = {str(k): _maybe(rng, {m: num() for m in AT_K_METRICS}) for k in (5, 10) if rng.random() < 0.9}
    rec: dict[str, Any] = {
        "case": _maybe(rng, {"answerable": rng.choice([True, False, None]), "gold_supports": rng.choice([[], [{}], None])}),
        Rec.RETRIEVAL_METRICS: _maybe(rng, {Rm.AT_K: at_k if rng.random() < 0.9 else None, "k": rng.choice([5, 10]),
                                             "recall_at_k": num(), "mrr": num(), "scope_miss": num(),
                                             "attribution_hit": num(), "recency": _maybe(rng, {"pass": num()})}),
        "abstention": _maybe(rng, {"abstained": rng.choice([True, False, None])}),
        Rec.JUDGE_ERRORS: rng.choice([[], None, [{"judge": "groundedness"}], [None, "oops", {"judge": "answer_quality"}]]),
        "groundedness": _maybe(rng, {"score": num()}),
        "correctness": _maybe(rng, {"score": num()}),
        "answer_quality": _maybe(rng, {d: num() for d in _QUALITY_DIMENSIONS}),
        "latency_budget": _maybe(rng, {"score": num(), "within": num()}),
        "response_validity": _maybe(rng, {"valid": num()}),
        "expectations": _maybe(rng, {"retrieved": {"include_recall": num()}, "answer": {"exclude_violated": num()}}),
        "error": rng.choice([None, None, {"kind": "timeout"}, {"kind": None}, "boom", {"kind": "empty_answer"}]),
        "answer": rng.choice(["an answer [1]", "  ", "", None, 5]),
        "references": rng.choice([[], [{}], None]),
        "latency": _maybe(rng, {"total_ms": num(), "retrieval_ms": num(), "rerank_ms": num(), "odd": 1}),
        "cost": _maybe(rng, {"judge_cost_usd": num(), "judge_tokens": rng.choice([0, 3, 2.5, None])}),
        "phase_budgets": _maybe(rng, {"retrieval": _maybe(rng, {"budget_ms": 10, "score": num(), "within": True})}),
    }
    for key in list(rec):
        if rng.random() < 0.08:
            del rec[key]
    return rec


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b if not isinstance(a, dict | list | tuple) else (
        type(a) is type(b) and len(a) == len(b)
        and (list(a) == list(b) and all(_same(a[k], b[k]) for k in a) if isinstance(a, dict)
             else all(_same(x, y) for x, y in zip(a, b, strict=True))))


@pytest.mark.parametrize("seed", range(8))
def test_the_reduction_is_the_one_it_was(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        rec = _record(rng)
        try:
            want: Any = _old_extract_case(rec, [10, 5])
        except Exception as e:  # noqa: BLE001 - a record it refused is refused the same way
            with pytest.raises(type(e)):
                extract_case(rec, [10, 5])
            continue
        got = extract_case(rec, [10, 5])
        assert _same(got, want), (rec, got, want)


def test_the_table_rows_are_the_reductions() -> None:
    rng = random.Random(7)
    table = RecordTable([10, 5])
    rows = []
    for _ in range(200):
        rec = _record(rng)
        try:
            rows.append(table.add_record(rec))
        except Exception:  # noqa: BLE001
            continue
    assert table.n == len(rows)
    width = len(table.columns)
    for i, x in enumerate(rows):
        row = table.data[i * width:(i + 1) * width]
        for name, j in table.col.items():
            if ":" in name and name.split(":")[0].isdigit():
                k, m = name.split(":")
                v = x[Cell.AT_K][k][m]
            elif name.startswith("latency:"):
                v = x["latency"][name.split(":")[1]]
            elif name == "cost_usd":
                v = x["cost_usd"]
            else:
                v = x["values"][name]
            assert (math.isnan(row[j]) and v is None) or row[j] == v, (name, row[j], v)


class _Defaulting(dict):
    def __missing__(self, key: str) -> float:
        return 0.25  # what `block[m]` would answer where `block.get(m)` says None


@pytest.mark.parametrize("seed", range(6))
def test_stored_at_k_blocks_are_reduced_as_before(seed: int) -> None:
    # The at_k blocks a stored record holds (every metric a float or None), mostly, with now
    # and then one odd value, a missing or extra metric, a NaN or infinities, or a mapping of
    # another kind (a C-call fast path for such blocks was tried and was slower: 8 `_num`
    # calls on floats cost less than the type set, the sum and the zip).
    rng = random.Random(seed)
    odd = [float("nan"), float("inf"), -float("inf"), -0.0, 1, True, None, "x", 1e308]
    for _ in range(400):
        blocks = {}
        for k in (10, 5):
            block: Any = {m: rng.choice([0.0, 0.5, 1.0, 1 / 3, 0.1, None]) for m in AT_K_METRICS}
            r = rng.random()
            if r < 0.3:
                block[rng.choice(AT_K_METRICS)] = rng.choice(odd)
            elif r < 0.35:
                del block[rng.choice(AT_K_METRICS)]
            elif r < 0.4:
                block["extra"] = 2.0
            elif r < 0.45:
                block = _Defaulting({m: v for m, v in block.items() if rng.random() < 0.8})
            elif r < 0.5:
                block = MappingProxyType(block)
            blocks[str(k)] = block
        rec = {"case": {"answerable": rng.random() < 0.9, "gold_supports": [{}]},
               Rec.RETRIEVAL_METRICS: {Rm.AT_K: blocks}}
        got, want = extract_case(rec, [10, 5]), _old_extract_case(rec, [10, 5])
        assert _same(got, want), (rec, got, want)
        assert repr(got[Cell.AT_K]) == repr(want[Cell.AT_K])  # -0.0 stays -0.0
