"""The config matrix table fits the console (issue 28: "matrix tables are unreadable piped
at 80 columns"): every column when wide, a compact table at 80 (rich's width for piped
output), one block per preset when narrower; no number is ever cut to `…`."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from evalkit.report.matrix import print_matrix, short_mark
from evalkit.run.matrix import MatrixResult, MatrixRow


def _row(preset: str, recall: float, mrr: float, ndcg: float, p50: float, p95: float, cost: float, vs: dict | None) -> MatrixRow:
    return MatrixRow(preset=preset, run_id=f"20261127T060335Z-182dbc-{preset}", params={}, flags={}, n=59,
                     values={"recall_any": recall, "mrr": mrr, "ndcg": ndcg}, metric_value=ndcg, latency_p50_ms=p50,
                     latency_p95_ms=p95, cost_usd=cost, gate_failed=False, thresholds_failed=False, incomplete=False,
                     vs_previous=vs)


def _result(cost: float = 0.0, names: tuple[str, str, str] = ("fast", "balanced", "thorough")) -> MatrixResult:
    a, b, c = names
    rows = [
        _row(a, 0.824, 0.525, 0.498, 3.0, 11.2, cost, None),
        _row(b, 0.863, 0.704, 0.650, 2.1, 6.7, cost, {"preset": a, "delta": 0.152, "significant": True}),
        _row(c, 0.941, 0.747, 0.696, 1.9, 3.9, cost, {"preset": b, "delta": 0.046, "significant": False}),
    ]
    return MatrixResult("20261127T060335Z-182dbc", Path("results/20261127T060335Z-182dbc.matrix.json"), 5,
                        "ndcg@5", rows, None)


def _render(result: MatrixResult, width: int) -> list[str]:
    out = io.StringIO()
    print_matrix(result, Console(file=out, width=width))  # a file, not a terminal: as when piped
    return out.getvalue().splitlines()


NUMBERS = ("0.824", "0.525", "0.498", "0.863", "0.704", "0.650", "0.941", "0.747", "0.696", "+0.152", "+0.046")


@pytest.mark.parametrize("width", [80, 60, 40])
def test_narrow_output_fits_and_keeps_every_number(width: int) -> None:
    lines = _render(_result(), width)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    for needle in (*NUMBERS, "fast", "balanced", "thorough", "20261127T060335Z-182dbc"):
        assert needle in text, (width, needle)


def test_80_columns_is_a_compact_table() -> None:
    lines = [line.rstrip() for line in _render(_result(), 80)]
    assert lines[0] == "config matrix 20261127T060335Z-182dbc: runs 20261127T060335Z-182dbc-<preset>"
    head = lines[1].split()
    assert head == ["preset", "n", "Recall@5", "MRR@5", "nDCG@5", "p50/p95", "ms", "vs", "prev."]  # no cost: all 0
    assert lines[3].split() == ["fast", "59", "0.824", "0.525", "0.498", "3.0/11.2", "–"]
    assert lines[4].split() == ["balanced", "59", "0.863", "0.704", "0.650", "2.1/6.7", "▲", "+0.152"]
    assert lines[5].split() == ["thorough", "59", "0.941", "0.747", "0.696", "1.9/3.9", "≈", "+0.046"]
    assert lines[6] == "vs prev.: nDCG@5 minus the row above; ▲/▼ significant, ≈ not distinguishable"


def test_a_cost_is_shown_when_a_run_cost_something_and_long_names_fold() -> None:
    lines = _render(_result(cost=0.0123, names=("bm25-fast", "bm25-balanced", "hybrid-rerank-thorough")), 80)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80 and "…" not in text
    assert "cost $" in text and text.count("0.0123") == 3
    for needle in NUMBERS:
        assert needle in text


def test_wide_output_keeps_every_column() -> None:
    lines = _render(_result(), 200)
    text = "\n".join(lines)
    assert "20261127T060335Z-182dbc-balanced" in text and "▲ significant +0.152" in text and "p95 ms" in text
    assert "…" not in text


def test_short_mark() -> None:
    assert short_mark(None) == "–" and short_mark({"delta": None}) == "–"
    assert short_mark({"delta": 0.1, "significant": True}) == "▲ +0.100"
    assert short_mark({"delta": -0.1, "significant": True}) == "▼ -0.100"
    assert short_mark({"delta": -0.1, "significant": False}) == "≈ -0.100"
