"""What a shard hashes (issue 36 item 9): the run's settings and its whole selection, never the
shard's own cases, so every shard of a run has the unsharded run's config_hash and they merge.

regression: issue 36 item 9 — only the shard holding the shipped eval set's acknowledge_both
case named the conflict judge's prompt version in its hashed config, and merge refused the shards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.evalset.shard import shard_of
from evalkit.run.preflight import conflict_cases, prepare_inputs
from evalkit.run.provenance import build_config
from evalkit.run.runner import _build_judge

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "eval_set.jsonl"
SHARDS = (None, "1/3", "2/3", "3/3")


def _conflict_ids() -> list[str]:
    cases = [json.loads(line) for line in SHIPPED.read_text().splitlines() if line.strip()]
    return [c["id"] for c in cases if c.get("recency_conflict_rule") == "acknowledge_both"]


def _config(shard: str | None, **values: Any) -> dict[str, Any]:
    """config.json as run_eval would write it for this shard (no target asked, nothing written)."""
    p = prepare_inputs({"eval_set": [str(SHIPPED)], "vault": str(ROOT / "sample_vault"), "shard": shard, **values})
    judge = _build_judge(p.settings, conflict_cases=conflict_cases(p))
    return build_config(p.settings, p.eval_set, p.selected, {}, judge.describe(), None)


def test_every_shard_hashes_the_unsharded_runs_config() -> None:
    # the shipped set puts its acknowledge_both case(s) in some shards only: the case that broke
    assert _conflict_ids() and len({shard_of(i, 3) for i in _conflict_ids()}) < 3
    configs = {shard: _config(shard) for shard in SHARDS}
    assert {json.dumps(c["hashed"], sort_keys=True) for c in configs.values()} == {
        json.dumps(configs[None]["hashed"], sort_keys=True)
    }
    assert {c["config_hash"] for c in configs.values()} == {configs[None]["config_hash"]}
    assert "conflict" in configs[None]["hashed"]["judge"]["prompt_version"]
    n_selected = {shard: c["eval_set"]["n_selected"] for shard, c in configs.items()}
    assert sum(n for shard, n in n_selected.items() if shard) == n_selected[None]


def test_a_selection_without_a_conflict_case_keeps_the_judge_it_had() -> None:
    # --ids leaving the acknowledge_both cases out: no shard and no whole run names the conflict prompt
    cases = [json.loads(line)["id"] for line in SHIPPED.read_text().splitlines() if line.strip()]
    ids = ",".join(c for c in cases[:12] if c not in _conflict_ids())
    configs = [_config(shard, ids=ids) for shard in SHARDS]
    assert len({c["config_hash"] for c in configs}) == 1
    assert "conflict" not in configs[0]["hashed"]["judge"]["prompt_version"]


@pytest.mark.parametrize(("stored_conflict", "expected"), [(False, False), (True, True)])
def test_a_stored_shard_resumes_with_the_judge_it_recorded(stored_conflict: bool, expected: bool) -> None:
    # A shard run before issue 36 without an acknowledge_both case hashed no conflict prompt.
    number = next(i for i in (1, 2, 3) if all(shard_of(c, 3) != i - 1 for c in _conflict_ids()))
    p = prepare_inputs({"eval_set": [str(SHIPPED)], "vault": str(ROOT / "sample_vault"), "shard": f"{number}/3"})
    versions = {"abstention": "heuristic-v1", "correctness": "heuristic-v1", "groundedness": "heuristic-v1"}
    if stored_conflict:
        versions["conflict"] = "heuristic-v1"
    p.stored_config = {"hashed": {"judge": {"provider": "heuristic", "prompt_version": versions}}}
    assert conflict_cases(p) is expected
