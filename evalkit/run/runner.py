"""run()/arun(): check every input, write config.json, run the session, write metrics.json.

Nothing is written until the eval set, the flags, the selection, the baseline, the judge
and the target have all been checked; then config.json is written before the first case.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from evalkit.collector import fewer_collections
from evalkit.config import RunSettings, judge_identity
from evalkit.derive import RecordPass, RunFacts, derive_run, now_utc
from evalkit.errors import BadConfig, EvalkitError, InputError, Problem
from evalkit.evalset.turns import record_turn
from evalkit.gate.decision import gate_exit_code
from evalkit.net.breaker import CircuitBreaker
from evalkit.run.preflight import (
    check_anchors,
    check_baseline_corpus,
    check_baseline_judge,
    conflict_cases,
    prepare_inputs,
    unchecked_rules,
)
from evalkit.run.probe import probe_target
from evalkit.run.provenance import build_config, git_revision
from evalkit.run.records import WorkList, record_key, run_order
from evalkit.run.result import RunInterrupted, RunResult, seed_data
from evalkit.run.session import Prepared, ProgressSink, Session
from evalkit.store.runlog import Cell, Met, Rec
from evalkit.store.runs import (
    RunBusy,
    RunDir,
    config_hash,
    new_run_id,
    point_latest,
    run_folder_taken,
)

__all__ = ["arun", "run"]


def _build_judge(settings: RunSettings, *, conflict_cases: bool = False) -> Any:
    if not settings.judge_evaluators:
        return None
    from evalkit.judges import JudgeSettings, build_judge_runner

    return build_judge_runner(
        JudgeSettings(
            provider=settings.judge_provider,
            model=settings.judge_model,
            base_url=settings.judge_base_url,
            temperature=settings.judge_temperature,
            allow_unpinned=settings.allow_unpinned,
            use_cache=not settings.no_cache,
            answer_quality=settings.answer_quality,
            trials=settings.judge_trials,
            evaluators=settings.judge_evaluators,
            conflict_cases=conflict_cases,
            concurrency=settings.concurrency,
            retry_policy=_retry_policy(3, settings.max_retry_wait),
        )
    )


@dataclass(frozen=True)
class _Custom:
    """The project's own metrics a run scores as it ends (`--rubric`, `--scorer`): loaded, with
    the rubrics' judge (None: the offline heuristic), before anything is asked."""

    rubrics: tuple[Any, ...]
    scorers: tuple[Any, ...]
    llm: Any
    concurrency: int
    samples: int = 1  # --judge-samples: an LLM rubric judge asked that many times per record

    def definitions(self) -> dict[str, dict[str, Any]]:
        """config.json's `custom_metrics`, as `evalkit score --rubric` records them."""
        from evalkit.judges.rubric import judged_by

        metrics = [*(r.metric for r in judged_by(self.rubrics, self.llm)), *(x.metric for x in self.scorers)]
        return dict(sorted((m.name, m.definition()) for m in metrics))


def _load_custom(settings: RunSettings) -> _Custom | None:
    """The rubrics and scorers the run names (BadConfig / InputError, exit 2, before the first
    case, when one does not load); their judge is the run's --judge-* one."""
    if not settings.rubric and not settings.scorer:
        return None
    from evalkit.judges import JudgeSettings
    from evalkit.judges.rubric import load_custom, rubric_llm

    rubrics, scorers = load_custom(settings.rubric, settings.scorer)
    llm = None
    if rubrics:
        llm = rubric_llm(JudgeSettings(
            provider=settings.judge_provider, model=settings.judge_model, base_url=settings.judge_base_url,
            temperature=settings.judge_temperature, allow_unpinned=settings.allow_unpinned,
            use_cache=not settings.no_cache, concurrency=settings.concurrency,
            retry_policy=_retry_policy(3, settings.max_retry_wait),
        ))
    return _Custom(tuple(rubrics), tuple(scorers), llm, settings.concurrency, settings.judge_trials)


