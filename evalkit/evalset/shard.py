"""Shards: a deterministic 1/n slice of a run's cases, for spreading one run over n machines.

A case belongs to the shard with 0-based index `shard_of(case_id, n)`: the first 8 bytes of
sha256(case id, UTF-8) as a big-endian integer, mod n. It depends on the id alone, so the
same id lands in the same shard whatever the eval set's order, size or the machine. Users
count shards from 1, as Playwright's, Jest's and Vitest's `--shard` do: `--shard 1/4` ..
`4/4` (issue 28), which is `Shard.number`; index 0 is shard 1/4. `--shard-from-env` maps
each batch engine's job index, 0- or 1-based, to that number (`ENV_SOURCES`).
`evalkit merge` (evalkit/run/merge.py) joins the n shard runs into one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from evalkit.errors import BadConfig, Problem

__all__ = [
    "ENV_SOURCES", "EnvSource", "Shard", "ids_sha256", "parse_shard", "shard_from_env", "shard_of", "stored_shard",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: `index` is 0-based (0 <= index < count), the value of
    `shard_of` for its cases; users see and type `number` (index + 1), as in `str()`: "2/4"."""

    index: int
    count: int

    @property
    def number(self) -> int:
        """The 1-based shard number (`--shard NUMBER/COUNT`)."""
        return self.index + 1

    def __str__(self) -> str:
        return f"{self.number}/{self.count}"

    def holds(self, case_id: str) -> bool:
        return shard_of(case_id, self.count) == self.index

    def select(self, selected: Iterable[tuple[int, T]], id_of: Any = lambda c: c.id) -> list[tuple[int, T]]:
        """The (index, case) pairs of `selected` this shard runs, in their order."""
        return [(i, c) for i, c in selected if self.holds(id_of(c))]


def shard_unit(case_id: str, conversation: str | None) -> str:
    """What decides a case's shard: its conversation's id for a turn of one (a conversation's
    turns are asked in order, with the turns before them, so they stay in one shard), else
    its own id. The run's selection and `evalkit merge`'s check both use it."""
    return conversation if conversation is not None else case_id


