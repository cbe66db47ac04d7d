"""merge_runs(): join the n shard runs of one run (`run_eval --shard i/n`) into one run folder.

The shards must share one config_hash, one dataset_version, one shard count and one
selection, hold every shard index once, be finished (metrics.json), and together hold
every selected (case, trial) exactly once. Otherwise nothing is written and every problem
is said. The merged run's results.jsonl is in run order (trial, then eval-set order) and
its metrics.json is aggregated from it by run_eval's own code, so it equals a single
machine's run of the same config, except timing: the shards ran side by side, so the
suite's wall time (`latency.total_ms`) is null and `run_timing` lists each shard's.
The merged run is written into a hidden staging folder and renamed into place when whole
(`store.runs.staged_run`), so no one, `latest` included, sees a half-made run: it needs no
writer lock. The shard runs are read several times over, so each one's writer lock
(`RunDir.writer`) is held while the merge reads them: a shard being resumed or re-scored is
refused by name, never merged half-changed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, Problem
from evalkit.run.records import record_key, run_order
from evalkit.store.runlog import Met, Rec
from evalkit.store.runs import RunDir, point_latest

__all__ = ["MergeResult", "merge_runs"]


@dataclass
class MergeResult:
    """What `merge_runs()` returns: the merged run, its metrics.json and what it came from."""

    run_id: str
    run_dir: Path
    metrics: dict[str, Any]
    merged_from: list[str]
    n_records: int
    shard_count: int
    warnings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _ShardRun:
    run: RunDir
    config: dict[str, Any]
    metrics: dict[str, Any]
    shard: dict[str, Any]
    in_order: bool = True


def _label(block: Mapping[str, Any]) -> str:
    """config.json's `shard` block as users number shards: "2/4".

    The block's `index` is 0-based in every version (runs stored before issue 28 have no
    `number`), so the merge checks use `index` and only messages add 1.
    """
    index = block.get("index")
    return f"{index + 1 if isinstance(index, int) else index}/{block.get('count')}"


def _open_shards(results_dir: Path, run_ids: Sequence[str], hold: ExitStack) -> tuple[list[_ShardRun], list[Problem]]:
    shards: list[_ShardRun] = []
    problems: list[Problem] = []
    for run_id in run_ids:
        run = RunDir.open(results_dir, run_id, flag="RUN_IDS")
        hold.enter_context(run.writer("evalkit merge"))  # held until the merged run is in place
        config = run.read_config()
        shard = config.get("shard")
        metrics = run.read_metrics()
        if not isinstance(shard, Mapping):
            problems.append(Problem(f"run {run.run_id} is not a shard (its config.json has no `shard`; "
                                    "shards are made by run_eval --shard I/N)", field="RUN_IDS"))
            continue
        if metrics is None:
            problems.append(Problem(f"shard {_label(shard)} (run {run.run_id}) is unfinished: "
                                    f"no metrics.json; finish it with run_eval --resume {run.run_id}", field="RUN_IDS"))
            continue
        shards.append(_ShardRun(run, config, metrics, dict(shard)))
    return shards, problems


def _same(shards: list[_ShardRun], what: str, get: Any) -> list[Problem]:
    values: dict[Any, list[str]] = {}
    for s in shards:
        values.setdefault(get(s), []).append(s.run.run_id)
    if len(values) <= 1:
        return []
    listed = "; ".join(f"{str(v)[:12]}: {', '.join(ids)}" for v, ids in values.items())
    return [Problem(f"the shards differ in {what} ({listed}); merge only the shards of one run", field="RUN_IDS")]


def _check_shards(shards: list[_ShardRun]) -> list[Problem]:
    problems = [
        *_same(shards, "config_hash", lambda s: s.config.get("config_hash")),
        *_same(shards, "dataset_version (the eval set)", lambda s: s.config.get("dataset_version")),
        *_same(shards, "shard count", lambda s: s.shard.get("count")),
        *_same(shards, "selected cases", lambda s: s.shard.get("selected_ids_sha256")),
    ]
    if problems:
        return problems
    count = shards[0].shard["count"]
    by_index: dict[int, list[str]] = {}
    for s in shards:
        by_index.setdefault(s.shard["index"], []).append(s.run.run_id)
    for index, ids in sorted(by_index.items()):
        if len(ids) > 1:
            problems.append(Problem(f"shard {index + 1}/{count} given {len(ids)} times (runs {', '.join(ids)}): "
                                    "its cases would be counted twice", field="RUN_IDS"))
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        problems.append(Problem(f"incomplete: {len(missing)} of {count} shards missing: "
                                f"{', '.join(f'{i + 1}/{count}' for i in missing)}", field="RUN_IDS"))
    return problems


def _check_records(shards: list[_ShardRun], trials: int) -> list[Problem]:
    """Every record in its shard, each (case, trial) once, each shard complete, the whole
    selection covered. Streams each results.jsonl once, keeping only keys."""
    from evalkit.evalset.shard import ids_sha256, shard_of, shard_unit
    from evalkit.evalset.turns import case_turn

    problems: list[Problem] = []
    owner: dict[tuple[str, int], str] = {}
    positions: dict[int, str] = {}
    count = shards[0].shard["count"]
    for s in shards:
        n, last, foreign = 0, (0, -1), 0
        for rec in s.run.iter_results():
            key = record_key(rec)
            n += 1
            if key in owner:
                problems.append(Problem(f"case {key[0]!r} trial {key[1]} is in both {owner[key]} and {s.run.run_id}",
                                        field="RUN_IDS"))
                continue
            owner[key] = s.run.run_id
            turn = case_turn(rec.get(Rec.CASE))
            if shard_of(shard_unit(key[0], turn[0] if turn is not None else None), count) != s.shard["index"]:
                foreign += 1
            pos = run_order(rec)
            if pos < last:
                s.in_order = False
            last = max(last, pos)
            positions[int(rec.get(Rec.CASE_INDEX, 0))] = key[0]
        if foreign:
            problems.append(Problem(f"run {s.run.run_id} holds {foreign} record(s) of cases outside shard "
                                    f"{_label(s.shard)}", field="RUN_IDS"))
        expected = int(s.shard.get("n_cases", 0)) * trials
        if n != expected:
            problems.append(Problem(f"shard {_label(s.shard)} (run {s.run.run_id}) has {n} records, "
                                    f"expected {expected}; finish it with run_eval --resume {s.run.run_id}",
                                    field="RUN_IDS"))
    total = int(shards[0].shard.get("n_selected_total", 0))
    if not problems and (len(positions) != total
                         or ids_sha256([positions[i] for i in sorted(positions)]) != shards[0].shard.get("selected_ids_sha256")):
        problems.append(Problem(f"the shards hold {len(positions)} distinct cases, not the {total} selected ones",
                                field="RUN_IDS"))
    return problems


def _merged_records(shards: list[_ShardRun]) -> Iterator[dict[str, Any]]:
    if all(s.in_order for s in shards):
        yield from heapq.merge(*(s.run.iter_results() for s in shards), key=run_order)
    else:
        yield from sorted((r for s in shards for r in s.run.iter_results()), key=run_order)


def _shard_wall_s(s: _ShardRun) -> float:
    walls = [x.get("wall_s") for x in s.config.get("sessions") or []]
    return round(sum(w for w in walls if isinstance(w, int | float)), 3)


def _sum_stats(stats: list[Any]) -> Any:
    """Judge stats of the shards summed field by field (numbers), else the first's value."""
    present = [x for x in stats if x is not None]
    if not present:
        return None
    if all(isinstance(x, Mapping) for x in present):
        keys = dict.fromkeys(k for x in present for k in x)
        return {k: _sum_stats([x.get(k) for x in present]) for k in keys}
    if all(isinstance(x, int | float) and not isinstance(x, bool) for x in present):
        return sum(present)
    return present[0]


