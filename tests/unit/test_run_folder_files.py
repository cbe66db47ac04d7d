"""A run folder's files (issue 29 item 6): recovery removes the temp file a killed atomic
write of any of them leaves, from one list (`store.runs.ATOMIC_FILES`), and a write of
metrics.json leaves the mark that its derived files are behind until the derive step ran."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from evalkit.derive import summary
from evalkit.judges.batch import _write_state
from evalkit.report.html.run import write_run_report
from evalkit.store.atomic import write_atomic
from evalkit.store.runs import (
    ATOMIC_FILES,
    DERIVE_PENDING,
    JUDGE_BATCH_FILE,
    REPORT_FILE,
    RESULTS_JSON,
    RunDir,
)
from tests.support import run_eval_api

ROOT = Path(__file__).resolve().parents[2]


def _retrieval_run(results: Path) -> RunDir:
    """A finished 2-case retrieval-only run of the sample vault (its derived files written)."""
    run_eval_api(eval_set=ROOT / "eval_set.jsonl", run_id="r", results_dir=results, retrieval_only=True,
                 vault=ROOT / "sample_vault", limit=2, quiet=True)
    return RunDir.open(results, "r")


class _Killed(Exception):
    pass


def _killed_write(path: Path) -> Path:
    """The temp file `write_atomic(path, ...)` leaves when killed before its rename, under the
    very name the writer gave it (kept by a hard link, as the writer removes its own on an error)."""
    names: list[Path] = []

    def kill(tmp: Path) -> None:
        os.link(tmp, tmp.with_suffix(".kept"))
        names.append(tmp)
        raise _Killed

    with pytest.raises(_Killed):
        write_atomic(path, b"half a file", check=kill)
    os.replace(names[0].with_suffix(".kept"), names[0])
    return names[0]


def test_recovery_removes_the_temp_file_of_a_killed_write_of_every_run_file(tmp_path: Path) -> None:
    # regression: issue 29 item 6, `.results.json.<random>.tmp` was never cleaned: the clean-up
    # pattern was a second, hand-kept list of names, and it had left results.json out
    run = RunDir.create(tmp_path, "r")
    left = [_killed_write(run.path / name) for name in ATOMIC_FILES]
    assert RESULTS_JSON in ATOMIC_FILES and left[ATOMIC_FILES.index(RESULTS_JSON)].name.startswith(".results.json.")
    not_ours = [run.path / ".notes.md.abc123.tmp", run.path / "x.tmp"]
    for p in not_ours:
        p.write_bytes(b"mine")
    assert all(p.exists() for p in left)
    RunDir.open(tmp_path, "r")
    assert sorted(p.name for p in run.path.iterdir()) == sorted(p.name for p in not_ours)


def test_the_run_folder_writer_refuses_a_file_outside_the_list(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    with pytest.raises(ValueError, match="ATOMIC_FILES"):
        run.write_file("notes.json", b"{}")
    assert run.write_file(RESULTS_JSON, [b"{", b"}\n"]).read_bytes() == b"{}\n"


def test_report_and_batch_state_are_written_as_run_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both live in the run folder: written through RunDir.write_file (under the folder lock),
    # so recovery both knows their temp files and never takes a live one.
    run = _retrieval_run(tmp_path)
    written: list[str] = []
    real = RunDir.write_file

    def spy(self: RunDir, name: str, payload):  # noqa: ANN001
        written.append(name)
        return real(self, name, payload)

    monkeypatch.setattr(RunDir, "write_file", spy)
    write_run_report(run)
    _write_state(run.path, {"schema_version": 1, "batches": []})
    assert written == [REPORT_FILE, JUDGE_BATCH_FILE]
    assert orjson.loads((run.path / JUDGE_BATCH_FILE).read_bytes()) == {"schema_version": 1, "batches": []}


def test_a_metrics_write_marks_the_derived_files_behind(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.write_together(results=[{"test_case_id": "a", "case_index": 0}], config={"judge": None})
    assert run.derive_pending() is None  # metrics.json untouched: nothing derived from it changed
    run.write_metrics({"a": 1})
    first = run.derive_pending()
    run.update_metrics({"b": 2})
    second = run.derive_pending()
    run.write_together(metrics={"c": 3})
    third = run.derive_pending()
    assert None not in (first, second, third) and len({first, second, third}) == 3
    # A derive that read an older mark must not clear the newer one.
    assert run.clear_derive_pending(second) is False and run.derive_pending() == third
    assert run.clear_derive_pending(third) is True and run.derive_pending() is None
    assert not (run.path / DERIVE_PENDING).exists()


def test_write_derived_clears_the_mark_only_when_every_derived_file_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _retrieval_run(tmp_path)
    assert run.derive_pending() is None  # run_eval derived its files
    run.update_metrics({"note": "changed by hand"})

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(summary, "write_results_json", fail)
    summary.write_derived(run)  # a warning, not an error
    assert run.derive_pending() is not None  # results.json was not written: still behind
    monkeypatch.undo()
    assert summary.rederive_pending(run) is True
    assert run.derive_pending() is None
    assert orjson.loads((run.path / RESULTS_JSON).read_bytes())["metrics"]["note"] == "changed by hand"
    assert summary.rederive_pending(run) is False
