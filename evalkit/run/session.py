"""The async part of one run: workers asking the target, one writer keeping eval-set order.

See evalkit/run/__init__.py for the order of work and the durability rules.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from evalkit.config import RunSettings
from evalkit.derive import RecordPass
from evalkit.errors import JudgeError, TargetError
from evalkit.evalset.load import EvalSet
from evalkit.judges.context import with_earlier_turns
from evalkit.net.ratelimit import AskTimer
from evalkit.run.records import (
    Selection,
    build_record,
    build_request,
    dump_model,
    error_record,
    record_config,
    versions_tuple,
)
from evalkit.schema import EvalCase
from evalkit.store.runlog import Rec
from evalkit.store.runs import RunDir

__all__ = ["FSYNC_INTERVAL_S", "ProgressSink"]


class ProgressSink(Protocol):
    """What the runner reports while it works (evalkit/report/run.py draws it with rich)."""

    def start(self, *, run_id: str, run_dir: Path, total: int, done: int, resumed: bool) -> None: ...

    def advance(self, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass
class Prepared:
    settings: RunSettings
    eval_set: EvalSet
    selected: Selection  # (position in eval_set, case id), in eval-set order
    baseline: dict[str, Any] | None
    stored_config: dict[str, Any] | None = None
    run: RunDir | None = None
    config: dict[str, Any] = field(default_factory=dict)
    response_validator: Any = None  # evalkit.metrics.validity.ResponseValidator, or None
    suite: Any = None  # evalkit.metrics.suite.Suite given with --suite (a resume keeps the stored one), or None
    shard_info: dict[str, Any] | None = None  # config.json's `shard` block with --shard (issue 15), else None
    # --history live on a resume: (conversation id, trial) -> the finished turns as the next
    # one is sent them, from the stored records (runner._live_history).
    live_history: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    # A judged run's resume: (conversation id, trial) -> (turn, its chunks, texts recovered as
    # judge_answers recovers them) of the finished turns (runner._earlier_contexts).
    earlier_contexts: dict[tuple[str, int], list[tuple[int, list[dict[str, Any]]]]] = field(default_factory=dict)
    # The run's cases before --shard (`selected` itself without it). What the hashed config
    # and the target are derived from, so that every shard of a run hashes alike (issue 36).
    unsharded: Selection | None = None

    @property
    def run_cases(self) -> Selection:
        """The whole run's selected cases, whichever shard of it this process runs."""
        return self.selected if self.unsharded is None else self.unsharded


# Hashed keys that are not settings: checked separately on resume.


FSYNC_INTERVAL_S = 1.0
_YIELD_EVERY = 4  # records the writer derives between yields to the event loop


@dataclass(slots=True)
class _Answer:
    case: EvalCase
    result: Any  # the target's AskResult, or the TargetError it raised
    total_ms: float
    history: list[dict[str, Any]] | None = None  # what a conversation's turn was sent, or None


def _units(pending: Sequence[tuple[int, str, int]], eval_set: EvalSet) -> list[list[tuple[int, tuple[int, str, int]]]]:
    """`pending` as units of work, each [(position, item)]: a single case alone, a
    conversation's pending turns (one trial) together, so that one worker asks them one
    after another while other conversations go in parallel (DESIGN.md §10). `pending` is in
    eval-set order within a trial (WorkList), and a line's turns are consecutive cases in
    turn order, so each unit is in turn order as gathered."""
    turn_of = eval_set.turn_of
    units: list[list[tuple[int, tuple[int, str, int]]]] = []
    open_units: dict[tuple[str, int], list[tuple[int, tuple[int, str, int]]]] = {}
    for pos, item in enumerate(pending):
        turn = turn_of(item[0])
        if turn is None:
            units.append([(pos, item)])
            continue
        key = (turn[0], item[2])
        unit = open_units.get(key)
        if unit is None:
            unit = open_units[key] = []
            units.append(unit)
        unit.append((pos, item))
    return units


