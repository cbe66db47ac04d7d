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
