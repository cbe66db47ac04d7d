"""Run folders under failure: updates of several files, what a killed process leaves, OS
errors, run ids (hardening issue, items 3, 4 and 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from evalkit.errors import BadConfig, InputError
from evalkit.store.runs import COMMIT_MARKER, DERIVE_PENDING, RunDir, RunFolderError, check_run_id, run_id_problem

OLD = {"results": [{"test_case_id": "a", "case_index": 0, "judged": False}], "metrics": {"judge": None}, "config": {"judge": None}}
NEW = {"results": [{"test_case_id": "a", "case_index": 0, "judged": True}], "metrics": {"judge": "h"}, "config": {"judge": "h"}}
# The three files, and the mark that metrics.json was written and its derived files were not
# rendered from it since (no derive step runs here; issue 29 item 6).
FILES = sorted([DERIVE_PENDING, "config.json", "metrics.json", "results.jsonl"])


def _run(tmp_path: Path) -> RunDir:
    run = RunDir.create(tmp_path, "r")
    run.write_together(**OLD)
    return run


def _state(run: RunDir) -> dict:
    return {"results": list(run.iter_results()), "metrics": run.read_metrics(), "config": run.read_config()}


def _stage(run: RunDir, name: str, payload: bytes) -> None:
    (run.path / f".{name}.new").write_bytes(payload)


def _new_payloads() -> dict[str, bytes]:
    return {
        "results.jsonl": b"".join(orjson.dumps(r) + b"\n" for r in NEW["results"]),
        "metrics.json": orjson.dumps(NEW["metrics"]),
        "config.json": orjson.dumps(NEW["config"]),
    }


def test_write_together_replaces_all_three_and_leaves_nothing_else(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.write_together(**NEW)
    assert _state(run) == NEW
    assert sorted(os.listdir(run.path)) == FILES


def test_killed_before_the_marker_rolls_back_on_open(tmp_path: Path) -> None:
    # regression: issue item 4, a kill between results.jsonl and metrics.json left results
    # judged while metrics and config said no judge ran
    run = _run(tmp_path)
    new = _new_payloads()
    _stage(run, "results.jsonl", new["results.jsonl"])
    _stage(run, "metrics.json", new["metrics.json"][:5])  # killed while writing this one
    assert RunDir(run.path).recover() == "rolled back"
    assert _state(run) == OLD
    assert sorted(os.listdir(run.path)) == FILES


@pytest.mark.parametrize("renamed", [0, 1, 2], ids=["none-renamed", "results-renamed", "two-renamed"])
def test_killed_after_the_marker_completes_on_open(tmp_path: Path, renamed: int) -> None:
    run = _run(tmp_path)
    names = ["results.jsonl", "metrics.json", "config.json"]
    for name, payload in _new_payloads().items():
        _stage(run, name, payload)
    (run.path / COMMIT_MARKER).write_bytes(orjson.dumps({"files": names}))
    for name in names[:renamed]:
        os.replace(run.path / f".{name}.new", run.path / name)
    opened = RunDir.open(tmp_path, "r")
    assert _state(opened) == NEW
    assert sorted(os.listdir(run.path)) == FILES


def test_stale_temp_files_of_killed_writes_are_removed_on_open(tmp_path: Path) -> None:
    # regression: issue item 4, a SIGKILL during the rewrite left a 78-121 MB
    # .results.jsonl.*.tmp that nothing removed
    run = _run(tmp_path)
    for name in (".results.jsonl.k3j_x9a2.tmp", ".metrics.json.abc.tmp", ".config.json.q.tmp", ".commit.tmp"):
        (run.path / name).write_bytes(b"partial")
    for name in ("notes.txt", ".results.jsonl.bak", "x.tmp"):  # not ours: kept
        (run.path / name).write_bytes(b"mine")
    RunDir.open(tmp_path, "r")
    assert sorted(os.listdir(run.path)) == sorted([*FILES, ".results.jsonl.bak", "notes.txt", "x.tmp"])
    assert _state(run) == OLD


def test_a_live_writer_keeps_its_temp_files(tmp_path: Path) -> None:
    # Another process holding the folder's lock is mid-write: its files are not stale.
    run = _run(tmp_path)
    tmp = run.path / ".results.jsonl.live1234.tmp"
    tmp.write_bytes(b"being written")
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(run.path)!r}, os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert RunDir.open(tmp_path, "r").recover() is None
        assert tmp.exists()
    finally:
        holder.communicate("")
    RunDir.open(tmp_path, "r")  # the holder is gone: now the file is debris
    assert not tmp.exists()


def test_write_together_failing_midway_keeps_the_old_files(tmp_path: Path) -> None:
    run = _run(tmp_path)

    def records():
        yield NEW["results"][0]
        raise RuntimeError("judge crashed mid-rewrite")

    with pytest.raises(RuntimeError):
        run.write_together(results=records(), metrics=NEW["metrics"], config=NEW["config"])
    assert _state(run) == OLD
    assert sorted(os.listdir(run.path)) == FILES


def test_written_files_keep_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run = _run(tmp_path)
    finally:
        os.umask(old)
    assert {(run.path / n).stat().st_mode & 0o777 for n in ("results.jsonl", "metrics.json", "config.json")} == {0o644}


# --------------------------------------------------------------------------- OS errors


def _one_line(exc: InputError) -> str:
    lines = exc.render().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_results_dir_that_is_a_file(tmp_path: Path) -> None:
    # regression: issue item 3, a NotADirectoryError traceback with exit 1
    (tmp_path / "results").write_text("not a folder")
    with pytest.raises(RunFolderError) as exc:
        RunDir.create(tmp_path / "results", "r")
    assert _one_line(exc.value) == (
        f"{tmp_path}/results/r: cannot create the run folder: Not a directory ({tmp_path}/results is a file, not a folder)"
    )


def test_results_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError) as exc:
        RunDir.create(tmp_path / "file" / "results", "r")
    assert "cannot create the run folder: Not a directory" in _one_line(exc.value)
    assert f"({tmp_path}/file is a file, not a folder)" in _one_line(exc.value)


def test_run_folder_name_taken_by_a_file(tmp_path: Path) -> None:
    (tmp_path / "r").write_text("x")
    with pytest.raises(RunFolderError, match=r"/r: cannot create the run folder: File exists \(.*/r is a file"):
        RunDir.create(tmp_path, "r")


def test_name_too_long(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError) as exc:
        RunDir.create(tmp_path / ("d" * 300), "r")
    assert _one_line(exc.value).endswith("cannot create the run folder: File name too long")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs")
def test_folder_the_os_refuses() -> None:
    # sysfs refuses new folders even to root (EPERM; EROFS where it is mounted read-only).
    with pytest.raises(RunFolderError, match=r"^/sys/evalkit-test(/r)?: cannot create the run folder: "):
        RunDir.create(Path("/sys/evalkit-test"), "r")


def _create_as_nobody(results: Path) -> str:
    """RunDir.create(results, "r") in a forked child that dropped root; its error text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            try:
                RunDir.create(results, "r")
                msg = "created"
            except RunFolderError as e:
                msg = str(e)
            os.write(w, msg.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_unwritable_results_dir(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir(mode=0o555)
    try:
        if os.geteuid() == 0:
            # root ignores permissions: try as `nobody`, in a folder nobody may reach
            import tempfile

            shared = Path(tempfile.mkdtemp(prefix="evalkit-perm-"))
            shared.chmod(0o755)
            (shared / "results").mkdir(mode=0o555)
            try:
                msg = _create_as_nobody(shared / "results")
            finally:
                (shared / "results").rmdir()
                shared.rmdir()
        else:
            with pytest.raises(RunFolderError) as exc:
                RunDir.create(results, "r")
            msg = str(exc.value)
    finally:
        results.chmod(0o755)
    assert msg.endswith("/results/r: cannot create the run folder: Permission denied"), msg


# --------------------------------------------------------------------------- run ids


@pytest.mark.parametrize(
    "run_id", ["20260102T030405Z-1a2b3c", "baseline", "my-run", "k5", "r1", "v1.2_rc-3", "A" * 128]
)
def test_valid_run_ids(run_id: str) -> None:
    assert run_id_problem(run_id) is None


@pytest.mark.parametrize(
    "run_id",
    [
        pytest.param("", id="empty"),
        pytest.param("..", id="parent"),
        pytest.param("../etc", id="path"),
        pytest.param(".hidden", id="dot-first"),
        pytest.param("-rf", id="dash-first"),
        pytest.param("[bold red]RUN", id="rich-markup"),
        pytest.param("has space; rm -rf x", id="shell"),
        pytest.param("run\x1b[2J", id="escape"),
        pytest.param("line\nbreak", id="newline"),
        pytest.param("run\u009b", id="c1-control"),
        pytest.param("caf\u00e9", id="non-ascii"),
        pytest.param("a" * 129, id="too-long"),
        pytest.param("a" * 300, id="errno-36-long"),
    ],
)
def test_invalid_run_ids_are_one_safe_line(run_id: str) -> None:
    # regression: issue item 7, markup, ESC and newlines reached the terminal and folders
    with pytest.raises(BadConfig) as exc:
        check_run_id(run_id, "--resume")
    line = _one_line(exc.value)
    assert line.startswith("--resume: not a valid run id: ")
    assert line.endswith("use 1-128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit")
    assert line.isprintable()
    assert len(line) < 200