def _define_custom(config: dict[str, Any], custom: _Custom | None) -> None:
    """A new run's config.json: the custom metrics' definitions, in its hash too (as `evalkit
    score --rubric` records them on a stored run: same config_hash, same metrics)."""
    if custom is None:
        return
    from evalkit.metrics.custom import CUSTOM_METRICS

    config[CUSTOM_METRICS] = custom.definitions()
    config["hashed"][CUSTOM_METRICS] = config[CUSTOM_METRICS]
    config["config_hash"] = config_hash(config["hashed"])


async def _score_custom(run: RunDir, asked: _Asked, custom: _Custom | None) -> _Asked:
    """Every record of the run scored by the custom metrics (a resumed run's earlier records
    again: cached or deterministic), results.jsonl rewritten; the derive then reads the file."""
    if custom is None:
        return asked
    from evalkit.judges.rubric import ascore_records
    from evalkit.metrics.custom import CUSTOM_FAILED

    records = run.read_results()
    try:
        await ascore_records(records, custom.rubrics, custom.scorers, llm=custom.llm, concurrency=custom.concurrency,
                             samples=custom.samples)
    except InputError as e:  # a scorer raised: the run's answers are kept and derived, said as an error
        message = (f"the run's own metrics were not scored: {e}; fix it, then score the run with evalkit score "
                   f"--run-id {run.run_id} --rubric/--scorer")
        return replace(asked, warnings=({"kind": CUSTOM_FAILED, "severity": "error", "message": message},))
    run.rewrite_results(records)
    if asked.derived is not None:
        asked.derived.close()
    return replace(asked, derived=None)


def _retry_policy(retries: int, max_retry_wait: float, progress: Any = None, breaker: Any = None) -> Any:
    """Bounded backoff whose server-requested Retry-After waits are capped at --max-retry-wait;
    each wait is told to the progress sink when it can show one. With a circuit breaker,
    retries stop once it opens."""
    from evalkit.net.retry import RetryPolicy

    on_wait = getattr(progress, "waiting", None)
    return RetryPolicy.from_retries(retries, max_retry_after=max_retry_wait, on_wait=on_wait if callable(on_wait) else None,
                                    breaker=breaker)


def reference_vault_id(settings: RunSettings, cases: Iterable[Any]) -> str | None:
    """The vault id the in-process reference chatbot serves: --vault-id; else, when the
    request carries a case's vaults (--send-scope vaults/both), the one vault the selected
    cases name, so an eval set written for a vault called "tasks" runs against --vault
    ./obsidian-tasks; else None (the folder's name)."""
    if settings.vault_id is not None or not settings.in_process:
        return settings.vault_id
    if "vaults" not in settings.scope_sent:
        return None
    named = {v for c in cases for v in (getattr(c, "vaults", None) or [])}
    return named.pop() if len(named) == 1 else None


def _build_target(settings: RunSettings, progress: Any = None, vault_id: str | None = None, breaker: Any = None) -> Any:
    from evalkit.targets import build_target

    target = build_target(
        target=settings.target,
        api_url=settings.api_url or None,
        vault=Path(settings.vault),
        vault_id=vault_id,
        timeout=settings.timeout,
        retries=settings.retries,
        rps=settings.rps,
        params=dict(settings.params),
        retry_policy=_retry_policy(settings.retries, settings.max_retry_wait, progress, breaker),
        max_response_bytes=settings.max_response_bytes,
        processes=settings.target_processes,
    )
    if settings.task_cache:
        from evalkit.run.task_cache import CachedTarget

        if settings.trials > 1:  # every trial would get trial 1's answer: no variance left to measure
            raise BadConfig(Problem("--task-cache answers a repeated question from the cache, so --trials would "
                                    "measure no variance; use one or the other", field="--task-cache"))

        target = CachedTarget(target, settings.task_cache)
    return target


def _count_probe(breaker: Any, probe: Mapping[str, Any] | None) -> None:
    """The probe's 5xx (or broken exchange) is the target's first failed request."""
    error = (probe or {}).get("error") or {}
    if probe and probe.get("ok") is False and error.get("kind") == "http_error":
        status = error.get("status")
        breaker.failure(f"HTTP {status}" if status else "connection error")


