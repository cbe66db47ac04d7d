"""One atomic writer (issue 25 item 8): every kept file goes through evalkit.store.atomic.write_atomic."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from evalkit.store.atomic import default_mode, write_atomic

ROOT = Path(__file__).resolve().parents[2]

# Renames that are not file writes: write_together's staged files and its commit marker,
# the `latest` symlink, and a damaged judge cache moved aside whole (with its -wal and -shm).
# A folder built whole (a merged run, a redacted copy, an import's vault) goes through
# store.atomic.staged_dir, so no other module renames one.
ALLOWED = {
    "evalkit/judges/cache.py": {"os.rename("},
    "evalkit/store/atomic.py": None,
    "evalkit/store/runs.py": {"os.replace("},
}


def test_no_module_keeps_its_own_copy_of_the_atomic_write() -> None:
    found = []
    for path in sorted((ROOT / "evalkit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for call in re.findall(r"(tempfile\.mkstemp\(|os\.replace\(|os\.rename\()", line):
                allowed = ALLOWED.get(rel, set())
                if allowed is not None and call not in allowed:
                    found.append(f"{rel}:{lineno}: {line.strip()}")
    assert found == []


def test_a_new_file_gets_the_umask_mode_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        new = write_atomic(tmp_path / "a.json", b"{}\n")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644 == default_mode()  # by hand: 0666 & ~0022
        kept = tmp_path / "b.txt"
        kept.write_text("x")
        kept.chmod(0o600)
        write_atomic(kept, "y")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.read_text() == "y"
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_failed_check_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "set.jsonl"
    target.write_bytes(b"old\n")

    def refuse(tmp: Path) -> None:
        assert tmp.read_bytes() == b"new\n"  # the check sees what was written
        raise ValueError("invalid")

    with pytest.raises(ValueError):
        write_atomic(target, [b"new", b"\n"], check=refuse)
    assert target.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set.jsonl"]


def test_trec_files_are_written_with_the_umask_mode(tmp_path: Path) -> None:
    # regression: evalkit export wrote TREC files 0600 and never fsynced (its own copy of the write)
    from evalkit import run_eval
    from evalkit.interop.trec import export_trec

    old = os.umask(0o022)
    try:
        run_eval(str(ROOT / "eval_set.jsonl"), run_id="r", results_dir=str(tmp_path / "results"), retrieval_only=True,
                 vault=str(ROOT / "sample_vault"), limit=5, quiet=True)
        export_trec("r", tmp_path / "trec", results_dir=tmp_path / "results")
    finally:
        os.umask(old)
    files = sorted((tmp_path / "trec").iterdir())
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}


def test_a_failed_write_names_the_file_asked_for(tmp_path, monkeypatch) -> None:
    """ENOSPC and EIO from write or fsync name no file (or the temp one): the error names the
    file the caller asked for, so `evalkit: <path>: No space left on device` says where."""
    import errno
    import os

    from evalkit.store import atomic

    target = tmp_path / "eval_sets.lock"
    for code in (errno.ENOSPC, errno.EIO):
        def failing_fsync(fd: int, code: int = code) -> None:
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(atomic.os, "fsync", failing_fsync)
        with pytest.raises(OSError) as caught:
            atomic.write_atomic(target, b"x")
        assert caught.value.errno == code and caught.value.filename == str(target)
        assert list(tmp_path.iterdir()) == []  # the temp file is gone
