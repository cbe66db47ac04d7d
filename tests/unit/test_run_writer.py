"""Issue 38 items 3 and 4: one writer per run, `RunDir.writer` and the doors that take it.

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
from tests.support import make_case, run_eval_api, write_eval_set

TARGET = "python:tests.integration.waiting_bot:ask"
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


# --------------------------------------------------------------------------- every door takes it


@pytest.fixture
def made_run(tmp_path: Path) -> Path:
    """results/r1: a finished --retrieval-only run of four cases; returns the results folder."""
    cases = [make_case(i, gold_supports=[{"rel_path": f"notes/c{i}.md", "heading_path": "# H"}]) for i in range(4)]
    es = write_eval_set(tmp_path / "es.jsonl", cases)
    results = tmp_path / "results"
    run_eval_api(eval_set=es, target=TARGET, retrieval_only=True, store_full_text=True, results_dir=results, run_id="r1")
    return results


def _files(run_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_path.iterdir()) if p.name != WRITER_LOCK}


def _score_retrieval(results: Path) -> None:
    from evalkit.rescore.scoring import score_retrieval

    score_retrieval("r1", ks=[3], results_dir=results)


def _score_abstention(results: Path) -> None:
    from evalkit.rescore.scoring import score_abstention

    score_abstention("r1", results_dir=results, classifier="heuristic")


def _judge(results: Path) -> None:
    from evalkit.judges import JudgeSettings
    from evalkit.rescore.answers import judge_run

    judge_run(RunDir.open(results, "r1"), JudgeSettings(provider="heuristic", use_cache=False))


def _grade(results: Path) -> None:
    from evalkit.judges.grades import append_grade

    append_grade(RunDir.open(results, "r1"), {"test_case_id": "c0", "groundedness": 4, "correctness": 5})


def _grade_session(results: Path) -> None:
    from evalkit.judges.grades import grade_cases

    grade_cases(RunDir.open(results, "r1"), [], ask=lambda prompt: None, show=lambda text: None)


def _resume(results: Path) -> None:
    run_eval_api(resume="r1", results_dir=results)


@pytest.mark.parametrize("door", [_score_retrieval, _score_abstention, _judge, _grade, _grade_session, _resume])
def test_every_library_door_that_changes_a_run_refuses_a_held_one(made_run: Path, door) -> None:
    run_path = made_run / "r1"
    before = _files(run_path)
    with held_elsewhere(run_path), pytest.raises(RunBusy) as e:
        door(made_run)
    assert [p.message for p in e.value.problems] == [BUSY]
    assert _files(run_path) == before


def test_merge_refuses_a_shard_run_another_command_holds(tmp_path: Path) -> None:
    from evalkit.run.merge import merge_runs

    cases = [make_case(i, gold_supports=[{"rel_path": f"notes/c{i}.md", "heading_path": "# H"}]) for i in range(4)]
    es = write_eval_set(tmp_path / "es.jsonl", cases)
    results = tmp_path / "results"
    for i in (1, 2):
        run_eval_api(eval_set=es, target=TARGET, retrieval_only=True, results_dir=results, run_id=f"s{i}", shard=f"{i}/2")
    with held_elsewhere(results / "s2", {**ELSEWHERE, "argv": "run_eval.py --resume s2"}), pytest.raises(RunBusy) as e:
        merge_runs(["s1", "s2"], run_id="all", results_dir=results)
    assert e.value.problems[0].message.startswith("run 's2' is being changed by judge_answers (pid 4242")
    assert not (results / "all").exists() and _free(results / "s1")  # the shard taken first is let go
    assert merge_runs(["s1", "s2"], run_id="all", results_dir=results).n_records == 4


def test_a_reader_leaves_a_held_runs_derived_files_to_their_holder(made_run: Path) -> None:
    from evalkit.derive.summary import open_run, rederive_pending
    from evalkit.store.runs import DERIVE_PENDING

    run = RunDir.open(made_run, "r1")
    (run.path / DERIVE_PENDING).write_text("mark")  # the holder changed metrics.json and is rendering
    summary = (run.path / "summary.md").read_bytes()
    with held_elsewhere(run.path):
        assert rederive_pending(run) is False
    assert (run.path / DERIVE_PENDING).exists() and (run.path / "summary.md").read_bytes() == summary
    open_run(made_run, "r1")  # nobody holds it now: the mark is settled
    assert not (run.path / DERIVE_PENDING).exists()


def test_evalkit_score_refuses_a_held_run_before_its_first_part(made_run: Path) -> None:
    from typer.testing import CliRunner

    from evalkit.cli.main import app

    run_path = made_run / "r1"
    before = _files(run_path)
    with held_elsewhere(run_path):
        res = CliRunner().invoke(app, ["score", "--run-id", "r1", "--results-dir", str(made_run)])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"evalkit: {run_path / WRITER_LOCK}: {BUSY}"
    assert _files(run_path) == before
    res = CliRunner().invoke(app, ["score", "--run-id", "r1", "--results-dir", str(made_run)])  # both parts, held across
    assert res.exit_code == 0, res.output
    assert _entry(run_path) == b""