def _stopped(breaker: Any, target: Any, n_not_asked: int, n_pending: int, run_id: str) -> dict[str, Any] | None:
    """What config.json, metrics.json's warnings and the CLI say when the circuit breaker
    stopped the run (the target failed every request and answered none); None when it did not."""
    if not breaker.open:
        return None
    desc = target.describe()
    where = f"the target at {desc['api_url']}" if desc.get("api_url") else f"the target {desc.get('target') or desc.get('kind')}"
    last = breaker.last or "an error"
    if last.startswith("HTTP"):
        check = f"check the server's log for the error behind {last}"
    elif last == "timeout":
        check = f"check that it answers within --timeout {desc.get('timeout_s') or 0:g}s (load, warm-up)"
    else:
        check = "check that it is running at that address"
    left = f"{n_not_asked} of {n_pending} cases were not asked" if n_not_asked else "its retries were cut short"
    message = (
        f"stopped asking {where}: it failed every request ({breaker.failures} in a row, the last {last}) and "
        f"answered none; {left}. {check[0].upper() + check[1:]}, then finish the run with: "
        f"--resume {shlex.quote(run_id)} --retry-errors"
    )
    return {"after_failures": breaker.failures, "last": last, "n_not_asked": n_not_asked, "message": message}


def _stopped_warning(stopped: Mapping[str, Any] | None, n_pending: int) -> dict[str, Any] | None:
    """metrics.json's `stopped_early` warning (cases not asked, of those the session had to ask)."""
    if stopped is None:
        return None
    return {"kind": "stopped_early", "severity": "error", "n": stopped["n_not_asked"], "of": n_pending, "ids": [],
            "message": stopped["message"]}


def _create_run_dir(results_dir: Path, run_id: str | None, chash: str, suffix: str = "",
                    hold: ExitStack | None = None) -> RunDir:
    """The run folder: the given --run-id, else `<UTC second>-<hash><suffix>` (a shard's suffix
    is `-shard-<i>-of-<n>`). Two runs of one config in the same second get the next free
    second, so ids stay unique and time-sorted. With `hold`, the new run's writer lock is
    taken into it as the folder is made (a generated id another run_eval took meanwhile
    moves on to the next second)."""
    if run_id:
        return RunDir.create(results_dir, run_id, hold=hold)
    now = datetime.now(timezone.utc)
    for step in range(1000):
        candidate = new_run_id(chash, now + timedelta(seconds=step)) + suffix
        if not run_folder_taken(results_dir / candidate):
            try:
                return RunDir.create(results_dir, candidate, hold=hold)
            except (RunBusy, BadConfig):
                continue  # made by another run_eval since the look above
    raise BadConfig(Problem(f"no free run id under {results_dir} for config {chash[:6]}"))


def _resumed_writer(values: Mapping[str, Any]) -> AbstractContextManager[object]:
    """The writer lock of the run `--resume` names (RunDir.writer), taken before its files are
    read: a second resume of a run is refused before it asks anything again. Nothing when no
    run is resumed, or when the run cannot be opened (prepare_inputs then says why)."""
    resume = values.get("resume")
    if not resume:
        return nullcontext()
    try:
        run = RunDir.open(Path(values.get("results_dir") or "results"), str(resume), flag="--resume")
    except InputError:
        return nullcontext()
    return run.writer("run_eval --resume")


