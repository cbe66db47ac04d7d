"""Issue 38 items 3 and 4: one writer per run, `RunDir.writer`.

Another process holding a run is played here by a second open file description of the
run's `.writer.lock`, flock'ed by the test: flock refuses it to this process's own
`RunDir.writer` just as it would another process's (tests/integration/test_one_writer.py
runs the real commands side by side)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from evalkit.store.runs import WRITER_LOCK, RunBusy, RunDir, RunFolderError

ELSEWHERE = {"command": "judge_answers", "argv": "judge_answers.py --run-id r1 --judge-provider heuristic",
             "pid": 4242, "host": socket.gethostname(), "started_at": "2026-11-27T10:00:00Z"}
BUSY = ("run 'r1' is being changed by judge_answers (pid 4242, since 2026-11-27T10:00:00Z: "
        "judge_answers.py --run-id r1 --judge-provider heuristic); wait for it to finish or stop it, then rerun")


@contextmanager
def held_elsewhere(run_path: Path, entry: dict | None = ELSEWHERE) -> Iterator[None]:
    """The run's writer lock held as another process holds it, with its `entry`."""
    fd = os.open(run_path / WRITER_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        if entry is not None:
            os.write(fd, json.dumps(entry).encode())
        yield
    finally:
        os.close(fd)


def _free(run_path: Path) -> bool:
    fd = os.open(run_path / WRITER_LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _entry(run_path: Path) -> bytes:
    return (run_path / WRITER_LOCK).read_bytes()


# --------------------------------------------------------------------------- the lock


def test_the_holder_is_written_while_held_and_emptied_when_released(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    with run.writer("score_retrieval"):
        entry = json.loads(_entry(run.path))
        assert not _free(run.path)
    assert entry["command"] == "score_retrieval" and entry["pid"] == os.getpid()
    assert entry["host"] == socket.gethostname() and entry["started_at"].endswith("Z") and entry["argv"]
    assert _entry(run.path) == b"" and _free(run.path)


def test_a_held_run_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    with held_elsewhere(run.path), pytest.raises(RunBusy) as e:
        with run.writer("score_retrieval"):
            pytest.fail("a held run was entered")
    assert [p.message for p in e.value.problems] == [BUSY]
    assert e.value.problems[0].path == str(run.path / WRITER_LOCK)
    assert json.loads(_entry(run.path)) == ELSEWHERE  # the holder's entry is left as it was


def test_a_holder_on_another_host_is_named_with_it_and_an_unwritten_entry_still_refuses(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    with held_elsewhere(run.path, {**ELSEWHERE, "host": "ci-7\x1b[2J"}), pytest.raises(RunBusy) as e:
        with run.writer("score_retrieval"):
            pass
    assert "(pid 4242 on ci-7?[2J, since" in e.value.problems[0].message  # a control character is not printed
    with held_elsewhere(run.path, None), pytest.raises(RunBusy) as e:
        with run.writer("score_retrieval"):
            pass
    assert e.value.problems[0].message.startswith(
        "run 'r1' is being changed by another command (its entry in the lock file is not written)")


def test_the_lock_is_reentrant_within_a_process(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    with run.writer("evalkit score"):
        with RunDir(run.path).writer("score_retrieval"):
            assert json.loads(_entry(run.path))["command"] == "evalkit score"
        assert not _free(run.path)  # the outer hold goes on
    assert _free(run.path)


def test_a_killed_holders_entry_does_not_block_the_next_command(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    (run.path / WRITER_LOCK).write_text(json.dumps(ELSEWHERE))  # left by a holder that died: no flock on it
    with run.writer("score_retrieval"):
        assert json.loads(_entry(run.path))["pid"] == os.getpid()


def test_a_link_at_the_lock_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (run.path / WRITER_LOCK).symlink_to(victim)
    with pytest.raises(RunFolderError) as e, run.writer("score_retrieval"):
        pass
    assert "symbolic link" in str(e.value)
    assert victim.read_text() == "mine"


def test_a_folder_holding_only_a_lock_file_is_no_run(tmp_path: Path) -> None:
    # run_eval killed right after making a new run's folder and taking its lock
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / WRITER_LOCK).write_text(json.dumps(ELSEWHERE))
    run = RunDir.create(tmp_path, "r1")
    assert run.path == tmp_path / "r1"


def test_a_new_run_is_made_under_its_lock_and_checked_again_there(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from evalkit.errors import BadConfig

    with ExitStack() as hold:
        run = RunDir.create(tmp_path, "r1", hold=hold, command="run_eval")
        assert json.loads(_entry(run.path))["command"] == "run_eval" and not _free(run.path)
    assert _free(run.path)
    # another run_eval --run-id r1 is making it (its folder holds only the lock so far)
    with held_elsewhere(run.path), pytest.raises(RunBusy):
        RunDir.create(tmp_path, "r1", hold=ExitStack())
    (run.path / "config.json").write_text("{}")  # ... and has made it
    with pytest.raises(BadConfig, match="already exists"):
        RunDir.create(tmp_path, "r1", hold=ExitStack())
