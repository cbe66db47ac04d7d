"""Run folders: atomic JSON, append-only results, truncated tail, resume ids."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from evalkit.errors import BadConfig, RunNotFound
from evalkit.store import RunDir, config_hash, merge_metrics, new_run_id, write_json_atomic


def test_run_id_sorts_by_time_and_carries_hash() -> None:
    h = config_hash({"k": [5], "folder_mode": "off"})
    assert h == config_hash({"folder_mode": "off", "k": [5]})  # key order does not matter
    rid = new_run_id(h, now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert rid == f"20260102T030405Z-{h[:6]}"


def test_create_open_and_refuse_existing(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    run.write_config({"a": 1})
    with pytest.raises(BadConfig, match="already exists"):
        RunDir.create(tmp_path, "r1")
    assert RunDir.open(tmp_path, "r1").read_config() == {"a": 1}
    with pytest.raises(RunNotFound, match="no run 'nope'.*latest runs: r1"):
        RunDir.open(tmp_path, "nope")
    with pytest.raises(BadConfig):
        RunDir.open(tmp_path, "../etc")


def test_append_iter_and_truncated_tail(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    for i in (1, 0, 2):
        run.append_result({"test_case_id": f"c{i}", "case_index": i})
    with open(run.results_path, "ab") as f:
        f.write(b'{"test_case_id": "c3", "case_in')  # killed mid-write
    assert [r["test_case_id"] for r in run.iter_results()] == ["c1", "c0", "c2"]
    assert [r["case_index"] for r in run.read_results()] == [0, 1, 2]
    assert run.completed_ids() == {"c0", "c1", "c2"}
    assert run.repair_tail() is True
    assert run.results_path.read_bytes().endswith(b"}\n")
    assert run.repair_tail() is False
    run.append_result({"test_case_id": "c3", "case_index": 3})
    assert len(list(run.iter_results())) == 4


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.results_path.write_bytes(b'{"test_case_id": "a", "case_index": 0}')
    assert run.completed_ids() == {"a"}
    assert run.repair_tail() is False
    run.append_result({"test_case_id": "b", "case_index": 1})
    assert run.completed_ids() == {"a", "b"}


def test_corrupt_middle_line_is_an_input_error(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.results_path.write_bytes(b'{"test_case_id": "a"}\nnot json\n{"test_case_id": "b"}\n')
    with pytest.raises(Exception, match=r"results.jsonl:2: corrupt record"):
        list(run.iter_results())


def test_write_json_atomic_leaves_no_temp_and_keeps_old_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    write_json_atomic(target, {"b": 1, "a": [1, 2]})
    assert orjson.loads(target.read_bytes()) == {"a": [1, 2], "b": 1}
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": object()})
    assert orjson.loads(target.read_bytes()) == {"a": [1, 2], "b": 1}
    assert os.listdir(tmp_path) == ["m.json"]


def test_update_metrics_keeps_keys_other_scripts_own(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.write_metrics({"aggregate_metrics": {"judge_reliability": {"spot_check_n": 5}, "mrr_avg": 0.1}})
    merged = run.update_metrics({"aggregate_metrics": {"mrr_avg": 0.5}})
    assert merged == {"aggregate_metrics": {"judge_reliability": {"spot_check_n": 5}, "mrr_avg": 0.5}}
    assert merge_metrics({"a": {"b": 1}}, {"a": 2}) == {"a": 2}
    # regression: a resumed run kept a stale error kind, {"exception": 1}, from its first session
    old = {"aggregate_metrics": {"operational_metrics": {"error_kinds": {"exception": 1}}, "judge_reliability": 1}}
    new = {"aggregate_metrics": {"operational_metrics": {"error_kinds": {}}}}
    assert merge_metrics(old, new)["aggregate_metrics"] == {"operational_metrics": {"error_kinds": {}}, "judge_reliability": 1}


def test_rewrite_results_is_atomic(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.append_result({"test_case_id": "a", "case_index": 0})

    def records():
        yield {"test_case_id": "a", "case_index": 0, "judged": True}
        raise RuntimeError("judge crashed mid-rewrite")

    with pytest.raises(RuntimeError):
        run.rewrite_results(records())
    assert list(run.iter_results()) == [{"test_case_id": "a", "case_index": 0}]
    run.rewrite_results([{"test_case_id": "a", "case_index": 0, "judged": True}])
    assert list(run.iter_results())[0]["judged"] is True
    assert sorted(os.listdir(run.path)) == ["results.jsonl"]


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path: Path) -> None:
    # regression: review finding 11 — metrics.json (meant to be committed) was 0600
    old = os.umask(0o022)
    try:
        run = RunDir.create(tmp_path, "r")
        run.write_metrics({"a": 1})
        run.rewrite_results([{"test_case_id": "a", "case_index": 0}])
    finally:
        os.umask(old)
    assert run.metrics_path.stat().st_mode & 0o777 == 0o644
    assert run.results_path.stat().st_mode & 0o777 == 0o644


def test_open_names_the_flag_that_gave_the_id(tmp_path: Path) -> None:
    with pytest.raises(RunNotFound) as exc:
        RunDir.open(tmp_path, "nope", flag="--baseline")
    assert str(exc.value).startswith("--baseline: no run 'nope'")