async def timed_ask(
    target: Any, request: Any, case_id: str, clock: Callable[[], float] = time.perf_counter
) -> tuple[Any, float]:
    """The target's answer to one ask (or the TargetError it raised) and its latency in ms:
    the wall time of the call, retries included, less its waits for `--rps` slots (AskTimer)."""
    with AskTimer(clock) as timer:
        try:
            result: Any = await target.ask(request, case_id=case_id)
        except TargetError as e:
            result = e
    return result, timer.ms


@dataclass(slots=True)
class _Unbuilt:
    case_index: int
    trial: int
    answer: _Answer


class Session:
    """The async part of one run (or one resume of it)."""

    def __init__(
        self,
        p: Prepared,
        target: Any,
        judge: Any,
        judge_desc: dict,
        progress: ProgressSink | None,
        derived: RecordPass | None = None,
        breaker: Any = None,
    ):
        self.p = p
        # evalkit.net.breaker.CircuitBreaker shared with the target's retry policy: once it is
        # open (the target failed every request), no further case is asked.
        self.breaker = breaker
        self.n_asked = 0
        # Fed every record as it is written, in file order (see `_writer`); None on resume.
        self.derived = derived
        self.s = p.settings
        self.target = target
        self.judge = judge
        self.judge_desc = judge_desc
        self.progress = progress
        self.run: RunDir = p.run  # type: ignore[assignment]
        self.coverage: dict | None = None
        self.versions: dict[str, Any] = dict(p.config.get("versions") or {})
        self.versions_observed = bool(p.config.get("versions_observed"))
        self.n_written = 0
        # Reorder buffer: records are written in eval-set order; one that finished early
        # waits for the cases before it, unless more than `hold_cap` are waiting (a hung
        # case), then everything waiting is written out of order (case_index restores it).
        self.hold_cap = max(64, 4 * self.s.concurrency)
        self.in_order = True
        self._next = 0
        self._held: dict[int, tuple[dict[str, Any], dict | None]] = {}
        self._early: set[int] = set()
        # --history live: (conversation id, trial) -> the turns so far as sent next, the
        # chatbot's own answers in them; a resume starts from the stored records' (`p.live`).
        self._live: dict[tuple[str, int], list[dict[str, Any]]] = dict(p.live_history)
        # A judged run of conversations: (conversation id, trial) -> (turn, its full chunks) of
        # the turns judged so far, which a later turn's judge sees too (judges.context).
        self._judged: dict[tuple[str, int], list[tuple[int, list[dict[str, Any]]]]] = {
            k: list(v) for k, v in p.earlier_contexts.items()}

    def _history(self, case: EvalCase, trial: int) -> list[dict[str, Any]] | None:
        """What a conversation's turn is sent as the turns before it (--history), or None."""
        conv = case.conversation
        if conv is None or self.s.history == "none":
            return None
        if self.s.history == "reference":
            return [m.model_dump() for m in conv.history]
        return list(self._live.get((conv.id, trial), ()))

    def _heard(self, answer: _Answer, trial: int) -> None:
        """--history live: the turn asked and the chatbot's answer, for the conversation's next
        turn. A turn the target failed adds its question alone (the chatbot said nothing)."""
        conv = answer.case.conversation
        if conv is None or self.s.history != "live":
            return
        said = None if isinstance(answer.result, TargetError) else answer.result.plain["answer"]
        turns = self._live.setdefault((conv.id, trial), [])
        turns.append({"role": "user", "content": answer.case.question})
        if said:
            turns.append({"role": "assistant", "content": said})

    async def _ask(self, case_index: int, trial: int = 1) -> _Answer:
        """Ask the target about one case; the answer (or its error) and how long it took."""
        # Rebuilt from the stored set when it is asked, and dropped with its record.
        case: EvalCase = self.p.eval_set.cases[case_index]
        history = self._history(case, trial) if case.conversation is not None else None
        request = build_request(case, self.s, history=history)
        result, total_ms = await timed_ask(self.target, request, case.id)
        answer = _Answer(case, result, total_ms, history)
        if case.conversation is not None:
            self._heard(answer, trial)
        return answer

    def _record(self, case_index: int, answer: _Answer, trial: int) -> tuple[dict[str, Any], dict | None, list]:
        """The record of one answer, the target's versions when it answered, and the full chunks."""
        case, result, total_ms = answer.case, answer.result, answer.total_ms
        versions: dict | None = None
        full_chunks: list[dict[str, Any]] = []
        if isinstance(result, TargetError):
            record = error_record(
                case_index,
                case,
                result,
                settings=self.s,
                total_ms=total_ms,
                config=record_config(self.s, self.versions, self.judge_desc),
                coverage=self.coverage,
            )
        else:
            record, full_chunks = build_record(
                case_index,
                case,
                result,
                settings=self.s,
                total_ms=total_ms,
                run_versions=self.versions,
                judge_desc=self.judge_desc,
                coverage=self.coverage,
                eval_set=self.p.eval_set,
            )
            validator = self.p.response_validator
            if validator is not None:
                raw = result.raw if result.raw is not None else result.response.model_dump(mode="json", exclude_unset=True)
                record["response_validity"] = validator.check(raw)
            debug = result.plain["debug"]
            versions = dict(debug["versions"]) if debug is not None and debug["versions"] is not None else {}
        if self.s.trials > 1:
            record["trial"] = trial  # (test_case_id, trial) is the record's key (EVAL.md "Trials")
        if answer.history is not None:
            record[Rec.HISTORY] = answer.history
        return record, versions, full_chunks

    async def _case(self, case_index: int, trial: int = 1) -> tuple[dict[str, Any], dict | None]:
        """The finished record (judged, when the run judges), and the target's versions when it answered."""
        answer = await self._ask(case_index, trial)
        record, versions, full_chunks = self._record(case_index, answer, trial)
        if self.judge is not None:
            context = full_chunks
            conv = answer.case.conversation
            if conv is not None:
                seen = self._judged.setdefault((conv.id, trial), [])
                context = with_earlier_turns(full_chunks, [(t, c) for t, c in seen if t < conv.turn])
                seen.append((conv.turn, full_chunks))
            # The judge runner decides what to judge: it skips target errors and scores
            # empty answers by rule, and never raises for one case's failure.
            try:
                record = await self.judge.judge_record(record, context=context)
            except JudgeError as e:
                record[Rec.JUDGE_ERRORS].append({"judge": "runner", "reason": e.reason, "detail": e.detail})
        return record, versions

    def _observe_versions(self, target_versions: Mapping[str, Any]) -> None:
        # The version tuple comes from the first successful response of the run.
        self.versions = versions_tuple(self.s, self.p.eval_set, target_versions, self.judge_desc)
        self.versions_observed = True
        self.p.config["versions"] = dict(self.versions)
        self.p.config["versions_observed"] = True
        self.run.write_config(self.p.config)

    def _release(self, flush_all: bool) -> list[tuple[dict[str, Any], dict | None]]:
        """Records ready to write: the in-order run from the next position; everything
        held when `flush_all` (end of session) or when too many are waiting."""
        out = []
        while self._next in self._held or self._next in self._early:
            if self._next in self._held:
                out.append(self._held.pop(self._next))
            else:
                self._early.discard(self._next)
            self._next += 1
        if self._held and (flush_all or len(self._held) > self.hold_cap):
            self.in_order = False
            for pos in sorted(self._held):
                out.append(self._held[pos])
                self._early.add(pos)
            self._held.clear()
        return out

    async def _writer(self, queue: asyncio.Queue) -> None:
        # Everything that finished while the writer was busy goes out in one write.
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            stop = batch[-1] is None
            for n, item in enumerate(batch, 1):
                if item is None:
                    continue
                pos, done = item
                if isinstance(done, _Unbuilt):
                    # Built here, not in the worker: the worker's next ask went out first.
                    record, versions, _ = self._record(done.case_index, done.answer, done.trial)
                    done = (record, versions)
                    if n % _YIELD_EVERY == 0:
                        await asyncio.sleep(0)
                self._held[pos] = done
            items = self._release(flush_all=stop)
            if items:
                # Page-cache writes are microseconds: done inline; only fsync goes to a thread.
                lines = self.out.write(record for record, _ in items)
                if self.derived is not None:
                    for i, line in enumerate(lines, 1):
                        # The record as results.jsonl now holds it (JSON has no tuple, inf or numpy
                        # number), so the metrics are those of reading the file back.
                        self.derived.add(orjson.loads(line))
                        if i % _YIELD_EVERY == 0:
                            # Let workers whose answers came in send their next ask: at C = 64 a
                            # batch is ~20 ms of this work, which otherwise delays every wake-up
                            # behind it (the workers move in step, so all 64 waited).
                            await asyncio.sleep(0)
                if self.out.sync_due():
                    await asyncio.to_thread(self.out.sync)
                self.n_written += len(items)
                for record, target_versions in items:
                    if not self.versions_observed and target_versions is not None:
                        await asyncio.to_thread(self._observe_versions, target_versions)
                    if self.progress is not None:
                        self.progress.advance(record)
            if stop:
                return

    async def execute(self, pending: Sequence[tuple[int, str, int]]) -> None:
        """Ask every (case_index, case id, trial) in `pending`, writing records in that order."""
        stats = await self.target.index_stats()
        self.coverage = dump_model(stats) if stats is not None else None
        if self.coverage is not None:
            # The file list (for the anchor check) would be copied into every record.
            self.coverage.pop("files", None)
        # Bounded: a target that answers faster than the writer builds records (a Python
        # function) waits here instead of piling answers up (513 MB at 100,000 cases).
        queue: asyncio.Queue = asyncio.Queue(maxsize=self.hold_cap)
        self.out = self.run.open_writer(fsync_interval=FSYNC_INTERVAL_S)
        writer = asyncio.create_task(self._writer(queue))
        units = _units(pending, self.p.eval_set) if self.p.eval_set.has_conversations else None
        todo = iter(units) if units is not None else ([x] for x in enumerate(pending))

        breaker = self.breaker

        async def worker() -> None:
            for unit in todo:  # shared iterator: each case (or conversation) is taken once
                for pos, (case_index, _, trial) in unit:  # a conversation's turns in order
                    if breaker is not None and breaker.open:
                        return  # not asked: no record, so a resume asks it
                    self.n_asked += 1
                    if self.judge is None:
                        # The record is built by the writer. Workers run in step (their answers
                        # arrive together), so CPU spent here before the next ask delays every
                        # worker behind it: at C = 64 about 8 ms a round against a 50 ms target.
                        await queue.put((pos, _Unbuilt(case_index, trial, await self._ask(case_index, trial))))
                    else:
                        await queue.put((pos, await self._case(case_index, trial)))

        n_units = len(units) if units is not None else len(pending)
        workers = [asyncio.create_task(worker()) for _ in range(min(self.s.concurrency, n_units))]
        try:
            await asyncio.gather(*workers)
        finally:
            # On Ctrl-C or a bug: stop asking, but keep every record that finished.
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            # The writer's stop mark, behind what the workers put. On a Ctrl-C (or a timeout)
            # the queue may be full: put_nowait's QueueFull hid the interrupt. The writer is
            # the only one taking from it now, so waiting for room ends; one that died has
            # nothing to stop.
            if not writer.done():
                try:
                    queue.put_nowait(None)
                except asyncio.QueueFull:
                    await queue.put(None)
            try:
                await asyncio.shield(writer)
            finally:
                self.out.close()


# A killed process loses nothing that was written (flushed to the OS after every batch);
# an OS crash or power loss loses at most this many seconds of records, redone on resume.
