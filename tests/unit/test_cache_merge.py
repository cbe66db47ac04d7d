"""`evalkit cache merge`: the judge caches of shards judged on several hosts, brought together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from evalkit.errors import BadConfig
from evalkit.judges.cache import JudgeCache, merge_caches


def _cache(path: Path, entries: dict[str, dict]) -> Path:
    cache = JudgeCache(path)
    for key, value in entries.items():
        cache.put(key, value, kind="groundedness", model="m", prompt_version="v1")
    cache.close()
    return path


def test_merge_adds_the_new_keeps_the_target_and_counts_conflicts(tmp_path: Path) -> None:
    a = _cache(tmp_path / "a.sqlite", {"k1": {"score": 5}, "k2": {"score": 3}})
    b = _cache(tmp_path / "b.sqlite", {"k2": {"score": 3}, "k3": {"score": 1}, "k1": {"score": 4}})
    c = _cache(tmp_path / "c.sqlite", {"k4": {"score": 2}})
    result = merge_caches(a, [b, c])
    # b: k3 new (1 added), k2 identical (1 same), k1 differs (1 conflict, a's kept); c: k4 new.
    assert (result.added, result.same, result.conflicts) == (2, 1, 1)
    assert [s["added"] for s in result.sources] == [1, 1]
    merged = JudgeCache(a)
    try:
        assert merged.count() == 4
        assert merged.get("k1") == {"score": 5} and merged.get("k3") == {"score": 1} and merged.get("k4") == {"score": 2}
    finally:
        merged.close()
    # Merging again adds nothing: every key is there already.
    again = merge_caches(a, [b, c])
    assert (again.added, again.same, again.conflicts) == (0, 3, 1)


def test_a_new_target_is_created(tmp_path: Path) -> None:
    b = _cache(tmp_path / "b.sqlite", {"k": {"score": 1}})
    result = merge_caches(tmp_path / "new" / "cache.sqlite", [b])
    assert result.added == 1 and (tmp_path / "new" / "cache.sqlite").exists()


def test_bad_sources_are_named_before_anything_is_written(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all" * 100)
    target = tmp_path / "target.sqlite"
    with pytest.raises(BadConfig) as exc:
        merge_caches(target, [junk, tmp_path / "missing.sqlite"])
    text = exc.value.render()
    assert f"{junk}: not a judge cache" in text and f"{tmp_path / 'missing.sqlite'}: no such file" in text
    assert not target.exists()
    with pytest.raises(BadConfig, match="is the target itself"):
        merge_caches(_cache(tmp_path / "t.sqlite", {}), [tmp_path / "t.sqlite"])


def test_cli(tmp_path: Path) -> None:
    a = _cache(tmp_path / "a.sqlite", {"k1": {"score": 5}})
    b = _cache(tmp_path / "b.sqlite", {"k2": {"score": 3}})
    out = CliRunner().invoke(app, ["cache", "merge", str(b), "--into", str(a), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["added"] == 1
    out = CliRunner().invoke(app, ["cache", "stats", str(a)])
    assert out.exit_code == 0 and "2 judgments" in out.stdout
    out = CliRunner().invoke(app, ["cache", "merge", str(tmp_path / "nope.sqlite"), "--into", str(a)])
    assert out.exit_code == 2 and "no such file" in out.output


def test_sources_are_read_without_writing_beside_them(tmp_path: Path) -> None:
    # Issue 38: a read-only SQLite reader of a WAL database makes its -wal and -shm and
    # cannot remove them, so every merge left two files beside each source (half-made on
    # a full disk, with "not a judge cache (disk I/O error)" said of a sound file).
    sources = tmp_path / "sources"
    a = _cache(sources / "a.sqlite", {"k1": {"score": 5}})
    b = _cache(sources / "b.sqlite", {"k2": {"score": 3}})
    merge_caches(tmp_path / "into.sqlite", [a, b])
    assert sorted(p.name for p in sources.iterdir()) == ["a.sqlite", "b.sqlite"]


def test_a_source_in_use_is_read_with_its_pending_wal(tmp_path: Path) -> None:
    # A cache another process still has open keeps recent judgments in its -wal; they are merged.
    live = JudgeCache(tmp_path / "live.sqlite")
    try:
        for i in range(5):
            live.put(f"k{i}", {"score": i}, kind="groundedness", model="m", prompt_version="v1")
        assert (tmp_path / "live.sqlite-wal").stat().st_size > 0
        result = merge_caches(tmp_path / "into.sqlite", [tmp_path / "live.sqlite"])
    finally:
        live.close()
    assert result.added == 5


def test_an_empty_target_left_by_a_stopped_merge_is_merged_into(tmp_path: Path) -> None:
    # A merge a full disk stopped at once leaves an empty --into; running it again goes on.
    b = _cache(tmp_path / "b.sqlite", {"k": {"score": 1}})
    (tmp_path / "into.sqlite").write_bytes(b"")
    assert merge_caches(tmp_path / "into.sqlite", [b]).added == 1


def test_a_full_disk_is_named_not_blamed_on_the_cache(tmp_path: Path) -> None:
    import errno
    import os
    import sqlite3

    from evalkit.judges.cache import io_reason

    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    said = io_reason(full, tmp_path / "into.sqlite")
    assert said == f"database or disk is full: {os.strerror(errno.ENOSPC)} on the disk holding {tmp_path}"
    # An I/O error with room on the disk is SQLite's words alone.
    io = sqlite3.OperationalError("disk I/O error")
    io.sqlite_errorcode = sqlite3.SQLITE_IOERR
    assert io_reason(io, tmp_path / "into.sqlite") == "disk I/O error"
