"""`--vault-id` (issue 26 item 5): an eval set written for a vault named "notes" runs against the
reference chatbot over a folder with another name, under --send-scope vaults."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import run_eval_cli, write_eval_set

ROOT = Path(__file__).resolve().parents[2]


def _eval_set(tmp_path: Path, vault: str) -> Path:
    cases = [json.loads(line) for line in (ROOT / "eval_set.jsonl").read_text().splitlines()[:4]]
    for c in cases:
        c["vaults"] = [vault]
    return write_eval_set(tmp_path / "es.jsonl", cases)


def _run(tmp_path: Path, es: Path, *extra: str):
    return run_eval_cli(*extra, eval_set=es, vault=ROOT / "sample_vault", send_scope="vaults",
                        results_dir=tmp_path / "r", retrieval_only=True, json=True)


def test_the_eval_sets_one_vault_is_served(tmp_path: Path) -> None:
    out = _run(tmp_path, _eval_set(tmp_path, "notes"))
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    config = json.loads((Path(payload["run_dir"]) / "config.json").read_text())
    assert config["target"]["vault_id"] == "notes"


def test_an_explicit_vault_id_wins_and_a_wrong_one_is_refused_before_the_run(tmp_path: Path) -> None:
    es = _eval_set(tmp_path, "notes")
    out = _run(tmp_path, es, "--vault-id", "other")
    assert out.exit_code == 2
    assert "unknown vault 'notes'" in out.output and "'other'" in out.output
    assert _run(tmp_path, es, "--vault-id", "notes").exit_code == 0


def test_a_shard_serves_the_vault_of_the_runs_cases_not_of_its_own(tmp_path: Path) -> None:
    # regression: issue 36 item 9. The vault the reference chatbot serves (it goes into every
    # chunk id) came from the shard's cases: a shard whose cases named one vault of the run's
    # two served it, while the unsharded run served none. Now each shard does as the whole run.
    from evalkit.evalset.shard import shard_of

    cases = [json.loads(line) for line in (ROOT / "eval_set.jsonl").read_text().splitlines()[:8]]
    for c in cases:
        c["vaults"] = ["notes" if shard_of(c["id"], 2) == 0 else "other"]
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps(c) + "\n" for c in cases))
    for extra in ((), ("--shard", "1/2"), ("--shard", "2/2")):
        out = _run(tmp_path, es, *extra)
        assert out.exit_code == 2 and "unknown vault" in out.output, (extra, out.output)
