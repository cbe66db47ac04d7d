"""Shards count from 1 (issue 28 item 9): `--shard 1/N .. N/N` as in Playwright and Jest, `0/N`
refused with a hint, the same cases in each shard as before (old `0/4` = new `1/4`), each batch
engine's job index mapped from its own convention, and stored runs read by their 0-based block."""

from __future__ import annotations

import hashlib

import pytest

from evalkit.config import build_settings
from evalkit.errors import BadConfig
from evalkit.evalset.shard import ENV_SOURCES, Shard, parse_shard, shard_from_env, shard_of, stored_shard


def _message(exc: pytest.ExceptionInfo[BadConfig]) -> str:
    (problem,) = exc.value.problems
    return str(problem)


def test_shards_count_from_one() -> None:
    assert parse_shard("1/4") == Shard(0, 4) and parse_shard("4/4") == Shard(3, 4)
    assert parse_shard(" 2/4 ").number == 2 and str(parse_shard("4/4")) == "4/4"
    assert parse_shard("1/1") == Shard(0, 1)
    assert parse_shard(Shard(3, 4)) == Shard(3, 4)  # a Shard is checked as it is (index 3 = "4/4")
    assert build_settings({"shard": "4/4"}).shard == "4/4"  # N/N: the last of N, accepted


def test_zero_is_refused_with_the_hint() -> None:
    with pytest.raises(BadConfig) as e:
        parse_shard("0/4")
    assert _message(e) == (
        "--shard: shards count from 1, like Playwright's and Jest's --shard (1/4 .. 4/4); "
        "0/4 was probably meant as the first: --shard 1/4"
    )
    # As run_eval and evalkit.run_eval() report it: one line, under the flag.
    with pytest.raises(BadConfig) as e:
        build_settings({"shard": "0/3"})
    assert _message(e) == (
        "--shard: shards count from 1, like Playwright's and Jest's --shard (1/3 .. 3/3); "
        "0/3 was probably meant as the first: --shard 1/3"
    )
    assert "\n" not in _message(e)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("5/4", "--shard: shard 5 is out of range for 4 shards: 1/4 .. 4/4", id="N+1"),
        pytest.param("-1/4", "--shard: shard -1 is out of range for 4 shards: 1/4 .. 4/4", id="negative"),
        pytest.param("1/0", "--shard: the shard count must be at least 1, got 0", id="no-shards"),
        pytest.param("2", "--shard: expected I/N like 1/4 (shards count from 1), got '2'", id="no-slash"),
        pytest.param("a/4", "--shard: expected I/N like 1/4 (shards count from 1), got 'a/4'", id="not-int"),
    ],
)
def test_bad_specs_say_the_range(spec: str, message: str) -> None:
    with pytest.raises(BadConfig) as e:
        parse_shard(spec)
    assert _message(e) == message


def test_old_0_based_shard_holds_the_cases_of_the_new_one_above() -> None:
    # regression: issue 28 item 9 renumbered shards, it must not move a case to another shard.
    ids = [f"c{n:03d}" for n in range(8)] + [f"case-{n}" for n in range(500)]
    for count in (1, 2, 3, 4, 7):
        for old_index in range(count):
            # Before issue 28, `--shard I/N` ran the cases with sha256(id) mod N == I.
            old_cases = [i for i in ids if shard_of(i, count) == old_index]
            new = parse_shard(f"{old_index + 1}/{count}")
            assert [case_id for _, case_id in new.select(enumerate(ids), id_of=str)] == old_cases
    # Pinned (sha256(id)[:8] big-endian mod 4): in old `--shard 0/4`, so in new `--shard 1/4`.
    assert [shard_of(f"c{n:03d}", 4) for n in range(8)] == [0, 0, 1, 0, 2, 3, 2, 0]
    assert shard_of("c005", 4) == int.from_bytes(hashlib.sha256(b"c005").digest()[:8], "big") % 4
    first = parse_shard("1/4")
    assert [f"c{n:03d}" for n in range(8) if first.holds(f"c{n:03d}")] == ["c000", "c001", "c003", "c007"]
    assert parse_shard("4/4").holds("c005") and not parse_shard("3/4").holds("c005")


