"""A damaged judge cache never stops a run (issue 29 item 2): checked on open, moved aside to
`<name>.corrupt-<UTC time>` and started again with one warning; a folder or a file that
cannot be opened is an input error; `evalkit cache stats` / `merge` name a damaged file in
one line and move nothing."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.errors import BadConfig
from evalkit.judges.cache import JudgeCache
from tests.support import write_run
from tests.unit.judges.judge_helpers import CORRECT, GROUNDED, OPENAI_MODEL, make_record, openai_reply

CORRUPT_NAME = re.compile(r"^judge_cache\.sqlite\.corrupt-\d{8}T\d{6}Z(-\d+)?$")
N_ROWS = 200


@pytest.fixture
def warnings_seen(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The `evalkit` logger's warnings: the channel the CLI prints on stderr."""
    caplog.set_level(logging.WARNING, logger="evalkit")
    return caplog


def _filled(path: Path, n: int = N_ROWS) -> Path:
    """A real cache with `n` judgments, closed (so the WAL is folded into the file)."""
    cache = JudgeCache(path)
    for i in range(n):
        cache.put(f"k{i}", {"verdict": {"score": i % 6}, "raw": "x" * 400}, kind="groundedness", model="m", prompt_version="v1")
    cache.close()
    assert not Path(f"{path}-wal").exists()
    return path


def _truncated(path: Path) -> None:
    data = _filled(path).read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(29).randbytes(64 * 1024))


def _wrong_schema(path: Path) -> None:
    # A valid SQLite file whose judgments table is someone else's.
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE judgments (id INTEGER PRIMARY KEY, verdict TEXT)")
        conn.execute("INSERT INTO judgments (verdict) VALUES ('yes')")
    conn.close()


def _moved_aside(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if ".corrupt-" in p.name and not p.name.endswith(("-wal", "-shm")))


def _assert_works(cache: JudgeCache) -> None:
    assert cache.count() == 0
    cache.put("new", {"verdict": {"score": 3}}, kind="correctness", model="m", prompt_version="v1")
    assert cache.get("new") == {"verdict": {"score": 3}} and cache.count() == 1


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        pytest.param(_truncated, "database disk image is malformed", id="truncated"),
        pytest.param(_random_bytes, "file is not a database", id="random-bytes"),
        pytest.param(_wrong_schema, "its judgments table lacks the column(s) key, kind, model, prompt_version, created_at, value",
                     id="wrong-schema"),
    ],
)
def test_a_damaged_file_is_moved_aside_and_a_new_cache_started(tmp_path: Path, warnings_seen, damage, why) -> None:
    path = tmp_path / "judge_cache.sqlite"
    damage(path)
    before = path.read_bytes()

    cache = JudgeCache(path)
    try:
        (aside,) = _moved_aside(path)
        assert CORRUPT_NAME.match(aside.name) and aside.read_bytes() == before  # kept as it was, for a post-mortem
        assert cache.recovered_from == aside and cache.damage == why
        _assert_works(cache)
    finally:
        cache.close()
    (line,) = [r.getMessage() for r in warnings_seen.records]
    assert line == (
        f"evalkit: warning: the judge cache {path} was damaged ({why}); it was moved to {aside} and a new cache "
        "started: its judgments will be made again (and paid for) as they are needed"
    )
    assert JudgeCache(path).recovered_from is None  # the new file is sound: nothing moved the next time


def test_the_damaged_files_wal_and_shm_go_with_it_and_nothing_is_overwritten(tmp_path: Path, warnings_seen) -> None:
    path = tmp_path / "judge_cache.sqlite"
    _random_bytes(path)
    damaged = path.read_bytes()
    Path(f"{path}-wal").write_bytes(b"old wal")
    Path(f"{path}-shm").write_bytes(b"old shm")
    # Copies put aside earlier under every name the next seconds could give: never overwritten.
    now = time.time()
    earlier = [path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now + s))}")
               for s in range(3)]
    for copy in earlier:
        copy.write_bytes(b"earlier")

    cache = JudgeCache(path)
    cache.close()
    moved = cache.recovered_from
    assert moved is not None and CORRUPT_NAME.match(moved.name) and moved.name.endswith("-1")
    assert moved.with_name(moved.name.removesuffix("-1")) in earlier
    assert all(copy.read_bytes() == b"earlier" for copy in earlier)
    assert moved.read_bytes() == damaged and Path(f"{moved}-wal").read_bytes() == b"old wal"
    assert Path(f"{moved}-shm").exists()  # SQLite's index of that WAL (rebuilt from it when opened)


