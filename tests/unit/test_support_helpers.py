"""tests/support.py, the helpers many test modules share: a setting means the same flag through
every door, and the cases and run folders it writes are what the tests say they are."""

from __future__ import annotations

import json
from pathlib import Path

import typer.main

from tests.support import make_case, read_records, run_args, write_eval_set, write_run

# The settings the test modules pass to run_eval_api / run_eval_cli / run_eval_script.
USED = ("eval_set", "vault", "target", "api_url", "results_dir", "run_id", "retrieval_only", "json", "quiet", "k",
        "no_probe", "retries", "concurrency", "timeout", "max_error_rate", "shard", "send_scope", "vault_id",
        "response_schema", "matrix", "expect_order", "answer_quality", "limit", "ids", "resume", "baseline",
        "store_full_text", "shard_from_env", "shard_count", "evaluators", "retry_errors", "allow_regressions",
        "ignore_invariants", "gate", "trials", "target_processes", "max_retry_wait", "same_corpus")


def test_run_args_spells_settings_as_run_eval_flags() -> None:
    argv = run_args(eval_set=Path("es.jsonl"), k=[1, 3], retrieval_only=True, quiet=False, run_id=None,
                    params={"top_k": 3, "bm25_b": 0.5}, concurrency=2)
    assert argv == ["--eval-set", "es.jsonl", "--k", "1", "--k", "3", "--retrieval-only",
                    "--param", "top_k=3", "--param", "bm25_b=0.5", "--concurrency", "2"]


def test_every_setting_the_tests_use_is_a_run_eval_flag() -> None:
    from evalkit.cli.run_eval import app

    flags = {opt for p in typer.main.get_command(app).params for opt in p.opts}
    missing = [name for name in USED if run_args(**{name: True})[0] not in flags]
    assert not missing, missing
    assert "--param" in flags


def test_cases_and_run_folders(tmp_path: Path) -> None:
    assert make_case(3) == {"id": "c3", "question": "question c3?", "answerable": True}
    assert make_case("q", answerable=False, tags=["a"])["tags"] == ["a"]
    es = write_eval_set(tmp_path / "es.jsonl", [make_case(1), make_case(2)])
    assert [json.loads(x)["id"] for x in es.read_text().splitlines()] == ["c1", "c2"]

    results = write_run(tmp_path / "results", "r1", [{"test_case_id": "c1"}, {"test_case_id": "c2"}])
    assert json.loads((results / "r1" / "config.json").read_text()) == {"run_id": "r1", "settings": {"k": [5]}}
    assert [r["test_case_id"] for r in read_records(results / "r1")] == ["c1", "c2"]
    write_run(results, "bare", [], config=None)
    assert not (results / "bare" / "config.json").exists()
