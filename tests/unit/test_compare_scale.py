"""compare_runs at scale (issue 36 item 11): what each row's test did, the same numbers for a
seed, rows that cannot change the decision not drawn to the end, and the two runs' passes in
a forked process giving what one process gives (EVAL.md, "The test of one row")."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from evalkit.compare import compare_runs
from evalkit.compare import sources as sources_module
from evalkit.compare.sources import each_run, open_source
from evalkit.errors import InputError
from tests.unit.test_compare import make_run, rec

R = 2000


def _runs(tmp_path: Path, n: int = 80, seed: int = 0) -> None:
    """Run b re-draws the first-hit rank of half the cases (no systematic change) and finds 12
    answers it missed (a real one), over two categories."""
    gen = np.random.default_rng(seed)
    ranks = [None, 1, 2, 3, 4, 5]
    recs_a, recs_b = [], []
    for i in range(n):
        cat = "factual" if i % 2 else "multi_hop"
        ra = ranks[int(gen.integers(0, 6))]
        rb = ranks[int(gen.integers(0, 6))] if i < n // 2 else ra
        if i >= n - 12:
            ra, rb = None, 1
        recs_a.append(rec(f"q{i:03d}", rank=ra, category=cat))
        recs_b.append(rec(f"q{i:03d}", rank=rb, category=cat))
    make_run(tmp_path, "a", recs_a)
    make_run(tmp_path, "b", recs_b)


def _row(result, metric: str, scope: str = "overall", k: int | None = 5):
    (row,) = [r for r in result.deltas if r.metric == metric and r.scope == scope and r.k == k]
    return row


def test_every_tested_row_says_how_its_interval_and_p_were_computed(tmp_path: Path) -> None:
    _runs(tmp_path)
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    tested = [r for r in result.deltas if r.p_value is not None]
    assert tested and all(r.ci_method in ("exact", "bootstrap", "normal") for r in tested)
    assert all(r.p_method in ("exact", "monte_carlo", "normal") for r in tested)
    assert all(r.p_exact == (r.p_method == "exact") for r in tested)
    assert all((r.p_draws is not None) == (r.p_method == "monte_carlo") for r in tested)
    # recall_any changes by whole cases: its sign-flip p is counted exactly (the sign test)
    recall = _row(result, "recall_any")
    assert (recall.p_method, recall.p_exact, recall.p_draws) == ("exact", True, None)
    # stats counts each distinct test once, by method
    by_test = {r.test: r for r in tested}
    assert sum(result.stats.methods["p"].values()) == len(by_test)
    assert result.stats.methods["p"].get("monte_carlo", 0) == sum(r.p_method == "monte_carlo" for r in by_test.values())
    assert result.stats.normal_from == {"ci": 30, "p": 100}
    dumped = result.model_dump(mode="json")
    assert {"ci_method", "p_method", "p_draws"} <= set(dumped["deltas"][0])


def test_a_row_that_cannot_be_significant_stops_drawing_and_says_so(tmp_path: Path) -> None:
    _runs(tmp_path)
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    # by construction: MRR@5 in multi_hop moves on about 20 cases both ways, by rank differences
    # of several sizes: a Monte-Carlo test whose p is far above 0.05 after the first 100 patterns
    mrr = _row(result, "mrr", "category:multi_hop")
    assert mrr.p_method == "monte_carlo" and mrr.p_draws == 100 and mrr.p_value > 0.2 and not mrr.significant
    assert mrr.note.endswith("; p from 100 sign patterns: drawing stopped once p > 0.05 was settled")
    # overall, the 12 misses found make p small: drawn to the end
    found = _row(result, "mrr")
    assert (found.p_method, found.p_draws) == ("monte_carlo", R) and found.p_value < 0.05


def test_a_row_too_small_to_matter_is_counted_not_drawn(tmp_path: Path) -> None:
    recs_a = [rec(f"q{i}", rank=1) for i in range(30)]
    recs_b = [rec(f"q{i}", rank=3 if i < 3 else 1) for i in range(30)]
    make_run(tmp_path, "a", recs_a)
    make_run(tmp_path, "b", recs_b)
    mrr = _row(compare_runs("a", "b", results_dir=tmp_path, resamples=R), "mrr")
    # by hand: 3 changed cases, each 1 − 1/3: 2 of the 2^3 patterns as extreme, counted
    assert (mrr.n_changed, mrr.in_family, mrr.p_value, mrr.p_method, mrr.p_draws) == (3, False, 2 / 8, "exact", None)
    assert mrr.note.endswith("too few to reach p ≤ 0.05")


def test_the_same_seed_gives_the_same_comparison(tmp_path: Path) -> None:
    _runs(tmp_path)
    first = compare_runs("a", "b", results_dir=tmp_path, resamples=R, seed=3).model_dump(mode="json")
    again = compare_runs("a", "b", results_dir=tmp_path, resamples=R, seed=3).model_dump(mode="json")
    assert again["deltas"] == first["deltas"] and again["stats"] == first["stats"]
    other = compare_runs("a", "b", results_dir=tmp_path, resamples=R, seed=4).model_dump(mode="json")
    for x, y in zip(first["deltas"], other["deltas"], strict=True):
        if x["p_method"] in ("exact", "normal"):  # nothing drawn: the same for every seed
            assert y["p_value"] == x["p_value"]
        if x["ci_method"] in ("exact", "normal"):
            assert y["ci95"] == x["ci95"]
    drawn = [i for i, x in enumerate(first["deltas"]) if x["ci_method"] == "bootstrap"]
    assert drawn and any(first["deltas"][i]["ci95"] != other["deltas"][i]["ci95"] for i in drawn)


def _pid(source, extra: int = 0) -> tuple[str, int]:
    return source.run_id, os.getpid() + extra


def test_each_run_forks_for_run_b_and_keeps_the_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _runs(tmp_path)
    a, b = open_source("a", tmp_path), open_source("b", tmp_path)
    assert each_run(_pid, a, b) == (("a", os.getpid()), ("b", os.getpid()))  # small files: one process
    monkeypatch.setattr(sources_module, "_FORK_MIN_BYTES", 0)
    (ra, pa), (rb, pb) = each_run(_pid, a, b, extra=0)
    assert (ra, pa, rb) == ("a", os.getpid(), "b") and pb != os.getpid()


def test_forked_passes_give_the_same_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _runs(tmp_path)
    one = compare_runs("a", "b", results_dir=tmp_path, resamples=R).model_dump(mode="json")
    monkeypatch.setattr(sources_module, "_FORK_MIN_BYTES", 0)
    forked = compare_runs("a", "b", results_dir=tmp_path, resamples=R).model_dump(mode="json")
    assert forked == one


def test_a_failing_forked_pass_is_redone_here_and_raises_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _runs(tmp_path)
    results = tmp_path / "b" / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join([*lines[:4], b"not json\n", *lines[4:]]))
    monkeypatch.setattr(sources_module, "_FORK_MIN_BYTES", 0)
    with pytest.raises(InputError, match=r"results.jsonl:5: corrupt record"):
        compare_runs("a", "b", results_dir=tmp_path, resamples=R)