def _finished_keys(run: RunDir, *, retry_errors: bool) -> set[tuple[str, int]]:
    """(case, trial) pairs a resume skips: every recorded one, or with --retry-errors only
    those the target did not fail (an empty answer is the system's answer, not a transient
    failure). A conversation's turns after a failed one are redone with it: they were asked
    with a history that lacked its answer (their new records replace the old)."""
    done: set[tuple[str, int]] = set()
    turns: dict[tuple[str, int], tuple[tuple[str, int], int]] = {}  # key -> ((conversation, trial), turn)
    redo_from: dict[tuple[str, int], int] = {}  # (conversation, trial) -> its first failed turn
    for r in run.iter_results():
        key, place = record_key(r), record_turn(r)
        if place is not None:
            turns[key] = place
        if not retry_errors or not r.get("error") or r["error"].get("kind") == "empty_answer":
            done.add(key)
        elif place is not None:
            redo_from[place[0]] = min(redo_from.get(place[0], place[1]), place[1])
    if redo_from:
        done -= {key for key, (unit, turn) in turns.items() if unit in redo_from and turn > redo_from[unit]}
    return done


def _resumed_conversations(p: Prepared, run: RunDir, pending: Sequence[tuple[int, str, int]]) -> None:
    """A resume of a run of conversations: for each conversation (and trial) with a pending
    turn, its turns before the first pending one, read from their records in one pass, as
    the session would have had them: what the next turn is sent under --history live (the
    question, then the chatbot's answer unless the target failed; `p.live_history`), and,
    when the run judges, their chunks with texts recovered as judge_answers recovers them
    (judges.context; `p.earlier_contexts`)."""
    s = p.settings
    live, judged = s.history == "live", not s.retrieval_only
    first: dict[tuple[str, int], int] = {}
    for case_index, _, trial in pending:
        turn = p.eval_set.turn_of(case_index)
        if turn is not None:
            first[(turn[0], trial)] = min(first.get((turn[0], trial), turn[1]), turn[1])
    if not first or not (live or judged):
        return
    if judged:
        from evalkit.judges.context import context_source, full_context
        from evalkit.judges.runner import context_from_record

        reader = context_source(p.config, None).reader
    said: dict[tuple[str, int], list[tuple[int, list[dict[str, Any]]]]] = {}
    for r in run.iter_results():
        place = record_turn(r)
        if place is None or place[0] not in first or place[1] >= first[place[0]]:
            continue
        unit, turn = place
        if live:
            messages = [{"role": "user", "content": r.get(Rec.QUESTION)}]
            if not r.get(Rec.ERROR) and r.get(Rec.ANSWER):
                messages.append({"role": "assistant", "content": r[Rec.ANSWER]})
            said.setdefault(unit, []).append((turn, messages))
        if judged:
            recovered = full_context(r, reader)[0]
            p.earlier_contexts.setdefault(unit, []).append((turn, recovered if recovered is not None else context_from_record(r)))
    p.live_history = {unit: [m for _, messages in sorted(turns, key=lambda t: t[0]) for m in messages]
                      for unit, turns in said.items()}


def _finalize_order(run: RunDir, selected: Sequence[tuple[int, str]], trials: int = 1) -> int:
    """Rewrite results.jsonl in run order (trial, then eval-set order), one record per
    selected (case, trial). Returns the count."""
    wanted = {case_id for _, case_id in selected}
    seen: set[tuple[str, int]] = set()
    in_order = True
    last = (0, -1)
    n = 0
    for rec in run.iter_results():
        key, pos = record_key(rec), run_order(rec)
        if key in seen or key[0] not in wanted or key[1] > trials or pos < last:
            in_order = False
        seen.add(key)
        last = max(last, pos)
        n += 1
    if in_order:
        return n
    records: dict[tuple[str, int], dict] = {}
    for rec in run.iter_results():
        key = record_key(rec)
        if key[0] in wanted and key[1] <= trials:
            # The last record of a case wins: a case redone by --retry-errors replaces its error.
            records[key] = rec
    ordered = sorted(records.values(), key=run_order)
    run.rewrite_results(ordered)
    return len(ordered)


def _note(progress: Any, message: str, details: Sequence[str] = ()) -> None:
    """A warning before the run: through the progress sink when it can print one (the CLI's
    does, on stderr), else the `evalkit` logger."""
    note = getattr(progress, "note", None)
    if callable(note):
        note(message, list(details))
        return
    import logging

    log = logging.getLogger("evalkit")
    log.warning(message)
    for line in details:
        log.warning("  %s", line)


