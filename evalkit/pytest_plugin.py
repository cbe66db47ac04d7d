"""evalkit's pytest plugin: assert a case's or a run's metrics inside a project's own test suite
(as DeepEval's `assert_test` does), through evalkit's own scoring (issue 42 item 5).

Registered by the `pytest11` entry point (pyproject.toml), so installing evalkit makes the
fixtures available; `-p evalkit.pytest_plugin` loads it explicitly. Two helpers, also fixtures:

    def test_port_question(evalkit_case, assert_metrics):
        record = evalkit_case(
            {"id": "port", "question": "Which port?", "answerable": True,
             "gold_supports": [{"rel_path": "notes/server.md", "heading_path": "# Server"}]},
            retrieved=[{"rel_path": "notes/server.md", "heading_path": "# Server", "rank": 1}],
            answer="Set the port to 8080 [1].",
            rubrics=["rubrics/helpfulness.toml"],
        )
        assert_metrics(record, {"recall_any@5": ">= 1", "mrr@5": "== 1", "rubric/helpfulness": ">= 2.5"})

    def test_last_run(assert_metrics):
        assert_metrics("results/2026-01-01_abc", {"recall_at_k_avg": ">= 0.8", "ndcg@10": "> 0.6"})

`evalkit_case` scores one case as run_eval scores a record (`score_case_retrieval`,
`score_case_abstention`, and rubrics / Python scorers through `judges.rubric.score_records`:
the offline heuristic, or `llm=` an LLMJudge). `assert_metrics` reads a record's values, or a
run folder's metrics.json the way `--threshold` does (`gate.floors.measured_value`), and
fails with every unmet expectation listed; a metric not measured fails, never passes.

This module imports nothing heavy at load: pytest loads it in every session of a project
that has evalkit installed.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from evalkit.store.runlog import Rec, Rm

__all__ = ["assert_metrics", "evalkit_case"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq,
}
_EXPECT = re.compile(r"^\s*(>=|<=|==|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_EPS = 1e-9


def evalkit_case(
    case: Mapping[str, Any], retrieved: Sequence[Mapping[str, Any]] = (), *, answer: str = "",
    references: Sequence[Mapping[str, Any]] = (), abstained: bool | None = None, ks: Sequence[int] = (5,),
    rubrics: Sequence[str | Path] = (), scorers: Sequence[str] = (), llm: Any = None,
) -> dict[str, Any]:
    """One case scored as a results.jsonl record: `retrieval_metrics` (every K of `ks`),
    `abstention`, and `custom_scores` for the rubric files and `python:` scorers given."""
    from evalkit.judges.rubric import load_rubric, load_scorer, score_records
    from evalkit.metrics.abstention import score_case_abstention
    from evalkit.metrics.retrieval import score_case_retrieval

    case = dict(case)
    chunks = [dict(c) for c in retrieved]
    answerable = case.get("answerable", True) is not False
    record: dict[str, Any] = {
        Rec.CASE_ID: str(case.get("id", "case")),
        "case": case,
        "question": case.get("question", ""),
        "answer": answer,
        "references": [dict(r) for r in references],
        "retrieved_chunks": chunks,
        Rec.RETRIEVAL_METRICS: score_case_retrieval(case, chunks, list(references), None, "off", list(ks)),
        "abstention": score_case_abstention(answerable, abstained),
    }
    if rubrics or scorers:
        score_records([record], [load_rubric(p) for p in rubrics], [load_scorer(s) for s in scorers], llm=llm)
    return record


def _record_value(record: Mapping[str, Any], name: str) -> float | None:
    """A record's own value of `name`: a custom metric, an @K metric (`recall_any@5`), or a
    key of its retrieval_metrics (`attribution_hit`)."""
    from evalkit.metrics.custom import CUSTOM_SCORES, is_custom_name
    from evalkit.metrics.keys import canonical_key

    if is_custom_name(name):
        value = (record.get(CUSTOM_SCORES) or {}).get(name)
    else:
        rm = record.get(Rec.RETRIEVAL_METRICS) or {}
        base, sep, k = canonical_key(name).partition("@")
        value = ((rm.get(Rm.AT_K) or {}).get(k) or {}).get(base) if sep else rm.get(base)
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _run_metrics(subject: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(subject, Mapping):
        return subject
    path = Path(subject)
    if path.is_dir():
        path = path / "metrics.json"
    import orjson

    return orjson.loads(path.read_bytes())


def assert_metrics(subject: Any, expected: Mapping[str, str | float]) -> None:
    """Assert each `{metric: ">= 0.8"}` (>=, >, <=, <, ==; a bare number means >=) of a record
    (`evalkit_case`, or a results.jsonl line) or of a run (its folder, its metrics.json path,
    or the parsed metrics.json).

    Raises:
        AssertionError: listing every expectation not met, and every metric not measured.
        ValueError: an expectation that is not `OP NUMBER`.
    """
    from evalkit.gate.floors import measured_value

    is_record = isinstance(subject, Mapping) and Rec.RETRIEVAL_METRICS in subject
    metrics = None if is_record else _run_metrics(subject)
    failures = []
    for name, want in expected.items():
        text = f">= {want}" if isinstance(want, int | float) else str(want)
        m = _EXPECT.match(text)
        if m is None:
            raise ValueError(f"{name}: expected 'OP NUMBER' with OP one of >=, >, <=, <, ==; got {want!r}")
        op, bound = m.group(1), float(m.group(2))
        if is_record:
            value = _record_value(subject, name)
        else:
            value, n = measured_value(metrics, name)  # type: ignore[arg-type]
            value = value if n else None
        if value is None:
            failures.append(f"{name}: not measured")
            continue
        # As --threshold: 0.7 against 0.7 passes (a float mean need not equal its bound to the last bit).
        if op == "==":
            ok = abs(value - bound) <= _EPS
        elif op == ">=":
            ok = value >= bound - _EPS
        elif op == "<=":
            ok = value <= bound + _EPS
        else:
            ok = _OPS[op](value, bound)
        if not ok:
            failures.append(f"{name} = {value:.6g}, expected {op} {bound:g}")
    if failures:
        raise AssertionError("evalkit metrics not met: " + "; ".join(failures))


@pytest.fixture(name="evalkit_case")
def _evalkit_case_fixture() -> Callable[..., dict[str, Any]]:
    """`evalkit_case(case, retrieved, answer=..., rubrics=..., scorers=...)`: one scored record."""
    return evalkit_case


@pytest.fixture(name="assert_metrics")
def _assert_metrics_fixture() -> Callable[[Any, Mapping[str, str | float]], None]:
    """`assert_metrics(record_or_run, {"recall_any@5": ">= 0.8"})`."""
    return assert_metrics