def _pre_run_warnings(shards: list[_ShardRun]) -> list[dict[str, Any]]:
    """The shards' pre-run warnings (stale anchors, unchecked rules), each kind as one
    (counts summed), as one run would say it."""
    out = []
    stale = [w for s in shards for w in s.metrics.get("warnings") or [] if w.get("kind") == "stale_anchors"]
    if stale:
        n, of = sum(int(w.get("n", 0)) for w in stale), sum(int(w.get("of", 0)) for w in stale)
        problems = [p for w in stale for p in w.get("problems") or []][:20]
        out.append({**stale[0], "n": n, "of": of, "problems": problems,
                    "message": f"{n} of {of} gold anchors do not exist in the corpus; they can only score 0 "
                               "(evalkit validate --eval-set ... --vault ... lists every one)"})
    rules = [w for s in shards for w in s.metrics.get("warnings") or [] if w.get("kind") == "unchecked_rules"]
    if rules:
        n, of = sum(int(w.get("n", 0)) for w in rules), sum(int(w.get("of", 0)) for w in rules)
        ids = [i for w in rules for i in w.get("ids") or []][:20]
        problems = [p for w in rules for p in w.get("problems") or []][:20]
        out.append({**rules[0], "n": n, "of": of, "ids": ids, "problems": problems,
                    "message": f"{n} of {of} cases ask for a rule that scoring cannot check as written "
                               "(evalkit validate lists each one with what to add)"})
    return out