def _lock_baselined(p: Prepared, result: RunResult, progress: Any) -> None:
    """Lock, in the `eval_sets.lock` beside them, the eval set files this run baselined:
    every file with the --baseline run's id when the run gated against a baseline of the
    same dataset_version; the versioned files (`*.v<N>.jsonl`) with this run's id unless
    the run is incomplete. Files already locked are left alone. Only a note is said; a lock
    that cannot be written is a warning, never a failed run."""
    from evalkit.evalset.lock import LOCK_NAME, lock_baselined

    plan: list[tuple[str, bool]] = []  # (run id to record, versioned files only)
    if p.baseline is not None and p.settings.baseline and p.baseline.get("dataset_version") == p.eval_set.version:
        plan.append((p.settings.baseline, False))
    if not result.incomplete:
        plan.append((result.run_id, True))
    for run_id, versioned_only in plan:
        try:
            added = lock_baselined(p.eval_set, run_id, versioned_only=versioned_only)
        except (EvalkitError, OSError) as e:
            _note(progress, f"could not lock the eval set in {LOCK_NAME}: {e}")
            return
        for path in added:
            _note(progress, f"locked {path.name} in {path.parent / LOCK_NAME} (baselined by run {run_id})")


async def arun(values: Mapping[str, Any], progress: ProgressSink | None = None, _state: dict | None = None) -> RunResult:
    """Run (or resume) an evaluation. See `run()`; this is its coroutine.

    Its stages: check the inputs and build the judge and the target; open the run folder (a
    new one, after the probe) or resume it; check what this session asks and write
    config.json; ask the cases; derive metrics.json and the result. The run's writer lock
    (`RunDir.writer`) is held from before a resumed run's files are read, or from when a
    new run's folder is made, to the end.
    """
    with ExitStack() as hold:
        hold.enter_context(_resumed_writer(values))
        return await _arun(values, progress, _state, hold)


async def _arun(values: Mapping[str, Any], progress: ProgressSink | None, _state: dict | None,
                hold: ExitStack) -> RunResult:
    """arun's stages; a new run's writer lock goes into `hold`."""
    state = _state if _state is not None else {}
    # A new run's `git rev-parse` and `git status` (5-10 ms) run in a thread while the
    # eval set loads.
    loop = asyncio.get_running_loop()
    git = None if values.get("resume") else loop.run_in_executor(None, git_revision, Path.cwd())
    p = prepare_inputs(values)
    s = p.settings
    judge = _build_judge(s, conflict_cases=conflict_cases(p))
    target = custom = None
    try:
        custom = _load_custom(s)
        # Shared by the target's retries and the session: a target failing every request stops the run.
        breaker = CircuitBreaker()
        # The run's cases, not the shard's: the vault id goes into every chunk id.
        target = _build_target(s, progress, reference_vault_id(s, (p.eval_set.cases[i] for i, _ in p.run_cases)), breaker)
        judge_desc = judge.describe() if judge is not None else {"provider": None}
        resumed = p.run is not None and p.stored_config is not None
        if resumed:
            run, probe = _resume_run(p, judge_desc, custom), None
        else:
            run, probe = await _open_new_run(p, target, judge_desc, git, hold, custom)
        state.update(run_id=run.run_id, run_dir=run.path, results_dir=s.results_dir)
        work = await _start_session(p, run, target, breaker, probe, progress, resumed=resumed,
                                    vault_given=values.get("vault") is not None)
        asked = await _ask_cases(p, run, work, target, judge, judge_desc, breaker, progress)
        asked = await _score_custom(run, asked, custom)
        result = _finish(p, run, work, asked, judge, judge_desc)
        _lock_baselined(p, result, progress)  # issue 14 item 6: a baselined eval set is immutable
        return result
    finally:
        if target is not None:
            await target.aclose()
        if judge is not None:
            await judge.aclose()
        if custom is not None and custom.llm is not None:
            await custom.llm.aclose()