def test_a_folder_at_the_path_is_an_input_error_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "judge_cache.sqlite"
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    with pytest.raises(BadConfig) as exc:
        JudgeCache(path)
    assert exc.value.render() == (
        f"{path}: the judge cache is a folder, not a file; move it away, or use --no-cache"
    )
    assert (path / "keep.txt").read_text() == "mine" and _moved_aside(path) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_a_file_that_cannot_be_read_is_an_input_error_not_damage(tmp_path: Path) -> None:
    path = _filled(tmp_path / "judge_cache.sqlite", n=1)
    path.chmod(0)
    try:
        with pytest.raises(BadConfig, match=r"the judge cache cannot be opened \(.*\); check its permissions"):
            JudgeCache(path)
    finally:
        path.chmod(0o644)
    assert _moved_aside(path) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_place_no_file_can_be_made_is_an_input_error() -> None:
    # /proc refuses new files even to root, where chmod (the test above) cannot.
    with pytest.raises(BadConfig) as exc:
        JudgeCache(Path("/proc/self/judge_cache.sqlite"))
    assert exc.value.render() == (
        "/proc/self/judge_cache.sqlite: the judge cache cannot be opened (unable to open database file); "
        "check its permissions and the disk, or use --no-cache"
    )


def test_a_folder_that_cannot_be_made_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the cache's folder should be")
    with pytest.raises(BadConfig, match=r"judge_cache.sqlite: the judge cache cannot be made: its folder cannot be created"):
        JudgeCache(tmp_path / "cache" / "judge_cache.sqlite")


def test_repair_false_reports_the_damage_and_moves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "judge_cache.sqlite"
    _random_bytes(path)
    with pytest.raises(BadConfig, match=r"the judge cache is damaged \(file is not a database\); move it away"):
        JudgeCache(path, repair=False)
    assert _moved_aside(path) == []


def test_a_file_damaged_after_open_is_a_miss_then_moved_aside(tmp_path: Path, warnings_seen) -> None:
    path = _filled(tmp_path / "judge_cache.sqlite")
    cache = JudgeCache(path)
    try:
        assert cache.get("k1") is not None
        # Another process folds the WAL into the file, then the disk garbles every page but the first.
        with sqlite3.connect(path) as other:
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        other.close()
        with open(path, "r+b") as f:
            f.seek(4096)
            f.write(random.Random(2).randbytes(path.stat().st_size - 4096))

        assert cache.get("k150") is None  # a miss, not a crash: the judgment is made again
        (aside,) = _moved_aside(path)
        assert cache.recovered_from == aside and cache.damage == "database disk image is malformed"
        _assert_works(cache)
    finally:
        cache.close()
    assert [r.getMessage() for r in warnings_seen.records] == [
        f"evalkit: warning: the judge cache {path} was damaged (database disk image is malformed); it was moved to "
        f"{aside} and a new cache started: its judgments will be made again (and paid for) as they are needed"
    ]


def test_a_schema_swapped_mid_run_loses_no_new_judgment(tmp_path: Path, warnings_seen) -> None:
    path = _filled(tmp_path / "judge_cache.sqlite", n=3)
    cache = JudgeCache(path)
    try:
        with sqlite3.connect(path) as other:
            other.execute("DROP TABLE judgments")
            other.execute("CREATE TABLE judgments (id INTEGER PRIMARY KEY)")
        other.close()
        # The put that meets the damage is stored in the new cache, not dropped.
        cache.put("fresh", {"verdict": {"score": 1}}, kind="groundedness", model="m", prompt_version="v1")
        assert cache.get("fresh") == {"verdict": {"score": 1}} and cache.count() == 1
        assert cache.recovered_from is not None and "lacks the column(s) key" in (cache.damage or "")
    finally:
        cache.close()
    assert len(warnings_seen.records) == 1