# (environment, the shard it names). Counts are 4 unless the engine says otherwise.
FIRST_AND_LAST = [
    pytest.param({"EVALKIT_SHARD_INDEX": "1", "EVALKIT_SHARD_COUNT": "4"}, "1/4", id="evalkit-first"),
    pytest.param({"EVALKIT_SHARD_INDEX": "4", "EVALKIT_SHARD_COUNT": "4"}, "4/4", id="evalkit-last"),
    pytest.param({"JOB_COMPLETION_INDEX": "0", "EVALKIT_SHARD_COUNT": "4"}, "1/4", id="kubernetes-first"),
    pytest.param({"JOB_COMPLETION_INDEX": "3", "EVALKIT_SHARD_COUNT": "4"}, "4/4", id="kubernetes-last"),
    pytest.param({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, "1/4",
                 id="slurm-0-3-first"),
    pytest.param({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, "1/4",
                 id="slurm-1-4-first"),
    pytest.param({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, "4/4",
                 id="slurm-1-4-last"),
    pytest.param({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}, "4/4", id="slurm-no-min"),
    pytest.param({"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "4"}, "1/4", id="circleci-first"),
    pytest.param({"CIRCLE_NODE_INDEX": "3", "CIRCLE_NODE_TOTAL": "4"}, "4/4", id="circleci-last"),
    pytest.param({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "1/4", id="buildkite-first"),
    pytest.param({"BUILDKITE_PARALLEL_JOB": "3", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "4/4", id="buildkite-last"),
    pytest.param({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "4", "GITLAB_CI": "true"}, "1/4", id="gitlab-first"),
    pytest.param({"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "4", "GITLAB_CI": "true"}, "4/4", id="gitlab-last"),
]


@pytest.mark.parametrize(("env", "expected"), FIRST_AND_LAST)
def test_each_engine_maps_its_index_to_the_shard(env: dict[str, str], expected: str) -> None:
    assert str(shard_from_env(env=env)) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"EVALKIT_SHARD_INDEX": "0", "EVALKIT_SHARD_COUNT": "4"},
                     "$EVALKIT_SHARD_INDEX=0 (evalkit, counts from 1, like --shard) is out of range for 4 shards: "
                     "1/4 .. 4/4; the first shard is EVALKIT_SHARD_INDEX=1", id="evalkit-0"),
        pytest.param({"JOB_COMPLETION_INDEX": "4", "EVALKIT_SHARD_COUNT": "4"},
                     "$JOB_COMPLETION_INDEX=4 (Kubernetes Indexed Job, 0-based, so shard 5) is out of range for 4 "
                     "shards: 1/4 .. 4/4", id="kubernetes-N"),
        pytest.param({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"},
                     "$SLURM_ARRAY_TASK_ID=5 minus $SLURM_ARRAY_TASK_MIN=1 (Slurm job array, 0-based, so shard 5) is "
                     "out of range for 4 shards: 1/4 .. 4/4", id="slurm-past-the-end"),
        pytest.param({"CIRCLE_NODE_INDEX": "4", "CIRCLE_NODE_TOTAL": "4"},
                     "$CIRCLE_NODE_INDEX=4 (CircleCI parallelism, 0-based, so shard 5) is out of range for 4 shards: "
                     "1/4 .. 4/4", id="circleci-N"),
        pytest.param({"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "4", "GITLAB_CI": "true"},
                     "$CI_NODE_INDEX=0 (GitLab CI parallel, counts from 1, like --shard) is out of range for 4 shards: "
                     "1/4 .. 4/4; the first shard is CI_NODE_INDEX=1", id="gitlab-0"),
    ],
)
def test_an_index_out_of_its_engines_range_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(BadConfig) as e:
        shard_from_env(env=env)
    assert _message(e) == f"--shard-from-env: {message}"


def test_gitlabs_index_is_read_only_in_gitlab() -> None:
    # Other tools set a CI_NODE_INDEX of their own that counts from 0: without GITLAB_CI it is no index.
    with pytest.raises(BadConfig, match=r"no shard index in the environment: .*CI_NODE_INDEX \(with GITLAB_CI\)"):
        shard_from_env(env={"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "4"})


def test_which_variable_and_which_count() -> None:
    # The first engine in ENV_SOURCES whose index is set wins; EVALKIT_SHARD_INDEX comes first.
    assert [s.index for s in ENV_SOURCES][0] == "EVALKIT_SHARD_INDEX"
    both = {"EVALKIT_SHARD_INDEX": "2", "EVALKIT_SHARD_COUNT": "4", "CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "4"}
    assert str(shard_from_env(env=both)) == "2/4"
    # The count: --shard-count, else EVALKIT_SHARD_COUNT, else the engine's own.
    circle = {"CIRCLE_NODE_INDEX": "1", "CIRCLE_NODE_TOTAL": "4"}
    assert str(shard_from_env(env=circle)) == "2/4"
    assert str(shard_from_env(env={**circle, "EVALKIT_SHARD_COUNT": "2"})) == "2/2"
    assert str(shard_from_env(3, env={**circle, "EVALKIT_SHARD_COUNT": "2"})) == "2/3"
    with pytest.raises(BadConfig) as e:
        shard_from_env(env={"JOB_COMPLETION_INDEX": "0"})  # Kubernetes says no count
    assert _message(e) == "--shard-from-env: no shard count: pass --shard-count N or set EVALKIT_SHARD_COUNT"
    with pytest.raises(BadConfig) as e:
        shard_from_env(env={"BUILDKITE_PARALLEL_JOB": "x", "BUILDKITE_PARALLEL_JOB_COUNT": "4"})
    assert _message(e) == "--shard-from-env: $BUILDKITE_PARALLEL_JOB is 'x', not an integer"
    with pytest.raises(BadConfig, match="no shard index in the environment"):
        shard_from_env(4, env={})


def test_stored_runs_are_read_by_their_0_based_block() -> None:
    # A run stored before issue 28 (settings.shard "0/4", no `number`) and one stored since
    # ("1/4", number 1) ran the same shard: the block's `index` says so in both.
    old = {"settings": {"shard": "0/4"}, "shard": {"index": 0, "count": 4, "n_cases": 3}}
    new = {"settings": {"shard": "1/4"}, "shard": {"index": 0, "number": 1, "count": 4, "n_cases": 3}}
    assert stored_shard(old) == stored_shard(new) == Shard(0, 4)
    assert str(stored_shard(old)) == "1/4"
    assert stored_shard({"settings": {"shard": None}}) is None