def _resume_run(p: Prepared, judge_desc: Mapping[str, Any], custom: _Custom | None = None) -> RunDir:
    """The resumed run's folder, its config.json kept, once the judge and the custom metrics
    are the ones it recorded (BadConfig otherwise). It probes later, with a case it is about
    to ask."""
    run = p.run
    stored_judge = (p.stored_config.get("hashed") or {}).get("judge")
    if stored_judge != judge_identity(judge_desc):
        raise BadConfig(
            Problem(
                f"cannot resume {run.run_id}: the judge differs: the run used {stored_judge!r}, "
                f"now {judge_identity(judge_desc)!r}"
            )
        )
    from evalkit.metrics.custom import CUSTOM_METRICS

    stored_custom = (p.stored_config.get("hashed") or {}).get(CUSTOM_METRICS)
    now_custom = custom.definitions() if custom is not None else None
    if stored_custom != now_custom:
        raise BadConfig(Problem(
            f"cannot resume {run.run_id}: its own metrics differ (a rubric or scorer file changed, or was added or "
            f"left out): the run recorded {sorted(stored_custom or {})}, now {sorted(now_custom or {})}"))
    p.config = p.stored_config
    return run


async def _open_new_run(
    p: Prepared, target: Any, judge_desc: Mapping[str, Any], git: asyncio.Future | None, hold: ExitStack,
    custom: _Custom | None = None,
) -> tuple[RunDir, dict[str, Any] | None]:
    """A new run's folder, created (its writer lock taken into `hold`) once the baseline suits
    the judge and the corpus and the target answered the probe; config.json's body is built
    (written later, per session). Returns the folder and the probe (None for an empty shard,
    which asks nothing)."""
    s = p.settings
    if p.baseline is not None and not s.ignore_invariants:
        check_baseline_judge(p.baseline, judge_desc, s.baseline)
        if s.same_corpus:
            await check_baseline_corpus(p.baseline, target, s.baseline)
    # Before anything is written: a dead or foreign target stops here with one line.
    # An empty shard asks nothing, so it probes nothing.
    probe = await probe_target(s, target, p.eval_set.cases[p.selected[0][0]]) if p.selected else None
    git_info = await git if git is not None else git_revision(Path.cwd())
    p.config = build_config(s, p.eval_set, p.selected, target.describe(), judge_desc, git_info)
    _define_custom(p.config, custom)
    shard_info = p.shard_info
    if shard_info is not None:  # recorded, never hashed: the shards of a run share one config_hash
        p.config["shard"] = shard_info
    suffix = f"-shard-{shard_info['number']}-of-{shard_info['count']}" if shard_info else ""

    run = _create_run_dir(Path(s.results_dir), s.run_id, p.config["config_hash"], suffix, hold)
    p.config["run_id"] = run.run_id
    p.run = run
    return run, probe


@dataclass(frozen=True)
class _Work:
    """What this session asks: the (case, trial) pairs still pending, of `n_work` in the run."""

    resumed: bool
    repaired: bool  # a torn last line of results.jsonl was cut
    n_work: int
    pending: WorkList
    warnings: tuple[dict[str, Any], ...]  # metrics.json warnings found before the first case


async def _start_session(
    p: Prepared, run: RunDir, target: Any, breaker: CircuitBreaker, probe: dict[str, Any] | None,
    progress: Any, *, resumed: bool, vault_given: bool,
) -> _Work:
    """What this session asks (a resume skips what is done), the warnings to say before the
    first case, and config.json written with this session's entry."""
    s = p.settings
    if p.suite is not None:  # it weighs the metrics, never changes them: kept beside the settings
        p.config["suite"] = p.suite.to_json()

    repaired = run.repair_tail() if resumed else False
    done = _finished_keys(run, retry_errors=s.retry_errors) if resumed else set()
    n_work = len(p.selected) * s.trials
    pending = WorkList(p.selected, s.trials, done)
    if resumed and p.eval_set.has_conversations:
        _resumed_conversations(p, run, pending)
    if resumed and pending:
        # A resume probes with a case it is about to ask anyway: finished cases are not re-asked.
        probe = await probe_target(s, target, p.eval_set.cases[pending[0][0]])
    _count_probe(breaker, probe)
    _note_probe(progress, s, probe)
    stale = await check_anchors(p, target, vault_given=vault_given)
    if stale is not None:
        _note(progress, stale["message"], stale["problems"])
    unchecked = unchecked_rules(p)
    if unchecked is not None:
        _note(progress, unchecked["message"], unchecked["problems"])
    p.config.setdefault("sessions", []).append(
        {
            "started_at": now_utc(),
            "resumed": resumed,
            "pending": len(pending),
            "repaired_tail": repaired,
            "settings": {k: getattr(s, k) for k in ("concurrency", "timeout", "retries", "rps")},
            "probe": probe,
        }
    )
    run.write_config(p.config)  # written before the first case is asked
    return _Work(resumed, repaired, n_work, pending, tuple(w for w in (stale, unchecked) if w))