def merge_runs(run_ids: Sequence[str], *, run_id: str, results_dir: str | Path = "results") -> MergeResult:
    """Merge the shard runs `run_ids` (under `results_dir`) into the new run `run_id` there.

    Raises:
        BadConfig: fewer than one run, runs that are not shards or are unfinished, shards of
            different configs / eval sets / counts, a shard given twice or missing, records
            that overlap or do not cover the selection, or `run_id` taken. Nothing is written.
        Whatever stops it later (an error, a kill) leaves no run folder named `run_id`.
        RunNotFound: a run id names no run.
        RunBusy: another command is changing a shard run.
    """
    with ExitStack() as hold:
        return _merge_runs(run_ids, run_id=run_id, results_dir=results_dir, hold=hold)


def _merge_runs(run_ids: Sequence[str], *, run_id: str, results_dir: str | Path, hold: ExitStack) -> MergeResult:
    """merge_runs' work; each shard run's writer lock goes into `hold`."""
    from evalkit.config import build_settings
    from evalkit.derive import RunFacts, derive_run, now_utc
    from evalkit.store.resultsdb import keep_in_step
    from evalkit.store.runs import check_run_id, staged_run

    results_dir = Path(results_dir)
    if not run_ids:
        raise BadConfig(Problem("no shard run given", field="RUN_IDS"))
    check_run_id(run_id)
    shards, problems = _open_shards(results_dir, run_ids, hold)
    if shards and not problems:
        problems = _check_shards(shards)
    settings_body = dict(shards[0].config.get("settings") or {}) if shards else {}
    trials = int(settings_body.get("trials") or 1)
    if shards and not problems:
        problems = _check_records(shards, trials)
    if problems:
        raise BadConfig([Problem(f"cannot merge: {p.message}", field=p.field) for p in problems])

    shards.sort(key=lambda s: s.shard["index"])
    first = shards[0]
    settings_body.update(shard=None, run_id=run_id, resume=None, results_dir=str(results_dir), baseline=None)
    settings = build_settings({}, settings_body)
    config = {k: v for k, v in first.config.items() if k != "shard"}
    merged_from = [s.run.run_id for s in shards]
    shard_runs = [
        {"run_id": s.run.run_id, "index": s.shard["index"], "number": s.shard["index"] + 1,
         "n_cases": s.shard.get("n_cases"),
         "wall_s": _shard_wall_s(s), "created_at": s.config.get("created_at"),
         "hardware": s.config.get("hardware"), "git": s.config.get("git")}
        for s in shards
    ]
    total = int(first.shard.get("n_selected_total", 0))
    config.update(
        run_id=run_id,
        created_at=now_utc(),
        settings=settings.public_dump(),
        sessions=[{**x, "shard_run_id": s.run.run_id} for s in shards for x in s.config.get("sessions") or []],
        merged_from=merged_from,
        shard_runs=shard_runs,
    )
    config["eval_set"] = {**(config.get("eval_set") or {}), "n_selected": total}

    walls = [x["wall_s"] for x in shard_runs]
    timing = {
        "session_wall_s": None,
        "sessions": len(config["sessions"]),
        "merged_shards": len(shards),
        "max_shard_wall_s": max(walls),
        "sum_shard_wall_s": round(sum(walls), 3),
        "shards": [{"run_id": x["run_id"], "index": x["index"], "number": x["number"], "wall_s": x["wall_s"]}
                   for x in shard_runs],
    }
    stats = _sum_stats([(s.metrics.get(Met.AGGREGATE) or {}).get("judge") for s in shards])
    # Built in a hidden staging folder, renamed into place whole (store.runs.staged_run): a
    # killed merge leaves no run under run_id, and the next merge removes what it left.
    with staged_run(results_dir, run_id) as run:
        run.write_together(results=_merged_records(shards), config=config)
        metrics, _ = derive_run(run, RunFacts(
            settings=settings, config=config, eval_set_commit_hash=first.config.get(Met.EVAL_SET_COMMIT_HASH),
            dataset_version=first.config.get("dataset_version"), judge_stats=stats,
            pre_run_warnings=_pre_run_warnings(shards), timing=timing,
        ))
    keep_in_step(run)  # derived in the hidden stage, indexed now it is in place
    point_latest(results_dir, run.run_id)
    return MergeResult(
        run_id=run.run_id,
        run_dir=run.path,
        metrics=metrics,
        merged_from=merged_from,
        n_records=total * trials,
        shard_count=first.shard["count"],
        warnings=list(metrics.get("warnings") or []),
    )