def test_a_failure_that_is_not_damage_is_warned_once_and_the_run_goes_on(tmp_path: Path, warnings_seen) -> None:
    path = _filled(tmp_path / "judge_cache.sqlite", n=3)
    cache = JudgeCache(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        # No 30 s busy wait per try: the put still retries for 2.5 s before it gives up.
        cache._conn.execute("PRAGMA busy_timeout=0")  # type: ignore[union-attr]
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        cache.put("late", {"verdict": {}}, kind="groundedness", model="m", prompt_version="v1")
        assert cache.count() == 3  # not stored, and nothing lost
        assert cache.get("k1") is not None  # reads still work under WAL
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        cache.close()
    (line,) = [r.getMessage() for r in warnings_seen.records]
    assert line.startswith(f"evalkit: warning: the judge cache {path} could not store a judgment (database is locked)")
    assert _moved_aside(path) == []  # locked is not damaged


# --------------------------------------------------------------------------- evalkit cache


@pytest.mark.parametrize("damage", [_truncated, _random_bytes, _wrong_schema], ids=["truncated", "random-bytes", "wrong-schema"])
def test_cache_stats_and_merge_name_a_damaged_file_in_one_line_and_move_nothing(tmp_path: Path, damage) -> None:
    from evalkit.cli.main import app

    bad = tmp_path / "judge_cache.sqlite"
    damage(bad)
    good = _filled(tmp_path / "good.sqlite", n=2)
    runner = CliRunner()

    stats = runner.invoke(app, ["cache", "stats", str(bad)])
    assert stats.exit_code == 2
    (line,) = stats.stderr.strip().splitlines()
    assert line.startswith(f"evalkit: {bad}: not a judge cache (")

    as_source = runner.invoke(app, ["cache", "merge", str(bad), "--into", str(tmp_path / "into.sqlite")])
    assert as_source.exit_code == 2 and as_source.stderr.count("\n") == 1
    assert as_source.stderr.startswith(f"evalkit: {bad}: not a judge cache (")
    assert not (tmp_path / "into.sqlite").exists()  # nothing written before every input is checked

    as_target = runner.invoke(app, ["cache", "merge", str(good), "--into", str(bad)])
    assert as_target.exit_code == 2 and as_target.stderr.count("\n") == 1
    assert as_target.stderr.startswith(f"evalkit: {bad}: --into: not a judge cache (")
    assert "move it away or merge into another file" in as_target.stderr
    assert _moved_aside(bad) == []


def test_cache_stats_on_a_folder_says_so(tmp_path: Path) -> None:
    from evalkit.cli.main import app

    (tmp_path / "judge_cache.sqlite").mkdir()
    out = CliRunner().invoke(app, ["cache", "stats", str(tmp_path / "judge_cache.sqlite")])
    assert out.exit_code == 2
    assert out.stderr == f"evalkit: {tmp_path / 'judge_cache.sqlite'}: is a folder, not a judge cache file\n"


# --------------------------------------------------------------------------- judge_answers


RUN_ID = "20250101T000000Z-cache29"


def test_judge_answers_on_a_random_bytes_cache_exits_0_and_remakes_the_judgments(
    tmp_path: Path, openai_router, openai_key, warnings_seen
) -> None:
    from evalkit.cli.judge_answers import app

    write_run(tmp_path / "results", RUN_ID, [make_record(f"q{i}", case_index=i) for i in range(3)])
    cache_path = tmp_path / "cache" / "judge_cache.sqlite"
    cache_path.parent.mkdir()
    _random_bytes(cache_path)

    def reply(request):
        import httpx

        kind = json.loads(request.content)["response_format"]["json_schema"]["name"].removesuffix("_verdict")
        return httpx.Response(200, json=openai_reply(json.dumps(GROUNDED if kind == "groundedness" else CORRECT)))

    route = openai_router["chat"]
    route.side_effect = reply
    args = ["--run-id", RUN_ID, "--results-dir", str(tmp_path / "results"), "--judge-model", OPENAI_MODEL,
            "--cache-path", str(cache_path), "--quiet", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout.strip().splitlines()[-1])["judge_stats"]
    # by hand: 3 cases x (groundedness + correctness), every one made again
    assert route.call_count == 3 * 2 and stats["cache_misses"] == 6 and stats["cache_hits"] == 0
    (aside,) = _moved_aside(cache_path)
    (line,) = [r.getMessage() for r in warnings_seen.records if "judge cache" in r.getMessage()]
    assert f"the judge cache {cache_path} was damaged (file is not a database); it was moved to {aside}" in line

    # The new cache holds them: a second pass is all hits, and moves nothing.
    route.reset()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert route.call_count == 0 and json.loads(res.stdout.strip().splitlines()[-1])["judge_stats"]["cache_hits"] == 6
    assert _moved_aside(cache_path) == [aside]