def _note_probe(progress: Any, s: RunSettings, probe: Mapping[str, Any] | None) -> None:
    """Say what the probe's answer tells before the run: options the target ignores, and
    where its answer breaks the contract."""
    ignored = list(probe.get("ignored_options") or []) if probe else []
    if "collection" in ignored and "collection" in s.scope_sent and "collection" not in s.params:
        ignored.remove("collection")
        _note(progress, "the target ignores the case's collection (options.collection, --send-scope collection): it "
              "says it does not know it (debug.ignored_options), so this run searches everything")
    if ignored:
        _note(progress, f"the target ignores --param {', '.join(ignored)}: it says it does not "
              "know them (debug.ignored_options), so this run measures its defaults for them")
    if probe and probe.get("contract"):
        from evalkit.targets.contract import probe_notes

        _note(progress, "the target's first answer breaks the contract (docs/api-contract.md); "
              "retrieval numbers will be wrong until it is fixed:", probe_notes(probe["contract"]))


@dataclass(frozen=True)
class _Asked:
    """How the session's asking went."""

    session: Session
    derived: RecordPass | None  # the metrics taken from the records as they were written
    wall_s: float
    stopped: dict[str, Any] | None  # the circuit breaker stopped the run (`_stopped`)
    warnings: tuple[dict[str, Any], ...] = ()  # metrics.json warnings of the run's end (`_score_custom`)


async def _ask_cases(
    p: Prepared, run: RunDir, work: _Work, target: Any, judge: Any, judge_desc: Mapping[str, Any],
    breaker: CircuitBreaker, progress: Any,
) -> _Asked:
    """The case loop: ask every pending (case, trial), append the records, then record the
    session's wall time and whether the breaker stopped it in config.json."""
    s = p.settings
    pending = work.pending
    # A fresh run's metrics are taken from its records as they are written: results.jsonl
    # (1.2 GB at 100,000 cases and K = 20) is then not read back when it is in run order.
    derived = RecordPass(s, rows=True) if not work.resumed else None
    session = Session(p, target, judge, judge_desc, progress, derived=derived, breaker=breaker)
    if progress is not None:
        progress.start(
            run_id=run.run_id, run_dir=run.path, total=work.n_work, done=work.n_work - len(pending),
            resumed=work.resumed,
        )
    t0 = time.perf_counter()
    try:
        if pending:
            with fewer_collections():  # records stream through: collections were a tenth of the CPU
                await session.execute(pending)
    finally:
        if progress is not None:
            progress.close()
    wall = time.perf_counter() - t0
    # The suite's wall time is the sum of its sessions' (a killed session's is lost).
    p.config["sessions"][-1]["wall_s"] = round(wall, 3)
    stopped = _stopped(breaker, target, len(pending) - session.n_asked, len(pending), run.run_id)
    if stopped is not None:
        p.config["sessions"][-1]["stopped"] = stopped
    if s.task_cache:  # this session's hits and misses (a resume's session has its own)
        p.config["sessions"][-1]["task_cache"] = target.summary()
    run.write_config(p.config)
    return _Asked(session, derived, wall, stopped)