def shard_of(case_id: str, count: int) -> int:
    """The shard index (0-based) of a case id among `count`: sha256(id)[:8] as big-endian int, mod count."""
    digest = hashlib.sha256(str(case_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def ids_sha256(ids: Sequence[str]) -> str:
    """sha256 hex of the ids joined by newlines (in the order given): names a selection."""
    h = hashlib.sha256()
    for i, case_id in enumerate(ids):
        h.update((("\n" if i else "") + str(case_id)).encode("utf-8"))
    return h.hexdigest()


def _span(count: int) -> str:
    return f"1/{count} .. {count}/{count}"


def _check_count(count: int, field: str) -> None:
    if count < 1:
        raise BadConfig(Problem(f"the shard count must be at least 1, got {count}", field=field))


def _numbered(number: int, count: int, field: str) -> Shard:
    """Shard `number/count` (1-based number), or BadConfig naming `field`."""
    _check_count(count, field)
    if number == 0:
        # 0 is most likely a 0-based first shard, the convention before issue 28.
        raise BadConfig(
            Problem(
                f"shards count from 1, like Playwright's and Jest's --shard ({_span(count)}); "
                f"0/{count} was probably meant as the first: --shard 1/{count}",
                field=field,
            )
        )
    if not 1 <= number <= count:
        raise BadConfig(Problem(f"shard {number} is out of range for {count} shards: {_span(count)}", field=field))
    return Shard(number - 1, count)


def parse_shard(value: str | Shard, field: str = "--shard") -> Shard:
    """`"i/n"` (1-based i: `1/4` .. `4/4`) -> Shard (index i - 1); a Shard is checked as it is.

    Raises:
        BadConfig: not `i/n` with integers, n < 1, or i outside 1..n (0 with a hint: shards
            count from 1).
    """
    if isinstance(value, Shard):
        return _numbered(value.number, value.count, field)
    text = str(value).strip()
    left, sep, right = text.partition("/")
    try:
        if not sep:
            raise ValueError
        number, count = int(left), int(right)
    except ValueError:
        raise BadConfig(Problem(f"expected I/N like 1/4 (shards count from 1), got {text!r}", field=field)) from None
    return _numbered(number, count, field)


def stored_shard(config: Mapping[str, Any]) -> Shard | None:
    """The shard a stored run ran, from its config.json `shard` block, or None if it ran all.

    The block's `index` is 0-based in every run folder, those made before shards counted
    from 1 (issue 28) included, whereas `settings.shard` holds the spec as typed: "0/4" then,
    "1/4" now, for the same shard. So readers take the shard from here, never from the settings.
    """
    block = config.get("shard")
    if not isinstance(block, Mapping):
        return None
    return Shard(int(block["index"]), int(block["count"]))


@dataclass(frozen=True)
class EnvSource:
    """Where a batch engine puts a job's index and the number of jobs."""

    engine: str
    index: str  # the job's index
    base: int  # the first job's index: 0 or 1
    count: str | None  # the number of jobs, when the engine says it
    only_with: str | None = None  # read only when this is set too (the name alone is ambiguous)


# Read by `shard_from_env`, first one set wins (docs/sharding.md has this as a table).
ENV_SOURCES = (
    EnvSource("evalkit", "EVALKIT_SHARD_INDEX", 1, "EVALKIT_SHARD_COUNT"),  # counts like --shard
    EnvSource("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", 0, None),
    # minus SLURM_ARRAY_TASK_MIN when set, so that an array 1-4 counts like 0-3
    EnvSource("Slurm job array", "SLURM_ARRAY_TASK_ID", 0, "SLURM_ARRAY_TASK_COUNT"),
    EnvSource("CircleCI parallelism", "CIRCLE_NODE_INDEX", 0, "CIRCLE_NODE_TOTAL"),
    EnvSource("Buildkite parallelism", "BUILDKITE_PARALLEL_JOB", 0, "BUILDKITE_PARALLEL_JOB_COUNT"),
    # 1-based in GitLab only; other tools set a CI_NODE_INDEX of their own that counts from 0.
    EnvSource("GitLab CI parallel", "CI_NODE_INDEX", 1, "CI_NODE_TOTAL", only_with="GITLAB_CI"),
)


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env[name].strip()
    try:
        return int(raw)
    except ValueError:
        raise BadConfig(Problem(f"${name} is {raw!r}, not an integer", field="--shard-from-env")) from None


def _is_set(env: Mapping[str, str], name: str | None) -> bool:
    return name is not None and bool(env.get(name, "").strip())


def shard_from_env(count: int | None = None, env: Mapping[str, str] | None = None) -> Shard:
    """The shard named by the environment of a batch engine or CI service.

    The index is read from the first `ENV_SOURCES` entry whose variable is set, and mapped
    from its engine's convention to a shard number: 0-based indexes (Kubernetes, Slurm
    minus SLURM_ARRAY_TASK_MIN, CircleCI, Buildkite) + 1; EVALKIT_SHARD_INDEX and GitLab's
    CI_NODE_INDEX (read only with GITLAB_CI set) count from 1 already. The count is `count`
    (--shard-count), else EVALKIT_SHARD_COUNT, else that engine's count variable.

    Raises:
        BadConfig: no index or no count in the environment, not integers, or out of range
            (naming the variable, its value and its convention).
    """
    env = os.environ if env is None else env
    field = "--shard-from-env"
    usable = [s for s in ENV_SOURCES if s.only_with is None or _is_set(env, s.only_with)]
    source = next((s for s in usable if _is_set(env, s.index)), None)
    if source is None:
        names = ", ".join(s.index + (f" (with {s.only_with})" if s.only_with else "") for s in ENV_SOURCES)
        raise BadConfig(Problem(f"no shard index in the environment: set one of {names}", field=field))
    raw = _env_int(env, source.index)
    said = f"${source.index}={raw}"
    offset = 0
    if source.index == "SLURM_ARRAY_TASK_ID" and _is_set(env, "SLURM_ARRAY_TASK_MIN"):
        offset = _env_int(env, "SLURM_ARRAY_TASK_MIN")
        said += f" minus $SLURM_ARRAY_TASK_MIN={offset}"
    number = raw - offset + 1 - source.base
    if count is None:
        count_name = next((n for n in ("EVALKIT_SHARD_COUNT", source.count) if _is_set(env, n)), None)
        if count_name is None:
            names = " or ".join(dict.fromkeys(n for n in ("EVALKIT_SHARD_COUNT", source.count) if n))
            raise BadConfig(Problem(f"no shard count: pass --shard-count N or set {names}", field=field))
        count = _env_int(env, count_name)
    _check_count(count, field)
    if not 1 <= number <= count:
        base = "counts from 1, like --shard" if source.base == 1 else f"0-based, so shard {number}"
        hint = f"; the first shard is {source.index}=1" if source.base == 1 and number == 0 else ""
        raise BadConfig(
            Problem(f"{said} ({source.engine}, {base}) is out of range for {count} shards: {_span(count)}{hint}",
                    field=field)
        )
    return Shard(number - 1, count)
