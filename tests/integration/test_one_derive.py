"""Issue 37 item 2: one derive. Every command that changes a run rewrites the records it
changed and derives metrics.json from them (`evalkit.derive`); none assembles or patches
metrics.json itself. So re-scoring a run that nothing changed leaves every file as it was,
byte for byte, timestamps aside."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalkit import run_eval, score_abstention, score_retrieval

ROOT = Path(__file__).resolve().parents[2]
FILES = ("results.jsonl", "metrics.json", "summary.md", "results.json", "config.json")
# An ISO time as evalkit writes it (metrics.json's timestamp, the scorings' scored_at).
_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    run_eval(str(ROOT / "eval_set.jsonl"), run_id="r", results_dir=str(results), retrieval_only=True,
             vault=str(ROOT / "sample_vault"), limit=8, quiet=True)
    return results


def _files(run: Path) -> dict[str, bytes]:
    return {name: _TIME.sub(b"<time>", (run / name).read_bytes()) for name in FILES}


def test_rescoring_an_unchanged_run_changes_no_byte(run: Path) -> None:
    score_retrieval("r", results_dir=run)
    score_abstention("r", results_dir=run)
    before = _files(run / "r")
    again = score_retrieval("r", results_dir=run)
    assert not again.results_rewritten
    assert _files(run / "r") == before
    score_abstention("r", results_dir=run)
    assert _files(run / "r") == before


def test_a_rescoring_derives_what_run_eval_derived(run: Path) -> None:
    """The same settings give run_eval's metrics.json back: the one derive made both."""
    import orjson

    fresh = orjson.loads((run / "r" / "metrics.json").read_bytes())
    got = score_retrieval("r", results_dir=run).metrics
    drop = ("timestamp", "retrieval_scoring")
    assert {k: v for k, v in got.items() if k not in drop} == {k: v for k, v in fresh.items() if k not in drop}


def test_only_the_derive_writes_metrics_json() -> None:
    """No module but evalkit/derive (and the run folder's own store) writes metrics.json:
    a command that changes a run hands its records to the derive."""
    allowed = {ROOT / "evalkit" / "store" / "runs.py"}
    allowed |= set((ROOT / "evalkit" / "derive").glob("*.py"))
    writers = re.compile(r"\.(write_metrics|update_metrics)\(|write_together\([^)]*metrics=")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "evalkit").rglob("*.py")) if path not in allowed
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if writers.search(line)
    ]
    assert offenders == []
