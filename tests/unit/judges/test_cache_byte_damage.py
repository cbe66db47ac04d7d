"""Bytes of a judge cache changed where SQLite keeps its header and schema (found by the
fault-injection loop, tests/integration/test_reliability_loop.py, issue 29): each is damage,
moved aside with one warning like any other, never an exit 2 or a traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from evalkit.judges.cache import JudgeCache, source_problem


def _filled(path: Path) -> bytes:
    cache = JudgeCache(path)
    for i in range(50):
        cache.put(f"k{i}", {"score": i % 6}, kind="groundedness", model="m", prompt_version="v1")
    cache.close()
    return path.read_bytes()


def _schema_format(data: bytes) -> bytes:
    # Offset 44: the schema format number, 4 big-endian bytes (1-4); 5 is no format SQLite knows.
    assert data[44:48] == b"\x00\x00\x00\x04"
    return data[:47] + b"\x05" + data[48:]


def _replaced(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    def damage(data: bytes) -> bytes:
        assert data.count(old) == 1 and len(old) == len(new)
        return data.replace(old, new)

    return damage


DAMAGE = [
    # regression: issue 29, "unsupported file format" (a plain SQLITE_ERROR) stopped judge_answers with exit 2
    pytest.param(_schema_format, "unsupported file format", id="schema-format-byte"),
    # regression: issue 29, SQLite's message quotes the bad bytes; Python raised UnicodeDecodeError (exit 70)
    pytest.param(_replaced(b"PRIMARY KEY,", b"PRIMARY KEY\x82"), "SQLite reports damage in bytes that are not text",
                 id="schema-text-not-utf8"),
    # regression: issue 29, the cache was kept and every put failed ("no column named prompt_version")
    pytest.param(_replaced(b"prompt_version TEXT", b"prompt_versi\x82n TEXT"), "lacks the column(s) prompt_version",
                 id="column-name-not-utf8"),
]


@pytest.mark.parametrize(("damage", "why"), DAMAGE)
def test_header_and_schema_bytes_are_damage(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage, why) -> None:
    path = tmp_path / "judge_cache.sqlite"
    path.write_bytes(damage(_filled(path)))
    assert why in (source_problem(path) or "")  # a reader that only reads names it, and moves nothing

    stats = CliRunner().invoke(app, ["cache", "stats", str(path)])
    assert stats.exit_code == 2 and len(stats.stderr.splitlines()) == 1 and str(path) in stats.stderr
    assert why in stats.stderr

    with caplog.at_level(logging.WARNING, logger="evalkit"):
        cache = JudgeCache(path)
    try:
        cache.put("new", {"score": 4}, kind="groundedness", model="m", prompt_version="v1")
        assert cache.count() == 1 and cache.get("new") == {"score": 4}
    finally:
        cache.close()
    assert cache.recovered_from is not None and cache.recovered_from.is_file() and why in (cache.damage or "")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "was damaged (" in warning and why in warning
    assert source_problem(path) is None
