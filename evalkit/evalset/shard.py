"""Shards: a deterministic 1/n slice of a run's cases, for spreading one run over n machines.

A case belongs to shard `shard_of(case_id, n)`: the first 8 bytes of sha256(case id, UTF-8)
as a big-endian integer, mod n. It depends on the id alone, so the same id lands in the
same shard whatever the eval set's order, size or the machine. Shard indexes are 0-based
(`0/4` .. `3/4`), like Kubernetes' JOB_COMPLETION_INDEX and a Slurm array started at 0.
`evalkit merge` (evalkit/run/merge.py) joins the n shard runs into one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from evalkit.errors import BadConfig, Problem

__all__ = ["Shard", "ids_sha256", "parse_shard", "shard_from_env", "shard_of"]

# Read by `shard_from_env`, first match wins.
INDEX_ENV = ("EVALKIT_SHARD_INDEX", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")
COUNT_ENV = ("EVALKIT_SHARD_COUNT", "SLURM_ARRAY_TASK_COUNT")

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 <= index < count)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, case_id: str) -> bool:
        return shard_of(case_id, self.count) == self.index

    def select(self, selected: Iterable[tuple[int, T]], id_of: Any = lambda c: c.id) -> list[tuple[int, T]]:
        """The (index, case) pairs of `selected` this shard runs, in their order."""
        return [(i, c) for i, c in selected if self.holds(id_of(c))]


def shard_of(case_id: str, count: int) -> int:
    """The shard (0-based) of a case id among `count`: sha256(id)[:8] as big-endian int, mod count."""
    digest = hashlib.sha256(str(case_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def ids_sha256(ids: Sequence[str]) -> str:
    """sha256 hex of the ids joined by newlines (in the order given): names a selection."""
    h = hashlib.sha256()
    for i, case_id in enumerate(ids):
        h.update((("\n" if i else "") + str(case_id)).encode("utf-8"))
    return h.hexdigest()


def _check(index: int, count: int, field: str) -> Shard:
    if count < 1:
        raise BadConfig(Problem(f"the shard count must be at least 1, got {count}", field=field))
    if not 0 <= index < count:
        raise BadConfig(
            Problem(
                f"shard index {index} is out of range for {count} shards: indexes are 0-based, "
                f"0/{count} .. {count - 1}/{count}",
                field=field,
            )
        )
    return Shard(index, count)


def parse_shard(value: str | Shard, field: str = "--shard") -> Shard:
    """`"i/n"` (0-based i) -> Shard.

    Raises:
        BadConfig: not `i/n` with integers, n < 1, or i outside 0..n-1.
    """
    if isinstance(value, Shard):
        return _check(value.index, value.count, field)
    text = str(value).strip()
    left, sep, right = text.partition("/")
    try:
        if not sep:
            raise ValueError
        index, count = int(left), int(right)
    except ValueError:
        raise BadConfig(Problem(f"expected INDEX/COUNT like 0/4 (0-based index), got {text!r}", field=field)) from None
    return _check(index, count, field)


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env[name].strip()
    try:
        return int(raw)
    except ValueError:
        raise BadConfig(Problem(f"${name} is {raw!r}, not an integer", field="--shard-from-env")) from None


def shard_from_env(count: int | None = None, env: Mapping[str, str] | None = None) -> Shard:
    """The shard named by the environment of a batch engine.

    The index is the first of EVALKIT_SHARD_INDEX, JOB_COMPLETION_INDEX (Kubernetes Indexed
    Job) and SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN when set, so an array 1-4 gives
    0..3) that is set. The count is `count` (--shard-count), else EVALKIT_SHARD_COUNT, else
    SLURM_ARRAY_TASK_COUNT.

    Raises:
        BadConfig: no index or no count in the environment, not integers, or out of range.
    """
    env = os.environ if env is None else env
    name = next((n for n in INDEX_ENV if env.get(n, "").strip()), None)
    if name is None:
        raise BadConfig(
            Problem(f"no shard index in the environment: set one of {', '.join(INDEX_ENV)}", field="--shard-from-env")
        )
    index = _env_int(env, name)
    if name == "SLURM_ARRAY_TASK_ID" and env.get("SLURM_ARRAY_TASK_MIN", "").strip():
        index -= _env_int(env, "SLURM_ARRAY_TASK_MIN")
    if count is None:
        count_name = next((n for n in COUNT_ENV if env.get(n, "").strip()), None)
        if count_name is None:
            raise BadConfig(
                Problem(
                    f"no shard count: pass --shard-count N or set one of {', '.join(COUNT_ENV)}",
                    field="--shard-from-env",
                )
            )
        count = _env_int(env, count_name)
    return _check(index, count, "--shard-from-env")
