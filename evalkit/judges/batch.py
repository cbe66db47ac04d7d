"""Batch judging: a run's judge prompts through the OpenAI Batch API or Anthropic Message
Batches (half the list price), resumable after a kill. The library behind
`judge_answers --batch`; rescore/answers.py calls `judge_in_batches` before its normal pass.

1. Collect. The run's records go through the normal JudgeRunner with a judge that answers
   from the judge cache and notes every prompt the cache lacks (`_Collector`), so the
   batch asks exactly what the normal pass would. A case whose abstention the judge must
   classify has its groundedness and correctness asked in the same batch (one round, not
   two); if it did abstain, those two verdicts stay in the cache unused.
2. Submit. `judge_batch.json` in the run folder records the intent (provider, model, a
   random tag, every custom_id -> cache key) before anything is sent; then OpenAI's input
   file is uploaded and its id recorded; then the batch is created and its id recorded.
   Every write is atomic (store/atomic.py).
3. Poll the batch every `poll_interval` seconds, telling `on_progress` each time.
4. Download the results (through a capped client with an overall deadline, `net.limits`)
   and fill the cache with every reply that validates, as the normal path would have
   cached it, before anything else. The normal pass then finds them all: the run's
   records, metrics.json and config.json are written by the one existing code path. A
   reply that fails validation, a request the provider errored, a results line that cannot
   be read, or a custom_id whose copies disagree is not cached: the normal pass asks it
   again at the normal price, with its repair round and bounded retries, exactly as a junk
   reply is treated there.

Never pay twice: a batch is not started when the judge cache cannot store a judgment (or
its disk lacks the room for the batch's verdicts). A verdict the cache fails to store after
the download is kept in `judge_batch_kept.jsonl` in the run folder and the command stops
(exit 2) without the normal pass; the rerun stores the kept verdicts first and asks none of
them again. If even that file cannot be written, the batch stays recorded as submitted and
the rerun downloads its results again.

Resume rule: a state file naming a batch id is polled, never submitted again. A state file
that says "submitting" without an id (killed between sending the create call and
recording its answer) cannot tell whether the provider made the batch: for OpenAI the
batch is looked up by the tag in its metadata (created if absent); Anthropic batches carry
no metadata, so the command stops and asks for `--batch-id ID` (the console shows it) or
`--batch-resubmit`. The state file goes once the run's files are written.
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import InputError, JudgeConfigError, Problem, redact
from evalkit.jsonio import MAX_WRITTEN_DEPTH, iter_jsonl, loads
from evalkit.judges.base import (
    BatchReply,
    BatchStatus,
    JudgeFailure,
    JudgeItem,
    JudgeOutcome,
)
from evalkit.judges.runner import JudgeRunner
from evalkit.judges.settings import JudgeSettings, build_judge, resolve_judge
from evalkit.net.retry import RetryPolicy
from evalkit.store.atomic import open_no_follow
from evalkit.store.runlog import Rec
from evalkit.store.runs import JUDGE_BATCH_FILE, JUDGE_BATCH_KEPT, RunDir

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BATCH_PROVIDERS",
    "KEPT_FILE",
    "STATE_FILE",
    "BatchOptions",
    "BatchProgress",
    "check_batch_settings",
    "clear_batch_state",
    "judge_in_batches",
    "read_batch_state",
]

STATE_FILE = JUDGE_BATCH_FILE
KEPT_FILE = JUDGE_BATCH_KEPT
LOCK_FILE = "judge_batch.lock"
STATE_VERSION = 1
BATCH_PROVIDERS = ("openai", "anthropic")
# Per-batch limits of the providers (requests; bytes of the input), with room to spare:
# OpenAI 50,000 requests and 200 MB, Anthropic 100,000 requests and 256 MB.
_LIMITS = {"openai": (50_000, 180_000_000), "anthropic": (100_000, 230_000_000)}
# A batch download holds one reply per request: its byte cap grows with the batch.
_REPLY_BYTES = 64 * 1024
# The whole download within --timeout plus a second per MiB of that cap (1 MiB/s at least):
# a results file trickled a byte at a time cannot hold the command for minutes.
_MIN_DOWNLOAD_RATE = 1024 * 1024
# Room the judge cache needs for a batch's verdicts: a row (the verdict, its raw reply of at
# most 2,000 characters, the SQLite page) per request, and the WAL before it is checkpointed.
_ROW_BYTES = 4 * 1024
_WAL_BYTES = 8 * 1024 * 1024


@dataclass
class BatchProgress:
    """What `on_progress` hears: `event` is "submitted", "resumed", "polled" or "collected"."""

    event: str
    provider: str
    batch_id: str
    requests: int
    elapsed_s: float = 0.0
    status: BatchStatus | None = None
    next_poll_s: float | None = None


@dataclass
class BatchOptions:
    """How `judge_answers --batch` runs its batches.

    Attributes:
        poll_interval: seconds between two looks at a running batch.
        resubmit: forget a submission whose id was never recorded and submit anew (you may
            pay for both if the provider did receive the first).
        batch_id: the id of that unrecorded submission, read from the provider's console.
        on_progress: told after each submission and each poll (the CLI's progress line).
        sleep: the async sleep between polls (tests inject one).
        max_requests: requests per batch, at most (default: the provider's limit).
        download_deadline: seconds for the whole download of a batch's results (default:
            the judge's timeout plus a second per MiB of the download's byte cap).
    """

    poll_interval: float = 30.0
    resubmit: bool = False
    batch_id: str | None = None
    on_progress: Callable[[BatchProgress], None] | None = None
    sleep: Callable[[float], Awaitable[object]] | None = None
    max_requests: int | None = None
    download_deadline: float | None = None


@dataclass
class _Pending:
    key: str
    kind: str
    case: str | None
    trial: int
    prompt: Any
    output: Any


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- state file


def read_batch_state(run_path: Path) -> dict[str, Any] | None:
    """The run's batch state (judge_batch.json), or None when there is none.

    Raises:
        JudgeConfigError: the file is not a state this version wrote.
    """
    path = Path(run_path) / STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        state = loads(raw, max_depth=MAX_WRITTEN_DEPTH, path=str(path))
    except InputError as e:  # not JSON, not UTF-8 or too deep, said at its line
        p = e.problems[0]
        raise JudgeConfigError(Problem(f"not a batch state file ({p.message}); delete it to start over",
                                       path=p.path, line=p.line)) from None
    if not isinstance(state, dict) or state.get("schema_version") != STATE_VERSION or not isinstance(state.get("batches"), list):
        raise JudgeConfigError(Problem("not a batch state file this version wrote; delete it to start over", path=str(path)))
    return state


def _write_state(run_path: Path, state: Mapping[str, Any]) -> None:
    # As the run's other files: under its folder lock, so recovery never takes a live temp file.
    RunDir(Path(run_path)).write_file(STATE_FILE, orjson.dumps(state, option=orjson.OPT_INDENT_2) + b"\n")


def clear_batch_state(run_path: Path) -> None:
    """Remove the batch state and its lock file (the run's files hold the batch's verdicts now)."""
    for name in (STATE_FILE, LOCK_FILE):
        (Path(run_path) / name).unlink(missing_ok=True)


@contextmanager
def _locked(run_path: Path) -> Iterator[None]:
    """One batch command per run at a time: two would each submit the same prompts."""
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    path = Path(run_path) / LOCK_FILE
    fd = open_no_follow(path, os.O_RDWR | os.O_CREAT)  # a planted link would create a file outside the run
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise JudgeConfigError(
                    Problem("another judge_answers --batch is working on this run; let it finish (or stop it) first",
                            path=str(path))
                ) from None
            raise
        yield
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- settings


def check_batch_settings(settings: JudgeSettings) -> None:
    """Refuse --batch where it cannot work, before anything is read or sent.

    Raises:
        JudgeConfigError: a judge without a batch API (heuristic, local servers) or no cache.
    """
    provider = resolve_judge(settings).provider
    if provider not in BATCH_PROVIDERS:
        raise JudgeConfigError(
            Problem(f"--batch needs --judge-provider openai or anthropic (a batch API); the judge here is {provider}",
                    field="--batch")
        )
    if not settings.use_cache:
        raise JudgeConfigError(
            Problem("--batch puts the batch's verdicts into the judge cache, which --no-cache turns off; drop --no-cache",
                    field="--batch")
        )


# --------------------------------------------------------------------------- collecting


class _Collector:
    """A Judge that answers from the cache and notes every prompt the cache lacks.

    Run through the normal JudgeRunner, it sees the same (kind, item, trial) triples the
    normal pass will judge, so the batch holds exactly the prompts that pass would send.
    """

    heuristic = False

    def __init__(self, llm: Any, *, refresh: bool, asked: set[str]):
        self.llm = llm
        self.name = llm.name
        self.version = llm.version
        self.refresh = refresh
        self.asked = asked  # keys earlier batches of this run asked: never asked twice
        self.case: str | None = None
        self.pending: dict[str, _Pending] = {}

    async def judge(self, kind: str, item: JudgeItem, *, trial: int = 0) -> JudgeOutcome | JudgeFailure:
        prompt, output, key = self.llm.request(kind, item, trial=trial)
        hit = self.llm.cached(key) if (key in self.asked or not self.refresh) else None
        if hit is not None:
            # The cached verdict steers the rest of the record (an abstention decides
            # whether groundedness and correctness are asked), as in the normal pass.
            return await self.llm.complete_structured(kind, prompt, output, key)
        if key not in self.asked and key not in self.pending:
            self.pending[key] = _Pending(key, kind, self.case, trial, prompt, output)
        return JudgeFailure(kind=kind, reason="batch_pending", detail="", judge=self.name)

    def describe(self) -> dict[str, Any]:
        return self.llm.describe()

    def stats(self) -> Any:
        return self.llm.stats()

    async def aclose(self) -> None:  # the caller closes the LLM judge
        return None


async def _collect(
    llm: Any,
    settings: JudgeSettings,
    records: Sequence[dict[str, Any]],
    selected: Sequence[int],
    contexts: Mapping[int, list[dict[str, Any]] | None],
    *,
    asked: set[str],
) -> list[_Pending]:
    collector = _Collector(llm, refresh=settings.refresh_cache, asked=asked)
    runner = JudgeRunner(collector, settings)
    for i in selected:
        collector.case = records[i].get(Rec.CASE_ID)
        await runner.judge_record(records[i], contexts.get(i))
    return list(collector.pending.values())


def _first_chunk(requests: list[dict[str, Any]], max_n: int, max_bytes: int) -> int:
    """How many of `requests` fit in one batch."""
    size = 0
    for n, r in enumerate(requests[:max_n]):
        size += len(orjson.dumps(r)) + 1
        if size > max_bytes:
            return max(1, n)
    return min(len(requests), max_n)


# --------------------------------------------------------------------------- the batches


@dataclass
class _Batches:
    """Everything one `judge_in_batches` call needs, and the summary it builds."""

    run_path: Path
    llm: Any
    options: BatchOptions
    policy: RetryPolicy
    # The prompts the cache lacks, less the keys in `asked` (see _collect).
    collect: Callable[[set[str]], Awaitable[list[_Pending]]]
    summary: dict[str, Any] = field(default_factory=dict)
    # Results are downloaded through this client: capped at `cap` bytes, whole within `deadline` s.
    download_client: Any = None
    cap: int = 0
    deadline: float = 0.0
    deadline_why: str = ""

    @property
    def backend(self) -> Any:
        return self.llm.backend

    def progress(self, event: BatchProgress) -> None:
        if self.options.on_progress is not None:
            self.options.on_progress(event)

    async def api(self, call: Callable[[], Awaitable[Any]], what: str | None = None) -> Any:
        """An idempotent batch API call (poll, download) under the bounded retry policy.
        `what` names a download ("the results of openai batch batch_1") for its errors."""
        from evalkit.net.limits import deadline_in, too_large_in

        def retry_on(exc: BaseException) -> bool:
            if too_large_in(exc) is not None or deadline_in(exc) is not None:
                return False  # the same file is as large again; the deadline bounds the whole download
            return self.backend.retry_decision(exc).retry

        try:
            async for attempt in self.policy.retrying(retry_on):
                with attempt:
                    return await call()
        except Exception as exc:  # noqa: BLE001 - sorted: the provider's error, or our bug
            big, late = too_large_in(exc), deadline_in(exc)
            if big is not None:
                raise JudgeConfigError(self._too_large(what, big)) from None
            if late is not None:
                raise JudgeConfigError(
                    Problem(f"{what or self.backend.provider + ' batch API'} did not arrive whole within the download "
                            f"deadline of {late:g}s ({self.deadline_why}). The batch stays recorded and the provider keeps "
                            "its results: rerun the same command to download them again (nothing is submitted or paid "
                            "twice), from a steadier link or with a larger --timeout", field="--batch")
                ) from None
            decision = self.backend.retry_decision(exc)
            if not decision.provider_error:
                raise
            raise JudgeConfigError(
                Problem(f"{self.backend.provider} batch API: {decision.reason}: {redact(str(exc))[:300]}"
                        + ("; check the API key and --judge-model" if decision.fatal else "; rerun to carry on"),
                        field="--batch")
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _too_large(self, what: str | None, big: BaseException) -> Problem:
        """An answer over the byte cap: the same file is as large on every rerun."""
        if what is None:
            return Problem(f"the {self.backend.provider} batch API answered with more than evalkit reads ({redact(str(big))[:300]}); "
                           "check what answers for the provider (--judge-base-url, HTTPS_PROXY) before you rerun",
                           field="--batch")
        return Problem(
            f"{what} are larger than evalkit downloads: {redact(str(big))[:300]} (the cap: {_REPLY_BYTES // 1024} KiB per "
            f"request judged, {self.cap} bytes here). No judge reply comes near that size, so this is not the results "
            "file as the provider makes it, and rerunning as it is meets the same cap. Check what answers for the "
            "provider (--judge-base-url, HTTPS_PROXY, a gateway): the batch stays recorded, and the same command "
            f"collects it once the file is right. To give the batch up instead, delete {self.run_path / STATE_FILE} "
            "(its requests are then asked, and paid for, again)",
            field="--batch",
        )

    @property
    def cache(self) -> Any:
        return self.llm.cache


async def judge_in_batches(
    run_path: Path,
    settings: JudgeSettings,
    records: Sequence[dict[str, Any]],
    selected: Sequence[int],
    contexts: Mapping[int, list[dict[str, Any]] | None],
    options: BatchOptions,
) -> dict[str, Any]:
    """Judge the selected records' missing verdicts through the provider's batch API and
    put them into the judge cache (module docstring). Resumes the run's recorded batches.

    Returns:
        The batch summary for metrics.json's aggregate_metrics.judge.batch: each batch's id,
        status, request counts, tokens and cost (the batch price), and how many requests
        are left to the normal pass.

    Raises:
        JudgeConfigError: (exit 2, naming the batch and what to do next) no batch API for
            this judge or no cache; a judge cache that cannot store the verdicts (nothing
            submitted), or that failed to store some after the download (they are kept, and
            the rerun stores them); a batch that failed, expired with requests unrun or was
            refused; results over the download cap or past the download deadline; a
            submission of unknown fate (the resume rule); another batch command holding the run.
    """
    check_batch_settings(settings)
    # At most six prompts per case and trial (abstention, groundedness, correctness, quality, conflict,
    # context relevance).
    n_prompts = 6 * max(1, settings.trials) * max(1, len(selected))
    # The judge used to collect, submit and fill: no refresh (the collector applies it) and
    # a download cap that grows with the batch (one reply per request).
    cap = max(settings.max_response_bytes, _REPLY_BYTES * n_prompts)
    llm = build_judge(replace(settings, refresh_cache=False, max_response_bytes=cap))
    backend = llm.backend
    factor = getattr(backend, "batch_price_factor", None)
    if factor is None:  # pragma: no cover - check_batch_settings refused it already
        raise JudgeConfigError(Problem(f"{backend.provider} has no batch API", field="--batch"))

    async def collect(asked: set[str]) -> list[_Pending]:
        return await _collect(llm, settings, records, selected, contexts, asked=asked)

    from evalkit.net.limits import bounded_client

    b = _Batches(Path(run_path), llm, options, settings.retry_policy or RetryPolicy(), collect, cap=cap)
    if options.download_deadline is not None:
        b.deadline, b.deadline_why = float(options.download_deadline), "as asked"
    else:
        b.deadline = settings.timeout + cap / _MIN_DOWNLOAD_RATE
        b.deadline_why = f"--timeout {settings.timeout:g}s plus a second per MiB of the {cap}-byte download cap"
    b.download_client = bounded_client(timeout=settings.timeout, max_bytes=cap, deadline=b.deadline)
    b.summary = {"provider": backend.provider, "model": backend.model, "price_factor": factor, "batches": [],
                 "requests": 0, "cached": 0, "left_to_normal_pass": 0, "prompt_tokens": 0, "completion_tokens": 0,
                 "cost_usd": 0.0, "price_known": llm.price is not None, "duplicates": 0, "conflicting": 0,
                 "bad_lines": 0, "kept_stored": 0}
    try:
        with _locked(b.run_path):
            try:
                state = read_batch_state(b.run_path)
                if state is not None:
                    _check_same_judge(b, state)
                elif options.batch_id is not None:
                    raise JudgeConfigError(Problem("there is no unrecorded batch submission to attach --batch-id to",
                                                  path=str(b.run_path / STATE_FILE), field="--batch-id"))
                # Before a batch is started or collected: its verdicts must have somewhere to go.
                _check_cache_writable(b, state)
                _store_kept(b)
                if state is not None:
                    for entry in state["batches"]:
                        if entry.get("phase") == "collected":  # by an earlier, killed command
                            _summarize(b, entry)
                state = state or _new_state(backend)
                while True:
                    todo = [e for e in state["batches"] if e.get("phase") != "collected"]
                    if not todo:
                        asked = {r["key"] for e in state["batches"] for r in e["requests"].values()}
                        pending = await collect(asked)
                        if not pending:
                            break
                        todo = [_add_batch(b, state, pending)]
                    for entry in todo:
                        await _run_batch(b, state, entry)
            finally:
                if not (b.run_path / STATE_FILE).exists():
                    # No state to resume (nothing asked, or a batch given up): no lock to keep.
                    (b.run_path / LOCK_FILE).unlink(missing_ok=True)
        b.summary["left_to_normal_pass"] = b.summary["requests"] - b.summary["cached"]
        b.summary["warnings"] = _warnings(b.summary)
        return b.summary
    finally:
        await b.download_client.aclose()
        await llm.aclose()


def _warnings(s: Mapping[str, Any]) -> list[str]:
    """What the batch summary holds that the user should hear of (judge_answers prints them)."""
    out = []
    if s["bad_lines"]:
        out.append(f"{s['bad_lines']} lines of the batch results were not what the provider documents (not JSON, not "
                   "an object, or without a result); each is its request's error, asked again the normal way")
    if s["conflicting"]:
        out.append(f"{s['conflicting']} batch requests came back as several different replies under one custom_id; "
                   "none was trusted, and each was asked again the normal way")
    if s["duplicates"]:
        out.append(f"{s['duplicates']} batch requests came back twice or more under one custom_id, the copies "
                   "identical; each was used once")
    if s["kept_stored"]:
        out.append(f"{s['kept_stored']} verdicts an earlier batch paid for, kept when the judge cache could not store "
                   "them, are stored now")
    if s.get("kept_unreadable"):
        out.append(f"{s['kept_unreadable']} lines of the kept verdicts could not be read; those verdicts are asked "
                   "again the normal way")
    return out


# --------------------------------------------------------------------------- the cache first


def _check_cache_writable(b: _Batches, state: Mapping[str, Any] | None) -> None:
    """Refuse to start or collect a batch whose verdicts the judge cache cannot store.

    Raises:
        JudgeConfigError: the cache's write probe failed.
    """
    cache = b.cache
    try:
        why = cache.writable()
    except (OSError, sqlite3.Error) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
    if why is None:
        return
    waiting = []
    if (b.run_path / KEPT_FILE).exists():
        waiting.append(f"the verdicts kept in {b.run_path / KEPT_FILE} are stored then")
    if state is not None and state.get("batches"):
        waiting.append("the recorded batch is collected then, not submitted again")
    raise JudgeConfigError(
        Problem(f"the judge cache {cache.path} cannot store a judgment now ({why}); --batch stores every verdict it pays "
                "for there before anything else, so no batch was started or collected. Free space on its disk, or pass "
                "--cache-path to a cache elsewhere, and rerun the same command"
                + (f" ({'; '.join(waiting)})" if waiting else ""), field="--batch")
    )


def _check_cache_room(b: _Batches, n: int) -> None:
    """Refuse to submit a batch of `n` requests when the cache's disk lacks the room for its verdicts.

    Raises:
        JudgeConfigError: the free space is below the estimate (`_ROW_BYTES`, `_WAL_BYTES`).
    """
    need = n * _ROW_BYTES + _WAL_BYTES
    try:
        free = shutil.disk_usage(b.cache.path.parent).free
    except OSError:
        return  # no figure: the write probe has passed, and a failed store is kept (_keep)
    if free < need:
        raise JudgeConfigError(
            Problem(f"the disk of the judge cache {b.cache.path} has {free:,} bytes free, and the {n} verdicts of this "
                    f"batch need about {need:,}; --batch stores every verdict it pays for there before anything else, "
                    "so nothing was submitted. Free space there, pass --cache-path to a cache elsewhere, or judge fewer "
                    "cases at a time (--ids)", field="--batch")
        )


def _store(b: _Batches, rows: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], str | None]:
    """Put `rows` (cache entries) into the judge cache: ([], None), or the rows from the
    first that could not be stored on, and why."""
    cache = b.cache
    for i, row in enumerate(rows):
        try:
            ok = cache.put(row["key"], row["value"], kind=row["kind"], model=row["model"],
                           prompt_version=row["prompt_version"])
            why = None if ok else (cache.last_error or "not stored")
        except (OSError, sqlite3.Error) as e:
            why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        if why is not None:
            return list(rows[i:]), why
    return [], None


def _read_kept(run_path: Path) -> tuple[list[dict[str, Any]], int]:
    """The verdicts kept in judge_batch_kept.jsonl, and how many of its lines were not one."""
    path = run_path / KEPT_FILE
    if not path.exists():
        return [], 0
    bad = 0

    def skip(problem: Problem) -> None:
        nonlocal bad
        bad += 1

    rows = []
    for _, row in iter_jsonl(path, max_depth=MAX_WRITTEN_DEPTH, on_problem=skip):
        if (isinstance(row, dict) and isinstance(row.get("value"), dict)
                and all(isinstance(row.get(k), str) for k in ("key", "kind", "model", "prompt_version"))):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def _keep(b: _Batches, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """Write `rows` (with any kept before) to judge_batch_kept.jsonl; None, or why it could not be."""
    try:
        old, _ = _read_kept(b.run_path)
        merged = {r["key"]: r for r in [*old, *rows]}
        RunDir(b.run_path).write_file(KEPT_FILE, [orjson.dumps(r) + b"\n" for r in merged.values()])
    except (OSError, InputError) as e:
        return str(e)
    return None


def _store_kept(b: _Batches) -> None:
    """Store the verdicts an earlier command kept, then remove the file.

    Raises:
        JudgeConfigError: the cache still cannot store them (they stay kept).
    """
    path = b.run_path / KEPT_FILE
    rows, bad = _read_kept(b.run_path)
    if not rows and not path.exists():
        return
    left, why = _store(b, rows)
    if left:
        raise JudgeConfigError(
            Problem(f"{len(left)} verdicts an earlier batch paid for still cannot be stored in the judge cache "
                    f"{b.cache.path} ({why}); they stay kept here. Free space on its disk, or pass --cache-path to a "
                    "cache elsewhere, and rerun the same command", path=str(path), field="--batch")
        )
    path.unlink(missing_ok=True)
    b.summary["kept_stored"] += len(rows)
    b.summary["kept_unreadable"] = bad  # a damaged line's verdict is asked again by the normal pass


def _new_state(backend: Any) -> dict[str, Any]:
    return {"schema_version": STATE_VERSION, "provider": backend.provider, "model": backend.model, "batches": []}


def _check_same_judge(b: _Batches, state: Mapping[str, Any]) -> None:
    mine = (b.backend.provider, b.backend.model)
    theirs = (state.get("provider"), state.get("model"))
    if mine != theirs:
        raise JudgeConfigError(
            Problem(f"holds batches of another judge ({theirs[0]} {theirs[1]}); rerun with --judge-provider {theirs[0]} "
                    f"--judge-model {theirs[1]} to collect them, or delete the file to abandon them",
                    path=str(b.run_path / STATE_FILE))
        )


def _add_batch(b: _Batches, state: dict[str, Any], pending: list[_Pending]) -> dict[str, Any]:
    """A new batch entry for (the first chunk of) `pending`, recorded before anything is sent."""
    tag = secrets.token_hex(6)
    lines, requests = [], {}
    for n, p in enumerate(pending):
        custom_id = f"{tag}-{n:06d}"
        lines.append(b.backend.batch_request(custom_id, p.prompt, p.output))
        requests[custom_id] = {"key": p.key, "kind": p.kind, "case": p.case, "trial": p.trial,
                               "prompt_hash": p.prompt.prompt_hash, "prompt_version": p.prompt.prompt_version}
    max_n, max_bytes = _LIMITS[b.backend.provider]
    n = _first_chunk(lines, b.options.max_requests or max_n, max_bytes)
    _check_cache_room(b, n)  # before anything is recorded or sent
    keep = set(list(requests)[:n])
    entry = {"tag": tag, "phase": "submitting", "created_at": time.time(), "created": _now(),
             "requests": {k: v for k, v in requests.items() if k in keep}}
    # The request bodies are rebuilt from the run on a resume, never stored: they hold the
    # full answers and chunk texts, and the state must stay small.
    entry["_lines"] = lines[:n]
    state["batches"].append(entry)
    _save(b, state)
    return entry


def _save(b: _Batches, state: Mapping[str, Any]) -> None:
    entries = [{k: v for k, v in e.items() if not k.startswith("_")} for e in state["batches"]]
    _write_state(b.run_path, {**state, "batches": entries})


async def _run_batch(b: _Batches, state: dict[str, Any], entry: dict[str, Any]) -> None:
    """Submit (or find) one batch entry, poll it to its end and fill the cache."""
    provider = b.backend.provider
    if not entry.get("batch_id"):
        if not await _submit(b, state, entry):
            return
    else:
        b.progress(BatchProgress("resumed", provider, entry["batch_id"], len(entry["requests"])))
    status = await _poll(b, entry)
    if status.error is not None or status.status == "failed":
        _forget(b, state, entry)
        raise JudgeConfigError(
            Problem(f"{provider} batch {status.batch_id} failed: {status.error or status.status}; nothing was judged "
                    "by it. Rerun to submit a new batch, or drop --batch", field="--batch")
        )
    replies = await b.api(lambda: b.backend.batch_results(status, http_client=b.download_client),
                          what=f"the results of {provider} batch {status.batch_id}")
    counts, rows = _fill(b, entry, status, replies)
    if entry.get("adopted") and not counts["matched"] and entry["requests"]:
        # Not the batch this run submitted: back to "submitting", so that another
        # --batch-id (or --batch-resubmit) can be tried.
        for k in ("batch_id", "adopted", "submitted"):
            entry.pop(k, None)
        entry["phase"] = "submitting"
        _save(b, state)
        raise JudgeConfigError(
            Problem(f"batch {status.batch_id} (--batch-id) holds none of this run's requests; check the id",
                    field="--batch-id")
        )
    # Every verdict paid for goes into the cache before anything else; what the cache cannot
    # store is kept in the run folder, never left to the normal pass to buy again.
    unstored, why = _store(b, rows)
    if unstored:
        not_kept = _keep(b, unstored)
        if not_kept is not None:
            # Nothing recorded as collected: the batch stays "submitted", and a rerun
            # downloads its results again (free) instead of asking anything anew.
            raise JudgeConfigError(
                Problem(f"{len(unstored)} of {counts['succeeded']} verdicts of {provider} batch {status.batch_id} could "
                        f"not be stored in the judge cache {b.cache.path} ({why}), nor kept in {b.run_path / KEPT_FILE} "
                        f"({not_kept}); nothing was asked again. The batch stays recorded and {provider} keeps its "
                        "results: free space (or pass --cache-path to a cache elsewhere) and rerun the same command with "
                        "--batch, which downloads them again (no new batch, nothing paid twice)", field="--batch")
            )
        counts["kept"] = len(unstored)
    entry.update(phase="collected", batch_status=status.status, ended=_now(), counts=counts)
    _save(b, state)
    _summarize(b, entry)
    b.progress(BatchProgress("collected", provider, status.batch_id, len(entry["requests"]), status=status))
    if unstored:
        rest = ""
        if counts["unrun"]:
            _forget(b, state, entry)
            rest = f"; the {counts['unrun']} requests the batch never ran go in a new batch then"
        raise JudgeConfigError(
            Problem(f"{len(unstored)} of {counts['succeeded']} verdicts of {provider} batch {status.batch_id} could not "
                    f"be stored in the judge cache {b.cache.path} ({why}); they are kept in {b.run_path / KEPT_FILE}, "
                    "and nothing was asked again (the run's files are unchanged). Free space on the cache's disk, or "
                    "pass --cache-path to a cache elsewhere, and rerun the same command with --batch: it stores the "
                    f"kept verdicts first and asks none of them again{rest}", field="--batch")
        )
    if counts["unrun"]:
        # Requests the batch never ran: ask them in a new batch (a rerun) rather than at
        # the full price now; what came back is cached and stays.
        _forget(b, state, entry)
        raise JudgeConfigError(
            Problem(f"{provider} batch {status.batch_id} ended {status.status} with {counts['unrun']} of "
                    f"{len(entry['requests'])} requests not run ({counts['succeeded']} verdicts are cached); rerun "
                    "with --batch to submit those in a new batch, or without --batch to judge them now", field="--batch")
        )
    if not counts["succeeded"]:
        _forget(b, state, entry)
        first = counts.get("first_error") or "no reply"
        raise JudgeConfigError(
            Problem(f"no request of {provider} batch {status.batch_id} came back usable ({counts['errored']} errored, "
                    f"{counts['unusable']} failed validation; first: {first}); rerun to try a new batch, or drop --batch",
                    field="--batch")
        )


def _forget(b: _Batches, state: dict[str, Any], entry: dict[str, Any]) -> None:
    """Drop `entry` from the state: a rerun collects its requests afresh."""
    state["batches"] = [e for e in state["batches"] if e is not entry]
    if state["batches"]:
        _save(b, state)
    else:
        (b.run_path / STATE_FILE).unlink(missing_ok=True)


async def _submit(b: _Batches, state: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Create the entry's batch and record its id; False when nothing was left to ask.

    A fresh entry carries its request lines; a resumed one (killed while submitting) is
    first looked for, and its lines are rebuilt only if the batch must be made after all.
    """
    backend = b.backend
    where = str(b.run_path / STATE_FILE)
    if "_lines" not in entry:
        if b.options.batch_id:
            entry.update(batch_id=b.options.batch_id, phase="submitted", submitted=_now(), adopted=True)
            _save(b, state)
            b.progress(BatchProgress("resumed", backend.provider, entry["batch_id"], len(entry["requests"])))
            return True
        if not b.options.resubmit:
            if not backend.batch_findable:
                raise JudgeConfigError(
                    Problem(f"judge_answers --batch was stopped at {entry['created']} while submitting a {backend.provider} "
                            f"batch of {len(entry['requests'])} requests, before its id was recorded, so whether "
                            f"{backend.provider} received it is unknown. If the provider's console lists a batch created "
                            "then, pass --batch-id ID to collect it; otherwise pass --batch-resubmit to submit a new one",
                            path=where, field="--batch")
                )
            found = await b.api(lambda: backend.find_batch(tag=entry["tag"], since=entry["created_at"]))
            if found is not None:
                entry.update(batch_id=found, phase="submitted", submitted=_now())
                _save(b, state)
                b.progress(BatchProgress("resumed", backend.provider, found, len(entry["requests"])))
                return True
    elif b.options.batch_id:
        raise JudgeConfigError(Problem("there is no unrecorded batch submission to attach --batch-id to",
                                      path=where, field="--batch-id"))
    lines = entry.get("_lines")
    # prepare_batch returns what create_batch needs besides the requests (OpenAI: the
    # uploaded file), empty when the requests travel in the create call (Anthropic).
    if lines is None and not entry.get("prepared"):
        lines = await _rebuild_lines(b, entry)
        if not lines:
            _forget(b, state, entry)
            return False
    if "prepared" not in entry:
        # Retried like a poll: an upload made twice leaves a stray file, never a second batch.
        entry["prepared"] = await b.api(lambda: backend.prepare_batch(lines))
        _save(b, state)
    try:
        batch_id = await backend.create_batch(lines or [], entry["prepared"], tag=entry["tag"])
    except Exception as exc:  # noqa: BLE001 - sorted: a refusal, an unknown fate, or our bug
        decision = backend.retry_decision(exc)
        if not decision.provider_error:
            raise
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and status < 500:
            # Refused (bad request, rate limit, key): no batch exists, so no intent either.
            _forget(b, state, entry)
            raise JudgeConfigError(
                Problem(f"{backend.provider} refused the batch ({decision.reason}: {redact(str(exc))[:300]})", field="--batch")
            ) from None
        then = ("rerun the same command: it looks for the batch by its tag before submitting again"
                if backend.batch_findable else "rerun the same command, which says how to go on")
        raise JudgeConfigError(
            Problem(f"{backend.provider} did not answer the batch submission ({decision.reason}); it may have made the "
                    f"batch. The state is kept: {then}", path=where, field="--batch")
        ) from None
    entry.update(batch_id=batch_id, phase="submitted", submitted=_now())
    entry.pop("_lines", None)
    _save(b, state)
    b.progress(BatchProgress("submitted", backend.provider, batch_id, len(entry["requests"])))
    return True


async def _rebuild_lines(b: _Batches, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The request lines of an entry whose submission was interrupted, collected again from
    the run (the state keeps keys, not prompts). A request whose verdict reached the cache
    since then is dropped from the entry."""
    custom_ids = {r["key"]: cid for cid, r in entry["requests"].items()}
    lines, kept = [], {}
    for p in await b.collect(set()):
        cid = custom_ids.get(p.key)
        if cid is not None and cid not in kept:
            lines.append(b.backend.batch_request(cid, p.prompt, p.output))
            kept[cid] = entry["requests"][cid]
    entry["requests"] = kept
    return lines


async def _poll(b: _Batches, entry: Mapping[str, Any]) -> BatchStatus:
    start = time.monotonic()
    sleep = b.options.sleep or asyncio.sleep
    interval = max(0.0, float(b.options.poll_interval))
    while True:
        status = await b.api(lambda: b.backend.batch_status(entry["batch_id"]))
        b.progress(BatchProgress("polled", b.backend.provider, status.batch_id, len(entry["requests"]),
                                 elapsed_s=time.monotonic() - start, status=status,
                                 next_poll_s=None if status.ended else interval))
        if status.ended:
            return status
        await sleep(interval)


def _fill(
    b: _Batches, entry: Mapping[str, Any], status: BatchStatus, replies: list[BatchReply]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Validate every reply; count the rest. Returns the entry's counts and the cache rows
    of the replies that validate (stored by the caller, `_store`).

    A custom_id that comes back more than once is used once when its copies are identical,
    and not at all when they disagree (neither can be trusted: the normal pass asks it).
    A line that cannot be read is its request's error; one that names no custom_id stands
    for one request the output does not otherwise mention.
    """
    requests = entry["requests"]
    counts: dict[str, Any] = {"requests": len(requests), "succeeded": 0, "unusable": 0, "errored": 0, "unrun": 0,
                              "duplicates": 0, "conflicting": 0, "bad_lines": 0,
                              "prompt_tokens": 0, "completion_tokens": 0, "first_error": None}

    def error(text: str) -> None:
        # It goes to metrics.json: a provider's message may quote a key.
        counts["first_error"] = counts["first_error"] or redact(text)[:300]

    copies: dict[str, list[BatchReply]] = {}
    anonymous = 0
    for reply in replies:
        counts["bad_lines"] += reply.bad_line
        if reply.custom_id in requests:
            copies.setdefault(reply.custom_id, []).append(reply)
        elif reply.bad_line and not reply.custom_id:
            anonymous += 1
            error(reply.error or "unreadable line")
        # else: not ours (an adopted id that is another batch)
    rows: list[dict[str, Any]] = []
    for custom_id, got in copies.items():
        meta, reply = requests[custom_id], got[0]
        if len(got) > 1:
            if any(other != reply for other in got[1:]):
                counts["conflicting"] += 1
                error(f"{meta['kind']}: {len(got)} different replies under custom_id {custom_id}")
                continue
            counts["duplicates"] += 1
        if reply.completion is None:
            counts["unrun" if reply.unrun else "errored"] += 1
            error(reply.error or "error")
            continue
        counts["prompt_tokens"] += reply.completion.prompt_tokens
        counts["completion_tokens"] += reply.completion.completion_tokens
        value, problem = b.llm.accept(meta["kind"], reply.completion, prompt_hash=meta["prompt_hash"],
                                      batch_id=status.batch_id)
        if value is None:
            counts["unusable"] += 1
            error(f"{meta['kind']}: {problem}")
            continue
        counts["succeeded"] += 1
        rows.append({"key": meta["key"], "kind": meta["kind"], "model": b.backend.model,
                     "prompt_version": meta["prompt_version"], "value": value})
    counts["matched"] = len(copies)
    # A request the output never mentions was not run (OpenAI leaves expired ones out),
    # unless a line that named no custom_id was its reply: that many are errors instead.
    missing = len(requests) - len(copies)
    unreadable = min(anonymous, missing)
    counts["errored"] += unreadable
    counts["unrun"] += missing - unreadable
    price = b.llm.price
    cost = price.cost(counts["prompt_tokens"], counts["completion_tokens"]) * b.summary["price_factor"] if price else 0.0
    counts["cost_usd"] = round(cost, 8)
    return counts, rows


def _summarize(b: _Batches, entry: Mapping[str, Any]) -> None:
    """Add a collected entry to the summary metrics.json gets."""
    counts = entry.get("counts") or {}
    s = b.summary
    s["batches"].append({"batch_id": entry.get("batch_id"), "status": entry.get("batch_status"),
                         "submitted": entry.get("submitted"), "ended": entry.get("ended"), **counts})
    s["requests"] += int(counts.get("requests") or 0)
    s["cached"] += int(counts.get("succeeded") or 0)
    s["prompt_tokens"] += int(counts.get("prompt_tokens") or 0)
    s["completion_tokens"] += int(counts.get("completion_tokens") or 0)
    s["cost_usd"] = round(s["cost_usd"] + float(counts.get("cost_usd") or 0.0), 8)
    for k in ("duplicates", "conflicting", "bad_lines"):
        s[k] += int(counts.get(k) or 0)

