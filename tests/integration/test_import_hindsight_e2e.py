"""A Hindsight fixture (seed 004), imported, then run against the reference chatbot in-process:
each case searches only its own folder of fact notes (`--send-scope folders`), as Hindsight
seeds a fresh memory per case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.interop.importers import import_cases, write_eval_set, write_vault
from evalkit.run.runner import run

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "hindsight" / "assistant-baseline.v1.jsonl"


def test_imported_fixture_runs_against_the_reference_chatbot(tmp_path: Path) -> None:
    cases = import_cases("hindsight", [FIXTURE])
    eval_set, vault = tmp_path / "eval_set.jsonl", tmp_path / "vault"
    write_eval_set(cases, eval_set, extra_categories=[])
    write_vault(cases, vault)

    result = run({"eval_set": str(eval_set), "vault": str(vault), "retrieval_only": True, "send_scope": "folders",
                  "k": [5], "results_dir": str(tmp_path / "results")})

    assert result.success and result.n_cases == len(cases) == 11 and result.n_errors == 0
    records = [json.loads(x) for x in (result.run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records] == [None] * 11
    # Only the case's own folder was searched.
    for r, c in zip(records, cases):
        assert r["retrieved_chunks"] and all(ch["rel_path"].startswith(c.case["folders"][0] + "/") for ch in r["retrieved_chunks"])
    aggregate = result.metrics["aggregate_metrics"]
    assert aggregate["k"] == 5
    recall_at_5 = aggregate["recall_at_k_avg"]
    assert isinstance(recall_at_5, float) and recall_at_5 > 0