def _finish(
    p: Prepared, run: RunDir, work: _Work, asked: _Asked, judge: Any, judge_desc: Mapping[str, Any]
) -> RunResult:
    """results.jsonl in run order, every derived file from the records (`derive_run`), the
    `latest` pointer, and the RunResult with its verdicts."""
    s = p.settings
    session, derived = asked.session, asked.derived
    if not work.resumed and session.in_order and session.n_written == work.n_work:
        n = session.n_written  # written in run order, one per (case, trial): nothing to fix
    else:
        n = _finalize_order(run, p.selected, s.trials)
        if derived is not None:
            derived.close()
        derived = None  # the file is not what was written, in that order: derive reads it
    n_pending = len(work.pending)
    metrics, gate = derive_run(run, RunFacts(
        settings=s, config=p.config, eval_set_commit_hash=p.eval_set.commit_hash,
        dataset_version=p.eval_set.version, judge_stats=judge.stats() if judge is not None else None,
        baseline=p.baseline, session_wall_s=asked.wall_s,
        pre_run_warnings=[w for w in (*work.warnings, _stopped_warning(asked.stopped, n_pending), *asked.warnings) if w],
    ), derived)
    point_latest(Path(s.results_dir), run.run_id)  # the run finished last, resumed ones too
    kinds = metrics[Met.AGGREGATE][Cell.OPERATIONAL].get("error_kinds") or {}
    n_errors = sum(v for kind, v in kinds.items() if kind != "empty_answer")
    failed_gate = bool(gate and gate_exit_code(gate) != 0 and not s.allow_regressions)
    result = RunResult(
        run_id=run.run_id,
        run_dir=run.path,
        metrics=metrics,
        data=seed_data(metrics, s.primary_k),
        gate=gate,
        success=not failed_gate,
        thresholds=metrics.get("thresholds") if s.thresholds else None,
        trials=metrics.get("trials"),
        n_cases=n,
        n_errors=n_errors,
        resumed=work.resumed,
        repaired_tail=work.repaired,
        skipped=work.n_work - n_pending,
        judge=judge_desc,
        max_error_rate=s.max_error_rate,
        warnings=list(metrics.get("warnings") or []),
        allow_format_mismatch=s.allow_format_mismatch,
        stopped=asked.stopped,
    )
    # One rule for the CLI and the API: a run whose target failed too often is not a success.
    result.success = result.success and not result.incomplete
    result.success = result.success and not result.thresholds_failed
    result.success = result.success and not result.unmeasurable
    return result


def run(values: Mapping[str, Any], progress: ProgressSink | None = None) -> RunResult:
    """Run (or resume, with `resume=RUN_ID`) an evaluation and write `results/<run_id>/`.

    Args:
        values: the settings the user gave (RunSettings field names); everything else
            takes its default, or on resume the stored value.
        progress: optional sink for progress events (the CLI's rich bar).

    Returns:
        RunResult with the metrics, the gate and the run folder.

    Raises:
        InputError: bad eval set (BadEvalSet), bad flags or a resume that does not match
            (BadConfig), unknown run (RunNotFound), judge misconfiguration (JudgeConfigError).
            Nothing is written in these cases, except that a resume may repair a torn tail.
            A judge the provider refuses mid-run (a rejected key) stops the run like Ctrl-C:
            what was written is kept and the error's `resume_command` finishes the run.
        RunInterrupted: Ctrl-C after the run folder was created; resume with its id.
    """
    state: dict[str, Any] = {}
    try:
        return asyncio.run(arun(values, progress, state))
    except KeyboardInterrupt:
        if "run_id" in state:
            raise RunInterrupted(state["run_id"], state["run_dir"], str(state["results_dir"])) from None
        raise
    except EvalkitError as e:
        # Stopped once config.json was written (a rejected judge key): resumable, as after Ctrl-C.
        if "run_id" in state and (Path(state["run_dir"]) / "config.json").exists():
            e.resume_command = RunInterrupted(state["run_id"], state["run_dir"], str(state["results_dir"])).resume_command
        raise
