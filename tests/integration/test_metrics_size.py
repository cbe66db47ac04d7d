"""metrics.json of the bundled run stays small enough to commit (issue 8)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from evalkit import run_eval

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"


@pytest.mark.skipif(not (SAMPLE_VAULT.is_dir() and MAIN_SET.is_file()), reason="sample_vault/ not there yet")
def test_bundled_run_metrics_json_is_under_45_kb(tmp_path: Path) -> None:
    # regression: issue 8, 206 KB for 59 cases (by_tag alone 96 KB), every slice holding
    # every K, latency percentiles and the rest of the overall cell. The README's first
    # command, in process: reference chatbot over sample_vault/, offline heuristic judge.
    result = run_eval(eval_set=str(MAIN_SET), vault=str(SAMPLE_VAULT), results_dir=str(tmp_path))
    path = Path(result.run_dir) / "metrics.json"
    size = path.stat().st_size
    # 40 KB held the 59 single questions; the three conversations (issue 40) add their tags,
    # the by_turn and by_follow_up slices and the conversations block: 40.0 KB measured.
    assert size < 45_000, f"metrics.json is {size} bytes"

    metrics = orjson.loads(path.read_bytes())
    assert metrics["total_tests"] == 66  # 59 questions, 7 turns of 3 conversations
    assert metrics["conversations"]["n_conversations"] == 3 and set(metrics["by_turn"]) == {"first", "follow-up"}
    assert len(metrics["by_tag"]) > 30  # the bound holds with every slice there
    agg = metrics["aggregate_metrics"]
    assert set(agg["at_k"]) == {str(k) for k in metrics["ks"]}  # the overall cell stays complete
    assert agg["latency"]["sum_case_ms"] > 0
    factual = metrics["by_category"]["factual"]
    # 20 questions and 6 conversation turns are factual
    assert factual["n_cases"] == 26 and factual["n"]["recall_at_k_avg"] >= 1 and "at_k" not in factual
