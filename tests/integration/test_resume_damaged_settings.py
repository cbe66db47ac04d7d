"""A damaged config.json is blamed on config.json, never on a flag the user did not pass
(issue 38 item 12's corrupt loop: `settings.judge_base_url` turned into `judge_b5se_url`
made `run_eval --resume` say "--judge-b5se-url: unknown setting")."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import run_eval_cli

ROOT = Path(__file__).resolve().parents[2]


def test_a_damaged_stored_setting_names_config_json(tmp_path: Path) -> None:
    results = tmp_path / "results"
    common = dict(eval_set=str(ROOT / "eval_set.jsonl"), results_dir=str(results), vault=str(ROOT / "sample_vault"),
                  retrieval_only=True, limit=2)
    first = run_eval_cli(run_id="r", **common)
    assert first.exit_code == 0, first.output
    path = results / "r" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["settings"]["judge_b5se_url"] = cfg["settings"].pop("judge_base_url", None)  # one damaged byte
    cfg["settings"]["timeout"] = "soon"  # and a damaged value
    path.write_text(json.dumps(cfg))
    again = run_eval_cli(resume="r", **{k: v for k, v in common.items() if k != "limit"})
    assert again.exit_code == 2
    assert "--judge-b5se-url" not in again.output and "--timeout" not in again.output
    assert f"{path}: settings.judge_b5se_url: unknown setting" in again.output
    assert f"{path}: settings.timeout:" in again.output
