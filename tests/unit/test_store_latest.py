"""results/latest: point_latest, resolve_run_id, RunDir.open("latest"), the reserved name
(issue 12, part 2)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson
import pytest

from evalkit.errors import BadConfig, RunNotFound
from evalkit.store.runs import RunDir, check_run_id, list_runs, point_latest, resolve_run_id, run_id_problem


def _runs(root: Path, *names: str) -> None:
    for i, name in enumerate(names):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_bytes(orjson.dumps({"created_at": f"2026-01-0{i + 1}T00:00:00Z"}))


def test_symlink_is_relative_and_replaced(tmp_path: Path) -> None:
    _runs(tmp_path, "r1", "r2")
    assert point_latest(tmp_path, "r1") == tmp_path / "latest"
    assert os.readlink(tmp_path / "latest") == "r1"
    point_latest(tmp_path, "r2")
    assert os.readlink(tmp_path / "latest") == "r2"
    assert resolve_run_id(tmp_path, "latest") == "r2"
    assert RunDir.open(tmp_path, "latest").run_id == "r2"
    assert RunDir.open(tmp_path, "latest").path == tmp_path / "r2"
    assert list_runs(tmp_path) == ["r2", "r1"]
    assert sorted(os.listdir(tmp_path)) == ["latest", "r1", "r2"]  # no temp link left


def test_latest_json_without_symlinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _runs(tmp_path, "r1", "r2")
    point_latest(tmp_path, "r1")  # a symlink made earlier, e.g. before the folder moved

    def no_symlinks(*args: object, **kwargs: object) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    assert point_latest(tmp_path, "r2") == tmp_path / "latest.json"
    assert orjson.loads((tmp_path / "latest.json").read_bytes()) == {"run_id": "r2"}
    assert not (tmp_path / "latest").is_symlink()  # the stale link is gone, so the two cannot disagree
    assert resolve_run_id(tmp_path, "latest") == "r2"
    assert RunDir.open(tmp_path, "latest", flag="--resume").run_id == "r2"
    assert list_runs(tmp_path) == ["r2", "r1"]


def test_other_ids_pass_through(tmp_path: Path) -> None:
    assert resolve_run_id(tmp_path, "r9") == "r9"


def test_no_latest_yet(tmp_path: Path) -> None:
    with pytest.raises(RunNotFound, match="no latest run under .*none has finished here yet") as e:
        RunDir.open(tmp_path, "latest")
    assert e.value.problems[0].field == "--run-id"


def test_latest_pointing_at_a_deleted_run(tmp_path: Path) -> None:
    _runs(tmp_path, "r1")
    point_latest(tmp_path, "r1")
    (tmp_path / "r1" / "config.json").unlink()
    (tmp_path / "r1").rmdir()
    with pytest.raises(RunNotFound, match="points at run 'r1', which is gone"):
        resolve_run_id(tmp_path, "latest", flag="--baseline")


def test_broken_latest_json(tmp_path: Path) -> None:
    (tmp_path / "latest.json").write_text('{"run_id": "../etc"}')
    with pytest.raises(RunNotFound, match="does not name a run"):
        resolve_run_id(tmp_path, "latest")


def test_a_legacy_run_folder_named_latest_is_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _runs(tmp_path, "latest", "r2")
    with caplog.at_level(logging.WARNING, logger="evalkit"):
        assert point_latest(tmp_path, "r2") is None
    assert "is a run folder" in caplog.text
    assert resolve_run_id(tmp_path, "latest") == "latest"
    assert "latest" in list_runs(tmp_path)


def test_latest_is_reserved_for_new_runs_only() -> None:
    assert run_id_problem("latest") is None
    assert "reserved" in (run_id_problem("latest", new=True) or "")
    assert run_id_problem("latest-2", new=True) is None
    with pytest.raises(BadConfig, match="'latest' is reserved: it names the newest run"):
        check_run_id("latest")


def test_point_latest_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="evalkit"):
        assert point_latest(blocked, "r1") is None
    assert "cannot point" in caplog.text
