"""The SQLite judge cache: keys, round trip, and two processes writing at once."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from evalkit.judges.cache import JudgeCache, cache_key, context_hash

BASE = dict(kind="groundedness", question="q", answer="a", context_sha256="h", provider="openai",
            model="gpt-4o-2024-08-06", prompt_version="groundedness-v1", temperature=0.0)


def test_key_changes_with_every_input():
    k = cache_key(**BASE)
    for field, value in [("kind", "correctness"), ("question", "q2"), ("answer", "a2"), ("context_sha256", "h2"),
                         ("model", "gpt-4o-2024-11-20"), ("prompt_version", "groundedness-v2"), ("temperature", 0.5)]:
        assert cache_key(**{**BASE, field: value}) != k, field
    assert cache_key(**BASE, trial=1) != k
    assert cache_key(**BASE, trial=0) == k  # trial 0 shares entries with single-trial runs
    assert cache_key(**BASE, extra={"expected_key_facts": ["x"]}) != k


def test_context_hash_depends_on_text_and_order():
    a, b = {"chunk_id": "1", "text": "x"}, {"chunk_id": "2", "text": "y"}
    assert context_hash([a, b]) != context_hash([b, a])
    assert context_hash([a]) != context_hash([{**a, "text": "x2"}])


def test_round_trip_and_replace(tmp_path: Path):
    cache = JudgeCache(tmp_path / "c.sqlite")
    assert cache.get("k") is None
    cache.put("k", {"verdict": {"score": 1}}, kind="groundedness", model="m", prompt_version="v")
    cache.put("k", {"verdict": {"score": 2}}, kind="groundedness", model="m", prompt_version="v")
    assert cache.get("k") == {"verdict": {"score": 2}}
    assert cache.count() == 1
    mode = sqlite3.connect(tmp_path / "c.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    cache.close()


def test_put_says_whether_it_stored_and_the_write_probe_leaves_nothing(tmp_path: Path):
    cache = JudgeCache(tmp_path / "c.sqlite")
    assert cache.put("k", {"verdict": {"score": 1}}, kind="groundedness", model="m", prompt_version="v") is True
    assert cache.writable() is None and cache.count() == 1  # the probe row is gone again
    # The disk full, as SQLite meets it: no page may be added to the file (SQLITE_FULL).
    pages = cache._conn.execute("PRAGMA page_count").fetchone()[0]
    cache._conn.execute(f"PRAGMA max_page_count = {pages}")
    big = {"verdict": {"reasoning": "x" * 200_000}}
    assert cache.put("k2", big, kind="groundedness", model="m", prompt_version="v") is False
    assert cache.last_error == "database or disk is full"
    assert cache.get("k2") is None and cache.get("k") == {"verdict": {"score": 1}}
    cache.close()


def _writer(path: str, prefix: str, n: int, barrier) -> None:
    cache = JudgeCache(Path(path))
    barrier.wait()
    for i in range(n):
        cache.put(f"{prefix}-{i}", {"verdict": {"i": i}}, kind="k", model="m", prompt_version="v")
        # Both processes also fight over the same keys.
        if i % 4 == 0:
            cache.put(f"shared-{i}", {"verdict": {"by": prefix}}, kind="k", model="m", prompt_version="v")
    cache.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path):
    path = tmp_path / "cache" / "judge_cache.sqlite"
    # spawn, not fork: the test process runs threads (xdist, the event loop), and forking a
    # threaded process can deadlock the child (Python 3.12+ warns about it).
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(str(path), p, 200, barrier)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = JudgeCache(path)
    # by hand: 2 × 200 own keys + 50 shared keys (i = 0, 4, ..., 196)
    assert cache.count() == 2 * 200 + 200 // 4
    assert cache.get("a-199") == {"verdict": {"i": 199}} and cache.get("b-0") == {"verdict": {"i": 0}}
    assert cache.get("shared-8")["verdict"]["by"] in ("a", "b")
