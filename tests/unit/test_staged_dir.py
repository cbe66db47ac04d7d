"""One staged-folder writer (issue 37 item 4): a merged run, a redacted copy and an imported
vault are each built out of sight by store.atomic.staged_dir and renamed into place whole;
three hand-kept copies of "build a folder, then rename it" had drifted (one fsynced its
files, one cleaned up what a killed process left, one could replace an earlier folder)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from evalkit.store.atomic import STAGE_SUFFIX, folder_lock, remove_stale_stages, staged_dir


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_folder_is_built_out_of_sight_then_renamed_whole(tmp_path: Path) -> None:
    final = tmp_path / "out" / "copy"  # the parent is made too
    old = os.umask(0o022)
    try:
        with staged_dir(final) as work:
            assert work.name == "copy" and work.parent.name.startswith(".copy.")
            assert work.parent.name.endswith(STAGE_SUFFIX)
            (work / "sub").mkdir()
            (work / "sub" / "a.txt").write_text("a")
            assert not final.exists() and _names(tmp_path / "out") == [work.parent.name]
    finally:
        os.umask(old)
    assert (final / "sub" / "a.txt").read_text() == "a"
    assert _names(tmp_path / "out") == ["copy"]  # the stage is gone
    assert stat.S_IMODE(final.stat().st_mode) == 0o755  # by hand: a plain mkdir, 0777 & ~0022


def test_an_error_in_the_block_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "copy"
    with pytest.raises(RuntimeError, match="half way"), staged_dir(final) as work:
        (work / "a.txt").write_text("a")
        raise RuntimeError("half way")
    assert _names(tmp_path) == []


def test_a_non_empty_folder_is_replaced_only_when_asked(tmp_path: Path) -> None:
    final = tmp_path / "vault"
    final.mkdir()
    (final / "old.md").write_text("old")
    with pytest.raises(FileExistsError), staged_dir(final) as work:
        (work / "new.md").write_text("new")
    assert _names(final) == ["old.md"] and _names(tmp_path) == ["vault"]

    with staged_dir(final, replace=True) as work:
        (work / "new.md").write_text("new")
    assert _names(final) == ["new.md"] and _names(tmp_path) == ["vault"]

    (tmp_path / "empty").mkdir()  # an empty folder is taken without asking
    with staged_dir(tmp_path / "empty") as work:
        (work / "x").write_text("x")
    assert _names(tmp_path / "empty") == ["x"]


def test_a_stage_a_killed_process_left_goes_and_a_live_one_stays(tmp_path: Path) -> None:
    dead = tmp_path / f".a.k3j9x2ab{STAGE_SUFFIX}"
    live = tmp_path / f".b.q8w7e6rt{STAGE_SUFFIX}"
    for stage in (dead, live):
        (stage / stage.name.split(".")[1]).mkdir(parents=True)
    not_ours = tmp_path / ".c.tmp"  # another suffix: never touched
    not_ours.mkdir()
    # flock treats two opens of one folder as two holders, even in one process
    with folder_lock(live):
        with staged_dir(tmp_path / "c") as work:
            (work / "x").write_text("x")
        assert _names(tmp_path) == sorted([".c.tmp", live.name, "c"])
    assert remove_stale_stages(tmp_path) == [live]
    assert _names(tmp_path) == [".c.tmp", "c"]
