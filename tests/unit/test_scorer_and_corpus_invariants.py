"""Issue 30 items 4 and 5 on hand-made metrics.json bodies: the scorer (evalkit version +
metric registry hash) is an invariant, a run without one is a warning; a changed corpus (the
target's index stats) is a warning, and a broken invariant with `same_corpus`; the index's
coverage is in the run summary rows and in every compare renderer."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalkit.compare import compare_runs
from evalkit.compare.compute import IncomparableRuns
from evalkit.gate.invariants import check_invariants, invariant_warnings, scorer_identity
from evalkit.gate.regressions import gate_result
from evalkit.metrics.registry import METRICS, registry_hash
from evalkit.report.compare import print_comparison, render_markdown
from evalkit.report.html.compare import compare_view, write_compare_report
from evalkit.report.run import summary_rows
from tests.unit.test_compare import RUN_A, RUN_B, R, make_run

OLD = {"evalkit_version": "0.0.9", "registry_hash": "0" * 64}


def _cov(docs: int, zero: int, attempted: int, version: str) -> dict[str, Any]:
    """metrics.json's aggregate `indexing_coverage` (summarize_indexing_coverage's shape)."""
    return {"index_version": version, "chunker_version": "md-heading-v2", "docs_processed": docs, "docs_with_0_chunks": zero,
            "no_chunks_generated_rate": zero / docs, "chunks_attempted": attempted, "chunks_embedded": attempted,
            "chunks_skipped": 0, "chunks_skipped_rate": 0.0, "chunks_skipped_due_to_context_rate": 0.0}


def _metrics(run_id: str, *, scorer: dict | None = None, cov: dict | None = None) -> dict[str, Any]:
    inv: dict[str, Any] = {"judge": None, "debug_fields_missing": []}
    if scorer is not None:
        inv["scorer"] = scorer
    agg: dict[str, Any] = {"k": 5, "recall_at_k_avg": 0.8, "mrr_avg": 0.6, "n": {"recall_at_k_avg": 10, "mrr_avg": 10}}
    if cov is not None:
        agg["indexing_coverage"] = cov
    return {"run_id": run_id, "dataset_version": "d" * 64, "total_tests": 10, "ks": [5], "invariants": inv,
            "aggregate_metrics": agg}


# ---------------------------------------------------------------- the registry hash


def test_the_registry_hash_follows_definitions_not_labels_or_thresholds() -> None:
    assert registry_hash() == registry_hash(METRICS) and len(registry_hash()) == 64
    first = METRICS[0]
    relabelled = (dataclasses.replace(first, label="Hit rate@{k}", margin=0.5), *METRICS[1:])
    assert registry_hash(relabelled) == registry_hash()  # how it is shown or gated is not what it means
    flipped = (dataclasses.replace(first, direction="lower" if first.direction == "higher" else "higher"), *METRICS[1:])
    assert registry_hash(flipped) != registry_hash()
    assert registry_hash(METRICS[:-1]) != registry_hash()  # a metric removed (or added)


def test_scorer_identity_is_the_version_and_the_registry_hash() -> None:
    from evalkit import __version__

    assert scorer_identity() == {"evalkit_version": __version__, "registry_hash": registry_hash()}


# ---------------------------------------------------------------- the scorer as an invariant


def test_another_scorer_is_a_violation_naming_both_and_the_rescore() -> None:
    now = scorer_identity()
    [violation] = check_invariants(_metrics("old", scorer=OLD), _metrics("new", scorer=now))
    assert violation == (
        f"scorers differ (evalkit 0.0.9, registry 000000000000 vs evalkit {now['evalkit_version']}, registry "
        f"{now['registry_hash'][:12]}): the metrics were computed by different definitions; re-score the run(s) made "
        f"with another scorer than this evalkit's (evalkit {now['evalkit_version']}, registry {now['registry_hash'][:12]}): "
        "score_retrieval.py --run-id old, then compare again"
    )
    assert check_invariants(_metrics("x", scorer=now), _metrics("y", scorer=now)) == []
    gate = gate_result(_metrics("old", scorer=OLD), _metrics("new", scorer=now))
    assert gate["passed"] is False and gate["failures"][-1] == f"invariant broken: {violation}"
    assert gate_result(_metrics("old", scorer=OLD), _metrics("new", scorer=now), ignore_invariants=True)["passed"] is True


@pytest.mark.parametrize("missing", ["baseline", "new run"])
def test_a_scorer_recorded_by_one_run_only_is_a_warning(missing: str) -> None:
    now = scorer_identity()
    base = _metrics("old", scorer=None if missing == "baseline" else now)
    new = _metrics("new", scorer=None if missing == "new run" else now)
    assert check_invariants(base, new) == []  # an older run stays comparable
    [warning] = invariant_warnings(base, new)
    run_id = "old" if missing == "baseline" else "new"
    assert warning.startswith(f"the {missing} recorded no scorer (made before evalkit recorded one)")
    assert warning.endswith(f"re-score the {missing} to be sure: score_retrieval.py --run-id {run_id}")
    # two runs that both predate it: nothing to compare, nothing said
    assert invariant_warnings(_metrics("x"), _metrics("y")) == []


# ---------------------------------------------------------------- the corpus


def test_a_changed_corpus_is_a_warning_and_with_same_corpus_a_violation() -> None:
    base = _metrics("a", cov=_cov(6, 1, 40, "v1"))
    new = _metrics("b", cov=_cov(7, 1, 43, "v2"))
    assert check_invariants(base, new) == []
    [warning] = invariant_warnings(base, new)
    # by hand: no chunks for 1 of 6 notes -> 1 of 7: 0.1667 -> 0.1429
    changes = "index_version v1 -> v2; docs_processed 6 -> 7; no_chunks_generated_rate 0.1667 -> 0.1429; " \
              "chunks_attempted 40 -> 43; chunks_embedded 40 -> 43"
    assert warning == (f"the notes or the index changed between the runs ({changes}): a difference in retrieval may come "
                       "from the corpus, not from the chatbot (--same-corpus refuses such a pair)")
    assert check_invariants(base, new, same_corpus=True) == [f"the notes or the index differ (--same-corpus): {changes}"]
    assert invariant_warnings(base, new, same_corpus=True) == []
    gate = gate_result(base, new, same_corpus=True)
    assert gate["failures"][-1] == f"invariant broken: the notes or the index differ (--same-corpus): {changes}"
    assert gate_result(base, new)["invariants"]["warnings"] == [warning]
    assert check_invariants(base, base, same_corpus=True) == [] and invariant_warnings(base, base) == []


def test_same_corpus_without_index_stats_cannot_be_checked() -> None:
    with_stats, without = _metrics("a", cov=_cov(6, 1, 40, "v1")), _metrics("b")
    assert invariant_warnings(with_stats, without) == []  # unknown is not a change
    assert check_invariants(with_stats, without, same_corpus=True) == [
        "the corpus cannot be checked (--same-corpus): the new run's target served no index stats "
        "(GET /api/v1/index/stats, or a Python target's index_stats())"
    ]


# ---------------------------------------------------------------- coverage in the run summary


def test_the_run_summary_shows_the_index_coverage() -> None:
    metrics = _metrics("a", cov={**_cov(62, 2, 389, "v1"), "chunks_skipped": 3, "chunks_skipped_rate": 3 / 389,
                                 "chunks_skipped_due_to_context_rate": 1 / 389})
    rows = {label: (value, n) for label, value, n in summary_rows(metrics)}
    assert rows["Notes with no chunks (index)"] == ("0.032 (2 of 62)", "62")  # by hand: 2 / 62 = 0.0323
    assert rows["Chunks skipped (index)"] == ("0.008 (3 of 389; context 0.003)", "389")  # 3 / 389, 1 / 389
    assert not any("(index)" in label for label, _, _ in summary_rows(_metrics("b")))  # no index stats: no rows


# ---------------------------------------------------------------- coverage and warnings in compare


@pytest.fixture
def edited(tmp_path: Path) -> Path:
    """RUN_A and RUN_B whose targets served index stats: one note added, one edited."""
    recs_a, recs_b = [dict(r) for r in RUN_A], [dict(r) for r in RUN_B]
    recs_a[0]["indexing_coverage"] = _cov(6, 1, 40, "v1")
    recs_b[0]["indexing_coverage"] = _cov(7, 1, 43, "v2")
    make_run(tmp_path, "a", recs_a)
    make_run(tmp_path, "b", recs_b)
    return tmp_path


def test_compare_shows_the_index_block_and_the_warning_in_every_renderer(edited: Path) -> None:
    c = compare_runs("a", "b", results_dir=edited, resamples=R)
    assert c.corpus.available and c.corpus.a["docs_processed"] == 6 and c.corpus.b["docs_processed"] == 7
    assert c.corpus.changed == ["index_version", "docs_processed", "no_chunks_generated_rate", "chunks_attempted",
                                "chunks_embedded"]
    assert c.config_diff["index.docs_processed"] == [6, 7] and c.config_diff["index.index_version"] == ["v1", "v2"]
    [warning] = c.invariants.warnings
    md = render_markdown(c)
    assert f"- {warning}" in md.replace("\\", "")
    assert "| notes indexed ✱ | 6 | 7 |" in md and "| notes with no chunks | 1 | 1 |" in md
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=400, color_system=None))
    assert f"warning: {warning}" in out.getvalue() and "Index and coverage" in out.getvalue()
    view = compare_view(c)
    assert view["invariants"]["warnings"] == [warning]
    assert {"label": "notes indexed", "a": "6", "b": "7", "changed": True} in view["corpus"]["rows"]
    html = write_compare_report("a", "b", results_dir=edited, resamples=R).read_text(encoding="utf-8")
    assert 'id="invariant-warnings"' in html and "Index and coverage" in html and "notes indexed ✱" in html


def test_compare_with_same_corpus_refuses_then_marks_every_number(edited: Path) -> None:
    with pytest.raises(IncomparableRuns) as e:
        compare_runs("a", "b", results_dir=edited, resamples=R, same_corpus=True)
    assert e.value.violations[0].startswith("the notes or the index differ (--same-corpus): index_version v1 -> v2")
    c = compare_runs("a", "b", results_dir=edited, resamples=R, same_corpus=True, ignore_invariants=True)
    assert [nc.metrics for nc in c.invariants.not_comparable] == [["*"]]
    assert c.invariants.warnings == [] and c.corpus.same_corpus
    assert "--same-corpus makes this a broken invariant" in render_markdown(c)


def test_another_evalkit_version_with_the_same_definitions_is_a_warning_not_a_violation() -> None:
    # A committed baseline must not break on every upgrade: the registry hash is the contract.
    now = scorer_identity()
    older = {**now, "evalkit_version": "0.0.9"}
    a, b = _metrics("a", scorer=older), _metrics("b", scorer=now)
    assert check_invariants(a, b) == []
    assert invariant_warnings(a, b) == [
        f"the runs were scored by evalkit 0.0.9 and {now['evalkit_version']}, with the same metric definitions "
        "(registry hash): their numbers are comparable"
    ]
